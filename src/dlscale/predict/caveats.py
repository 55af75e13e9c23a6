"""What a prediction's inputs do not cover, said in its header: a global batch beyond what the shipped
references trained to accuracy, and an MFU above what dlscale measured on the device. A throughput at a
global batch no published run kept its accuracy at says nothing of the time to accuracy; an MFU no
measurement reached predicts a device faster than any run of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlscale.predict.compute import measured_mfu
from dlscale.report.references import load_reference, reference_names

ACCURACY_TOLERANCE_PCT = 1.0
"""A run kept its accuracy when its final top-1 is at most this many points below its series' smallest global
batch: `dlscale report`'s --top1-tolerance default (docs/scaling.md, the accuracy flag)."""


@dataclass(frozen=True)
class TrainedBatch:
    """A published run's global batch and final top-1 against its series' smallest global batch."""

    global_batch: int
    top1_pct: float
    drop_pct: float
    """Points below the series' run at its smallest global batch."""
    base_batch: int
    where: str
    """Reference, series and device count."""

    @property
    def kept(self) -> bool:
        return self.drop_pct <= ACCURACY_TOLERANCE_PCT


def trained_batches(model: str) -> list[TrainedBatch]:
    """Every shipped scaling point of `model` with a final top-1 and a global batch, by global batch."""
    found = []
    for name in reference_names():
        ref = load_reference(name)
        if ref.model != model:
            continue
        for series in ref.of_kind("scaling"):
            points = [p for p in series.points if p.get("final_top1_pct") is not None and p.get("global_batch")]
            if not points:
                continue
            base = min(points, key=lambda p: p["global_batch"])
            found += [TrainedBatch(int(p["global_batch"]), p["final_top1_pct"],
                                   base["final_top1_pct"] - p["final_top1_pct"], int(base["global_batch"]),
                                   f"{name}:{series.id} at {p['devices']} devices") for p in points]
    return sorted(found, key=lambda t: t.global_batch)


def accuracy_line(model: str, global_batches: Sequence[tuple[int, int]]) -> str | None:
    """One line when a predicted point's global batch (devices, global batch) is beyond the largest a shipped
    reference of the model trained to accuracy; None otherwise, or when none states an accuracy."""
    trained = trained_batches(model)
    kept = [t for t in trained if t.kept]
    if not kept:
        return None
    largest = max(kept, key=lambda t: t.global_batch)
    beyond = [(n, batch) for n, batch in global_batches if batch > largest.global_batch]
    if not beyond:
        return None
    devices, batch = beyond[0]
    lost = [t for t in trained if not t.kept]
    losses = "; ".join(f"{t.where} lost {t.drop_pct:.2f} points at {t.global_batch:,} ({t.top1_pct:.2f}% top-1)"
                       for t in sorted(lost, key=lambda t: -t.drop_pct))
    return (f"global batch {batch:,} (from {devices} devices) is beyond the largest a shipped reference trained to "
            f"accuracy: {largest.global_batch:,} ({largest.where}: {largest.top1_pct:.2f}% top-1, "
            f"{largest.drop_pct:.2f} points below its global batch {largest.base_batch:,}; kept: within "
            f"{ACCURACY_TOLERANCE_PCT:g} point)" + (f"; beyond it {losses}" if losses else "") +
            ": these rates say nothing of the time to that accuracy (a larger global batch needs its own recipe)")


def mfu_line(device: str | None, mfu: float, peak_dtype: str) -> str | None:
    """One line when --mfu is above the highest MFU dlscale measured on the device at that peak's precision."""
    measured = measured_mfu(device, peak_dtype)
    if measured is None or mfu <= measured.mfu:
        return None
    return (f"--mfu {mfu:g} ({100 * mfu:.1f}%) is above what dlscale measured on an {measured.device}: "
            f"{100 * measured.mfu:.1f}% of its {peak_dtype} peak ({measured.what}); the prediction is "
            f"{mfu / measured.mfu:.1f}x that run's compute rate (references/device_mfu.json)")
