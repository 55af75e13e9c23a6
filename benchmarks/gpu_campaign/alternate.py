"""Several `dlscale bench` configurations compared in alternated windows, each in its own process.

    python3 benchmarks/gpu_campaign/alternate.py --json OUT.json --rounds 10 \\
        --variant default= --variant "stem 4=--stem-channels 4" --variant "b512=--batch-size 512"

Every variant is `dlscale bench` with the common flags (--common, default: none, i.e. the GPU default)
and its own. Three phases:

1. Prime: a short `dlscale bench` of every variant not named by --warm, several at once (as many as
   --memory-gib holds, by batch size), so that their compilations overlap and fill the inductor cache
   (TORCHINDUCTOR_CACHE_DIR, shared). Their processes end; nothing of them is measured.
2. Warm up: one worker process per variant (its own CUDA context, CUDA-graph pool and compile state, as
   a `dlscale bench` run has). They start together, compile from the cache, and run their warm-up steps
   one worker at a time under a lock: cuDNN's autotuning times its algorithms on an otherwise idle GPU
   (timed among other processes' kernels it can keep a slower one for good).
3. Measure: the GPU is handed to one worker at a time: in round k every variant times one window of
   steps, in an order rotated each round (a b c, b c a, c a b, ...), so that drift and position hit every
   variant alike. A figure per variant is the median of its windows; a ratio is of two medians of this
   one run, with the ratio of each round's pair beside it.

The same code path as `dlscale bench`: the flags go through its parser and config_from_args, the step is
dlscale.bench.synthetic's set-up and train_step, a window is measure() with one timed iteration.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PREFIX = "@@ "
"""Marks the worker's protocol lines on its stdout (dlscale's own lines pass through to the log)."""


# ----------------------------------------------------------------------------------- worker

def worker(flags: list[str], lock: Path | None = None) -> int:
    """Build the configuration `dlscale bench FLAGS` would run, warm it up (compiling; under `lock`, the
    GPU to itself), say ready, then time one window per "go" line on stdin until "stop"; then its compile
    facts (dlscale.metrics.compile, as `dlscale bench` records them)."""
    import torch

    from dlscale.bench.synthetic import build_bench, measure
    from dlscale.cli import build_parser
    from dlscale.cli.bench import config_from_args
    from dlscale.distributed import DistEnv, init_process_group, select_device
    from dlscale.metrics.compile import CompileWatch, counting_replays, timed_first_step
    from dlscale.metrics.timing import device_synchronizer
    from dlscale.train.step import train_step

    args = build_parser().parse_args(["bench", *flags])
    cfg, _ = config_from_args(args, has_gpu=args.device != "cpu" and torch.cuda.is_available())
    env = DistEnv.from_env()
    device = select_device(env, cfg.device)
    init_process_group(env, device, cfg.pg_timeout_s, one_rank_group=cfg.strategy.wrap_single_rank)
    setup = build_bench(cfg, env, device)
    pool, cursor = setup.pool, iter(range(1 << 62))
    sync = device_synchronizer(device)
    compiling = CompileWatch.for_run(cfg.speed.compile, cfg.speed.compile_mode, device)

    def next_batch():
        return setup.pool[next(cursor) % len(pool)]

    def step(images, labels):
        with timed_first_step(compiling, sync, time.perf_counter):
            return train_step(setup.parts, [(images, labels)])

    windows_ms: list[float] = []
    with counting_replays(compiling):
        waited = time.perf_counter()
        with _exclusive(lock):
            started = time.perf_counter()
            for _ in range(cfg.num_warmup_batches):
                step(*next_batch())
            sync()
        warmup_s = time.perf_counter() - started
        if compiling:
            compiling.warmup_done(warmup_s)
        _say("ready", warmup_s=warmup_s, first_step_s=compiling.first_step_s if compiling else None,
             lock_wait_s=started - waited, batch_size=cfg.batch_size,
             speed={k: getattr(cfg.speed, k) for k in cfg.speed.__dataclass_fields__}, precision=cfg.precision,
             model=cfg.model, wrap_single_rank=cfg.strategy.wrap_single_rank)
        for line in sys.stdin:
            if line.strip() != "go":
                break
            rate = measure(step, next_batch, batch_size=cfg.batch_size, num_warmup_batches=0,
                           num_batches_per_iter=cfg.num_batches_per_iter, num_iters=1, sync=sync)[0]
            windows_ms.append(rate.step_ms)
            _say("rate", img_per_s=rate.total_ips, step_ms=rate.step_ms)
    facts = None
    if compiling and windows_ms:
        facts = compiling.facts(device, steady_step_s=statistics.median(windows_ms) / 1000,
                                steps=len(windows_ms) * cfg.num_batches_per_iter,
                                warmup_steps=cfg.num_warmup_batches)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    _say("done", peak_memory_bytes=peak, compile_facts=facts)
    return 0


@contextlib.contextmanager
def _exclusive(path: Path | None):
    """Hold an exclusive lock on `path` (nothing where None): one worker's warm-up at a time."""
    if path is None:
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _say(kind: str, **fields) -> None:
    print(PREFIX + json.dumps({"kind": kind, **fields}), flush=True)


# ------------------------------------------------------------------------------ coordinator

class Variant:
    """One worker process and what it reported."""

    def __init__(self, name: str, flags: list[str], log: Path, env: dict[str, str], lock: Path):
        self.name, self.flags, self.log_path = name, flags, log
        self.windows: list[float] = []
        self.window_rounds: list[int] = []
        """The round of each window (a variant stopped by an error has none after it)."""
        self.ready: dict | None = None
        self.done: dict | None = None
        self.error: str | None = None
        self.started = time.monotonic()
        self.ready_s: float | None = None
        self._log = open(log, "w")  # noqa: SIM115 - closed in close()
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", str(lock), "--", *flags]
        self._log.write("$ " + shlex.join(command) + "\n")
        self._log.flush()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._log, text=True, env=env)
        self._lines: list[str] = []
        self._event = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.startswith(PREFIX):
                self._lines.append(line[len(PREFIX):])
                self._event.set()
            else:
                self._log.write(line)
                self._log.flush()
        self._event.set()

    def expect(self, kind: str, timeout_s: float) -> dict | None:
        """The next protocol message, which must be of this kind; None (and self.error) otherwise."""
        deadline = time.monotonic() + timeout_s
        while not self._lines:
            if self.process.poll() is not None and not self._lines:
                time.sleep(0.2)  # the reader may still hold the last lines
                if not self._lines:
                    self.error = f"exited {self.process.returncode}: {self._tail()}"
                    return None
            left = deadline - time.monotonic()
            if left <= 0:
                self.error = f"no {kind} within {timeout_s:.0f} s: {self._tail()}"
                return None
            self._event.wait(min(left, 1.0))
            self._event.clear()
        message = json.loads(self._lines.pop(0))
        if message.get("kind") != kind:
            self.error = f"expected {kind}, got {message}"
            return None
        return message

    def send(self, line: str) -> bool:
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError) as exc:
            self.error = f"could not write to the worker: {exc}"
            return False

    def _tail(self) -> str:
        self._log.flush()
        lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        return " | ".join(lines[-4:])[-800:]

    def close(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def record(self) -> dict:
        return {"flags": self.flags, "command": "dlscale bench " + shlex.join(self.flags),
                "status": "ok" if self.windows and not self.error else "failed", "error": self.error,
                "ready_s": self.ready_s, "warmup_s": (self.ready or {}).get("warmup_s"),
                "first_step_s": (self.ready or {}).get("first_step_s"),
                "lock_wait_s": (self.ready or {}).get("lock_wait_s"),
                "batch_size": (self.ready or {}).get("batch_size"), "speed": (self.ready or {}).get("speed"),
                "windows_img_per_s": self.windows, "window_rounds": self.window_rounds,
                "median_img_per_s": statistics.median(self.windows) if self.windows else None,
                "peak_memory_bytes": (self.done or {}).get("peak_memory_bytes"),
                "compile_facts": (self.done or {}).get("compile_facts")}


PRIME_STEPS = ["--num-warmup-batches", "3", "--num-iters", "1", "--num-batches-per-iter", "1"]
"""A prime run: three steps compile the training graph and record its CUDA graphs (into the cache), one
timed step ends it."""

GIB_PER_IMAGE = 0.05
"""Device memory per image of the batch of ResNet-50's compiled step, its peak rounded up (levers.py's
MEMORY_GIB_PER_IMAGE: alternate.py runs alone, without the campaign's modules)."""


def batch_size(flags: list[str]) -> int:
    """The last --batch-size among the flags (the GPU default's 512 on an 80 GB GPU where none)."""
    sizes = [flags[i + 1] for i, flag in enumerate(flags[:-1]) if flag == "--batch-size"]
    return int(sizes[-1]) if sizes else 512


def prime(specs: list[tuple[str, list[str]]], *, memory_gib: float, timeout_s: float, logs: Path,
          env: dict[str, str], say=print) -> dict[str, dict]:
    """Run each variant's short bench, as many at once as `memory_gib` holds; their results."""
    pending, running, done = list(specs), {}, {}
    started = time.monotonic()
    while pending or running:
        held = sum(gib for _, gib, _ in running.values())
        while pending and (not running or held + batch_size(pending[0][1]) * GIB_PER_IMAGE <= memory_gib):
            name, flags = pending.pop(0)
            gib = batch_size(flags) * GIB_PER_IMAGE
            log = open(logs / f"prime-{_slug(name)}.log", "w")  # noqa: SIM115 - closed below
            argv = [sys.executable, "-m", "dlscale", "bench", *flags, *PRIME_STEPS, "--output-dir",
                    str(logs / "prime-runs")]
            log.write("$ " + shlex.join(argv) + "\n")
            log.flush()
            running[name] = (subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), gib, log)
            held += gib
        time.sleep(0.5)
        for name, (process, _, log) in list(running.items()):
            late = time.monotonic() - started > timeout_s
            if process.poll() is None and not late:
                continue
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
            del running[name]
            done[name] = {"returncode": process.returncode, "seconds": time.monotonic() - started}
            say(f"[{time.monotonic() - started:5.0f} s] primed {name}: exit {process.returncode}")
    return done


def rotation(names: list[str], round_index: int) -> list[str]:
    """Round k starts with the k-th variant: a b c, b c a, c a b, ..."""
    k = round_index % len(names) if names else 0
    return names[k:] + names[:k]


def by_round(record: dict) -> dict[int, float]:
    """A variant's windows by their round (records written before rounds were kept: by their index)."""
    windows = record["windows_img_per_s"]
    rounds = record.get("window_rounds") or range(len(windows))
    return dict(zip(rounds, windows, strict=True))


def ratios(variants: dict[str, dict], baseline: str) -> dict[str, dict]:
    """Each variant against the baseline: the ratio of the two medians, and each round's own pair (the rounds
    both measured, in order)."""
    base = variants[baseline]
    out = {}
    for name, record in variants.items():
        if name == baseline or record["median_img_per_s"] is None or base["median_img_per_s"] is None:
            continue
        mine, theirs = by_round(record), by_round(base)
        pairs = [mine[k] / theirs[k] for k in sorted(mine.keys() & theirs.keys()) if theirs[k]]
        out[name] = {"ratio": record["median_img_per_s"] / base["median_img_per_s"], "per_round": pairs}
    return out


class Also:
    """A command run beside the prime runs (a test tier: it measures nothing, so sharing the machine with
    compilations costs it only time); the workers warm up only after it ended."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str]):
        self.argv, self.log_path, self.started = argv, log, time.monotonic()
        self._log = open(log, "w")  # noqa: SIM115 - closed in wait()
        self._log.write("$ " + shlex.join(argv) + "\n")
        self._log.flush()
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)

    def wait(self, timeout_s: float) -> dict:
        try:
            self.process.wait(max(timeout_s - (time.monotonic() - self.started), 1.0))
            status = "ok" if self.process.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait()
            status = "timeout"
        self._log.close()
        return {"command": shlex.join(self.argv), "status": status, "returncode": self.process.returncode,
                "seconds": time.monotonic() - self.started, "log": str(self.log_path)}


def coordinate(specs: list[tuple[str, list[str]]], *, rounds: int, ready_timeout_s: float, window_timeout_s: float,
               logs: Path, env: dict[str, str], warm: frozenset[str] = frozenset(), memory_gib: float = 64.0,
               also: list[str] | None = None, also_timeout_s: float = 300.0, say=print) -> dict:
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    beside = Also(also, logs / "also.log", env) if also else None
    primed = prime([(n, f) for n, f in specs if n not in warm], memory_gib=memory_gib, timeout_s=ready_timeout_s,
                   logs=logs, env=env, say=say)
    lock = logs / "gpu.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the workers start, and wait here for the command beside to end
        variants = [Variant(name, flags, logs / f"{_slug(name)}.log", env, lock) for name, flags in specs]
        say(f"started {len(variants)} workers: {', '.join(v.name for v in variants)}")
        beside_record = beside.wait(also_timeout_s) if beside else None
        if beside_record:
            say(f"[{time.monotonic() - started:5.0f} s] beside: {beside_record['status']} after "
                f"{beside_record['seconds']:.0f} s")
        fcntl.flock(held, fcntl.LOCK_UN)
    spawned = time.monotonic()
    for v in variants:
        v.ready = v.expect("ready", max(ready_timeout_s - (time.monotonic() - spawned), 1.0))
        v.ready_s = time.monotonic() - v.started if v.ready else None
        say(f"[{time.monotonic() - started:5.0f} s] {v.name}: " + (f"ready after {v.ready_s:.0f} s" if v.ready
                                                                     else f"failed: {v.error}"))
    live = [v.name for v in variants if v.ready]
    by_name = {v.name: v for v in variants}
    order = []
    for k in range(rounds):
        turn = [name for name in rotation(live, k) if by_name[name].error is None]
        order.append(turn)
        for name in turn:
            v = by_name[name]
            message = v.expect("rate", window_timeout_s) if v.send("go") else None
            if message:
                v.windows.append(message["img_per_s"])
                v.window_rounds.append(k)
        say(f"[{time.monotonic() - started:5.0f} s] round {k}: " + ", ".join(
            f"{name} {by_name[name].windows[-1]:.0f}" for name in turn if by_name[name].windows))
    for v in variants:
        if v.ready and v.error is None and v.send("stop"):
            v.done = v.expect("done", 60.0)
        v.close()
    records = {v.name: v.record() for v in variants}
    baseline = specs[0][0]
    for name, record in records.items():
        record["prime"] = primed.get(name)
    return {"baseline": baseline, "rounds": rounds, "order": order, "variants": records,
            "ratios": ratios(records, baseline), "seconds": time.monotonic() - started,
            "prime_s": max((p["seconds"] for p in primed.values()), default=0.0), "also": beside_record}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name)


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, sep, flags = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"--variant {text!r}: write NAME=FLAGS (FLAGS may be empty)")
    return name.strip(), shlex.split(flags)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:  # --worker LOCK -- FLAGS
        return worker(argv[3:], Path(argv[1]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variant", type=parse_variant, action="append", required=True,
                   help="NAME=FLAGS: `dlscale bench` flags of one variant; the first is the baseline")
    p.add_argument("--common", default="", help="flags every variant gets first (default: none, the GPU default)")
    p.add_argument("--rounds", type=int, default=10, help="windows per variant, one per round")
    p.add_argument("--warm", action="append", default=[], metavar="NAME",
                   help="a variant already in the inductor cache: not primed")
    p.add_argument("--memory-gib", type=float, default=64.0,
                   help="device memory the concurrent prime runs may take (0.05 GiB per image of the batch)")
    p.add_argument("--ready-timeout", type=float, default=400.0,
                   help="seconds for the prime runs, and again for the workers to warm up")
    p.add_argument("--window-timeout", type=float, default=60.0, help="seconds for one window")
    p.add_argument("--also", default=None, metavar="COMMAND",
                   help="arguments for this Python to run beside the prime runs (e.g. '-m pytest tests/gpu'); the "
                        "workers warm up after it ends")
    p.add_argument("--also-timeout", type=float, default=300.0, help="seconds the command beside may take")
    p.add_argument("--json", type=Path, required=True, help="where the figures go")
    p.add_argument("--logs", type=Path, default=None, help="each worker's output (default: beside --json)")
    args = p.parse_args(argv)
    names = [name for name, _ in args.variant]
    if len(set(names)) != len(names):
        p.error("--variant names must differ")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if set(args.warm) - set(names):
        p.error(f"--warm {', '.join(sorted(set(args.warm) - set(names)))}: no such --variant")
    common = shlex.split(args.common)
    specs = [(name, [*common, *flags]) for name, flags in args.variant]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    result = coordinate(specs, rounds=args.rounds, ready_timeout_s=args.ready_timeout,
                        window_timeout_s=args.window_timeout, logs=args.logs or args.json.parent / "alternate-logs",
                        env=env, warm=frozenset(args.warm), memory_gib=args.memory_gib,
                        also=[sys.executable, *shlex.split(args.also)] if args.also else None,
                        also_timeout_s=args.also_timeout)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    for name, record in result["variants"].items():
        ratio = result["ratios"].get(name, {}).get("ratio")
        shown = f"{record['median_img_per_s']:.1f} img/s" if record["median_img_per_s"] else record["error"]
        print(f"{name}: {shown}" + (f", {ratio:.3f}x {result['baseline']}" if ratio else ""), flush=True)
    return 0 if all(r["status"] == "ok" for r in result["variants"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
