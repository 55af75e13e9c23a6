"""Causes in what was run: the recipe against the reference's (precision, channels_last, batch per rank,
cuDNN autotuning, fused SGD, compile or CUDA graphs, the input pipeline), and the software against the
reference's. Threads per rank are the host's (host.py)."""

from __future__ import annotations

from dlscale.config.data import own_image_size
from dlscale.errors import DlscaleError
from dlscale.explain import effects
from dlscale.explain.context import Context, Result
from dlscale.explain.findings import Effect, Finding, RuledOut
from dlscale.explain.target import precision_family
from dlscale.metrics.input_bound import INPUT_BOUND_SHARE
from dlscale.predict.layers import forward_macs, model_parameters

OWN_RUNS = "the runs' own measurements"


def recipe(ctx: Context) -> Result:
    if ctx.target is None:
        return _faster_precision(ctx) if ctx.run.device == "cpu" else []
    return [*_workload(ctx), *_precision(ctx), *_channels_last(ctx), *_batch(ctx), *_speed_options(ctx),
            *_input_pipeline(ctx)]


def _section(run, name: str) -> dict:
    """A section of the run's config.json ({} where it has none, or a name in its place as older runs wrote)."""
    section = run.config.get(name)
    return section if isinstance(section, dict) else {}


def _workload(ctx: Context) -> Result:
    """The work per image: model, width and image size against the reference's (MACs of dlscale's layer
    table, predict/layers.py), so that a cheaper or dearer image is not taken for a faster or slower run."""
    run, ref = ctx.run, ctx.target.reference
    theirs_size = ctx.target.recipe.get("image_size")
    ours = (run.model, int(run.summary.get("width") or _section(run, "model").get("width") or 64),
            int(run.summary.get("image_size") or _section(run, "data").get("image_size")
                or (own_image_size(run.data) if run.kind == "train" else 224)))
    if not ref.model or not theirs_size:
        return [RuledOut("recipe", f"work per image: the reference states no model and image size (run: {ours[0]} "
                                   f"at {ours[2]} px)")]
    try:
        mine = forward_macs(model_parameters(ours[0], width=ours[1], image_size=ours[2]))
        theirs = forward_macs(model_parameters(ref.model, image_size=int(theirs_size)))
    except DlscaleError:
        return [RuledOut("recipe", f"work per image: {ours[0]} is not in dlscale's layer table")]
    text = (f"run: {ours[0]} (width {ours[1]}) at {ours[2]} px, {mine / 1e9:.3f} GMACs per image; reference: "
            f"{ref.model} at {theirs_size} px, {theirs / 1e9:.3f} GMACs (predict/layers.py)")
    if mine <= theirs:
        note = "" if mine == theirs else f"; the run's images are {theirs / mine:.1f}x cheaper, so the gap in " \
                                          "img/s understates the gap in work"
        return [RuledOut("recipe", text + note)]
    return [Finding("recipe", f"more work per image than the reference ({mine / theirs:.2f}x)", text,
                    Effect(mine / theirs, "MACs per image, dlscale's layer table (docs/references.md#"
                                          "torchvision-resnet-flops)"),
                    f"the reference's model and image size ({ref.model}, {theirs_size} px) to compare img/s")]


def _precision(ctx: Context) -> Result:
    run, recipe = ctx.run, ctx.target.recipe
    theirs = str(recipe.get("precision") or "").split(" ")[0]
    if run.device == "cpu":
        return _precision_on_cpu(ctx, theirs)
    if not theirs or theirs == run.precision:
        return [RuledOut("recipe", f"precision: {run.precision}, as the reference")]
    if precision_family(theirs) == precision_family(run.precision) or precision_family(theirs) != "amp":
        effect = Effect(None, f"no published figure compares {run.precision} with {theirs}")
    else:
        effect = effects.precision(ctx.target, run.precision, run.device_name)
    return [Finding("recipe", f"precision {run.precision}, the reference {theirs}",
                    f"run: {run.precision}; reference: {recipe.get('precision')} ({ctx.target.cite()})", effect,
                    ctx.change(f"--precision {theirs}", f"precision={theirs}"))]


CPU_PRECISIONS = ("fp32", "amp_bf16", "amp_fp16")
"""The precisions a CPU runs (tf32 is NVIDIA's)."""


def _precision_on_cpu(ctx: Context, theirs: str) -> Result:
    """A CPU run is told to change its precision only where another run of the same work on the same CPU
    ran faster in it: the reference's AMP speed-up is a GPU's tensor cores, and autocast on a CPU can be
    many times slower than fp32 (docs/explain.md)."""
    run = ctx.run
    faster = _faster_precision(ctx)
    if faster:
        return faster
    if not theirs or theirs == run.precision:
        return [RuledOut("recipe", f"precision: {run.precision}, as the reference")]
    return [RuledOut("recipe", f"precision: {run.precision} on a CPU against the reference's {theirs} on "
                               f"{ctx.target.device}: its AMP speed-up is a GPU's; no run explained here shows another "
                               "precision faster on this CPU (measure them side by side: dlscale scale --nproc 1 "
                               "--precision fp32,amp_bf16 -- bench ...)")]


def _faster_precision(ctx: Context) -> Result:
    """Another precision that ran the same work faster on the same CPU (a run explained beside this one)."""
    run = ctx.run
    faster = [o for o in (ctx.faster(p) for p in CPU_PRECISIONS if p != run.precision) if o is not None]
    if not faster:
        return []
    best = max(faster, key=lambda o: o.per_device_ips)
    ratio = best.per_device_ips / run.per_device_ips
    reference = f"; reference: {ctx.target.recipe.get('precision')} on {ctx.target.device}" if ctx.target else ""
    return [Finding("recipe", f"precision {run.precision}; {best.precision} ran {ratio:.2f}x faster on this CPU",
                    f"run {best.name}: {best.precision}, {best.per_device_ips:.1f} img/s per device against this "
                    f"run's {run.per_device_ips:.1f} (same model, batch, ranks and CPU){reference}",
                    Effect(ratio, f"{OWN_RUNS}: {best.name} over this run"),
                    ctx.change(f"--precision {best.precision}", f"precision={best.precision}"))]


def _channels_last(ctx: Context) -> Result:
    run, recipe = ctx.run, ctx.target.recipe
    theirs, ours = recipe.get("channels_last"), bool(ctx.run.speed("channels_last"))
    if theirs is None:
        return [RuledOut("recipe", "channels_last: the reference does not state its memory format")]
    if ours or not theirs:
        return [RuledOut("recipe", f"channels_last: {ours} (the reference: {theirs})")]
    if run.device == "cuda" and precision_family(run.precision) == "amp":
        effect = effects.channels_last()
    else:
        effect = Effect(None, f"the one shipped NHWC step (SC20's) was measured with AMP on a GPU; this run is "
                              f"{run.precision} on {run.device}")
    return [Finding("recipe", "channels_last off (NCHW); the reference runs NHWC",
                    f"run: channels_last false; reference: NHWC ({ctx.target.cite(recipe=True)})", effect,
                    ctx.change("--channels-last", "speed.channels_last=true"))]


def _batch(ctx: Context) -> Result:
    theirs, ours = ctx.target.recipe.get("batch_per_device"), ctx.run.batch
    if not theirs or not ours or ours >= int(theirs):
        return [RuledOut("recipe", f"batch per rank: {ours} (the reference: {theirs or 'not stated'})")]
    return [Finding("recipe", f"batch {ours} per rank, the reference {theirs}",
                    f"run: {ours} images per rank per step; reference: {theirs} per device ({ctx.target.cite()})",
                    Effect(None, "no shipped figure of this system at both batches"),
                    ctx.change(f"--batch-size {theirs}", f"batch_size={theirs}") + " (if it fits in memory)")]


def _speed_options(ctx: Context) -> Result:
    run, recipe = ctx.run, ctx.target.recipe
    if run.device != "cuda":
        return [RuledOut("recipe", "cuDNN autotuning and fused SGD: GPU options, this run is on the CPU")]
    out: Result = []
    missing = [key for key in ("cudnn_benchmark", "fused_optimizer") if recipe.get(key) and not run.speed(key)]
    flags = {"cudnn_benchmark": ("--cudnn-benchmark", "speed.cudnn_benchmark=true"),
             "fused_optimizer": ("--fused-optimizer", "speed.fused_optimizer=true")}
    if missing:
        out.append(Finding("recipe", f"{' and '.join(missing)} off; the reference uses them",
                           f"run: {', '.join(f'{k} false' for k in missing)}; reference: true "
                           f"({ctx.target.cite(recipe=True)})", effects.extra_options(),
                           " ".join(ctx.change(*flags[k]) for k in missing)))
    else:
        out.append(RuledOut("recipe", "cudnn_benchmark and fused_optimizer: as the reference or better"))
    if (recipe.get("compile") or recipe.get("cuda_graphs")) and not (run.speed("compile") or run.speed("cuda_graphs")):
        out.append(Finding("recipe", "no torch.compile / CUDA graphs; the reference uses them",
                           f"reference: compile {recipe.get('compile')}, CUDA graphs {recipe.get('cuda_graphs')}",
                           Effect(None, "no shipped figure for compile or CUDA graphs on this model"),
                           ctx.change("--compile-mode reduce-overhead", "speed.compile=true")))
    return out


def _input_pipeline(ctx: Context) -> Result:
    run, recipe = ctx.run, ctx.target.recipe
    if run.kind == "bench":
        return [RuledOut("recipe", "input pipeline: synthetic batches already on the device (the reference read "
                                   f"{recipe.get('data_backend') or 'its data'}: more work than this run did)")]
    data = run.data_settings
    workers, theirs = data.get("num_workers"), recipe.get("loader_workers")
    total, compute = run.steady_rates()
    waits = 1.0 - total / compute if total and compute else None
    if workers is None or not theirs or workers >= int(theirs) or (waits is not None and waits < INPUT_BOUND_SHARE):
        limit = "" if waits is None else f"; the run waits for data {100 * max(waits, 0.0):.1f}% of each step"
        return [RuledOut("recipe", f"loader workers per rank: {workers} (the reference: {theirs or 'not stated'}; "
                                   f"data backend {recipe.get('data_backend') or 'not stated'}){limit}")]
    return [Finding("recipe", f"{workers} loader workers per rank, the reference {theirs}",
                    f"run: data.num_workers={workers}, {data.get('name')} data; reference: {theirs} workers, "
                    f"{recipe.get('data_backend') or 'backend not stated'} ({ctx.target.cite(recipe=True)})",
                    Effect(None, "matters only where the run waits for data: see the input finding"),
                    f"--set data.num_workers={theirs}")]


VERSIONS = ("torch", "cuda", "cudnn", "nccl")
"""What a run records of its software (env.json) and a reference may state: only these are compared."""


def software(ctx: Context) -> Result:
    """torch, CUDA, cuDNN and the NCCL the run loaded against what the reference states it ran: only the
    versions both sides record (a reference that names only its container has none to compare)."""
    if ctx.target is None:
        return []
    stated = ctx.target.software
    theirs = {k: stated[k] for k in VERSIONS if stated.get(k) is not None}
    env = ctx.run.env
    ours = {k: env.get(k) for k in VERSIONS}
    run_text = ", ".join(f"{k} {v}" for k, v in ours.items() if v is not None) or "not recorded (no env.json)"
    if env.get("nccl_source"):
        run_text += f" (NCCL from the {env['nccl_source']})"
    container = f"; it ran in {stated['container']}" if stated.get("container") else ""
    if not theirs:
        return [RuledOut("software", f"the reference states no torch, CUDA, cuDNN or NCCL version to compare"
                                     f"{container} (run: {run_text})")]
    compared = {k: v for k, v in theirs.items() if ours[k] is not None}
    differ = [k for k, v in compared.items() if not str(ours[k]).startswith(str(v))]
    unrecorded = f"; not recorded by the run: {', '.join(k for k in theirs if k not in compared)}" \
        if len(compared) < len(theirs) else ""
    if not compared:
        return [RuledOut("software", f"the run records none of the versions the reference states ("
                                     f"{', '.join(f'{k} {v}' for k, v in theirs.items())}); run: {run_text}")]
    if not differ:
        return [RuledOut("software", f"the reference's versions where both record them: {run_text}{unrecorded}")]
    cited = f"references/{ctx.target.reference.name}.json, sources {', '.join(stated.get('source', []))}"
    return [Finding("software", f"other software than the reference's ({', '.join(differ)})",
                    f"run: {run_text}; reference: {', '.join(f'{k} {v}' for k, v in theirs.items())}{container} "
                    f"({cited}){unrecorded}",
                    Effect(None, "no published figure of this system on other versions"),
                    "run the reference's software to compare like with like (its container or versions)")]
