"""`dlscale predict`: img/s per device, total img/s and scaling efficiency at any device count.

    dlscale predict --gpus 1,8,64,512,4096 --from-reference ngc:v100_16gb_amp --platform dgx1-v100
    dlscale predict --gpus 1,2,4 --from-run runs/bench-... --comm-run runs/comm-...
    dlscale predict --validate [--sweep runs/sweep-... --comm-run runs/comm-...]

No torch is imported: the answer comes in well under a second.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from dlscale.cli import numbers, paths
from dlscale.cli.output import write_json_file, write_summary_file
from dlscale.cli.tracking import add_tracking_arguments, tracking_from_args
from dlscale.errors import ConfigError
from dlscale.metrics.cost import check_price
from dlscale.metrics.tracking import numbers as figures
from dlscale.metrics.tracking import track_finished
from dlscale.predict import anchor, caveats, inputs, output, sweeps, validate
from dlscale.predict.anchor import Setting
from dlscale.predict.compute import Fixed, with_fixed
from dlscale.predict.graphs import SCHEDULES, TOPOLOGIES
from dlscale.predict.model import OVERLAPS, STRATEGIES, Ceilings, Strategy, Workload, predict
from dlscale.predict.network import ALGORITHMS, Network
from dlscale.predict.platforms import platform, platforms
from dlscale.rundir import check_output_dir, check_output_file, read_summary, run_path

MIB = 1024 * 1024


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "predict", help="predicted img/s and scaling efficiency at any device count, and its validation",
        description="Predict a training step at each device count from a single-device figure and a network, "
        "term by term (compute, exposed communication, input, stragglers). --validate predicts every published "
        "scaling point dlscale ships and prints the errors. See docs/prediction.md.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--gpus", type=numbers.DEVICES, default="1,8,64,512,4096", metavar="N[,N]",
                   help="device counts to predict")
    p.add_argument("--gpus-per-node", type=numbers.PER_NODE, default=None,
                   help="devices per node (default: the platform's)")
    compute = p.add_argument_group("compute (one of)")
    compute.add_argument("--from-run", type=paths.PATH, default=None, metavar="DIR",
                         help="a 1-rank dlscale bench run, or a dlscale profile run")
    compute.add_argument("--from-reference", type=paths.TEXT, default=None, metavar="NAME[:SERIES]",
                         help="a shipped reference's smallest published point, e.g. ngc:v100_16gb_amp (NAME alone: its "
                              "first series with img/s); its own communication taken out; a strong-scaling series "
                              "predicts at its global batch unless --batch-size or --global-batch is given")
    compute.add_argument("--peak-tflops", default=None, metavar="TFLOPS|DEVICE",
                         help="compute from FLOPs: a peak in TFLOP/s or a device (H100, A100), with --mfu")
    compute.add_argument("--mfu", type=numbers.FRACTION, default=None, help="model FLOPs utilisation for --peak-tflops")
    compute.add_argument("--model", default=None, help="model (resnet50 unless the run names one)")
    compute.add_argument("--batch-size", type=numbers.BATCH, default=None,
                         help="images per device per step (weak scaling)")
    compute.add_argument("--global-batch", type=numbers.GLOBAL_BATCH, default=None,
                         help="images per step over all devices "
                         "(strong scaling: the batch per device is this / N)")
    compute.add_argument("--image-size", type=numbers.PIXELS, default=224)
    compute.add_argument("--step-overhead-ms", type=numbers.MILLISECONDS_OR_ZERO, default=None,
                         help="override: the part of the single-device step that does not shrink with the batch "
                              "(default: fitted to a curve, else the shipped curve of the device, else unknown)")
    compute.add_argument("--step-curve", type=paths.PATH, default=None, metavar="DIR",
                         help="a 1-rank dlscale bench run with a batch list (--batch-size 16,32,...): its fitted fixed "
                              "part for a compute figure of one batch size")
    compute.add_argument("--grad-bytes", type=int, choices=(2, 4), default=None,
                         help="bytes per gradient element (4: fp32, torch AMP included; 2: fp16 gradients)")
    network = p.add_argument_group("network (one of, numbers override)")
    network.add_argument("--platform", default=None, help="a shipped machine (--list-platforms)")
    network.add_argument("--comm-run", type=paths.PATH, default=None, metavar="DIR", help="a dlscale comm run")
    network.add_argument("--intra-gbps", type=numbers.GBPS, default=None, help="bus bandwidth inside a node, Gbit/s")
    network.add_argument("--inter-gbps", type=numbers.GBPS, default=None,
                         help="bus bandwidth of a node to others, Gbit/s")
    network.add_argument("--latency-us", type=numbers.LATENCY_US, default=None,
                         help="latency of one algorithm step, us")
    network.add_argument("--list-platforms", action="store_true", help="list the shipped machines and exit")
    strategy = p.add_argument_group("strategy")
    strategy.add_argument("--dist-optimizer", choices=STRATEGIES, default=None,
                          help="default: with --from-reference, the reference's own strategy where dlscale documents "
                               "it (--validate's cases), else allreduce")
    strategy.add_argument("--algorithm", choices=ALGORITHMS, default="auto", help="allreduce algorithm")
    strategy.add_argument("--overlap", choices=OVERLAPS, default=None,
                          help="backward: DDP buckets under backward; none: after it; step: under forward and "
                               "backward (default: dlscale's own: backward for allreduce, none otherwise)")
    strategy.add_argument("--bucket-cap-mb", type=numbers.MEBIBYTES, default=25.0, help="DDP bucket size in MiB")
    strategy.add_argument("--topology", choices=TOPOLOGIES, default="exp2", help="neighbour graph")
    strategy.add_argument("--disable-dynamic-topology", action="store_true",
                          help="every neighbour each step instead of one rotating peer")
    strategy.add_argument("--schedule", choices=SCHEDULES, default=None,
                          help="neighbour schedule: one_peer (dlscale's dynamic), static (every neighbour), "
                               "inner_outer (BlueFog's benchmark on several machines: one rank per machine sends "
                               "outside)")
    strategy.add_argument("--fusion-cycle-ms", type=numbers.MILLISECONDS, default=None,
                          help="allreduce: Horovod's tensor fusion, one fused allreduce per cycle of this many ms, up "
                               "to --bucket-cap-mb, instead of DDP's buckets")
    ceilings = p.add_argument_group("ceilings and noise (optional)")
    ceilings.add_argument("--loader-run", type=paths.PATH, default=None, metavar="DIR",
                          help="a dlscale loader run: its img/s per core is a ceiling")
    ceilings.add_argument("--cores-per-device", type=numbers.CORES, default=None,
                          help="CPU cores feeding each device (default: the platform's cores / devices)")
    ceilings.add_argument("--stragglers-from", type=paths.PATH, default=None, metavar="DIR",
                          help="a dlscale bench run whose per-rank step spread sets the stragglers term")
    ceilings.add_argument("--step-cv", type=numbers.SPREAD, default=None,
                          help="the spread (std / mean) of a step, given")
    p.add_argument("--price-per-device-hour", type=numbers.PRICE, default=None, metavar="PRICE",
                   help="what one device costs for one hour: adds the cost of an ImageNet epoch at each count")
    p.add_argument("--validate", action="store_true", help="predict every shipped published scaling point")
    p.add_argument("--sweep", type=paths.PATH, action="append", default=[], metavar="DIR",
                   help="with --validate: a dlscale scale sweep (--nproc 1,2) of this machine, with --comm-run")
    p.add_argument("--json", type=paths.PATH, default=None, help="also write the summary object to this file")
    p.add_argument("--output-dir", type=paths.PATH, default=Path("runs"), help="root of run directories")
    p.add_argument("--name", type=paths.TEXT, default=None, help="run directory name")
    p.add_argument("--no-run-dir", action="store_true", help="print only; write no run directory")
    add_tracking_arguments(p)
    p.set_defaults(run=run)


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
        workload, spread = inputs.workload_from_run(args.from_run, fixed)
        return workload, spread, f"the step spread of {args.from_run}", {}
    if figure is not None:
        done = anchor.anchored(figure, setting, model=args.model or "resnet50", fixed=fixed, step_cv=figure.spread)
        said = {"anchored": "; ".join(done.lines)} if done.lines else {}
        return done.workload, figure.spread, f"the 95% interval {figure.spec} publishes", said
    if args.mfu is None or args.batch_size is None:
        raise ConfigError("--peak-tflops needs --mfu and --batch-size")
    peak = args.peak_tflops
    with contextlib.suppress(ValueError):  # a number, else a device name (H100, A100)
        peak = float(peak)
    workload = inputs.workload_from_flops(args.model or "resnet50", batch=args.batch_size, peak_tflops=peak,
                                          mfu=args.mfu, image_size=args.image_size, fixed=fixed)
    above = caveats.mfu_line(peak if isinstance(peak, str) else None, args.mfu, "bf16")
    return workload, None, "", {"mfu": f"WARNING: {above}"} if above else {}


NETWORK_FLAGS = ("platform", "comm_run", "intra_gbps", "inter_gbps", "latency_us")


def _network(args: argparse.Namespace, own: Setting | None) -> tuple[Network, int | None]:
    """The network, and the platform's CPU cores per node where it states them; with none given, a
    reference's own platform."""
    if args.platform and args.comm_run:
        raise ConfigError("give --platform or --comm-run, not both")
    cores = None
    base = None
    if args.platform:
        chosen = platform(args.platform)
        base, cores = chosen.network(), chosen.value("cpu_cores_per_node")
    elif args.comm_run:
        base = inputs.network_from_comm_run(args.comm_run)
    elif own is not None and all(getattr(args, flag) is None for flag in NETWORK_FLAGS):
        base, cores = own.network, own.cores_per_node
    per_node = args.gpus_per_node or (base.devices_per_node if base else 8)
    if per_node < 1:
        raise ConfigError("--gpus-per-node must be >= 1")
    return inputs.network_from_numbers(per_node, args.intra_gbps, args.inter_gbps, args.latency_us, base), cores


STRATEGY_DEFAULTS = {"dist_optimizer": None, "algorithm": "auto", "overlap": None, "bucket_cap_mb": 25.0,
                     "topology": "exp2", "disable_dynamic_topology": False, "schedule": None, "fusion_cycle_ms": None}


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
                    fusion_cycle_s=args.fusion_cycle_ms / 1e3 if args.fusion_cycle_ms else None)


def _ceilings(args: argparse.Namespace, net: Network, cores: int | None, spread: tuple[float | None, str]) -> Ceilings:
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
    if cv is not None and cv < 0:
        raise ConfigError("--step-cv must be >= 0")
    return Ceilings(input_img_per_s=ceiling, step_cv=cv, source=source)


def run(args: argparse.Namespace) -> int:
    if args.list_platforms:
        for chosen in platforms().values():
            print(chosen.describe())
        return 0
    if args.mlflow is not None and (args.validate or args.no_run_dir):
        raise ConfigError("--mlflow tracks a prediction's run directory: drop --validate or --no-run-dir")
    tracking = tracking_from_args(args, args.output_dir)
    if args.json:  # the outputs checked before the work: one line now, not a traceback after it
        check_output_file(args.json, "--json")
    if args.validate:
        return _validate(args)
    if not args.no_run_dir:
        if args.name:
            run_path(args.output_dir, args.name)  # a name, not a path: refused before any folder is made
        check_output_dir(args.output_dir, "--output-dir", "the folder of run directories")
    devices = list(args.gpus)
    price = check_price(args.price_per_device_hour)
    got = _inputs(args)
    workload, net, strategy = got.workload, got.net, got.strategy
    ceilings = _ceilings(args, net, got.cores, got.spread)
    batch = args.batch_size if got.global_batch is None and args.peak_tflops is None else None
    uneven = [n for n in devices if got.global_batch and got.global_batch % n]
    if uneven and args.global_batch is None:  # the reference's global batch, not one given
        raise ConfigError(f"{args.from_reference} kept a global batch of {got.global_batch}, which does not split over "
                          f"{uneven[0]} devices: pick device counts that divide it, or --batch-size B for weak scaling")
    points = predict(devices, workload, strategy, net, ceilings, batch=batch, global_batch=got.global_batch)
    beyond = caveats.accuracy_line(workload.model, [(p.devices, p.devices * p.batch_per_device) for p in points])
    notes = {**got.notes, **({"accuracy": f"WARNING: {beyond}"} if beyond else {})}
    mode = (f"strong scaling, global batch {got.global_batch}" if got.global_batch
            else f"weak scaling, batch {points[0].batch_per_device} per device")
    title = f"{workload.model}, {mode}, {strategy.name} on {net.name}"
    print("\n".join([*_header(title, workload, net, strategy, ceilings), *(f"  {k}: {t}" for k, t in notes.items()),
                     "", *output.table(points, price)]), flush=True)
    settings = {"model": workload.model, "title": title, "devices": devices, "global_batch": got.global_batch,
                "strategy": asdict(strategy), "network_name": net.name, "network": asdict(net)}
    step = workload.step_time
    compute_inputs = {"compute": workload.source, "step_time": "; ".join(step.describe()),
                      "fixed_part_ms": 1e3 * step.fixed_s, "per_image_ms": 1e3 * step.per_image_s,
                      "fixed_part_known": step.fixed_known, "fixed_part_source": step.fixed_source}
    result = output.summary(points, settings, {**compute_inputs, "network": net.source, **ceilings.source, **notes},
                            price)
    if args.json:
        write_summary_file(args.json, result)
    if not args.no_run_dir:
        config = {**settings, "argv": sys.argv[1:]}
        with output.claim_run(args.output_dir, args.name, config) as run_dir:
            path = output.write_run(run_dir, config, result)
        # matplotlib takes a second or two to import; it is loaded only now, after the answer is printed.
        from dlscale.predict import plot

        plot.draw(path / "predicted.png", result["points"], title)
        print(f"Run directory: {path}", flush=True)
        # Each device count is the step of the predicted figures (img_per_s_total, efficiency, ...).
        track_finished(tracking, path, kind="predict", settings={**settings, "inputs": result["inputs"]},
                       steps=[(p["devices"], figures(p, "", skip=("devices",))) for p in result["points"]],
                       summary=result)
    return 0


@dataclass(frozen=True)
class _Inputs:
    workload: Workload
    net: Network
    cores: int | None
    """The platform's CPU cores per node, where it states them."""
    strategy: Strategy
    spread: tuple[float | None, str]
    """The spread that comes with the compute figure, and where from."""
    global_batch: int | None
    notes: dict[str, str]
    """What the header says of the inputs beyond their sources (and summary.json's inputs record)."""


def _inputs(args: argparse.Namespace) -> _Inputs:
    """The workload with the command line's adjustments, the network, the strategy and the global batch, each
    from the command line, else, with --from-reference, from the reference's own setting where dlscale documents
    it (its strategy, platform and global batch)."""
    figure = inputs.reference_figure(args.from_reference) if _source(args) == "--from-reference" else None
    own = anchor.own_setting(figure) if figure else None
    net, cores = _network(args, own)
    strategy = _strategy(args, own)
    notes = anchor.setting_notes(figure, own, net, strategy)
    setting = own or Setting(strategy, net, args.grad_bytes or (figure.grad_bytes if figure else 4),
                             "the command's (dlscale documents none of this reference)", documented=False)
    workload, spread, spread_source, said = _workload(args, figure, setting)
    if args.grad_bytes:
        workload = replace(workload, grad_bytes_per_element=args.grad_bytes)
    if args.step_overhead_ms is not None:
        if not 0 <= args.step_overhead_ms < 1e3 * workload.step_time.points[-1][1]:
            raise ConfigError(f"--step-overhead-ms {args.step_overhead_ms:g} must be >= 0 and below the step "
                              f"({1e3 * workload.step_time.points[-1][1]:.2f} ms)")
        given = Fixed(args.step_overhead_ms / 1e3, f"{args.step_overhead_ms:g} ms, given: --step-overhead-ms "
                                                   "(an override)")
        workload = replace(workload, step_time=with_fixed(workload.step_time, given))
    if args.comm_run is None:  # other machines than the one the run measured: its cores are not theirs
        workload = replace(workload, cpu_threads=None, cpu_cores=None)
    global_batch = args.global_batch
    if figure is not None and global_batch is None and args.batch_size is None and figure.global_batch:
        global_batch = figure.global_batch
        notes["scaling"] = (f"strong scaling at the reference's global batch {global_batch}, which every point of "
                            f"{figure.spec} kept (--batch-size B predicts weak scaling instead)")
    return _Inputs(workload, net, cores, strategy, (spread, spread_source), global_batch, {**notes, **said})


def _header(title: str, workload: Workload, net: Network, strategy: Strategy, ceilings: Ceilings) -> list[str]:
    """What was predicted and where every input came from."""
    step = workload.step_time
    lines = [f"Prediction: {title}",
             f"  compute: {workload.source}",
             *(f"  {line}" for line in step.describe())]
    if not step.fixed_known:
        lines.append("  so a smaller batch per device is predicted as efficient as the figure's own (a curve: "
                     "--step-curve DIR; an override: --step-overhead-ms)")
    lines += [
              f"  network: {net.source} ({net.intra.bandwidth_gbs:.3f} GB/s per device inside a node, "
              f"{net.inter.bandwidth_gbs:.3f} GB/s per node between nodes, {net.devices_per_node} per node)",
              f"  strategy: {strategy.describe()}"]
    if workload.cpu_threads:
        lines.append(f"  cores: CPU ranks of {workload.cpu_threads} thread(s) share {workload.cpu_cores} cores; when "
                     "they fill them, communication runs after backward, not under it")
    return lines + [f"  {key}: {text}" for key, text in ceilings.source.items()]


def _validate(args: argparse.Namespace) -> int:
    rows, texts = validate.validate_references()
    print("Published scaling points, predicted from each system's smallest published figure and documented hardware")
    print("(docs/prediction.md; error = predicted / published - 1; parameters from: the published points that fed a")
    print("parameter of the prediction, never the point itself)\n")
    print("\n".join(validate.format_rows(rows)))
    every = validate.statistics_of(rows)
    print(f"\nAll {every['points']} points: median |error| {100 * every['median_abs_error']:.1f}% (goal <= 10%), "
          f"max {100 * every['max_abs_error']:.1f}% ({every['worst']}; goal <= 25%), {every['within_25pct']} of "
          f"{every['points']} within 25%")
    for name, reason in validate.NOT_PREDICTED.items():
        print(f"Not predicted: {name}: {reason}")
    print("\nInputs:")
    for key, text in texts.items():
        print(f"  {key}: {text}")
    sweep_rows = []
    if args.sweep:
        if args.comm_run is None:
            raise ConfigError("--sweep needs --comm-run (the network of this machine, from dlscale comm)")
        for sweep in args.sweep:
            sweep_rows += sweeps.validate_sweep(sweep, args.comm_run)
        print("\nMeasured gloo sweeps on this machine (goal: within 15%)")
        for r in sweep_rows:
            print(f"  {r.sweep} {r.series} {r.devices} ranks: measured {r.measured:.1f} img/s, predicted "
                  f"{r.predicted:.1f} ({100 * r.error:+.1f}%, {r.limit}); with stragglers {r.with_stragglers:.1f} "
                  f"({100 * r.error_with_stragglers:+.1f}%); {r.inputs}")
    if args.json:
        write_json_file(args.json, {
            "kind": "predict_validation", "all": every,
            "rows": [{"group": r.case.group, "reference": r.case.reference, "series": r.case.series,
                      "devices": r.devices, "metric": r.metric, "published": r.published, "predicted": r.predicted,
                      "error": r.error, "limit": r.limit, "bound": r.bound,
                      "fed_by": [{"parameter": k, "point": v} for k, v in r.fed_by]} for r in rows],
            "inputs": texts,
            "sweeps": [{**asdict(r), "error": r.error, "error_with_stragglers": r.error_with_stragglers}
                       for r in sweep_rows]})
    return 0
