"""The validation's scorecard: its table of rows, the statistics over every shipped point and per class of machine,
and the published times to train set beside their end-to-end predictions. Pure text and arithmetic on
validate.py's rows (no torch)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from dlscale.predict.cases import NOT_PREDICTED
from dlscale.predict.efficiency import EfficiencyRow
from dlscale.predict.endtoend import Schedule, end_to_end
from dlscale.predict.output import duration
from dlscale.predict.platforms import platform
from dlscale.predict.validate import Row


def statistics_of(rows: Sequence[Row]) -> dict:
    errors = [abs(r.error) for r in rows]
    if not errors:
        return {"points": 0}
    worst = max(rows, key=lambda r: abs(r.error))
    return {"points": len(errors), "median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
            "worst": f"{worst.case.reference}:{worst.case.series} at {worst.devices}",
            "within_25pct": sum(e <= 0.25 for e in errors), "within_10pct": sum(e <= 0.10 for e in errors)}


def machine_class(row: Row) -> str:
    """The class of machine a row's system belongs to (platforms.json's class)."""
    return platform(row.case.platform).machine_class


def statistics_per_class(rows: Sequence[Row]) -> dict[str, dict]:
    """statistics_of over the rows of each class of machine, in the order the rows first name them."""
    classes: dict[str, list[Row]] = {}
    for row in rows:
        classes.setdefault(machine_class(row), []).append(row)
    return {name: statistics_of(members) for name, members in classes.items()}


def format_rows(rows: Sequence[Row]) -> list[str]:
    head = f"{'group':<16} {'series':<36} {'devices':>7}  {'metric':<10} {'rate':<23} {'published':>10} " \
           f"{'predicted':>10} {'error':>7}  {'limited by':<24} parameters from"
    lines = [head]
    for r in rows:
        fmt = "{:,.0f}" if r.metric == "img/s" else "{:.3f}"
        bound = {"lower": " (published: at least)", "approximate": " (published: about)"}.get(r.bound, "")
        lines.append(f"{r.case.group:<16} {r.case.reference + ':' + r.case.series:<36} {r.devices:>7}  {r.metric:<10} "
                     f"{r.case.rate:<23} {fmt.format(r.published):>10} {fmt.format(r.predicted):>10} "
                     f"{100 * r.error:>+6.1f}%  {r.limit + bound:<24} {r.fed_text()}")
    return lines


def format_classes(rows: Sequence[Row]) -> list[str]:
    """One line per class of machine: its points, median and largest |error|."""
    lines = []
    for name, stats in statistics_per_class(rows).items():
        median, worst = 100 * stats["median_abs_error"], 100 * stats["max_abs_error"]
        lines.append(f"  {name:<42} {stats['points']:>3} points, median |error| {median:4.1f}%, max {worst:4.1f}% "
                     f"({stats['worst']}), {stats['within_25pct']} within 25%")
    return lines


MLPERF_EVAL_EVERY = 4
"""Epochs between two evaluations of MLPerf's ResNet-50: "Every 4 epochs with offset 0 or 1 or 2 or 3", the
evaluation frequency MLPerf's training rules set (mlcommons/training_policies@001952a7 training_rules.adoc,
Quality measure). Each point of references/mlperf_scale.json that names its configuration file (`config`) ran
EVAL_PERIOD="4" there; ABCI's, which names none, logs blocks of 4 epochs. The file's `eval_s` (a result's
evaluation time) is read by nothing here: the evaluations are predicted (predict/endtoend.py), not taken from the
run they are judged against."""


def end_to_end_rows(rows: Sequence[Row]) -> list[tuple[Row, float, float]]:
    """(row, published time to train, predicted) for every row whose point publishes a time to train and its
    epochs: the predicted step rate for the epochs plus the evaluations (predict/endtoend.py), no start-up (MLPerf's
    clock starts after initialisation). Not part of the goals: the shipped rates are step rates."""
    found = []
    for row in rows:
        published = row.published_point or {}
        if row.point is None or not published.get("train_time_s") or not published.get("epochs"):
            continue
        schedule = Schedule(float(published["epochs"]), MLPERF_EVAL_EVERY, 0.0)
        found.append((row, float(published["train_time_s"]), end_to_end(schedule, row.point).time_to_train_s))
    return found


def format_end_to_end(found: Sequence[tuple[Row, float, float]]) -> list[str]:
    lines = [f"{'series':<36} {'devices':>7} {'epochs':>6} {'published':>10} {'predicted':>10} {'error':>7}  "
             "step rate's error"]
    for row, published, predicted in found:
        lines.append(f"{row.case.reference + ':' + row.case.series:<36} {row.devices:>7} "
                     f"{row.published_point['epochs']:>6g} {duration(published):>10} {duration(predicted):>10} "
                     f"{100 * (predicted / published - 1):>+6.1f}%  {100 * row.error:+.1f}%")
    return lines


def efficiency_statistics(checks: Sequence[EfficiencyRow]) -> dict:
    errors = [abs(c.error) for c in checks]
    if not errors:
        return {"points": 0}
    worst = max(checks, key=lambda c: abs(c.error))
    return {"points": len(errors), "median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
            "worst": f"{worst.spec} at {worst.devices}", "within_25pct": sum(e <= 0.25 for e in errors),
            "within_10pct": sum(e <= 0.10 for e in errors)}


def format_efficiency(checks: Sequence[EfficiencyRow]) -> list[str]:
    """The published scaling efficiencies of references/large_batch.json beside their predictions."""
    stats = efficiency_statistics(checks)
    if not checks:
        return []
    out = ["Published scaling efficiencies of runs dlscale ships no rates for (references/large_batch.json), each "
           "predicted from the run's own time to train on the machine its paper names (predict/efficiency.py): not "
           "fitted, not among the shipped points; the same goals",
           f"{'series':<28} {'devices':>7} {'base':>5} {'published':>10} {'predicted':>10} {'error':>7}  "
           f"{'exposed ms':>10} {'stragglers ms':>13} {'step ms':>8}"]
    for c in checks:
        about = {"approximate": "~", "lower": ">="}.get(c.bound, "")
        out.append(f"{c.spec:<28} {c.devices:>7} {c.base:>5} {about + f'{100 * c.published:.1f}%':>10} "
                   f"{100 * c.predicted:>9.1f}% {100 * c.error:>+6.1f}%  {c.point.exposed_ms:>10.2f} "
                   f"{c.point.stragglers_ms:>13.2f} {c.point.step_ms:>8.2f}")
    out.append(f"{stats['points']} published efficiencies: median |error| {100 * stats['median_abs_error']:.1f}% (goal "
               f"<= 10%), max {100 * stats['max_abs_error']:.1f}% ({stats['worst']}; goal <= 25%)")
    return out


def lines(rows: Sequence[Row], texts: dict[str, str], file: object = None,
          checks: Sequence[EfficiencyRow] = ()) -> list[str]:
    """The validation as printed: the table, the goals over every shipped point, a reference file's points apart,
    the published times to train, the errors per class of machine, the published efficiencies of runs not shipped,
    what is not predicted, every case's inputs."""
    shipped = [r for r in rows if r.case.path is None]
    every = statistics_of(shipped)
    out = ["Published scaling points, predicted from each system's smallest published figure and documented hardware",
           "(docs/prediction.md; error = predicted / published - 1; parameters from: the published points that fed a",
           "parameter of the prediction, never the point itself)", "", *format_rows(rows), "",
           f"All {every['points']} shipped points: median |error| {100 * every['median_abs_error']:.1f}% (goal <= "
           f"10%), max {100 * every['max_abs_error']:.1f}% ({every['worst']}; goal <= 25%), {every['within_25pct']} "
           f"of {every['points']} within 25%"]
    own = [r for r in rows if r.case.path is not None]
    if own:
        stats = statistics_of(own)
        out.append(f"Your {stats['points']} points ({file}): median |error| {100 * stats['median_abs_error']:.1f}%, "
                   f"max {100 * stats['max_abs_error']:.1f}% ({stats['worst']}), {stats['within_25pct']} of "
                   f"{stats['points']} within 25%")
    timed = end_to_end_rows(shipped)
    if timed:
        median = statistics.median(abs(predicted / published - 1) for _, published, predicted in timed)
        out += ["", f"Time to train (end-to-end, MLPerf's run_start to run_stop) of the {len(timed)} predicted MLPerf "
                "points that publish one: the step rate above for their epochs plus an evaluation every "
                f"{MLPERF_EVAL_EVERY} epochs (a third of a step per image), no start-up: not in the goals (the rows "
                f"above are step rates); median |error| {100 * median:.1f}%", *format_end_to_end(timed)]
    out += ["", "Errors per class of machine (references/platforms.json's class):", *format_classes(shipped)]
    out += [f"Not predicted: {name}: {reason}" for name, reason in NOT_PREDICTED.items()]
    if checks:
        out += ["", *format_efficiency(checks)]
    inputs = [*(f"  {key}: {text}" for key, text in texts.items()), *(f"  {c.spec}: {c.inputs}" for c in checks)]
    return [*out, "", "Inputs:", *inputs]


def as_json(rows: Sequence[Row], texts: dict[str, str], checks: Sequence[EfficiencyRow] = ()) -> dict:
    """--validate's --json: the goals' statistics, per class, a reference file's apart, every row and input, and the
    published efficiencies of runs not shipped with their statistics."""
    shipped = [r for r in rows if r.case.path is None]
    own = [r for r in rows if r.case.path is not None]
    return {"kind": "predict_validation", "all": statistics_of(shipped), "classes": statistics_per_class(shipped),
            "file": statistics_of(own) if own else None,
            "rows": [{"group": r.case.group, "reference": r.case.reference, "series": r.case.series,
                      "class": machine_class(r), "rate": r.case.rate, "devices": r.devices, "metric": r.metric,
                      "published": r.published, "predicted": r.predicted, "error": r.error, "limit": r.limit,
                      "bound": r.bound, "fed_by": [{"parameter": k, "point": v} for k, v in r.fed_by]}
                     for r in rows],
            "inputs": texts,
            "efficiency_checks": {"statistics": efficiency_statistics(checks), "rows": [
                {"reference": c.series.reference, "series": c.series.id, "devices": c.devices, "base": c.base,
                 "published": c.published, "bound": c.bound, "predicted": c.predicted, "error": c.error,
                 "point": c.point.as_dict(), "inputs": c.inputs} for c in checks]}}
