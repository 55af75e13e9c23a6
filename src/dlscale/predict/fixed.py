"""A first-principles floor for the part of a device's step that does not shrink with its batch (t0).

Where no step curve of the device was measured and no published figures give it at two batch sizes or
more, dlscale predict models t0 from what every step must do whatever its batch, term by term:

    t0 >= issuing the kernels + GEMM waves + parameter traffic

- issuing the kernels: the kernels of one training step (counted from the layer table for the execution mode),
  each at the cost its stack pays to issue one (docs/references.md#launch-floors, #dispatch-costs):
  - a node of a replayed CUDA graph, 0.58 us (ahrefs/ocannl#488), whatever the framework that captured it;
  - a kernel of torch.compile's wrapper, enqueued by the host: 2.65 us (the same measurement);
  - an operator of eager PyTorch, its dispatcher and launch: 4 us (pytorch/pytorch#82793, an A100);
  - a kernel of MXNet's symbolic executor: its launch, 4.83 us (apache/mxnet#9055, MXNet's own cudaLaunch
    average), and for each engine operation (a bulk segment of up to MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_FWD or
    _BWD nodes, 15 by default) the stream synchronisation that closes it (apache/mxnet#18951) before the next
    is issued: at least one more launch. With MXNet's CUDA graphs a segment's kernels replay as graph nodes.
- GEMM waves: every convolution's forward and input-gradient GEMM runs at least one wave of output tiles
  over its reduction dimension (C_in k^2 forward, C_out k^2 backward), even for one image: 2 x 128 x 256 x K
  FLOPs per tile (CUTLASS's default tensor-op threadblock, 128 x 128 for fp32 on CUDA cores) at one SM's
  share of the device's dense peak (metrics/hardware.py). The weight gradient's reduction runs over the
  batch, so it is all per image.
- parameter traffic: the bytes every step moves per parameter whatever the batch (the optimizer's reads and
  writes of weights, gradients and momentum; the weight casts of mixed precision; the reads of the weights by
  the forward and input-gradient passes), over the device's memory bandwidth.

It is a floor: tiles run below peak, small kernels run longer than their launch, and a step's host work beyond
issuing its kernels is left out. Checked against the H100's measured fixed part (references/device_steps.json),
which it puts at 61% (tests/unit/test_predict_fixed.py): the predictions say so wherever they use it.
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

FRAMEWORKS = ("pytorch", "mxnet")
"""Who issues a step's kernels: PyTorch (dlscale's own runs, NVIDIA's ConvNets, HAL, BlueFog) or MXNet's symbolic
executor (NVIDIA's MLPerf ResNet-50, v0.6 to v4.0)."""

GRAPH_NODE_US = 0.58
"""A replayed CUDA graph's cost per kernel node (no-op kernels; ahrefs/ocannl#488, 2026-07-30)."""
HOST_LAUNCH_US = 2.65
"""The host's cost to enqueue one kernel asynchronously (the same measurement): torch.compile's wrapper."""
PYTORCH_OP_US = 4.0
"""Eager PyTorch's cost per operator on a CUDA tensor, dispatch and launch: "4 us per op on CUDA" on an A100 with
PyTorch 1.12, in a model the profiler's maintainer calls dispatch bound (pytorch/pytorch#82793)."""
MXNET_LAUNCH_US = 4.83
"""MXNet's executor per kernel launch: cudaLaunch's average under nvprof in MXNet 1.0.0, 631,908 calls in 3.05095 s
(0.10.0: 4.82 us; apache/mxnet#9055)."""
MXNET_BULK_DEFAULT = 15
"""Nodes per engine operation when a configuration sets none: MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN's default
(MXNet's docs/faq/env_var.md, apache/mxnet#14200)."""
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
class Stack:
    """How a step's kernels are issued: the execution mode, the framework issuing them, its optimizer and, for
    MXNet, the nodes of forward and backward per engine operation (bulk execution)."""

    execution: str = "eager"
    framework: str = "pytorch"
    fused_optimizer: bool = True
    bulk: tuple[int, int] = (MXNET_BULK_DEFAULT, MXNET_BULK_DEFAULT)

    def __post_init__(self) -> None:
        if self.execution not in EXECUTIONS:
            raise ConfigError(f"unknown execution {self.execution!r}; choose one of {', '.join(EXECUTIONS)}")
        if self.framework not in FRAMEWORKS:
            raise ConfigError(f"unknown framework {self.framework!r}; choose one of {', '.join(FRAMEWORKS)}")
        if self.framework == "mxnet" and self.execution == "compiled":
            raise ConfigError("execution 'compiled' is torch.compile's: an MXNet step is eager or cuda-graphs")
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in self.bulk):
            raise ConfigError(f"bulk execution takes whole numbers of nodes >= 1 (forward, backward), got {self.bulk}")

    def describe(self) -> str:
        bulk = f", {self.bulk[0]}/{self.bulk[1]} nodes per engine operation" if self.framework == "mxnet" else ""
        return f"{self.framework} {self.execution}{bulk}"


def stack_of(settings: dict) -> Stack:
    """The stack of a bench run's speed options or a reference's recipe (`framework`, `fused_optimizer`, MXNet's
    `bulk_fwd` and `bulk_bwd`), PyTorch's with a fused optimizer where they say nothing."""
    framework = str(settings.get("framework") or "pytorch")
    bulk = tuple(int(settings.get(key) or MXNET_BULK_DEFAULT) for key in ("bulk_fwd", "bulk_bwd"))
    return Stack(execution_of(settings), framework, settings.get("fused_optimizer", True) is not False, bulk)


def issue_cost_us(stack: Stack) -> tuple[float, float]:
    """Microseconds to issue one kernel of a step, and one engine operation of MXNet's (0 for PyTorch): a graph's
    node, torch.compile's host launch, eager PyTorch's dispatch, MXNet's launch; an engine operation ends in a
    stream synchronisation, after which the next is issued: one launch at least."""
    per_segment = MXNET_LAUNCH_US if stack.framework == "mxnet" else 0.0
    if stack.execution == "cuda-graphs":
        return GRAPH_NODE_US, per_segment
    if stack.execution == "compiled":
        return HOST_LAUNCH_US, 0.0
    return (MXNET_LAUNCH_US if stack.framework == "mxnet" else PYTORCH_OP_US), per_segment


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


def kernel_counts(model: str, execution: str, *, mixed: bool = True,
                  fused_optimizer: bool = True) -> tuple[int, int, int]:
    """Kernels one training step launches (PyTorch's ops on cuDNN, channels-last): forward, backward, optimizer.

    Forward: a convolution and (mixed precision) its weight's cast; a normalisation's statistics and
    transform; each ReLU; each residual add; the stem's max-pool, the average pool, the classifier (its casts
    and one GEMM) and the loss (log-softmax, NLL). Backward: each convolution's weight gradient, input
    gradient (not the stem's) and (mixed) its gradient's cast; a normalisation's two reductions; each ReLU's
    and residual add's; the pools, the classifier (two GEMMs, the bias sum, two casts), the loss (two). The
    optimizer: a fused SGD one launch per 110 tensors (multi_tensor_apply's chunking, derived), else three per
    parameter. torch.compile fuses each normalisation's transform with its ReLU and residual add into one
    pointwise kernel, forward and backward. MXNet's ResNet is counted alike (its own fusions are not)."""
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
    return forward, backward, optimizer


def kernels_per_step(model: str, execution: str, *, mixed: bool = True, fused_optimizer: bool = True) -> int:
    """All the kernels of one training step (kernel_counts)."""
    return sum(kernel_counts(model, execution, mixed=mixed, fused_optimizer=fused_optimizer))


@dataclass(frozen=True)
class Floor:
    """The modelled floor of a device's fixed part, term by term, in seconds."""

    launches_s: float
    waves_s: float
    parameters_s: float
    kernels: int
    device: str
    stack: Stack
    segments: int = 0
    """MXNet's engine operations per step (0 for PyTorch)."""

    def describe(self) -> str:
        per_kernel, per_segment = issue_cost_us(self.stack)
        segments = f" + {self.segments} engine operations x {per_segment:.2f} us" if self.segments else ""
        return (f"{1e3 * self.seconds:.2f} ms, a first-principles floor on {self.device} ({self.stack.describe()}): "
                f"{self.kernels} kernels x {per_kernel:.2f} us{segments} = {1e3 * self.launches_s:.2f} ms, one wave "
                f"of GEMM tiles per convolution pass {1e3 * self.waves_s:.2f} ms, parameter traffic "
                f"{1e3 * self.parameters_s:.2f} ms (predict/fixed.py)")

    @property
    def seconds(self) -> float:
        return self.launches_s + self.waves_s + self.parameters_s


def device_key(device: str | None) -> str | None:
    """The peak table's key of a device named by a run or a reference ("NVIDIA A100-SXM4-80GB", "V100 16GB")."""
    if not device:
        return None
    key = known_device(device)
    if key is None:
        alias = next((full for short, full in DEVICE_ALIASES.items() if short in device), None)
        key = known_device(f"{device} {alias}") if alias else None
    return key


def floor(device: str | None, precision: str = "amp_fp16", execution: str | Stack = "eager",
          model: str = "resnet50") -> Floor | None:
    """The first-principles floor of the fixed part on a known device, or None (its peak or bandwidth unknown,
    or a precision it has no peak for). `execution`: a mode (PyTorch's, fused optimizer) or a whole Stack."""
    stack = execution if isinstance(execution, Stack) else Stack(execution)
    key = device_key(device)
    dtype = PEAK_DTYPE.get((precision or "").split(" ")[0].lower())
    if key is None or dtype is None:
        return None
    peak = PEAKS[key]
    tflops = peak.tflops.get(dtype)
    if not tflops or not peak.memory_gbs:
        return None
    mixed = dtype in ("fp16", "bf16")
    forward, backward, optimizer = kernel_counts(model, stack.execution, mixed=mixed,
                                                 fused_optimizer=stack.fused_optimizer)
    segments = 0
    if stack.framework == "mxnet":
        segments = math.ceil(forward / stack.bulk[0]) + math.ceil(backward / stack.bulk[1])
    per_kernel, per_segment = issue_cost_us(stack)
    kernels = forward + backward + optimizer
    tile_m, tile_n = TILE_SIMT if dtype == "fp32" else TILE_TENSOR
    s = structure(model)
    waves = 2 * tile_m * tile_n * (s.gemm_k_forward + s.gemm_k_backward) / (tflops * 1e12 / peak.sms)
    traffic = s.elements * BYTES_PER_PARAMETER["mixed" if mixed else "fp32"] / (peak.memory_gbs * 1e9)
    return Floor((kernels * per_kernel + segments * per_segment) * 1e-6, waves, traffic, kernels, key, stack, segments)
