"""What every cause function gets: the run, the published figure it is compared with, and optionally a
1-rank run of the same settings, a network for dlscale predict's expected communication, a dlscale comm
run and the platform it is compared with."""

from __future__ import annotations

from dataclasses import dataclass

from dlscale.explain.findings import Finding, RuledOut
from dlscale.explain.target import Target
from dlscale.predict.network import Network
from dlscale.predict.platforms import Platform
from dlscale.rundir import CommRun, Run

Result = list[Finding | RuledOut]


@dataclass(frozen=True)
class Context:
    run: Run
    target: Target | None = None
    baseline: Run | None = None
    """A 1-rank run of the same settings (the sweep's smallest point, or --baseline)."""
    network: Network | None = None
    """The network for dlscale predict's expected communication (--comm-run, else --platform)."""
    comm_run: CommRun | None = None
    """A dlscale comm run of the machine (--comm-run): its busbw against the platform's."""
    platform: Platform | None = None
    """The machine named with --platform: what the comm run's busbw is compared with."""

    def change(self, bench: str, train: str) -> str:
        """The flag that changes a setting: bench's own flag, or train's --set."""
        return bench if self.run.kind == "bench" else f"--set {train}"
