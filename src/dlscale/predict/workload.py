"""What one device computes per step and what it communicates: its step as a function of its batch
(compute.py's t(b)) and its gradients in the order backward produces them (model.workload_for_model builds
them from the layer table)."""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.predict.compute import StepTime


@dataclass(frozen=True)
class GradSpec:
    numel: int
    ready_fraction: float
    """When it is ready, as a fraction of backward (0 = start, 1 = end)."""


@dataclass(frozen=True)
class Workload:
    """What one device computes per step, and what it has to communicate."""

    model: str
    batch_per_device: int
    """The reference batch: the figure's own (weak scaling's default; the rate `small batch` is judged by)."""
    step_time: StepTime
    """One device's step as a function of its batch, no communication (compute.py)."""
    grads: tuple[GradSpec, ...]
    """Gradients in the order backward produces them."""
    grad_bytes_per_element: int = 4
    """4: fp32 gradients (torch autocast keeps them fp32); 2: fp16 gradients (apex O2, MXNet fp16)."""
    forward_fraction: float = 1 / 3
    backward_fraction: float = 2 / 3
    cpu_threads: int | None = None
    """CPU ranks: compute threads per rank (None for GPUs)."""
    cpu_cores: int | None = None
    """CPU ranks: cores of the machine they share."""
    host_slowdown: float | None = None
    """Measured: each rank's compute when the ranks of a device count share one host, over one rank's
    alone (replaces the cores arithmetic of core_share)."""
    source: str = ""
    """Where the step time came from, in words."""

    @property
    def step_s(self) -> float:
        """The step at the reference batch."""
        return self.step_time.at(self.batch_per_device)

    def core_share(self, ranks_per_node: int) -> tuple[float, bool]:
        """CPU ranks share the machine's cores: (compute slowdown when they oversubscribe them, whether
        any core is left for communication to run under backward). GPUs: (1, True)."""
        if not self.cpu_threads or not self.cpu_cores:
            return (self.host_slowdown or 1.0), True
        busy = ranks_per_node * self.cpu_threads
        slowdown = self.host_slowdown if self.host_slowdown is not None else max(1.0, busy / self.cpu_cores)
        return slowdown, busy < self.cpu_cores

    def compute_s(self, batch: int) -> float:
        return self.step_time.at(batch)

    @property
    def grad_bytes(self) -> int:
        return sum(g.numel for g in self.grads) * self.grad_bytes_per_element

    @property
    def param_bytes(self) -> int:
        """What a neighbour exchange sends: the parameters, as fp32 (master) weights."""
        return 4 * sum(g.numel for g in self.grads)
