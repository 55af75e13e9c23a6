#!/usr/bin/env bash
# What the GPU campaign carries to the GPU machine, which has no package registry: nvImageCodec's, nvJPEG's and
# simplejpeg's wheels for its Python (3.12, x86_64, CUDA 13) into .whl/, and timm's benchmark.py (the peers'
# script) into .peers/, both git-ignored. benchmarks/gpu.py installs the wheels there (`pip install --no-deps
# --target`, its wheels stage). The run tool sends at most 64 MiB, the tree and the carried folders together: this
# fails beyond.
#
#   scripts/gpu-wheels.sh                  # from the repository root, on a machine with a registry
#   TIMM_BENCHMARK=path/to/benchmark.py scripts/gpu-wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.whl
PEERS=.peers
PYTHON=${PYTHON:-python3}
TIMM_BENCHMARK=${TIMM_BENCHMARK:-../shared/peers/timm_benchmark.py}
LIMIT_MIB=64
# nvImageCodec as the development venv tests it; nvJPEG of CUDA 13.0, the GPU machine's toolkit and driver;
# simplejpeg, the CPU path's JPEG decoder (data.cpu_decoder; a dependency the GPU machine's Python lacks)
PACKAGES=(nvidia-nvimgcodec-cu13==0.9.0.20 nvidia-nvjpeg==13.0.2.28 simplejpeg==1.9.0)

mkdir -p "$WHEELS" "$PEERS"
rm -f "$WHEELS"/*.whl  # the campaign installs every wheel here: no older version beside the pinned one
# manylinux_2_28 and manylinux2014 (2_17): the GPU machine's glibc (2.39) takes both, and nvJPEG has only the latter
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --dest "$WHEELS" "${PACKAGES[@]}"
if [ -f "$TIMM_BENCHMARK" ]; then
    cp "$TIMM_BENCHMARK" "$PEERS/timm_benchmark.py"
else
    echo "no $TIMM_BENCHMARK: the peers stage will say timm's script is missing (TIMM_BENCHMARK=PATH)" >&2
fi
ls -l "$WHEELS" "$PEERS"
# what the run tool sends: the tree git does not ignore, and the carried folders
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null | paste -sd+ | bc)
carried=$(find "$WHEELS" "$PEERS" -type f -printf '%s\n' | paste -sd+ | bc)
total=$(( ${tree:-0} + ${carried:-0} ))
mib=$(( (total + 1048575) / 1048576 ))
echo "the tree ${tree:-0} bytes, $WHEELS and $PEERS $carried bytes: $mib MiB of the $LIMIT_MIB MiB the run tool sends"
if [ "$mib" -gt "$LIMIT_MIB" ]; then
    echo "more than the $LIMIT_MIB MiB the run tool sends: carry less" >&2
    exit 1
fi
