"""A prediction as a table, a summary object and a run directory (config.json, env.json,
summary.json, through dlscale.rundir; the plot is drawn by predict/plot.py). No torch."""

from __future__ import annotations

from pathlib import Path

from dlscale.metrics.cost import imagenet_epoch_cost
from dlscale.metrics.provenance import host_info
from dlscale.predict.endtoend import Schedule, end_to_end
from dlscale.predict.model import Point
from dlscale.rundir import RunDir, default_run_name

HEADERS = ("devices", "nodes", "batch/device", "compute ms", "fixed %", "comm ms", "exposed ms", "stragglers ms",
           "step ms", "img/s/device", "img/s total", "efficiency", "limited by")


def table(points: list[Point], price_per_device_hour: float | None = None,
          schedule: Schedule | None = None) -> list[str]:
    """Aligned rows, one per device count; with a price, the cost of an ImageNet epoch at each count; with a
    schedule, the time to train and the end-to-end rate. `fixed %`: the share of the device's compute that does
    not shrink with its batch (t0)."""
    extra = ([] if price_per_device_hour is None else ["cost/ImageNet epoch"]) + \
        ([] if schedule is None else ["time to train", "img/s end-to-end"])
    headers = (*HEADERS[:-1], *extra, HEADERS[-1])
    rows = [[f"{p.devices}", f"{p.nodes}", f"{p.batch_per_device}", f"{p.compute_ms:.2f}",
             f"{100 * p.fixed_share:.0f}%", f"{p.comm_ms:.2f}",
             f"{p.exposed_ms:.2f}", f"{p.stragglers_ms:.2f}", f"{p.step_ms:.2f}", f"{p.img_per_s_per_device:,.1f}",
             f"{p.img_per_s_total:,.0f}", f"{100 * p.efficiency:.1f}%" if p.efficiency is not None else "-",
             *([] if price_per_device_hour is None else
               [f"{imagenet_epoch_cost(p.img_per_s_total, p.devices, price_per_device_hour):,.2f}"]),
             *([] if schedule is None else _end_to_end_cells(schedule, p)),
             p.limit] for p in points]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.rjust(w) if i < len(cells) - 1 else c  # noqa: E731 - a one-line formatter
                                   for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
    return [line(headers), *(line(r) for r in rows)]


def _end_to_end_cells(schedule: Schedule, point: Point) -> list[str]:
    done = end_to_end(schedule, point)
    return [duration(done.time_to_train_s), f"{done.img_per_s:,.0f}"]


def duration(seconds: float) -> str:
    """12.3 s, 4.5 min, 2.1 h."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def efficiency_basis(points: list[Point]) -> str:
    """What the efficiency column is relative to: the smallest device count asked for, not one device."""
    if not points:
        return ""
    base = points[0].devices
    relative = "one device's" if base == 1 else (f"that at {base} devices, the smallest count asked for (--gpus); "
                                                  "list 1 first for efficiency against one device")
    return f"each count's img/s per device over {relative}"


def summary(points: list[Point], settings: dict, inputs: dict, price_per_device_hour: float | None = None,
            schedule: Schedule | None = None) -> dict:
    """summary.json of a predict run: what it was asked, where each input came from, every point (with
    the cost of an ImageNet epoch when a price is given; its time to train and end-to-end rate with a schedule)."""
    rows = [{**p.as_dict(), "cost_per_imagenet_epoch": imagenet_epoch_cost(p.img_per_s_total, p.devices,
                                                                            price_per_device_hour),
             **({} if schedule is None else _end_to_end_fields(schedule, p))} for p in points]
    return {"kind": "predict", **settings, "inputs": inputs, "price_per_device_hour": price_per_device_hour,
            "points": rows, "max_devices": max(p.devices for p in points)}


def claim_run(root: str | Path, name: str | None, config: dict) -> RunDir:
    """runs/<name>/, created and locked before the prediction is written."""
    return RunDir.claim_new(root, name or default_run_name("predict", config.get("model", "model"),
                                                             config.get("network_name", "net")), "predict")


def write_run(run: RunDir, config: dict, result: dict) -> Path:
    """config.json (the command's settings), env.json (host) and summary.json."""
    run.write_setup({"kind": "predict", **config}, host_info())
    run.finish(result)
    return run.path


def _end_to_end_fields(schedule: Schedule, point: Point) -> dict:
    done = end_to_end(schedule, point)
    return {"time_to_train_s": done.time_to_train_s, "evaluation_s": done.evaluation_s,
            "img_per_s_end_to_end": done.img_per_s}
