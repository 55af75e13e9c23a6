"""The run directory: its schema, its one writer and its one reader. No torch (report, explain and
predict start without it); below every part that writes or reads a run (an import contract: no other
part of dlscale imports json).

    runs/<name>/config.json     what the run was asked to do (`kind` first)
    runs/<name>/env.json        what it ran on
    runs/<name>/metrics.jsonl   one record per log step or epoch
    runs/<name>/summary.json    what it measured
    runs/<sweep>/sweep.json     a sweep's plan and its points' status; a run directory per point

schema.py   the files, the version they carry, the figures under one name, the checks on reading
files.py    JSON read with one line for anything wrong, written atomically; output paths checked first
writer.py   RunDir: create, claim the lock, write the set-up, append records, finish
run.py      Run and CommRun: a run as its files describe it
reader.py   read_run, read_runs, read_summary, read_comm_run, read_sweep
"""

from dlscale.rundir.files import (
    check_output_dir,
    check_output_file,
    json_line,
    json_value,
    open_append,
    read_json,
    replace_atomically,
    storage_cause,
    storage_error,
    storing,
    to_jsonable,
    write_json_file,
    write_text,
    writing,
)
from dlscale.rundir.reader import (
    Sweep,
    is_run,
    is_sweep,
    read_comm_run,
    read_optional,
    read_run,
    read_runs,
    read_summary,
    read_sweep,
)
from dlscale.rundir.run import CommRun, Run
from dlscale.rundir.schema import FIGURES, FILES, THROUGHPUT_KINDS, VERSION, number, stamped
from dlscale.rundir.writer import RunDir, RunInUse, default_run_name, refuse_a_run, run_path

__all__ = [
    "FIGURES", "FILES", "THROUGHPUT_KINDS", "VERSION", "CommRun", "Run", "RunDir", "RunInUse", "Sweep",
    "check_output_dir", "check_output_file", "default_run_name", "is_run", "is_sweep", "json_line", "json_value",
    "number", "open_append", "read_comm_run", "read_json", "read_optional", "read_run", "read_runs", "read_summary",
    "read_sweep", "refuse_a_run", "replace_atomically", "run_path", "stamped", "storage_cause", "storage_error",
    "storing", "to_jsonable", "write_json_file", "write_text", "writing",
]
