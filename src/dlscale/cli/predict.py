"""`dlscale predict`: img/s per device, total img/s and scaling efficiency at any device count.

    dlscale predict --gpus 1,8,64,512,4096 --from-reference ngc:v100_16gb_amp --platform dgx1-v100
    dlscale predict --gpus 1,2,4 --from-run runs/bench-... --comm-run runs/comm-...
    dlscale predict --validate [--sweep runs/sweep-... --comm-run runs/comm-...]

No torch is imported: the answer comes in well under a second.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from dlscale.cli import DefaultsHelpFormatter, numbers, paths, predict_inputs
from dlscale.cli.output import write_json_file, write_summary_file
from dlscale.cli.tracking import add_tracking_arguments, tracking_from_args
from dlscale.errors import ConfigError
from dlscale.metrics.cost import check_price
from dlscale.metrics.hardware import PEAK_TFLOPS
from dlscale.metrics.tracking import numbers as figures
from dlscale.metrics.tracking import track_finished
from dlscale.predict import cases, caveats, efficiency, output, scorecard, sweeps, validate
from dlscale.predict.cases import CASES
from dlscale.predict.ceilings import Ceilings
from dlscale.predict.endtoend import Schedule
from dlscale.predict.fixed import EXECUTIONS, FRAMEWORKS
from dlscale.predict.graphs import SCHEDULES, TOPOLOGIES
from dlscale.predict.model import OVERLAPS, STRATEGIES, Strategy, predict
from dlscale.predict.network import ALGORITHMS, Network
from dlscale.predict.platforms import TRANSPORTS, platforms
from dlscale.predict.workload import Workload
from dlscale.rundir import check_output_dir, check_output_file, run_path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "predict", help="predicted img/s and scaling efficiency at any device count, and its validation",
        description="Predict a training step at each device count from a single-device figure and a network, "
        "term by term (compute, exposed communication, input, stragglers). --validate predicts every published "
        "scaling point dlscale ships and prints the errors. See docs/prediction.md.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--gpus", type=numbers.DEVICES, default="1,8,64,512,4096", metavar="N[,N]",
                   help="device counts to predict")
    p.add_argument("--gpus-per-node", type=numbers.PER_NODE, default=None,
                   help="devices per node (default: the platform's)")
    compute = p.add_argument_group("compute (one of)")
    compute.add_argument("--from-run", type=paths.PATH, default=None, metavar="DIR",
                         help="a 1-rank dlscale bench run, or a dlscale profile run")
    compute.add_argument("--from-reference", type=paths.TEXT, default=None, metavar="NAME[:SERIES]|rate=...",
                         help="a shipped reference's smallest published point, e.g. ngc:v100_16gb_amp (NAME alone: its "
                              "first series with img/s), or one of --reference-file's; or a rate of your own, "
                              "rate=IMG_PER_S,devices=N,batch=B[,nodes=M][,device=D][,precision=P][,execution=E]"
                              "[,framework=F]; its own communication taken out; a strong-scaling series predicts at "
                              "its global batch unless --batch-size or --global-batch is given")
    compute.add_argument("--reference-file", type=paths.PATH, default=None, metavar="FILE",
                         help="published or measured points of your own, in the shipped references' format "
                              "(docs/prediction.md): --from-reference NAME[:SERIES] reads them, --validate predicts "
                              "them as it does the shipped ones")
    compute.add_argument("--execution", choices=EXECUTIONS, default=None,
                         help="how the device launches a step's kernels, for the model of its fixed part (default: "
                              "the run's or the reference's, else eager)")
    compute.add_argument("--framework", choices=FRAMEWORKS, default=None,
                         help="who issues a step's kernels, for the model of its fixed part: eager PyTorch's dispatch "
                              "or MXNet's executor (default: the run's or the reference's, else pytorch)")
    compute.add_argument("--peak-tflops", type=numbers.NumberOrName(numbers.PEAK_TFLOPS, PEAK_TFLOPS, "a device"),
                         default=None, metavar="TFLOPS|DEVICE",
                         help="compute from FLOPs: a peak in TFLOP/s or a device (H100, A100, MI300X: its bf16 "
                              "peak, else fp16, else fp32), with --mfu")
    compute.add_argument("--mfu", type=numbers.FRACTION, default=None, help="model FLOPs utilisation for --peak-tflops")
    compute.add_argument("--model", default=None, help="model (resnet50 unless the run names one)")
    compute.add_argument("--batch-size", type=numbers.BATCH, default=None,
                         help="images per device per step (weak scaling)")
    compute.add_argument("--global-batch", type=numbers.GLOBAL_BATCH, default=None,
                         help="images per step over all devices "
                         "(strong scaling: the batch per device is this / N)")
    compute.add_argument("--image-size", type=numbers.PIXELS, default=224,
                         help="with --peak-tflops: the side of the training images in pixels (the FLOPs per image)")
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
    network.add_argument("--nics", type=numbers.NICS, default=None,
                         help="the platform's nodes on another fabric: network adapters per node")
    network.add_argument("--nic-gbps", type=numbers.NIC_GBPS, default=None,
                         help="the platform's nodes on another fabric: line rate of one adapter, Gbit/s (25-400 for "
                              "Ethernet and RoCE, 100-400 for InfiniBand)")
    network.add_argument("--transport", choices=TRANSPORTS, default=None,
                         help="the platform's nodes on another fabric: ib, roce or tcp (NCCL's sockets)")
    network.add_argument("--list-platforms", action="store_true", help="list the shipped machines and exit")
    strategy = p.add_argument_group("strategy")
    strategy.add_argument("--dist-optimizer", choices=STRATEGIES, default=None,
                          help="default: with --from-reference, the reference's own strategy where dlscale documents "
                               "it (--validate's cases), else allreduce")
    strategy.add_argument("--algorithm", choices=ALGORITHMS, default="auto", help="allreduce algorithm")
    strategy.add_argument("--overlap", choices=OVERLAPS, default=None,
                          help="backward: DDP buckets under backward; none: after it; step: under forward and "
                               "backward (default: dlscale's own: backward for allreduce, none otherwise)")
    strategy.add_argument("--bn-group", type=numbers.BN_GROUP, default=1,
                          help="devices whose BatchNorm statistics are reduced together, forward and backward (MXNet's "
                               "BN_GROUP, a SyncBatchNorm group inside a node); 1: each device's own")
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
    rates = p.add_argument_group("end-to-end rate (optional): with --epochs, the time to train beside the step rate")
    rates.add_argument("--epochs", type=numbers.EPOCHS_FRACTION, default=None,
                       help="epochs of the run to accuracy (MLPerf's ResNet-50: 35 to 90)")
    rates.add_argument("--eval-every", type=numbers.EPOCHS_FRACTION, default=1.0,
                       help="epochs between two evaluations of the 50,000 validation images")
    rates.add_argument("--startup-s", type=numbers.SECONDS_OR_ZERO, default=None,
                       help="seconds before the first step (default: unknown, taken as zero and said)")
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
    got = predict_inputs.inputs_from_args(args)
    workload, net, strategy = got.workload, got.net, got.strategy
    ceilings = predict_inputs.ceilings_from_args(args, net, got.cores, got.spread, got.kind)
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
    schedule = Schedule(args.epochs, args.eval_every, args.startup_s) if args.epochs else None
    rates = (f"  rates: img/s is the step rate (training steps alone); the end-to-end rate: {schedule.describe()}"
             if schedule else "  rates: img/s is the step rate (training steps alone: no start-up, no evaluation; "
                              "--epochs adds the time to train and the end-to-end rate)")
    print("\n".join([*_header(title, workload, net, strategy, ceilings), *(f"  {k}: {t}" for k, t in notes.items()),
                     f"  efficiency: {output.efficiency_basis(points)}", rates, "",
                     *output.table(points, price, schedule)]), flush=True)
    settings = {"model": workload.model, "title": title, "devices": devices, "global_batch": got.global_batch,
                "strategy": asdict(strategy), "network_name": net.name, "network": asdict(net)}
    step = workload.step_time
    compute_inputs = {"compute": workload.source, "step_time": "; ".join(step.describe()),
                      "fixed_part_ms": 1e3 * step.fixed_s, "per_image_ms": 1e3 * step.per_image_s,
                      "fixed_part_known": step.fixed_known, "fixed_part_source": step.fixed_source}
    result = output.summary(points, settings, {**compute_inputs, "network": net.source, **ceilings.source, **notes,
                                               "rates": rates.strip()}, price, schedule)
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
    lines += [f"  {key}: {text}" for key, text in ceilings.source.items()]
    if not ceilings.step_cv:
        lines.append("  stragglers: TAKEN AS ZERO: no spread of step times given (--stragglers-from DIR: a dlscale "
                     "bench run's; --step-cv X) and no platform whose kind of machine gives a default (--platform), "
                     "so every step is predicted as fast as one device's alone")
    return lines


def _validate(args: argparse.Namespace) -> int:
    extra = cases.file_cases(str(args.reference_file)) if args.reference_file else ()
    rows, texts = validate.validate_references(CASES + extra)
    checks = efficiency.efficiency_rows()
    print("\n".join(scorecard.lines(rows, texts, args.reference_file, checks)))
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
            **scorecard.as_json(rows, texts, checks),
            "sweeps": [{**asdict(r), "error": r.error, "error_with_stragglers": r.error_with_stragglers}
                       for r in sweep_rows]})
    return 0
