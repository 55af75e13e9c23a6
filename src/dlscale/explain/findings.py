"""A finding: a cause, the run's evidence for it, its estimated effect with the estimate's source, and
what to change. Findings are ranked by their effect; a cause that was checked and found absent is
kept as ruled out, so the output says what was looked at."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

UNEXPLAINED = 1.10
"""A remainder of the gap above 10% is called unexplained: dlscale's own threshold, twice the +-5% by
which repeated runs of one benchmark spread on the development machine (docs/benchmarks.md)."""

CATEGORIES = ("recipe", "device", "host", "input", "communication", "stragglers", "software", "measurement")


@dataclass(frozen=True)
class Effect:
    """How much faster the run would be without the cause: 1.2 = 20% more images/s; None: unknown."""

    factor: float | None
    source: str
    """Where the estimate comes from (a published figure, a datasheet ratio, the run's own measurement),
    or why there is none."""
    bound: bool = False
    """True: at most this much (an estimate that covers more than this cause, or a ceiling)."""

    def text(self) -> str:
        if self.factor is None:
            return "unknown"
        return f"{'up to ' if self.bound else ''}{self.factor:.2f}x"


@dataclass(frozen=True)
class Finding:
    category: str
    cause: str
    evidence: str
    effect: Effect
    change: str

    def as_dict(self) -> dict:
        return {**asdict(self), "effect": {**asdict(self.effect), "text": self.effect.text()}}


@dataclass(frozen=True)
class RuledOut:
    category: str
    evidence: str


@dataclass
class Explanation:
    """One run against one published figure (or none): the gap, the findings ranked, what was ruled out."""

    run: str
    describe_run: str
    run_ips: float | None
    """The run's images/s per device."""
    reference: str | None = None
    describe_reference: str | None = None
    reference_ips: float | None = None
    note: str = ""
    """Why the run is compared with nothing although no --reference none was given (no reference matched)."""
    findings: list[Finding] = field(default_factory=list)
    ruled_out: list[RuledOut] = field(default_factory=list)
    next_step: str = ""

    @property
    def gap(self) -> float | None:
        """Reference img/s over the run's (1.5: the reference is 1.5x faster)."""
        if not self.reference_ips or not self.run_ips:
            return None
        return self.reference_ips / self.run_ips

    @property
    def below(self) -> bool:
        """The run is slower than the reference (a gap to explain)."""
        return self.gap is not None and self.gap > 1

    @property
    def explained(self) -> float:
        """The product of the known effects (bounds included, as at most)."""
        return math.prod(f.effect.factor for f in self.findings if f.effect.factor)

    @property
    def unexplained(self) -> float | None:
        """The part of the gap the known effects leave: gap / explained (1.0 or less: none left)."""
        return None if self.gap is None else self.gap / self.explained

    def ranked(self) -> list[Finding]:
        """Known effects first, largest first; unknown effects after them, in the order of CATEGORIES."""
        return sorted(self.findings, key=lambda f: (f.effect.factor is None, -(f.effect.factor or 0.0),
                                                    CATEGORIES.index(f.category)))

    def as_dict(self) -> dict:
        return {"run": self.run, "describe_run": self.describe_run, "run_img_per_s_per_device": self.run_ips,
                "reference": self.reference, "describe_reference": self.describe_reference,
                "reference_img_per_s_per_device": self.reference_ips, "note": self.note, "gap": self.gap,
                "explained": self.explained,
                "unexplained": self.unexplained, "findings": [f.as_dict() for f in self.ranked()],
                "ruled_out": [asdict(r) for r in self.ruled_out], "next_step": self.next_step}
