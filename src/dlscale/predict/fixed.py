"""A first-principles floor for the part of a device's step that does not shrink with its batch (t0).

Where no step curve of the device was measured and no published figures give it at two batch sizes or
more, dlscale predict models t0 from what every step must do whatever its batch, term by term:

    t0 >= launches + GEMM waves + parameter traffic

- launches: the kernels of one training step (counted from the layer table for the execution mode), each
  at least the cost of one launch: a node of a replayed CUDA graph 0.58 us, a kernel enqueued by the host
  2.65 us (ahrefs/ocannl#488, measured on an RTX 5070 Ti Laptop with CUDA 13.3: docs/references.md#launch-
  floors). Eager and compiled steps are enqueued op by op, so their launches are the host's; a framework
  adds its own dispatch on top, which this floor leaves out.
- GEMM waves: every convolution's forward and input-gradient GEMM runs at least one wave of output tiles
  over its reduction dimension (C_in k^2 forward, C_out k^2 backward), even for one image: 2 x 128 x 256 x K
  FLOPs per tile (CUTLASS's default tensor-op threadblock, 128 x 128 for fp32 on CUDA cores) at one SM's
  share of the device's dense peak (metrics/hardware.py). The weight gradient's reduction runs over the
  batch, so it is all per image.
- parameter traffic: the bytes every step moves per parameter whatever the batch (the optimizer's reads and
  writes of weights, gradients and momentum; the weight casts of mixed precision; the reads of the weights by
  the forward and input-gradient passes), over the device's memory bandwidth.

It is a floor: tiles run below peak, small kernels run longer than their launch, and a framework's host
work is left out. Checked against the H100's measured fixed part (references/device_steps.json), which it
puts at 61% (tests/unit/test_predict_fixed.py): the predictions say so wherever they use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlscale.errors import ConfigError
from dlscale.metrics.hardware import PEAKS, known_device
from dlscale.predict.layers import Parameter, model_parameters

EXECUTIONS = ("eager", "compiled", "cuda-graphs")
"""How the step's kernels are launched: op by op from Python, from torch.compile's wrapper (fewer kernels:
its pointwise fusion), or replayed as one captured CUDA graph."""

GRAPH_NODE_US = 0.58
"""A replayed CUDA graph's cost per kernel node (no-op kernels; ahrefs/ocannl#488, 2026-07-30)."""
HOST_LAUNCH_US = 2.65
"""The host's cost to enqueue one kernel asynchronously (the same measurement): a framework's op costs more."""
TILE_TENSOR = (128, 256)
"""CUTLASS's default threadblock tile of a tensor-op GEMM on Volta, Turing and Ampere (M x N)."""
TILE_SIMT = (128, 128)
"""CUTLASS's default threadblock tile of a GEMM on CUDA cores (fp32 without tensor cores)."""
BYTES_PER_PARAMETER = {"mixed": 38, "fp32": 32}
"""Bytes moved per parameter per step, whatever the batch (derived): SGD with momentum on fp32 master weights
reads weight, gradient and momentum and writes weight and momentum (20); the forward and input-gradient passes
read the weights (2 x 4 in fp32, 2 x 2 in 16 bits); mixed precision casts the weights to 16 bits (read 4, write
2) and the 16-bit weight gradient back (write 2, read 2, write 4)."""
PEAK_DTYPE = {"amp_bf16": "bf16", "bf16": "bf16", "amp_fp16": "fp16", "fp16": "fp16", "amp": "fp16", "tf32": "tf32",
              "fp32": "fp32"}
"""A precision's name (dlscale's, or the first word of a reference's) -> the peak its GEMMs run at."""
DEVICE_ALIASES = {"V100": "V100-SXM2", "P100": "P100-SXM2"}
"""A reference that names only the GPU (DGX-1's "V100 16GB") is taken to mean the SXM2 board DGX systems carry."""


def execution_of(settings: dict) -> str:
    """The execution of a bench run's speed options or a reference's recipe: CUDA graphs (captured by dlscale,
    MXNet's, or torch.compile's reduce-overhead and max-autotune modes, which record them), compiled, or eager."""
    mode = str(settings.get("compile_mode") or "default")
    if settings.get("cuda_graphs") or (settings.get("compile") and mode != "default" and "no-cudagraphs" not in mode):
        return "cuda-graphs"
    return "compiled" if settings.get("compile") else "eager"


@dataclass(frozen=True)
class Structure:
    """What a model's step is made of, for counting its kernels: from the layer table."""

    convs: int
    norms: int
    relus: int
    adds: int
    parameters: int
    """Parameter tensors (what an optimizer loops over)."""
    elements: int
    """Parameter elements."""
    gemm_k_forward: int
    """Sum over convolutions of C_in x k^2."""
    gemm_k_backward: int
    """Sum over convolutions but the first of C_out x k^2 (the input gradient's reduction)."""


def structure(model: str) -> Structure:
    params = model_parameters(model)
    convs = [(p, _out_channels(params, i)) for i, p in enumerate(params) if p.macs and not p.name.startswith("fc")]
    blocks = {".".join(p.name.split(".")[:2]) for p, _ in convs if p.name.startswith("layer")}
    bottleneck = any(".conv3." in p.name for p, _ in convs)
    k_forward = sum(p.numel // c_out for p, c_out in convs)
    k_backward = sum(c_out * _kernel_area(p.name, bottleneck) for p, c_out in convs[1:])
    return Structure(len(convs), sum(p.norm for p in params) // 2, 1 + len(blocks) * (3 if bottleneck else 2),
                     len(blocks), len(params), sum(p.numel for p in params), k_forward, k_backward)


def _out_channels(params: list[Parameter], index: int) -> int:
    """A convolution's output channels: its normalisation layer's weight follows it in registration order."""
    follower = params[index + 1]
    if not follower.norm:
        raise ConfigError(f"{params[index].name} is not followed by its normalisation layer")
    return follower.numel


def _kernel_area(name: str, bottleneck: bool) -> int:
    """k^2 of a convolution of dlscale's ResNets by its name: the 7x7 stem, 1x1 downsampling, a bottleneck's
    3x3 conv2 between two 1x1, a basic block's two 3x3 (models/resnet.py)."""
    if name == "conv1.weight":
        return 49
    if "downsample" in name:
        return 1
    return 9 if ".conv2." in name or not bottleneck else 1


def kernels_per_step(model: str, execution: str, *, mixed: bool = True, fused_optimizer: bool = True) -> int:
    """Kernels one training step launches (PyTorch's ops on cuDNN, channels-last): forward, backward, optimizer.

    Forward: a convolution and (mixed precision) its weight's cast; a normalisation's statistics and
    transform; each ReLU; each residual add; the stem's max-pool, the average pool, the classifier (its casts
    and one GEMM) and the loss (log-softmax, NLL). Backward: each convolution's weight gradient, input
    gradient (not the stem's) and (mixed) its gradient's cast; a normalisation's two reductions; each ReLU's
    and residual add's; the pools, the classifier (two GEMMs, the bias sum, two casts), the loss (two). The
    optimizer: a fused SGD one launch per 110 tensors (multi_tensor_apply's chunking, derived), else three per
    parameter. torch.compile fuses each normalisation's transform with its ReLU and residual add into one
    pointwise kernel, forward and backward."""
    if execution not in EXECUTIONS:
        raise ConfigError(f"unknown execution {execution!r}; choose one of {', '.join(EXECUTIONS)}")
    s = structure(model)
    casts = 1 if mixed else 0
    forward = s.convs * (1 + casts) + 2 * s.norms + s.relus + s.adds + 2 + (1 + 2 * casts) + 2
    backward = s.convs * (2 + casts) - 1 + 2 * s.norms + s.relus + s.adds + 2 + (3 + 2 * casts) + 2
    if execution == "compiled":  # pointwise work joins the normalisation's kernel
        forward -= s.relus + s.adds
        backward -= s.relus + s.adds
    optimizer = math.ceil(s.parameters / 110) if fused_optimizer else 3 * s.parameters
    return forward + backward + optimizer


@dataclass(frozen=True)
class Floor:
    """The modelled floor of a device's fixed part, term by term, in seconds."""

    launches_s: float
    waves_s: float
    parameters_s: float
    kernels: int
    device: str
    execution: str

    @property
    def seconds(self) -> float:
        return self.launches_s + self.waves_s + self.parameters_s

    def describe(self) -> str:
        return (f"{1e3 * self.seconds:.2f} ms, a first-principles floor on {self.device} ({self.execution}): "
                f"{self.kernels} kernels x {1e6 * self.launches_s / self.kernels:.2f} us = "
                f"{1e3 * self.launches_s:.2f} ms, one wave of GEMM tiles per convolution pass "
                f"{1e3 * self.waves_s:.2f} ms, parameter traffic {1e3 * self.parameters_s:.2f} ms (predict/fixed.py)")


def device_key(device: str | None) -> str | None:
    """The peak table's key of a device named by a run or a reference ("NVIDIA A100-SXM4-80GB", "V100 16GB")."""
    if not device:
        return None
    key = known_device(device)
    if key is None:
        alias = next((full for short, full in DEVICE_ALIASES.items() if short in device), None)
        key = known_device(f"{device} {alias}") if alias else None
    return key


def floor(device: str | None, precision: str = "amp_fp16", execution: str = "eager", model: str = "resnet50",
          *, fused_optimizer: bool = True) -> Floor | None:
    """The first-principles floor of the fixed part on a known device, or None (its peak or bandwidth unknown,
    or a precision it has no peak for)."""
    key = device_key(device)
    dtype = PEAK_DTYPE.get((precision or "").split(" ")[0].lower())
    if key is None or dtype is None:
        return None
    peak = PEAKS[key]
    tflops = peak.tflops.get(dtype)
    if not tflops or not peak.memory_gbs:
        return None
    mixed = dtype in ("fp16", "bf16")
    kernels = kernels_per_step(model, execution, mixed=mixed, fused_optimizer=fused_optimizer)
    launch_us = GRAPH_NODE_US if execution == "cuda-graphs" else HOST_LAUNCH_US
    tile_m, tile_n = TILE_SIMT if dtype == "fp32" else TILE_TENSOR
    s = structure(model)
    waves = 2 * tile_m * tile_n * (s.gemm_k_forward + s.gemm_k_backward) / (tflops * 1e12 / peak.sms)
    traffic = s.elements * BYTES_PER_PARAMETER["mixed" if mixed else "fp32"] / (peak.memory_gbs * 1e9)
    return Floor(kernels * launch_us * 1e-6, waves, traffic, kernels, key, execution)
