"""What every cause function gets: the run, the published figure it is compared with, and optionally a
1-rank run of the same settings and a network for dlscale predict's expected communication."""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.explain.findings import Finding, RuledOut
from dlscale.explain.runs import RunFacts
from dlscale.explain.target import Target
from dlscale.predict.network import Network

Result = list[Finding | RuledOut]


@dataclass(frozen=True)
class Context:
    run: RunFacts
    target: Target | None = None
    baseline: RunFacts | None = None
    """A 1-rank run of the same settings (the sweep's smallest point, or --baseline)."""
    network: Network | None = None
    """The network for dlscale predict's expected communication (--comm-run or --platform)."""

    def change(self, bench: str, train: str) -> str:
        """The flag that changes a setting: bench's own flag, or train's --set."""
        return bench if self.run.kind == "bench" else f"--set {train}"
