"""What every cause function gets: the run, the published figure it is compared with, and optionally a
1-rank run of the same settings, a network for dlscale predict's expected communication, a dlscale comm
run and the platform it is compared with, and the other runs explained with it."""

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
    others: tuple[Run, ...] = ()
    """The other runs explained with this one (a sweep's points, --baseline): a setting is advised on a CPU
    only where one of them shows it faster."""

    def change(self, bench: str, train: str) -> str:
        """The flag that changes a setting: bench's own flag, or train's --set."""
        return bench if self.run.kind == "bench" else f"--set {train}"

    def faster(self, precision: str) -> Run | None:
        """The fastest other run of the same work (model, batch, ranks, device) in `precision` that ran faster
        than this one, if any: the run's own evidence for a change of precision."""
        run = self.run
        same = [o for o in self.others if o.path != run.path and o.precision == precision and o.model == run.model
                and o.batch == run.batch and o.world_size == run.world_size and o.device_name == run.device_name
                and o.per_device_ips and run.per_device_ips and o.per_device_ips > run.per_device_ips]
        return max(same, key=lambda o: o.per_device_ips, default=None)
