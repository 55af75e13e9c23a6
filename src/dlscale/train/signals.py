"""Turn SIGTERM / SIGUSR1 into a flag that the training loop reads at step boundaries.

SLURM sends SIGUSR1 ahead of preemption or the time limit (`#SBATCH --signal=B:USR1@N`,
"up to 60 seconds earlier than specified", sbatch(1)) and SIGTERM when it cancels a job;
torchrun's agent sends SIGTERM to its workers. The handler only records the signal:
no I/O, no collectives and no checkpoint inside it (docs/references.md#rule-signals). The loop checks
`requested` between optimizer steps, agrees on it across ranks (an all-reduce of the
flag, because a signal may reach only some ranks), checkpoints and exits cleanly.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)


class PreemptionHandler:
    """Installs flag-setting handlers on creation; `close()` puts the previous ones back.

    Usage::

        with PreemptionHandler() as preemption:
            for step in steps:
                train_step(...)
                if preemption.requested:  # all-reduce it first when distributed
                    save_checkpoint_and_exit()
    """

    def __init__(self, signals: tuple[signal.Signals, ...] = DEFAULT_SIGNALS) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("PreemptionHandler must be created in the main thread")
        self._signum: int | None = None
        self.signals = tuple(signals)
        self._previous: dict[signal.Signals, object] = {}
        try:
            for signum in signals:
                self._previous[signum] = signal.signal(signum, self._handle)
        except BaseException:
            self.close()
            raise

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # Signal context: only remember which signal came first.
        if self._signum is None:
            self._signum = signum

    @property
    def requested(self) -> bool:
        """True once one of the signals has arrived."""
        return self._signum is not None

    def votes(self) -> list[float]:
        """One entry per handled signal, 1.0 for the one that arrived here first: summed over ranks,
        they say which signal stopped the job even where it reached only some ranks."""
        return [1.0 if self._signum == signum else 0.0 for signum in self.signals]

    def agreed_name(self, summed_votes: list[float]) -> str | None:
        """The signal most ranks got (the first handled one on a tie), or None if none arrived."""
        if not any(summed_votes):
            return None
        index = max(range(len(self.signals)), key=lambda i: (summed_votes[i], -i))
        return signal.Signals(self.signals[index]).name

    @property
    def signal_name(self) -> str | None:
        """Name of the first signal that arrived ("SIGTERM", "SIGUSR1"), else None."""
        return None if self._signum is None else signal.Signals(self._signum).name

    def close(self) -> None:
        """Restore the handlers that were installed before; safe to call twice."""
        for signum, previous in self._previous.items():
            # getsignal() returns None for handlers not set from Python: fall back to default.
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()

    def __enter__(self) -> PreemptionHandler:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
