"""The spread of one device's step times where no run measured it: a sourced default per kind of machine.

A synchronous step waits for the slowest of the devices it synchronises with (model.py's stragglers term:
spread x compute x E[max of K standard normals]); with thousands of devices a small spread costs several
percent. Where neither a run (`--stragglers-from`), a published interval (BlueFog's sample) nor the command
line (`--step-cv`) gives the spread, the kind of machine does (platforms.json's `kind`):

- dedicated: nodes given to one job, joined by an RDMA fabric (InfiniBand, RoCE). PyTorch's DDP benchmark on
  DGX-1 nodes with 4x EDR (pytorch/pytorch@bf69c149 benchmarks/distributed/ddp/README.md) prints ResNet-50's
  time per iteration at batch 32 as p50, p75, p90 and p95, all 0.097 s on one GPU without DDP: to its
  millisecond the 95th percentile is the median, so p95 - p50 < 1 ms, and for normal step times
  (p95 - p50 = 1.645 sigma) sigma < 0.61 ms of 97: a spread below 0.63%, taken at that bound.
- cloud-tcp: virtual instances on TCP over Ethernet. BlueFog's 16-GPU sample on AWS p3.16xlarge at 25 Gbps
  publishes 4,310.6 +- 146.9 img/s, a per-step spread of 22% (inputs.reference_spread).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.predict.inputs import reference_spread
from dlscale.report.references import load_reference

DDP_BENCHMARK = "pytorch/pytorch@bf69c149 benchmarks/distributed/ddp/README.md"
DDP_STEP_S = 0.097
"""ResNet-50 at batch 32 on one V100 of a DGX-1, no DDP: p50 = p75 = p90 = p95 = 0.097 s per iteration."""
DDP_ROUNDING_S = 0.001
"""The benchmark prints seconds to three decimals: two figures printed alike differ by less than this."""
NORMAL_P95_OVER_SIGMA = 1.6449
"""p95 - p50 of a normal distribution, in standard deviations."""


@dataclass(frozen=True)
class Spread:
    cv: float
    """std / mean of one device's step time."""
    source: str
    point: str
    """What fed it, as the validation lists the points that fed a prediction."""


def dedicated() -> Spread:
    cv = DDP_ROUNDING_S / NORMAL_P95_OVER_SIGMA / DDP_STEP_S
    return Spread(cv, f"{100 * cv:.2f}%, the default of dedicated machines on an RDMA fabric: at most this, from "
                      "the percentiles of PyTorch's DDP benchmark on DGX-1 nodes (ResNet-50, batch 32: p50 = p95 = "
                      f"0.097 s, so sigma < 1 ms / 1.645; {DDP_BENCHMARK}; predict/spread.py)",
                  "pytorch:ddp_benchmark@1")


def cloud_tcp() -> Spread:
    series = load_reference("bluefog").get("sample_16")
    cv, _ = reference_spread(series, series.point(devices=16))
    return Spread(cv, f"{100 * cv:.1f}%, the default of cloud instances on TCP: the spread BlueFog's 16-GPU sample "
                      "on AWS p3.16xlarge publishes (4,310.6 +- 146.9 img/s; inputs.reference_spread)",
                  "bluefog:sample_16@16")


def default_spread(kind: str | None) -> Spread | None:
    """The sourced default spread of a kind of machine (platforms.json's kinds), None for an unknown kind."""
    return {"dedicated": dedicated, "cloud-tcp": cloud_tcp}.get(kind or "", lambda: None)()
