"""A finished run stays finished: the command that made it, run again, says so in one line and changes nothing.

A run is finished when it reached its target accuracy (its time to solution is written, and never rewritten)
or trained its last epoch. Running it again would resume from its last checkpoint, train on past the point
its record describes and rewrite summary.json: a time to solution that is no longer the run's, an accuracy
of more epochs than it claims. So fit() asks first, under the run directory's lock and before anything is
built or written: the run's summary.json says what it reached. A run whose schedule lets its epochs change
(train/resume_check.py) may still be lengthened: asked for more epochs than it trained, it is not finished.
Asked for settings that would change what it trained, it is refused as a resume would refuse them (its
config.json holds the settings it ran with).
"""

from __future__ import annotations

from pathlib import Path

from dlscale.config.sections import TrainConfig
from dlscale.errors import ConfigError
from dlscale.rundir import is_run, number, read_optional, read_summary, to_jsonable
from dlscale.train.resume_check import EPOCHS_MAY_CHANGE, check_resume, flatten


def finished(run_dir: Path, cfg: TrainConfig, world_size: int) -> tuple[str, dict] | None:
    """(the one line, the run's summary) when the train run in run_dir is finished for this configuration,
    else None (no summary, an unreadable one, or one of a run that was stopped before its end). A ConfigError
    when the configuration would change what the run trained."""
    if not is_run(run_dir):
        return None
    try:
        summary = read_summary(run_dir, "train")
        ran = read_optional(run_dir / "config.json")
    except ConfigError:  # a record that cannot be read is none to protect; the checkpoints decide
        return None
    _check_settings(run_dir, ran, {**to_jsonable(cfg), "world_size": world_size})
    best = _best(summary)
    seconds = number(summary.get("time_to_target_s"))
    if seconds is not None:
        target = number(summary.get("target_top1_pct"))
        what = f"its target top-1 {target:.2f}%" if target is not None else "its target accuracy"
        return _line(run_dir, f"reached {what} after {summary.get('time_to_target') or f'{seconds:.1f} s'}{best}",
                     "a new run: add --name NEW (or remove the directory)"), summary
    done = summary.get("epochs_completed")
    if summary.get("preempted") is True or not isinstance(done, int) or done < cfg.schedule.epochs:
        return None
    longer = f"more epochs: --epochs N above {done}; " if cfg.schedule.name in EPOCHS_MAY_CHANGE else ""
    return _line(run_dir, f"trained all {done} of its epochs{best}",
                 f"{longer}a new run: add --name NEW (or remove the directory)"), summary


def _check_settings(run_dir: Path, ran: dict, asked: dict) -> None:
    """The settings the run ran with (config.json; its world size from its plan) against the ones asked for, as
    a resume checks them (train/resume_check.py); only the keys both have (a run of an older dlscale has fewer)."""
    old = flatten({**ran, "world_size": (ran.get("plan") or {}).get("world_size", asked["world_size"])})
    new = flatten(asked)
    common = [key for key in new if key in old]
    check_resume({key: old[key] for key in common}, {key: new[key] for key in common}, run=str(run_dir))


def _best(summary: dict) -> str:
    top1, epoch = number(summary.get("best_top1_pct")), summary.get("best_epoch")
    return f", best top-1 {top1:.2f}% at epoch {epoch}" if top1 is not None else ""


def _line(run_dir: Path, what: str, how: str) -> str:
    return f"{run_dir} is a finished run: it {what}; nothing was trained or written. To train again, {how}"
