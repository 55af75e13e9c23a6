"""An explanation as the terminal shows it (and report.md lists it)."""

from __future__ import annotations

import textwrap

from dlscale.explain.findings import Explanation

WIDTH = 110


def _wrapped(label: str, text: str, indent: str = "     ") -> list[str]:
    return textwrap.wrap(f"{label}{text}", WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def lines(explanation: Explanation) -> list[str]:
    e = explanation
    out = [f"Run: {e.run} ({e.describe_run}): " + (f"{e.run_ips:.1f} img/s per device" if e.run_ips else "no rate")]
    if e.reference:
        out += _wrapped("Reference: ", e.describe_reference or e.reference, "")
        out.append(f"Gap: the reference is {e.gap:.2f}x this run ({100 / e.gap:.0f}% of it reached)" if e.gap else
                   "Gap: unknown")
    else:
        out.append("Reference: none (what the run shows by itself)")
    ranked = e.ranked()
    out += ["", "Causes, largest estimated effect first:" if ranked else "No cause found."]
    for number, finding in enumerate(ranked, 1):
        out.append(f"{number:>2}. [{finding.category}] {finding.cause}: effect {finding.effect.text()}")
        out += _wrapped("evidence: ", finding.evidence)
        out += _wrapped("estimate: ", finding.effect.source)
        out += _wrapped("change: ", finding.change)
    if e.gap and ranked:
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


def short(explanation: Explanation, top: int = 3) -> list[str]:
    """A few lines for report.md: the gap and the largest findings."""
    e = explanation
    head = (f"against {e.reference} ({e.reference_ips:.1f} img/s per device): gap {e.gap:.2f}x" if e.gap
            else "no published reference matched")
    found = [f"{f.cause} ({f.effect.text()})" for f in e.ranked()[:top]]
    return [head + (": " + "; ".join(found) if found else ": no cause found") +
            (f"; unexplained {e.unexplained:.2f}x" if e.gap and e.unexplained and e.unexplained > 1.10 else "")]
