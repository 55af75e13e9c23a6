"""predicted.png of a predict run: total img/s against devices with the linear ideal, and the
scaling efficiency, in the report's figure style (report/figure.py)."""

from __future__ import annotations

from pathlib import Path

from dlscale.report.figure import figure, legend, log2_axis, save


def draw(path: Path, points: list[dict], title: str) -> None:
    fig, (left, right) = figure(f"Predicted: {title}", ncols=2)
    n = [p["devices"] for p in points]
    left.plot(n, [p["img_per_s_total"] for p in points], marker="o", label="predicted")
    base = points[0]
    left.plot(n, [base["img_per_s_per_device"] * k for k in n], linestyle="--", color="black", alpha=0.6,
              label="ideal: linear from the smallest count")
    log2_axis(left, n, "devices")
    left.set_yscale("log")
    left.set_ylabel("throughput (images/s, all devices)")
    legend(left)
    right.plot(n, [100 * (p["efficiency"] or 0) for p in points], marker="o", label="predicted")
    right.axhline(100, color="black", linestyle="--", linewidth=1, label="ideal (100%)")
    log2_axis(right, n, "devices")
    right.set_ylim(0, 110)
    right.set_ylabel("scaling efficiency (%)")
    legend(right)
    save(fig, path)
