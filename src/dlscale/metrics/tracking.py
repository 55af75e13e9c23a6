"""MLflow tracking of a run (`--mlflow [URI]`): its settings, its metrics with their step, its summary
and its run directory's files, on rank 0 only.

Where it goes: the URI given; with none, MLFLOW_TRACKING_URI if set, else an SQLite file beside
the runs (`<output-dir>/mlflow.db`, artifacts in `<output-dir>/mlartifacts/`): no server needed,
and `mlflow ui --backend-store-uri sqlite:///runs/mlflow.db` shows it. A path ending in .db or
.sqlite is such a file; any other path is a folder in MLflow's file format.

What: the run's config.json flattened (`optim.lr`, `plan.global_batch`) as parameters; every record
of metrics.jsonl as metrics `<record>/<key>` at the record's step (`train/train_loss`,
`epoch/val_top1_pct`), so the MLflow history is metrics.jsonl's; the numbers of summary.json as
`summary/<key>`; the run directory's files (checkpoints, TensorBoard events and hidden files left
out) as artifacts. The MLflow run's id is kept in the run directory (mlflow.json), so a resumed run
logs on into the same MLflow run.

Never in the way: every call only queues its work for one background thread, so a slow server
costs training nothing; if the tracker fails (no MLflow, a server that does not answer, a full
disk), one warning says so and the run goes on untracked. MLflow is an optional extra
(`pip install 'dlscale[mlflow]'`); `tracking_target` refuses `--mlflow` without it, up front.

Imports no torch (predict and report may track too), and MLflow only on the thread that logs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import os
import queue
import re
import sqlite3
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dlscale.errors import ConfigError, one_line, shown
from dlscale.rundir.files import (
    check_output_dir,
    json_line,
    json_value,
    read_json,
    refuse_non_regular,
    storage_error,
    write_text,
)

EXPERIMENT = "dlscale"
"""Default experiment name (--mlflow-experiment, else MLFLOW_EXPERIMENT_NAME, else this)."""
RUN_FILE = "mlflow.json"
"""In the run directory: the tracking URI and MLflow run id, for a resumed run to log on."""
CLOSE_TIMEOUT_S = 120.0
"""How long close() waits for queued work (an unreachable server's retries) before giving up."""
SKIPPED_DIRS = {"checkpoints", "tb"}
"""Run directory folders not sent as artifacts: large, and kept in the run directory."""
_PARAM_LENGTH = 6000  # MLflow's limit on a parameter's value
_BATCH = 100  # MLflow's limit on parameters per log_batch


@dataclass(frozen=True)
class TrackingTarget:
    """Where a run is tracked."""

    uri: str
    """MLflow tracking URI: sqlite:///..., file:///..., http(s)://..., databricks."""
    experiment: str
    artifact_location: str | None = None
    """For a new experiment in a local store: a folder beside it (MLflow's default is the working directory)."""


def tracking_target(given: str | None, *, output_dir: str | os.PathLike, experiment: str | None = None,
                    environ: Mapping[str, str] | None = None) -> TrackingTarget | None:
    """The target that `--mlflow [URI]` names (given None: not asked; "": the default store)."""
    if given is None:
        return None
    if importlib.util.find_spec("mlflow") is None:
        raise ConfigError("--mlflow needs the MLflow client: pip install 'dlscale[mlflow]'")
    environ = os.environ if environ is None else environ
    experiment = experiment or environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT
    uri = given or environ.get("MLFLOW_TRACKING_URI", "")
    where = "--mlflow" if given else "MLFLOW_TRACKING_URI"
    if not uri:
        root = Path(output_dir).resolve()
        target = TrackingTarget(f"sqlite:///{root / 'mlflow.db'}", experiment, str(root / "mlartifacts"))
    elif uri == "databricks" or uri.startswith(("file:", "databricks://")) or re.match(SCHEME, uri):
        target = TrackingTarget(uri, experiment)
    elif ":" in uri or any(ord(c) < 32 for c in uri):
        raise ConfigError(f"{where} {shown(uri)} is not a tracking URI: give http(s)://HOST:PORT, sqlite:///FILE.db, "
                          "file:///FOLDER, databricks, or a path (one with a ':' in it as file:///PATH)")
    else:
        path = Path(uri).resolve()  # a path: an SQLite file or a folder
        if path.suffix in (".db", ".sqlite"):
            target = TrackingTarget(f"sqlite:///{path}", experiment, str(path.with_name("mlartifacts")))
        else:
            target = TrackingTarget(path.as_uri(), experiment)
    check_store(target.uri, where)
    return target


SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s]")
"""A URI with a scheme and something after it: MLflow's servers and databases (http, https, postgresql, ...)."""
SQLITE_TIMEOUT_S = 5.0
"""How long the check of an SQLite store waits for another writer's lock."""


def check_store(uri: str, where: str = "--mlflow") -> None:
    """A local store that cannot be written is one line before the work (MLflow would retry for minutes): an
    SQLite file that is read-only or locked, or a folder that cannot be created or written. A server is not
    contacted here: the tracker's thread warns if it does not answer."""
    if uri.startswith("sqlite:///"):
        path = Path(uri[len("sqlite:///"):])
        check_output_dir(path.parent, where, "the MLflow store's folder")
        if path.exists():
            _check_sqlite(path, where)
        else:
            _check_writable(path.parent, where)
    elif uri.startswith("file:"):
        folder = Path(urllib.parse.urlsplit(uri).path)
        check_output_dir(folder, where, "the MLflow store")
        _check_writable(folder, where)


def _check_sqlite(path: Path, where: str) -> None:
    refuse_non_regular(path, where)
    try:
        with contextlib.closing(sqlite3.connect(path, timeout=SQLITE_TIMEOUT_S)) as db:
            db.execute("BEGIN IMMEDIATE")  # takes the write lock, as a logging MLflow does
            db.rollback()
    except sqlite3.Error as error:
        raise ConfigError(f"{where}: the SQLite store {path} cannot be written ({error}); make it (and its folder) "
                          "writable, or give another store") from None


def _check_writable(folder: Path, where: str) -> None:
    probe = folder / f".mlflow-probe.{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise storage_error(folder, error, where) from None


def flatten(settings: Mapping, prefix: str = "") -> dict[str, str]:
    """Nested settings as MLflow parameters: {"optim": {"lr": 0.1}} -> {"optim.lr": "0.1"}."""
    params: dict[str, str] = {}
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            params.update(flatten(value, f"{name}."))
        else:
            text = value if isinstance(value, str) else json_value(value)
            params[name] = text[:_PARAM_LENGTH]
    return params


def numbers(record: Mapping, prefix: str, skip: Iterable[str] = ()) -> dict[str, float]:
    """The finite numbers of a record as metrics named prefix + key (booleans and text left out)."""
    skipped = set(skip)
    return {f"{prefix}{key}": float(value) for key, value in record.items()
            if key not in skipped and isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value)}


def artifact_files(root: Path) -> list[Path]:
    """The run directory's files to send: not checkpoints, TensorBoard events, locks or temporary files."""
    files = []
    for path in sorted(root.rglob("*")):
        parts = path.relative_to(root).parts
        if path.is_file() and not any(p.startswith(".") or p in SKIPPED_DIRS for p in parts):
            files.append(path)
    return files


def _warn(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _say(text: str) -> None:
    print(text, flush=True)


class Tracker:
    """One MLflow run, fed from a background thread. `Tracker(None)` (not asked, or not rank 0) does nothing."""

    def __init__(self, target: TrackingTarget | None, *, run_name: str, tags: Mapping[str, str] | None = None,
                 run_dir: Path | None = None, warn: Callable[[str], None] = _warn,
                 say: Callable[[str], None] = _say) -> None:
        self.target = target
        self.run_name, self.tags, self.run_dir = run_name, dict(tags or {}), run_dir
        self.warn, self.say = warn, say
        self.run_id: str | None = None
        self.resumed = False
        """The run directory's MLflow run, logged into again (a resumed training run)."""
        self.failed = False
        self._queue: queue.Queue = queue.Queue()
        self._thread = None
        if target is not None:
            self._thread = threading.Thread(target=self._work, name="dlscale-mlflow", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self._thread is not None and not self.failed

    def params(self, settings: Mapping) -> None:
        """Nested settings (config.json) as parameters."""
        self._put("params", flatten(settings))

    def metrics(self, values: Mapping[str, float], step: int) -> None:
        """Numbers at a step, stamped now (not when the thread gets to them)."""
        if values:
            self._put("metrics", dict(values), int(step), int(time.time() * 1000))

    def artifacts(self, root: Path, path: str | None = None) -> None:
        """root's files (artifact_files) under `path` in the run's artifacts."""
        self._put("artifacts", Path(root), path)

    def close(self, status: str = "FINISHED", timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """End the MLflow run (FINISHED, FAILED or KILLED) once the queued work is done."""
        if self._thread is None:
            return
        self._put("end", status)
        self._thread.join(timeout_s)
        if self._thread.is_alive() and not self.failed:
            self.failed = True
            self.warn(f"warning: MLflow tracking ({self.target.uri}) still busy after {timeout_s:g} s; "
                      "what was not logged by then is not tracked")
        self._thread = None
        if not self.failed and self.run_id:
            self.say(self.where())

    def where(self) -> str:
        """Where the run was logged, and how to look at it."""
        uri = self.target.uri
        look = (f"open {uri}" if uri.startswith(("http://", "https://")) else "the Databricks workspace"
                if uri.startswith("databricks") else f"mlflow ui --backend-store-uri {uri}")
        return (f"MLflow: {'logged on to' if self.resumed else 'logged to'} run {self.run_id} of experiment "
                f"{self.target.experiment!r} at {uri} (to see it: {look})")

    def _put(self, *item) -> None:
        if self.enabled:
            self._queue.put(item)

    # ---------------------------------------------------------------- the tracking thread

    def _work(self) -> None:
        try:
            client = self._open()
            while True:
                kind, *args = self._queue.get()
                if kind == "end":
                    client.set_terminated(self.run_id, status=args[0])
                    return
                getattr(self, f"_log_{kind}")(client, *args)
        except Exception as error:  # noqa: BLE001 - any failure of the tracker: one warning, training goes on
            self.failed = True
            detail = one_line(error, 300)
            self.warn(f"warning: MLflow tracking ({self.target.uri}) failed and is off for the rest of this run: "
                      f"{type(error).__name__}: {detail}")

    def _open(self):
        """The client, the experiment and the run: the run directory's own if it was tracked here before."""
        client = _mlflow_client(self.target.uri)
        previous = self._previous_run()
        if previous:
            self.run_id, self.resumed = previous, True
            client.update_run(previous, status="RUNNING")
            return client
        found = client.get_experiment_by_name(self.target.experiment)
        if found is not None:
            experiment_id = found.experiment_id
        else:
            experiment_id = client.create_experiment(self.target.experiment,
                                                     artifact_location=self.target.artifact_location)
        tags = {"mlflow.runName": self.run_name, **self.tags}
        self.run_id = client.create_run(experiment_id, run_name=self.run_name, tags=tags).info.run_id
        if self.run_dir is not None:
            check_output_dir(self.run_dir, "--output-dir", "the run directory")
            write_text(self.run_dir / RUN_FILE, json_line({"tracking_uri": self.target.uri, "run_id": self.run_id,
                                                           "experiment_id": experiment_id}))
        return client

    def _previous_run(self) -> str | None:
        path = None if self.run_dir is None else self.run_dir / RUN_FILE
        if path is None or not path.is_file():
            return None
        try:
            kept = read_json(path)
        except ConfigError:  # damaged: a new MLflow run
            return None
        return kept.get("run_id") if kept.get("tracking_uri") == self.target.uri else None

    def _log_params(self, client, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        if self.resumed:  # MLflow keeps a parameter's first value: log only the new ones
            logged = client.get_run(self.run_id).data.params
            params = {key: value for key, value in params.items() if key not in logged}
        items = [Param(key, value) for key, value in params.items()]
        for start in range(0, len(items), _BATCH):
            client.log_batch(self.run_id, params=items[start:start + _BATCH])

    def _log_metrics(self, client, values: dict[str, float], step: int, stamp_ms: int) -> None:
        from mlflow.entities import Metric

        client.log_batch(self.run_id, metrics=[Metric(key, value, stamp_ms, step) for key, value in values.items()])

    def _log_artifacts(self, client, root: Path, path: str | None) -> None:
        for file in artifact_files(root):
            folder = file.parent.relative_to(root).as_posix()
            parts = [p for p in (path, None if folder == "." else folder) if p]
            client.log_artifact(self.run_id, str(file), "/".join(parts) or None)


def track_finished(target: TrackingTarget | None, run_dir: Path, *, kind: str, settings: Mapping,
                   steps: Iterable[tuple[int, Mapping[str, float]]] = (), summary: Mapping | None = None,
                   warn: Callable[[str], None] = _warn) -> None:
    """A run that has ended (bench, scale, predict), logged in one go: its settings, each step's
    metrics, the summary's numbers as `summary/<key>`, the run directory's files. Waits for MLflow
    (CLOSE_TIMEOUT_S at most); a failure is one warning."""
    if target is None:
        return
    tracker = Tracker(target, run_name=run_dir.name, run_dir=run_dir, warn=warn,
                      tags={"dlscale.kind": kind, "dlscale.run_dir": str(run_dir.resolve())})
    tracker.params(settings)
    last = 0
    for step, values in steps:
        tracker.metrics(values, step)
        last = max(last, step)
    if summary:
        tracker.metrics(numbers(summary, "summary/"), last)
    tracker.artifacts(run_dir)
    tracker.close()


def _mlflow_client(uri: str):
    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # a folder was asked for by name
    # A server that does not answer gives up after about a minute, not MLflow's default of several.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    from mlflow.tracking import MlflowClient

    for name in ("mlflow", "alembic"):  # after MLflow's import, which sets its own levels
        logging.getLogger(name).setLevel(logging.WARNING)  # no INFO lines about creating tables
    return MlflowClient(tracking_uri=uri)

