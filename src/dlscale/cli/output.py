"""What the commands write, through dlscale.rundir (no torch: predict and explain use it): rank 0's run
directory and --json file claimed before the work starts, and the --json file itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlscale import rundir
from dlscale.rundir import RunDir, stamped


def claim_outputs(root: str | Path, name: str, json_path: Path | None, kind: str, *,
                  is_main: bool = True) -> RunDir | None:
    """Before the work: the --json file checked and the run directory of this `kind` created and locked (rank 0;
    None elsewhere). A path that cannot be written, or a directory that holds another run, is one line now, not a
    traceback or a lost run after the measurement."""
    if not is_main:
        return None
    if json_path is not None:
        rundir.check_output_file(json_path, "--json")
    return RunDir.claim_new(root, name, kind)


def write_json_file(path: Path, data: Any) -> None:
    """`--json PATH`: the object as indented JSON (written atomically), its folder created if missing."""
    rundir.write_json_file(path, data, "--json")


def write_summary_file(path: Path, summary: dict) -> None:
    """`--json PATH` of a command that writes summary.json: the same object, its schema version included."""
    write_json_file(path, stamped(summary))
