"""fit(): train and evaluate a configuration on this rank, resumable at any step boundary.

Set-up happens in one order: device and process group, seed, data, model, precision,
strategy, optimizer and schedule, checkpoint, records. Each step runs without host
synchronisation; metrics are reduced across ranks only on log steps, where a log window
closes (train/windows.py); each epoch ends with an evaluation (train/evaluate.py).
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dlscale.config.sections import TrainConfig
from dlscale.data import DatasetInfo, build_loaders
from dlscale.data.counting import ReadMeter, count_reads
from dlscale.data.device import DeviceFeed, DeviceNormalizer, for_device
from dlscale.distributed import DistEnv, init_process_group, on_main, select_device, sum_over_ranks
from dlscale.errors import ConfigError
from dlscale.metrics.compile import CompileWatch, counting_replays, timed_first_step
from dlscale.metrics.compile import describe as describe_compile
from dlscale.metrics.cost import train_costs
from dlscale.metrics.energy import device_energy_meter, energy_summary
from dlscale.metrics.hardware import available_cores
from dlscale.metrics.host_load import HostLoad
from dlscale.metrics.input_bound import input_bound_warning
from dlscale.metrics.records import Records
from dlscale.metrics.run import environment_info
from dlscale.metrics.timing import device_synchronizer, format_duration
from dlscale.metrics.tracking import TrackingTarget
from dlscale.models import build_model
from dlscale.models.memory import check_fits, footprint
from dlscale.precision import build_precision, precision_note
from dlscale.rundir import RunDir, check_output_file, run_path, to_jsonable
from dlscale.train.checkpoint import CheckpointManager
from dlscale.train.evaluate import evaluate
from dlscale.train.finished import finished
from dlscale.train.optim import loss_fn
from dlscale.train.plan import Plan, make_plan, per_rank_batch
from dlscale.train.raport import convnets_parameters
from dlscale.train.replica import build_replica
from dlscale.train.schedule import LRSchedule
from dlscale.train.signals import PreemptionHandler
from dlscale.train.state import Progress, RunState
from dlscale.train.step import StepParts, train_step
from dlscale.train.windows import LogWindows, Window

clock = time.perf_counter
"""The host clock of log windows (read after the window's device synchronisation)."""


@dataclass
class Run:
    """Everything fit() builds once and passes down."""

    cfg: TrainConfig
    env: DistEnv
    device: torch.device
    plan: Plan
    model: nn.Module
    """The unwrapped model: evaluated and checkpointed."""
    parts: StepParts
    """What the train step runs: the wrapped model, optimizer, precision, strategy, loss."""
    schedule: LRSchedule
    feed: DeviceFeed
    """Brings the training and the validation batches to the device (data.device_feed), built once."""
    train_loader: object
    val_loader: object
    info: DatasetInfo
    state: RunState
    """What checkpoints save and restore."""
    windows: LogWindows
    """The log windows: what each measures, closed on log steps, and what the summary keeps of them."""
    records: Records = field(default_factory=lambda: Records(None, enabled=False))
    preemption: PreemptionHandler | None = None
    stop_signal: str | None = None
    """The preemption signal the ranks agreed on at a log step (the one most of them got)."""
    warned_epoch: int = -1
    """Epoch of the last input-bound warning (at most one per epoch)."""
    sync: Callable[[], None] = lambda: None
    """Waits for the device's queued work: every timed window ends with it before its clock is read."""
    clock_origin: tuple[float, float] = (0.0, 0.0)
    """(perf_counter, elapsed_s) when this attempt started; elapsed = e0 + now - t0."""
    compiling: CompileWatch | None = None
    """What torch.compile did (None for an eager model): the first step's time, the CUDA-graph replays."""
    def elapsed_s(self) -> float:
        t0, e0 = self.clock_origin
        return e0 + time.perf_counter() - t0


def fit(cfg: TrainConfig, env: DistEnv, *, run_name: str, output_dir: str | Path = "runs",
        resume: str = "auto", raport_file: str | None = None, tracking: TrackingTarget | None = None) -> dict:
    """Train to the end (or the target accuracy, or a preemption signal); return the summary. A run that is
    already finished is not trained again: its recorded summary is returned, with `already_finished`, the line
    that says so.

    tracking: also log the run to MLflow there (rank 0; dlscale.metrics.tracking).

    A preemption signal is recorded from the start: one that arrives while the run is still being
    set up stops it at the first step boundary, with a checkpoint, like one that arrives later.
    """
    with PreemptionHandler() as preemption:
        device = select_device(env, cfg.device)
        init_process_group(env, device, cfg.pg_timeout_s, one_rank_group=cfg.strategy.wrap_single_rank)
        run_dir = RunDir(run_path(output_dir, cfg.name or run_name))
        lock = _claim(run_dir, env, raport_file)  # before anything is built or written: one run per directory
        try:
            done = _finished(run_dir, cfg, env)
            if done is not None:  # run again, a finished run says so and changes nothing (train/finished.py)
                line, summary = done
                if resume != "auto":  # asked to train it from the start or from a checkpoint: refused
                    raise ConfigError(f"--resume {resume}: {line}")
                return {**summary, "already_finished": line}
            return _fit(cfg, env, device, run_dir, preemption, run_name=run_name, resume=resume,
                        raport_file=raport_file, tracking=tracking)
        finally:
            if lock is not None:
                lock.release()


def _claim(run_dir: RunDir, env: DistEnv, raport_file: str | None) -> RunDir | None:
    """Rank 0 checks its outputs, creates and locks the run directory; every rank raises rank 0's error, if any."""

    def claim() -> RunDir:
        if raport_file:
            check_output_file(raport_file, "--raport-file")
        return run_dir.claim("train", name_flag="--name", reuse=True)  # a run resumes in its own directory

    return on_main(env.is_main, claim)


def _finished(run_dir: RunDir, cfg: TrainConfig, env: DistEnv) -> tuple[str, dict] | None:
    """Rank 0's finished() on every rank; its refusal of the settings raised on every rank."""
    return on_main(env.is_main, lambda: finished(run_dir.path, cfg, env.world_size), share=True)


def _fit(cfg: TrainConfig, env: DistEnv, device: torch.device, run_dir: RunDir, preemption: PreemptionHandler, *,
         run_name: str, resume: str, raport_file: str | None, tracking: TrackingTarget | None) -> dict:
    host = HostLoad.start(env.local_world_size, torch.get_num_threads())  # before the work: the others' load
    run = build_run(cfg, env, device, run_dir)
    progress = _resume(run, run_dir, resume)
    if env.is_main:
        run_dir.write_setup({"kind": "train", "preset": run_name, **to_jsonable(cfg), "plan": asdict(run.plan),
                             "changes": run.state.changes}, {**environment_info(env.world_size, device, env.launcher),
                                                             "host_load": host.at_start()})
    run.records = Records(run_dir, enabled=env.is_main, resume_step=progress.step, raport_file=raport_file,
                          steps_per_epoch=run.plan.steps_per_epoch, epochs=run.plan.epochs, tracking=tracking)
    meter = None
    try:  # from here the records are closed (TensorBoard's writer and the thread hook it set) whatever raises
        run.records.parameters({**convnets_parameters(cfg, run.plan, env, run.info, raport_file=raport_file,
                                                      workspace=run_dir.path,
                                                      loss_scale=run.parts.precision.scaler.get_scale()),
                                "preset": run_name, **asdict(run.plan), "precision": cfg.precision,
                                "model": cfg.model.name, "world_size": env.world_size})
        for note in (host.warning(), precision_note(cfg.precision, device.type)):
            if note:
                run.records.message(note)
        run.clock_origin = (time.perf_counter(), progress.elapsed_s)
        meter, first_step = device_energy_meter(device), progress.step  # NVML, sampled off this thread
        run.preemption = preemption
        if meter:
            meter.start()
        host.timed()
        with counting_replays(run.compiling), cfg.speed.training_stream(device):
            preempted = _epochs(run, progress)
        summary = _summary(run, progress, preempted=preempted, signal=run.stop_signal or preemption.signal_name)
        summary["host_load"] = host.finish()  # rank 0's: the load at the end, its CPU time over the training
        summary["compile_facts"] = _compile_facts(run, summary, steps=progress.step - first_step)
        # Energy of this attempt's training (validation and checkpoints included) per image it trained.
        summary.update(energy_summary(meter.stop() if meter else None,
                                      (progress.step - first_step) * run.plan.global_batch, device),
                       **train_costs(progress.history, progress.elapsed_s, env.world_size, cfg.price_per_device_hour))
        run.records.summary(summary)
        return summary
    finally:
        if meter:
            meter.stop()  # its sampling thread, where the training raised before the summary stopped it
        run.records.close()
        run.feed.close()  # the decode process, if the feed started one


def build_run(cfg: TrainConfig, env: DistEnv, device: torch.device, run_dir: RunDir) -> Run:
    """Everything a training run needs, built in one order (also used by `dlscale profile`)."""
    cfg.speed.apply_globals(device)
    _seed(cfg.seed, cfg.deterministic, device)  # after the speed globals: deterministic turns autotuning off
    precision = build_precision(cfg.precision, device)
    # The data first: the class count comes from it, and the plan from its size.
    per_rank = per_rank_batch(cfg, env.world_size)
    train_loader, val_loader, info = build_loaders(
        for_device(cfg.data, device), rank=env.rank, world_size=env.world_size, batch_size=per_rank,  # data.decode
        val_batch_size=cfg.val_batch_size, seed=cfg.seed,                                            # for it
    )
    plan = make_plan(cfg, env.world_size, info.train_size)
    if cfg.model.norm == "batch" and plan.per_rank_batch < 2 and not (cfg.sync_batchnorm and env.is_distributed):
        raise ConfigError(f"{plan.per_rank_batch} image per rank per step: BatchNorm needs at least 2 to normalise "
                          "in training; raise the batch, or use --set model.norm=group")
    check_memory(cfg, env, device, plan, info)  # before the model is built: what cannot fit or train, in one line
    model = build_model(cfg.model.name, num_classes=info.num_classes, width=cfg.model.width,
                        zero_init_residual=cfg.model.zero_init_residual, norm=cfg.model.norm,
                        conv_init=cfg.model.conv_init)
    if cfg.sync_batchnorm and device.type != "cuda":
        raise ConfigError("sync_batchnorm needs GPUs (torch's SyncBatchNorm has no CPU kernel); "
                          "drop it, or use --set model.norm=group for per-sample normalisation")
    if cfg.sync_batchnorm and env.is_distributed:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    replica = build_replica(model, env=env, device=device, speed=cfg.speed, strategy=cfg.strategy, optim=cfg.optim,
                            global_batch=plan.global_batch, precision=precision, loss_fn=loss_fn(cfg.optim))
    optimizer = replica.parts.optimizer
    schedule = LRSchedule(cfg.schedule, peak_lr=plan.peak_lr, steps_per_epoch=plan.steps_per_epoch,
                          optimizer=optimizer)
    checkpoints = CheckpointManager(run_dir.path / "checkpoints", keep_last=cfg.checkpoint.keep_last)
    sync = device_synchronizer(device)
    data = for_device(cfg.data, device)
    feed = DeviceFeed(device, DeviceNormalizer(info.mean, info.std, device, channels_last=cfg.speed.channels_last),
                      feed=data.device_feed, depth=data.device_feed_depth)
    return Run(
        cfg=cfg, env=env, device=device, plan=plan, model=replica.model, parts=replica.parts, schedule=schedule,
        feed=feed, train_loader=train_loader, val_loader=val_loader, info=info,
        state=RunState(replica.model, optimizer, schedule, precision, train_loader.sampler, checkpoints, device,
                       settings={**to_jsonable(cfg), "world_size": env.world_size}),
        windows=LogWindows(device, model=replica.model, strategy=replica.parts.strategy, compiled=cfg.speed.compile,
                           reads=ReadMeter(count_reads(train_loader), also=feed.pids),
                           sync=sync, clock=clock),
        sync=sync, compiling=CompileWatch.for_run(cfg.speed.compile, cfg.speed.compile_mode, device),
    )


def check_memory(cfg: TrainConfig, env: DistEnv, device: torch.device, plan: Plan, info: DatasetInfo) -> None:
    """The model at this rank's batch and the data set's image size against the device's memory, and the step's
    shapes against what torch trains on (models.memory); one line naming the settings otherwise."""
    settings = (f"model.name={cfg.model.name}, model.width={cfg.model.width}, {plan.per_rank_batch} images per rank "
                f"per step, {info.image_size} px (data.image_size)")
    need = footprint(cfg.model.name, num_classes=info.num_classes, width=cfg.model.width, norm=cfg.model.norm,
                     batch=plan.per_rank_batch, image_size=info.image_size, settings=settings,
                     train=not (cfg.sync_batchnorm and env.is_distributed))  # SyncBatchNorm counts every rank's
    check_fits(need, device, settings=settings, amp=cfg.precision.startswith("amp"),
               ranks_on_host=env.local_world_size if device.type == "cpu" else 1)
    _check_last_batch(cfg, env, plan, info)


def _check_last_batch(cfg: TrainConfig, env: DistEnv, plan: Plan, info: DatasetInfo) -> None:
    """A kept partial last batch (data.drop_last=false, HAL's recipe) of one image per rank, which BatchNorm in
    training cannot normalise where the model leaves one value per channel: refused now, not at the end of the
    first epoch."""
    per_rank_samples = -(-info.train_size // env.world_size)
    last = per_rank_samples % plan.per_rank_batch
    reached = plan.steps_per_epoch * plan.per_rank_batch >= per_rank_samples
    if cfg.data.drop_last or last != 1 or not reached or cfg.model.norm != "batch" \
            or (cfg.sync_batchnorm and env.is_distributed):
        return
    try:
        footprint(cfg.model.name, num_classes=info.num_classes, width=cfg.model.width, norm=cfg.model.norm,
                  batch=1, image_size=info.image_size)
    except ConfigError:
        raise ConfigError(f"the last batch of every epoch holds 1 image per rank ({info.train_size:,} training "
                          f"images over {env.world_size} rank(s) in batches of {plan.per_rank_batch}), and BatchNorm "
                          f"cannot train on one image at {info.image_size} px (one value per channel): set "
                          "data.drop_last=true, or change the batch") from None


def _seed(seed: int, deterministic: bool, device: torch.device) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # the same initial weights on every rank
    if deterministic:
        # On GPUs a few ops of a ResNet step have no deterministic CUDA kernel (the backward of
        # AdaptiveAvgPool2d, nll_loss): they warn instead of stopping the run. cuBLAS needs a fixed
        # workspace to be repeatable (torch's "Reproducibility" notes).
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


# ------------------------------------------------------------------------------ the epochs


def _epochs(run: Run, progress: Progress) -> bool:
    """Train from progress to the end; True when a preemption signal stopped the run."""
    cfg, plan = run.cfg, run.plan
    # A run resumed after it reached its target trains no further: its time to solution is written.
    while progress.epoch < plan.epochs and progress.time_to_target_s is None:
        stopped, images, train_s = _train_epoch(run, progress)
        if stopped:
            _save(run, progress, reason="preemption")
            return True
        evaluation = _evaluate(run)
        progress.elapsed_s = run.elapsed_s()
        # an epoch whose every step ran before a resume has no rate of this attempt's: none, not 0 img/s
        _end_epoch(run, progress, evaluation, images / max(train_s, 1e-9) if images else None)
        reached = cfg.target_accuracy is not None and evaluation["val_top1_pct"] >= 100 * cfg.target_accuracy
        if reached:  # the loop runs only while the target is not reached yet
            progress.time_to_target_s = progress.elapsed_s
        progress.epoch += 1
        progress.epoch_step = 0
        last = progress.epoch == plan.epochs or reached
        if cfg.checkpoint.enabled and (last or progress.epoch % cfg.checkpoint.every_epochs == 0):
            _save(run, progress, reason="epoch")
        if reached:
            run.records.message(f"reached top-1 {100 * cfg.target_accuracy:.2f}% after "
                                f"{format_duration(progress.time_to_target_s)}")
            break
    return False


def _train_epoch(run: Run, progress: Progress) -> tuple[bool, int, float]:
    """One epoch from progress.epoch_step on: (stopped by a signal?, images trained, seconds)."""
    cfg, plan = run.cfg, run.plan
    started, first_step = time.perf_counter(), progress.epoch_step
    start_index = plan.samples_seen(progress.epoch_step) * run.env.world_size  # over all ranks
    run.train_loader.sampler.set_epoch(progress.epoch, start_index=start_index)
    run.parts.model.train()
    window = run.windows.open(first=True)  # the loader starts its workers at the first next(batches)
    skipped: list[str] = []
    stopped = False
    # closed however the epoch ends (an error in a step too): a thread bringing batches ahead ends with it
    with contextlib.closing(run.feed.batches(run.train_loader)) as batches:
        while progress.epoch_step < plan.steps_per_epoch and not stopped:
            run.schedule.apply(progress.step)
            micro = []
            for _ in range(plan.accumulation_steps):
                window.data.start()  # on a GPU: from the end of the queued step to the batch being there
                batch = next(batches)
                window.data.stop()
                skipped.extend(batch.skipped)
                micro.append((batch.images, batch.labels))
            with timed_first_step(run.compiling, run.sync, clock):  # this attempt's first step: it compiles
                loss = train_step(run.parts, micro, regions=window.regions)
            window.add(loss, plan.rank_images_per_step)
            progress.step += 1
            progress.epoch_step += 1
            run.records.tick(progress.epoch, progress.epoch_step)  # the terminal's bar; nothing elsewhere
            if progress.step % cfg.log_every == 0 or progress.epoch_step == plan.steps_per_epoch:
                stopped = _log(run, progress, window)
                window = run.windows.open()
            else:
                stopped = _preempted_locally(run)
            every = cfg.checkpoint.every_steps
            if not stopped and cfg.checkpoint.enabled and every and progress.step % every == 0:
                _save(run, progress, reason="step")
    train_s = time.perf_counter() - started
    total = int(sum_over_ranks({"skipped": len(skipped)}, run.device)["skipped"])
    progress.skipped_samples += _say_skipped(run, total, skipped, "training")
    return stopped, (progress.epoch_step - first_step) * plan.global_batch, train_s


def _preempted_locally(run: Run) -> bool:
    """A single process may stop at any step; several ranks agree on log steps (one reduction)."""
    return not run.env.is_distributed and run.preemption.requested


def _log(run: Run, progress: Progress, window: Window) -> bool:
    """Close the window (one device sync, one collective over the ranks) and record it; return the stop
    flag the ranks agreed on (their preemption votes ride on the window's collective)."""
    figures, summed = run.windows.close(window, also_sum={"votes": run.preemption.votes()})
    run.stop_signal = run.preemption.agreed_name(summed["votes"])
    record = {
        "epoch": progress.epoch, "step": progress.step, "iteration": progress.epoch_step, **figures,
        "lr": run.parts.optimizer.param_groups[0]["lr"],
        "grad_scale": run.parts.precision.scaler.get_scale(),  # 1.0 without fp16 loss scaling
        "elapsed_s": run.elapsed_s(),
    }
    run.records.train(record)
    if not window.first:
        _warn_if_input_bound(run, progress.epoch, record)
    return run.stop_signal is not None


def _warn_if_input_bound(run: Run, epoch: int, record: dict) -> None:
    """The input-bound warning and what would help, at most once per epoch."""
    if run.warned_epoch == epoch:
        return
    warning = input_bound_warning(
        record["data_time_ms"] / 1000, record["step_time_ms"] / 1000, workers=run.cfg.data.num_workers,
        decode=run.info.decode or "not JPEG", cores=max(available_cores() // run.env.local_world_size, 1),
        batch_size=run.plan.per_rank_batch, cpu_s_per_image=record["host_cpu_ms_per_image"] / 1000,
        device_type=run.device.type, decode_process=_decode_process(run),
        workers_kind=run.cfg.data.workers_kind_on(run.device.type))
    if warning:
        run.warned_epoch = epoch
        run.records.message(warning)


def _decode_process(run: Run) -> bool:
    """Whether the training batches are decoded in a process of their own (data.device_feed=process)."""
    return run.feed.decode_process(run.train_loader) is not None


def _evaluate(run: Run) -> dict:
    evaluation, unreadable = evaluate(run.model, run.val_loader, run.feed, run.parts.precision)
    _say_skipped(run, evaluation["val_skipped"], unreadable, "validation")
    return evaluation


def _say_skipped(run: Run, total: int, skipped: list[str], split: str) -> int:
    """Unreadable files of this epoch over all ranks, said once by rank 0 (with rank 0's first five)."""
    if total:
        shown = ", ".join(skipped[:5]) + (" ..." if len(skipped) > 5 else "")
        if split == "training":
            run.records.message(f"skipped {total} unreadable sample(s) this epoch (rank 0: {shown or 'none'})")
        else:
            run.records.message(f"validation: {total} unreadable file(s) left out, the metrics are over the readable "
                                f"images only (rank 0: {shown or 'none'})")
    return total


def _end_epoch(run: Run, progress: Progress, evaluation: dict, throughput: float | None) -> None:
    if run.cfg.schedule.name == "plateau":
        run.schedule.observe(evaluation["val_loss"], epoch=progress.epoch)
    record = {"epoch": progress.epoch, "step": progress.step, **evaluation, "elapsed_s": progress.elapsed_s,
              "throughput_img_per_s": throughput, "lr": run.parts.optimizer.param_groups[0]["lr"],
              "global_batch": run.plan.global_batch}
    if evaluation["val_top1_pct"] > progress.best_top1_pct:
        progress.best_top1_pct, progress.best_top5_pct = evaluation["val_top1_pct"], evaluation["val_top5_pct"]
        progress.best_epoch = progress.epoch
    progress.history.append(record)
    run.records.epoch(record)


# -------------------------------------------------------------------------- checkpoints


def _save(run: Run, progress: Progress, *, reason: str) -> None:
    progress.elapsed_s = run.elapsed_s()
    path = run.state.save(progress, consumed=run.plan.samples_seen(progress.epoch_step), reason=reason,
                          is_main=run.env.is_main)
    if path is not None:
        run.records.message(f"checkpoint ({reason}): {path}")


def _resume(run: Run, run_dir: RunDir, resume: str) -> Progress:
    """Continue from the checkpoint directory alone (never from restart counters)."""
    progress = run.state.resume(resume, run.device)
    if progress is None:
        return Progress()
    if run.env.is_main:
        print(f"resumed at epoch {progress.epoch} step {progress.step} from {run_dir.path / 'checkpoints'}",
              flush=True)
    return progress


def _summary(run: Run, progress: Progress, *, preempted: bool, signal: str | None) -> dict:
    cfg, plan = run.cfg, run.plan
    last = progress.history[-1] if progress.history else {}
    rates = [h["throughput_img_per_s"] for h in progress.history if h["throughput_img_per_s"] is not None]
    tts = progress.time_to_target_s
    found = progress.best_epoch >= 0
    return {
        "kind": "train", "model": cfg.model.name, "data": cfg.data.name, "precision": cfg.precision,
        "world_size": run.env.world_size, "num_nodes": run.env.num_nodes, "device": run.device.type,
        "decode": run.info.decode,  # the decode path that ran (data.decode resolved); None: not JPEG
        "decode_process": _decode_process(run),  # the training batches decoded in a process of their own
        "device_feed": run.feed.feed,
        "workers_kind": cfg.data.workers_kind_on(run.device.type),  # data.workers_kind as it ran ("auto" resolved)
        "cpu_decoder": run.info.cpu_decoder,  # who decoded full-scale JPEGs on the CPU (data.cpu_decoder resolved)
        "batch_size": plan.per_rank_batch, "global_batch_size": plan.global_batch,
        "dist_optimizer": cfg.strategy.dist_optimizer, "peak_lr": plan.peak_lr,
        "epochs_planned": plan.epochs, "epochs_completed": progress.epoch, "steps": progress.step,
        "best_top1_pct": progress.best_top1_pct if found else None,
        "best_top5_pct": progress.best_top5_pct if found else None,
        "best_epoch": progress.best_epoch if found else None,
        "final_top1_pct": last.get("val_top1_pct"), "final_top5_pct": last.get("val_top5_pct"),
        "final_val_loss": last.get("val_loss"),
        "target_top1_pct": 100 * cfg.target_accuracy if cfg.target_accuracy is not None else None,
        "time_to_target_s": tts, "time_to_target": format_duration(tts) if tts is not None else None,
        "train_time_s": progress.elapsed_s, "total_ips": sum(rates) / len(rates) if rates else None,
        "skipped_samples": progress.skipped_samples, **run.windows.summary(),
        "preempted": preempted, "signal": signal, "history": progress.history,
    }


def _compile_facts(run: Run, summary: dict, *, steps: int) -> dict | None:
    """What compiling cost and did (dlscale.metrics.compile), against this rank's mean step of the log windows
    (epochs' first left out); also a message each line. None for an eager model."""
    if run.compiling is None:
        return None
    step_ms = summary["rank_step_ms"]
    steady_s = step_ms[run.env.rank] / 1000 if step_ms else None
    facts = run.compiling.facts(run.device, steady_step_s=steady_s, steps=steps)
    for line in describe_compile(facts):
        run.records.message(line)
    return facts
