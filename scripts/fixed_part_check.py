"""The modelled fixed part of each shipped MLPerf series' stack against the fixed part its published steps imply.

    .venv/bin/python scripts/fixed_part_check.py

For every series of references/mlperf_scale.json it prints, per step program with steps at two
batch sizes or more, the fit t0 of t(b) = t0 + b x t1 over those steps (each anchored as `dlscale predict
--validate` anchors them: its own communication, stragglers and start-up out), beside predict/fixed.py's modelled
fixed part of the series' stack (its device, precision and recipe: framework, CUDA graphs, MXNet's bulk execution),
and the H100's measured curve (references/device_steps.json) beside its modelled part. docs/prediction.md's table
of the fixed part's check is what it printed.
"""

from __future__ import annotations

from dlscale.predict.compute import device_curve, fit_fixed_per_image, published_batch, published_step
from dlscale.predict.fixed import Stack, floor, stack_of
from dlscale.predict.validate import CASES, anchored_step, case_network, case_reference, case_terms


def series_fits(case) -> list[tuple[str, str, float]]:
    """(program, its points, fitted t0 in seconds) of each program of the case's series with two batch sizes."""
    series = case_reference(case).get(case.series)
    terms, net = case_terms(case), case_network(case)
    programs: dict[str | None, list[dict]] = {}
    for point in series.points:
        programs.setdefault(point.get("program"), []).append(point)
    fits = []
    for program, points in programs.items():
        if len({published_batch(series, p) for p in points}) < 2:
            continue
        batches = [published_batch(series, p) for p in points]
        steps = [(b, anchored_step(case, p, b, published_step(series, p), terms, net))
                 for b, p in zip(batches, points, strict=True)]
        where = ", ".join(f"{p['devices']} at {published_batch(series, p)}" for p in points)
        fits.append((program or "one program", where, fit_fixed_per_image(steps)[0]))
    return fits


def main() -> None:
    h100 = floor("NVIDIA H100 80GB HBM3", "amp_bf16", Stack("cuda-graphs"))
    print(f"H100, {h100.stack.describe()}: modelled {1e3 * h100.seconds:.2f} ms; measured "
          f"{1e3 * device_curve('H100').fixed_s:.2f} ms (references/device_steps.json)")
    for case in CASES:
        if case.reference != "mlperf_scale" or case.input_series:
            continue
        ref = case_reference(case)
        series = ref.get(case.series)
        stack = stack_of(ref.recipe_of(series))
        modelled = floor(series.meta.get("device"), series.meta.get("precision"), stack)
        said = modelled.describe() if modelled else "no model (device or precision unknown)"
        print(f"{case.reference}:{case.series}: {said}")
        for program, where, t0 in series_fits(case):
            ratio = f", {t0 / modelled.seconds:.2f} x the model" if modelled else ""
            print(f"    {program} ({where}): fitted {1e3 * t0:.2f} ms{ratio}")


if __name__ == "__main__":
    main()
