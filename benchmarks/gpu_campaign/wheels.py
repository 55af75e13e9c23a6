"""Install the wheels the GPU machine lacks (it has no package registry: nvImageCodec and its nvJPEG, and simplejpeg,
the CPU path's JPEG decoder) into a folder of their own, and say whether nvImageCodec then decodes on the device and
which of its backends takes a region:

    PYTHONPATH=src python3 benchmarks/gpu_campaign/wheels.py --wheels .whl --target DIR --device cuda --json OUT

`pip install --no-deps --no-index --target DIR` of the *.whl in --wheels (scripts/gpu-wheels.sh downloads them on a
machine with a registry): nvImageCodec's and nvJPEG's in one call, simplejpeg's in a call of its own, so that a
simplejpeg wheel pip refuses costs only simplejpeg (the CPU path then decodes with Pillow). The campaign then puts
DIR first on its commands' PYTHONPATH. OUT (JSON) holds each install's command, exit status, seconds and output's
end (`install`, `install_simplejpeg`), the packages' versions, and `unavailable`: why nvImageCodec cannot decode the
device path here (None where it can). Where it cannot, this exits 1 after writing OUT: the campaign records that and
skips the nvImageCodec rows with the reason. With no wheel in --wheels nothing is installed and the check asks the
environment's own nvImageCodec (the CPU rehearsal's venv has one).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import subprocess
import sys
import time
from pathlib import Path

PACKAGES = ("nvidia-nvimgcodec-cu13", "nvidia-nvjpeg", "simplejpeg")
"""What scripts/gpu-wheels.sh downloads (their versions pinned there)."""


def install(wheels: list[Path], target: Path) -> dict:
    """pip's --no-deps, --no-index install of the wheels into target: its command, status, seconds, output's end."""
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile", "--no-cache-dir",
               "--no-warn-conflicts", "--disable-pip-version-check", "--target", str(target), *map(str, wheels)]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        returncode, output = done.returncode, done.stdout + done.stderr
    except (OSError, subprocess.SubprocessError) as error:
        returncode, output = None, f"{type(error).__name__}: {error}"
    return {"command": " ".join(command), "returncode": returncode, "seconds": round(time.monotonic() - started, 2),
            "output": output[-2000:]}


def versions() -> dict[str, str | None]:
    found = {}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def check(device_name: str) -> dict:
    """Whether nvImageCodec decodes the device path on the device (unavailable_named: on a CPU its CPU backend), and
    which backend took a 500 x 375 JPEG's region and a whole one (the cascade's first that could)."""
    import io

    import numpy as np
    import torch
    from PIL import Image

    from dlscale.data.device.decoders.nvimgcodec import NvimgcodecDecoder

    device = torch.device(device_name)
    why = NvimgcodecDecoder.unavailable_named(device)
    if why is not None:
        return {"unavailable": why}
    buffer = io.BytesIO()
    pixels = np.random.default_rng(0).integers(0, 256, (375, 500, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    file = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)
    taken = {}
    for what, regions in (("region", [(17, 40, 211, 180)]), ("whole", None)):
        decoder = NvimgcodecDecoder(device)
        decoded = decoder.decode([file], regions)
        taken[what] = next((kind for kind, count in decoder.decoded_by.items() if count), None) \
            if decoded[0] is not None else None
    return {"unavailable": None, "probe_backend": taken}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheels", type=Path, required=True, help="the folder of *.whl files")
    p.add_argument("--target", type=Path, required=True, help="where they are installed (pip --target)")
    p.add_argument("--device", default="cuda", help="where the check decodes (cuda, or cpu on the rehearsal)")
    p.add_argument("--json", type=Path, required=True)
    args = p.parse_args(argv)
    wheels = sorted(args.wheels.glob("*.whl")) if args.wheels.is_dir() else []
    simplejpeg = [w for w in wheels if w.name.startswith("simplejpeg-")]
    nvimgcodec = [w for w in wheels if w not in simplejpeg]
    record: dict = {"wheels": [w.name for w in wheels], "target": None, "install": None, "install_simplejpeg": None}
    if nvimgcodec:
        record["install"] = install(nvimgcodec, args.target)
    if simplejpeg:
        record["install_simplejpeg"] = install(simplejpeg, args.target)
        if record["install_simplejpeg"]["returncode"] != 0:
            print(f"pip could not install {', '.join(w.name for w in simplejpeg)} (exit "
                  f"{record['install_simplejpeg']['returncode']}): the CPU path decodes with Pillow", flush=True)
    if any(done and done["returncode"] == 0 for done in (record["install"], record["install_simplejpeg"])):
        record["target"] = str(args.target)
        sys.path.insert(0, str(args.target))
        importlib.invalidate_caches()
    record["versions"] = versions()
    try:
        record.update(check(args.device))
    except Exception as error:  # noqa: BLE001 - recorded: the campaign goes on without the nvImageCodec rows
        record["unavailable"] = f"the check failed: {type(error).__name__}: {' '.join(str(error).split())[:300]}"
    if record["unavailable"] and not nvimgcodec:
        record["unavailable"] += f" (no wheel in {args.wheels} for nvImageCodec: scripts/gpu-wheels.sh downloads them)"
    elif record["unavailable"] and record["install"]["returncode"] != 0:
        record["unavailable"] += f" (pip could not install {', '.join(w.name for w in nvimgcodec)}: exit " \
                                 f"{record['install']['returncode']})"
    args.json.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2), flush=True)
    return 1 if record["unavailable"] else 0


if __name__ == "__main__":
    sys.exit(main())
