"""Numeric precision as one object: autocast, backward and optimizer step, with no branches.

The training step calls `precision.autocast()`, `precision.backward(loss)` and
`precision.step(optimizer)` whatever the mode. Only amp_fp16 enables the GradScaler: fp16 has
5 exponent bits, so small gradients underflow without loss scaling; bf16 keeps fp32's 8 exponent
bits and needs none (Micikevicius et al. 2018, "Mixed Precision Training"). A disabled
GradScaler passes every call through, as nanoGPT does with `GradScaler(enabled=...)`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from dlscale.config.sections import PRECISIONS
from dlscale.errors import DeviceError, shown

_AUTOCAST_DTYPE = {"fp32": None, "tf32": None, "amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}
"""Each of PRECISIONS (dlscale.config.sections, the one list of names) -> its autocast dtype."""


@dataclass(frozen=True)
class Precision:
    name: str
    """One of PRECISIONS."""
    device_type: str
    """"cuda" or "cpu": where autocast applies."""
    autocast_dtype: torch.dtype | None
    """Lower-precision dtype of autocast regions; None runs everything in fp32 (or tf32)."""
    scaler: torch.amp.GradScaler
    """Dynamic loss scaler, enabled for amp_fp16 only."""

    @property
    def flops_dtype(self) -> str:
        """Which peak FLOP/s of the device this mode uses: bf16, fp16, tf32 or fp32."""
        return {"amp_bf16": "bf16", "amp_fp16": "fp16", "tf32": "tf32", "fp32": "fp32"}[self.name]

    def autocast(self) -> contextlib.AbstractContextManager:
        enabled = self.autocast_dtype is not None
        return torch.autocast(self.device_type, dtype=self.autocast_dtype or torch.float32, enabled=enabled)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaler.scale(loss).backward()

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        # GradScaler.step skips the update when gradients overflowed (inf/nan) and lowers the scale.
        self.scaler.step(optimizer)
        self.scaler.update()

    def state_dict(self) -> dict:
        return self.scaler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if state:
            self.scaler.load_state_dict(state)


def build_precision(name: str, device: torch.device, *, init_scale: float = 2.0**16) -> Precision:
    """Check that `device` can run `name`, set the process-wide TF32 switches, return the object."""
    if name not in PRECISIONS:
        raise DeviceError(f"unknown precision {shown(name)}; choose one of {', '.join(PRECISIONS)}")
    _check_supported(name, device)
    if device.type == "cuda":
        # TF32 for fp32 matmuls/convolutions: on in tf32 and AMP modes (NVIDIA's containers default
        # to it on Ampere+), off in fp32 so that "fp32" means IEEE fp32.
        _set_tf32(name != "fp32")
    dtype = _AUTOCAST_DTYPE[name]
    scaler = torch.amp.GradScaler(device.type, init_scale=init_scale, enabled=name == "amp_fp16")
    return Precision(name=name, device_type=device.type, autocast_dtype=dtype, scaler=scaler)


def default_precision(device: torch.device) -> str:
    """What a user would pick on this device: bf16 AMP where supported, fp16 AMP on older GPUs."""
    if device.type != "cuda":
        return "fp32"
    return "amp_bf16" if torch.cuda.is_bf16_supported() else "amp_fp16"


def _check_supported(name: str, device: torch.device) -> None:
    if name == "tf32":
        if device.type != "cuda":
            raise DeviceError("--precision tf32 needs an NVIDIA GPU (Ampere or newer); on the CPU use fp32")
        if torch.cuda.get_device_capability(device) < (8, 0):
            raise DeviceError(f"{torch.cuda.get_device_name(device)} has no TF32; use fp32 or amp_fp16")
    if name == "amp_bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise DeviceError(f"{torch.cuda.get_device_name(device)} has no bf16 support; use --precision amp_fp16")
    dtype = _AUTOCAST_DTYPE[name]
    if dtype is not None and not _autocast_runs(device, dtype):
        other = "amp_bf16" if dtype == torch.float16 else "amp_fp16"
        raise DeviceError(f"autocast to {dtype} does not run on {device.type} here; use --precision {other} or fp32")


def _autocast_runs(device: torch.device, dtype: torch.dtype) -> bool:
    """Run one small convolution under autocast: the device's real answer, not a version table."""
    try:
        conv = torch.nn.Conv2d(3, 4, 3).to(device)
        with torch.autocast(device.type, dtype=dtype):
            conv(torch.randn(1, 3, 8, 8, device=device)).sum().backward()
        return True
    except (RuntimeError, NotImplementedError):
        return False


def _set_tf32(enabled: bool) -> None:
    """TF32 for fp32 matmuls and cuDNN convolutions, on or off, through the legacy switches.

    torch >= 2.9 also has per-backend `fp32_precision` settings; setting only those makes the
    legacy getters (`torch.get_float32_matmul_precision()`, `torch.backends.cuda.matmul.allow_tf32`)
    raise "mix of the legacy and new APIs", and inductor's autotuning reads them, so compiling in
    a max-autotune mode crashed. The legacy setters update the new settings too: every getter
    then agrees (docs/references.md#pytorch-tf32).
    """
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def precision_note(name: str, device_type: str) -> str | None:
    """One line on what a precision means where it is easy to misread, else None. AMP on a CPU runs (a mode
    that does not is refused by build_precision) but often badly: a warning, not a refusal."""
    if name == "fp32" and device_type == "cuda":
        return ("precision fp32: IEEE fp32, TF32 off for matmuls and cuDNN convolutions (PyTorch's own default "
                "runs convolutions in TF32), several times slower than --precision tf32 on Ampere and newer GPUs")
    if name in ("amp_fp16", "amp_bf16") and device_type == "cpu":
        return (f"warning: precision {name} on the CPU: autocast runs, but on a CPU it can be many times slower "
                "than fp32, depending on the CPU and its kernels (amp_fp16 ran at 0.06x fp32 on the development "
                "machine's Xeon, amp_bf16 at 1.03x: docs/explain.md); compare with --precision fp32")
    return None
