"""Runs of `dlscale predict` in a report: their points beside the measured runs of the same
model at the same world size, and their curves on the throughput and efficiency plots."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HEADERS = ["prediction", "devices", "predicted img/s", "measured img/s", "error", "efficiency", "limited by",
           "measured run"]
CSV = ["prediction", "devices", "predicted_img_per_s", "measured_img_per_s", "error", "efficiency", "limit",
       "measured_run", "path"]


@dataclass(frozen=True)
class PredictRun:
    path: Path
    summary: dict
    config: dict = field(default_factory=dict)
    """config.json: the command's settings and argv (its --from-run)."""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def label(self) -> str:
        return f"predicted: {self.summary.get('title') or self.name}"

    @property
    def points(self) -> list[dict]:
        return sorted(self.summary.get("points", []), key=lambda p: p["devices"])

    @property
    def model(self) -> str | None:
        return self.summary.get("model")


def _measured(runs, model: str | None, devices: int):
    """The measured run of this model at this world size with the most recent name, if any."""
    matches = [r for r in runs if r.summary.get("model") == model and r.world_size == devices and r.total_ips]
    return max(matches, key=lambda r: r.name) if matches else None


def table(predictions: list[PredictRun], runs) -> tuple[list, list]:
    shown, raw = [], []
    for pred in predictions:
        for p in pred.points:
            run = _measured(runs, pred.model, p["devices"])
            measured = run.total_ips if run else None
            error = p["img_per_s_total"] / measured - 1 if measured else None
            efficiency = p.get("efficiency")
            shown.append([pred.name, p["devices"], f"{p['img_per_s_total']:,.1f}",
                          f"{measured:,.1f}" if measured else "—", f"{100 * error:+.1f}%" if error is not None else "—",
                          f"{100 * efficiency:.1f}%" if efficiency is not None else "—", p["limit"],
                          run.name if run else "—"])
            raw.append([pred.name, p["devices"], p["img_per_s_total"], measured, error, efficiency, p["limit"],
                        run.name if run else None, str(pred.path)])
    return shown, raw
