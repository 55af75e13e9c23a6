"""An explanation as the terminal shows it (and report.md lists it)."""

from __future__ import annotations

import textwrap

from dlscale.explain.findings import UNEXPLAINED, Explanation
from dlscale.report.tables import plain

WIDTH = 110


def _wrapped(label: str, text: str, indent: str = "     ") -> list[str]:
    return textwrap.wrap(f"{label}{text}", WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def _gap(gap: float | None) -> str:
    if not gap:
        return "Gap: unknown"
    if gap <= 1:
        return f"Gap: none: this run reaches {100 / gap:.0f}% of the reference (the reference is {gap:.2f}x this run)"
    return f"Gap: the reference is {gap:.2f}x this run ({100 / gap:.0f}% of it reached)"


def lines(explanation: Explanation) -> list[str]:
    e = explanation
    out = [f"Run: {e.run} ({e.describe_run}): " + (f"{e.run_ips:.1f} img/s per device" if e.run_ips else "no rate")]
    if e.reference:
        out += _wrapped("Reference: ", e.describe_reference or e.reference, "")
        out.append(_gap(e.gap))
    elif e.note:
        out += _wrapped("Reference: none: ", e.note, "")
    else:
        out.append("Reference: none (what the run shows by itself)")
    ranked = e.ranked()
    heading = "Causes, largest estimated effect first:" if not e.gap or e.below else \
        "Not below the reference; what still differs, largest estimated effect first:"
    out += ["", heading if ranked else "No cause found."]
    for number, finding in enumerate(ranked, 1):
        out.append(f"{number:>2}. [{finding.category}] {finding.cause}: effect {finding.effect.text()}")
        out += _wrapped("evidence: ", finding.evidence)
        out += _wrapped("estimate: ", finding.effect.source)
        out += _wrapped("change: ", finding.change)
    if e.below and ranked:
        left = e.unexplained
        out += ["", f"Explained: {e.explained:.2f}x of the {e.gap:.2f}x gap" +
                (f"; unexplained: {left:.2f}x" if left and left > 1.0 else " (bounds count fully)")]
    if e.ruled_out:
        out += ["", "Checked, not a cause here:"]
        for item in e.ruled_out:
            out += _wrapped(f"[{item.category}] ", item.evidence, "   ")
    if e.next_step:
        out += ["", e.next_step]  # not wrapped: the command is copied from it
    return out


def markdown(explanation: Explanation) -> list[str]:
    """report.md's lines for one run: the gap, then every finding ranked as `dlscale explain` prints them
    (effect, evidence, estimate, change) as a nested list, and what to measure next. Every text that holds a
    record's values is escaped (report.tables.plain): a run's records add no HTML or markup to the report."""
    e = explanation
    reference = plain(e.reference)
    head = (f"against {reference} ({e.reference_ips:.1f} img/s per device): " +
            (f"gap {e.gap:.2f}x" if e.below else f"not below it ({100 / e.gap:.0f}% reached)") if e.gap
            else f"against {reference}: no rate to compare" if e.reference else "no published reference matched")
    ranked = e.ranked()
    if e.below and ranked:
        left = e.unexplained
        head += f"; explained {e.explained:.2f}x" + (f", unexplained {left:.2f}x" if left and left > UNEXPLAINED
                                                     else "")
    out = [head + ("" if ranked else "; no cause found")]
    for number, finding in enumerate(ranked, 1):
        out += [f"{number}. [{plain(finding.category)}] {plain(finding.cause)}: effect {plain(finding.effect.text())}",
                f"   - evidence: {plain(finding.evidence)}", f"   - estimate: {plain(finding.effect.source)}",
                f"   - change: {plain(finding.change)}"]
    if e.next_step:
        out.append(f"- {plain(e.next_step)}")
    return out
