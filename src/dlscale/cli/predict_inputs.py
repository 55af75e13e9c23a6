"""`dlscale predict`'s flags turned into its inputs: the compute figure (a run, a reference or a rate of one's own,
FLOPs), the network, the strategy, the ceilings and the spread of step times, each from the command line, else
from a reference's own documented setting (predict/anchor.py). No torch is imported."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from dlscale.errors import ConfigError
from dlscale.predict import anchor, cases, caveats, inputs
from dlscale.predict.anchor import Setting
from dlscale.predict.cases import CASES
from dlscale.predict.ceilings import Ceilings
from dlscale.predict.compute import Fixed, with_fixed
from dlscale.predict.fixed import Stack
from dlscale.predict.model import Strategy
from dlscale.predict.network import Network
from dlscale.predict.platforms import platform
from dlscale.predict.spread import default_spread
from dlscale.predict.workload import Workload
from dlscale.rundir import read_summary

MIB = 1024 * 1024


def _source(args: argparse.Namespace) -> str:
    given = [name for name, value in (("--from-run", args.from_run), ("--from-reference", args.from_reference),
                                      ("--peak-tflops", args.peak_tflops)) if value is not None]
    if len(given) != 1:
        raise ConfigError("give one compute source: --from-run DIR, --from-reference NAME[:SERIES], "
                          "or --peak-tflops with --mfu" + (f" (got {', '.join(given)})" if given else ""))
    return given[0]


def _workload(args: argparse.Namespace, figure: inputs.ReferenceFigure | None,
              setting: Setting) -> tuple[Workload, float | None, str, dict[str, str]]:
    """The compute figure, the per-step spread it comes with (or None), where that spread is from, and what its
    header says of it: a reference's own setting and what was taken out of its steps; an MFU above dlscale's."""
    fixed = inputs.fixed_from_run(args.step_curve) if args.step_curve else None
    if args.from_run is not None:
        workload, spread = inputs.workload_from_run(args.from_run, fixed, execution=args.execution,
                                                    framework=args.framework)
        return workload, spread, f"the step spread of {args.from_run}", {}
    if figure is not None:
        default = default_spread(setting.kind)
        own_cv = figure.spread or (default.cv if default else None)  # the reference's own run's spread
        done = anchor.anchored(figure, setting, model=args.model or "resnet50", fixed=fixed, step_cv=own_cv)
        said = {"anchored": "; ".join(done.lines)} if done.lines else {}
        return done.workload, figure.spread, f"the 95% interval {figure.spec} publishes", said
    if args.mfu is None or args.batch_size is None:
        raise ConfigError("--peak-tflops needs --mfu and --batch-size")
    peak = args.peak_tflops  # a number, else a device name (H100, A100): checked when parsed
    workload = inputs.workload_from_flops(args.model or "resnet50", batch=args.batch_size, peak_tflops=peak,
                                          mfu=args.mfu, image_size=args.image_size, fixed=fixed,
                                          stack=Stack(args.execution or "eager", args.framework or "pytorch"))
    device = peak if isinstance(peak, str) else None
    above = caveats.mfu_line(device, args.mfu, inputs.device_peak_dtype(device) if device else "bf16")
    return workload, None, "", {"mfu": f"WARNING: {above}"} if above else {}


NETWORK_FLAGS = ("platform", "comm_run", "intra_gbps", "inter_gbps", "latency_us")


def _network(args: argparse.Namespace, own: Setting | None) -> tuple[Network, int | None, str | None]:
    """The network, the platform's CPU cores per node where it states them and its kind of machine; with none
    given, a reference's own platform."""
    if args.platform and args.comm_run:
        raise ConfigError("give --platform or --comm-run, not both")
    cores = kind = None
    base = None
    fabric = (args.nics, args.nic_gbps, args.transport)
    if any(value is not None for value in fabric) and not args.platform:
        raise ConfigError("--nics, --nic-gbps and --transport put a platform's nodes on another fabric: give "
                          "--platform NAME (--list-platforms), or --inter-gbps for a network of numbers")
    if args.platform:
        chosen = platform(args.platform).with_fabric(*fabric)
        if chosen.transport == "tcp" and args.algorithm == "sharp":
            raise ConfigError(f"--algorithm sharp reduces in InfiniBand switches (NCCL's CollNet); {args.platform}'s "
                              "nodes on TCP have none: choose auto, ring, tree or hierarchical")
        base, cores, kind = chosen.network(), chosen.value("cpu_cores_per_node"), chosen.kind
    elif args.comm_run:
        base = inputs.network_from_comm_run(args.comm_run)
    elif own is not None and all(getattr(args, flag) is None for flag in NETWORK_FLAGS):
        base, cores, kind = own.network, own.cores_per_node, own.kind
    per_node = args.gpus_per_node or (base.devices_per_node if base else 8)
    if per_node < 1:
        raise ConfigError("--gpus-per-node must be >= 1")
    net = inputs.network_from_numbers(per_node, args.intra_gbps, args.inter_gbps, args.latency_us, base)
    return net, cores, kind


STRATEGY_DEFAULTS = {"dist_optimizer": None, "algorithm": "auto", "overlap": None, "bucket_cap_mb": 25.0,
                     "topology": "exp2", "disable_dynamic_topology": False, "schedule": None, "fusion_cycle_ms": None,
                     "bn_group": 1}


def _strategy(args: argparse.Namespace, own: Setting | None) -> Strategy:
    """The strategy the flags describe; with none given but --dist-optimizer naming the reference's, the
    reference's own (where dlscale documents it)."""
    others = {key: value for key, value in STRATEGY_DEFAULTS.items() if key != "dist_optimizer"}
    if own is not None and args.dist_optimizer in (None, own.strategy.name) and \
            all(getattr(args, key) == value for key, value in others.items()):
        return own.strategy  # its name alone (or nothing) asks for the reference's own
    return _given_strategy(args)


def _given_strategy(args: argparse.Namespace) -> Strategy:
    name = args.dist_optimizer or "allreduce"
    overlap = args.overlap or ("backward" if name == "allreduce" else "none")
    if args.bucket_cap_mb <= 0:
        raise ConfigError("--bucket-cap-mb must be > 0")
    if args.fusion_cycle_ms is not None and args.fusion_cycle_ms <= 0:
        raise ConfigError("--fusion-cycle-ms must be > 0")
    schedule = args.schedule or ("static" if args.disable_dynamic_topology else "one_peer")
    return Strategy(name, algorithm=args.algorithm, overlap=overlap,
                    bucket_cap_bytes=int(args.bucket_cap_mb * MIB), topology=args.topology, schedule=schedule,
                    fusion_cycle_s=args.fusion_cycle_ms / 1e3 if args.fusion_cycle_ms else None,
                    norm_group=args.bn_group)


def ceilings_from_args(args: argparse.Namespace, net: Network, cores: int | None, spread: tuple[float | None, str],
              kind: str | None = None) -> Ceilings:
    """The input ceiling and the stragglers' spread: given, measured by a run, or published with the figure."""
    source = {}
    ceiling = None
    if args.loader_run:
        per_device = args.cores_per_device or (cores / net.devices_per_node if cores else None)
        if per_device is None:
            raise ConfigError("--loader-run needs --cores-per-device (the platform states no core count)")
        ceiling, source["input"] = inputs.loader_ceiling(args.loader_run, per_device)
    cv = args.step_cv
    if args.stragglers_from:
        cv = inputs.step_spread(read_summary(args.stragglers_from, "bench", flag="--stragglers-from"))
        source["stragglers"] = f"per-rank step spread of {args.stragglers_from}: {100 * (cv or 0):.1f}%"
    elif cv is not None:
        source["stragglers"] = f"step spread given: {100 * cv:.1f}%"
    elif args.from_reference and spread[0]:  # a run's own spread is used only when asked for (--stragglers-from)
        cv = spread[0]
        source["stragglers"] = (f"per-step spread {100 * cv:.1f}% from {spread[1]} (its own stragglers taken out of "
                                "the compute figure); each step waits for the slowest device it synchronises with")
    elif default_spread(kind) is not None:
        chosen = default_spread(kind)
        cv, source["stragglers"] = chosen.cv, f"per-step spread {chosen.source}"
    if cv is not None and cv < 0:
        raise ConfigError("--step-cv must be >= 0")
    return Ceilings(input_img_per_s=ceiling, step_cv=cv, source=source)


@dataclass(frozen=True)
class Inputs:
    workload: Workload
    net: Network
    cores: int | None
    """The platform's CPU cores per node, where it states them."""
    kind: str | None
    """The platform's kind of machine (the default spread of step times), where a platform is known."""
    strategy: Strategy
    spread: tuple[float | None, str]
    """The spread that comes with the compute figure, and where from."""
    global_batch: int | None
    notes: dict[str, str]
    """What the header says of the inputs beyond their sources (and summary.json's inputs record)."""


def inputs_from_args(args: argparse.Namespace) -> Inputs:
    """The workload with the command line's adjustments, the network, the strategy and the global batch, each
    from the command line, else, with --from-reference, from the reference's own setting where dlscale documents
    it (its strategy, platform and global batch)."""
    figure = _figure(args) if _source(args) == "--from-reference" else None
    known = CASES + (cases.file_cases(str(args.reference_file), strict=False) if args.reference_file else ())
    own = anchor.own_setting(figure, known) if figure else None
    net, cores, kind = _network(args, own)
    strategy = _strategy(args, own)
    notes = anchor.setting_notes(figure, own, net, strategy)
    setting = own or Setting(strategy, net, args.grad_bytes or (figure.grad_bytes if figure else 4),
                             "the command's (dlscale documents none of this reference)", documented=False, kind=kind)
    workload, spread, spread_source, said = _workload(args, figure, setting)
    _check_stack(args, workload)
    if args.grad_bytes:
        workload = replace(workload, grad_bytes_per_element=args.grad_bytes)
    if args.step_overhead_ms is not None:
        if not 0 <= args.step_overhead_ms < 1e3 * workload.step_time.points[-1][1]:
            raise ConfigError(f"--step-overhead-ms {args.step_overhead_ms:g} must be >= 0 and below the step "
                              f"({1e3 * workload.step_time.points[-1][1]:.2f} ms)")
        given = Fixed(args.step_overhead_ms / 1e3, f"{args.step_overhead_ms:g} ms, given: --step-overhead-ms "
                                                   "(an override)", kind="given")
        workload = replace(workload, step_time=with_fixed(workload.step_time, given))
    if args.comm_run is None:  # other machines than the one the run measured: its cores are not theirs
        workload = replace(workload, cpu_threads=None, cpu_cores=None)
    global_batch = args.global_batch
    if figure is not None and global_batch is None and args.batch_size is None and figure.global_batch:
        global_batch = figure.global_batch
        notes["scaling"] = (f"strong scaling at the reference's global batch {global_batch}, which every point of "
                            f"{figure.spec} kept (--batch-size B predicts weak scaling instead)")
    return Inputs(workload, net, cores, kind, strategy, (spread, spread_source), global_batch, {**notes, **said})


def _check_stack(args: argparse.Namespace, workload: Workload) -> None:
    """--execution and --framework change a modelled fixed part only: refused where the compute figure's fixed part
    is measured, fitted to published steps or unknown, which they would leave as it is."""
    given = " ".join(f"{flag} {value}" for flag, value in (("--execution", args.execution),
                                                            ("--framework", args.framework)) if value)
    step = workload.step_time
    if not given or step.fixed_kind == "modelled":
        return
    if args.step_curve:
        whose = "the fixed part --step-curve gives"
    else:
        whose = f"the fixed part of {args.from_run or args.from_reference or 'the --peak-tflops device'}"
    if not step.fixed_known:
        what = "not modelled for its device"
    elif len(step.points) >= 2:
        what = "measured at its batch sizes" if step.fixed_kind == "measured" else "fitted to its published steps"
    else:
        what = f"{step.fixed_kind} ({1e3 * step.fixed_s:.2f} ms), not modelled"
    raise ConfigError(f"{given}: --execution and --framework choose the stack a fixed part is modelled with; {whose} "
                      f"is {what}: drop them")


def _figure(args: argparse.Namespace) -> inputs.ReferenceFigure:
    """--from-reference: a rate given as such (rate=...), else a shipped reference or --reference-file's."""
    if "=" in args.from_reference:
        figure = inputs.given_figure(args.from_reference)
    else:
        figure = inputs.reference_figure(args.from_reference, str(args.reference_file) if args.reference_file else None)
    stack = replace(figure.stack, execution=args.execution or figure.stack.execution,
                    framework=args.framework or figure.stack.framework)
    return replace(figure, stack=stack)
