"""dlscale explain's recipe and device causes over hand-written run facts: cuDNN autotuning and fused SGD,
compile or CUDA graphs, threads per rank, and the device's clocks, power limit, MIG slice and PCIe board
(env.json's fields as metrics/nvml.py and metrics/run.py write them). Each expected effect is worked out
here from the shipped figure it must come from."""

from dataclasses import replace
from pathlib import Path

import pytest

from dlscale.explain.build import explain_run
from dlscale.explain.context import Context
from dlscale.explain.findings import Finding
from dlscale.explain.recipe import recipe
from dlscale.explain.target import Target
from dlscale.report.references import load_reference
from dlscale.rundir import Run

# SC20's progression on one V100 (references/sc20.json): + NHWC 2075-2250, + extra opts 2460-2577 img/s.
EXTRA_OPTS = ((2460 + 2577) / 2) / ((2075 + 2250) / 2)


def _run(kind="bench", config=None, env=None, **summary):
    base = {"kind": kind, "model": "resnet50", "precision": "amp_fp16", "world_size": 1, "device": "cuda",
            "device_name": "Tesla V100-SXM2-16GB", "batch_size": 256, "img_per_sec_total_mean": 1000.0,
            "total_ips": 1000.0, "image_size": 224, "channels_last": True, "cudnn_benchmark": True}
    merged = {key: value for key, value in {**base, **summary}.items() if value is not None}  # None: not recorded
    return Run(Path("r"), merged, config or {}, env or {})


def _found(explanation, category, text) -> Finding:
    (finding,) = [f for f in explanation.findings if f.category == category and text in f.cause]
    return finding


def _causes(explanation, category) -> list[str]:
    return [f.cause for f in explanation.findings if f.category == category]


def test_cudnn_benchmark_off_against_nvidias_recipe_is_bounded_by_sc20s_extra_opts_step():
    e = explain_run(_run(cudnn_benchmark=False), "ngc:v100_16gb_amp")  # NVIDIA: cudnn.benchmark on, plain SGD
    found = _found(e, "recipe", "cudnn_benchmark off")
    assert found.cause == "cudnn_benchmark off; the reference uses them" and found.change == "--cudnn-benchmark"
    assert found.effect.factor == pytest.approx(EXTRA_OPTS) and found.effect.bound
    # SC20's recipe uses fused SGD as well; a train run is told the --set form of both.
    train = _run("train", config={"speed": {"cudnn_benchmark": False, "fused_optimizer": False}},
                 cudnn_benchmark=None, channels_last=None)
    both = _found(explain_run(train, "sc20:weak_scaling"), "recipe", "fused_optimizer off")
    assert both.cause.startswith("cudnn_benchmark and fused_optimizer off")
    assert both.change == "--set speed.cudnn_benchmark=true --set speed.fused_optimizer=true"
    on = _run("train", config={"speed": {"cudnn_benchmark": True, "fused_optimizer": True}}, cudnn_benchmark=None)
    assert not any("off; the reference uses them" in c for c in _causes(explain_run(on, "sc20:weak_scaling"), "recipe"))
    # CPU runs have neither option: ruled out, not a finding.
    cpu = explain_run(_run(device="cpu", device_name="x86_64", cudnn_benchmark=False), "ngc:v100_16gb_amp")
    assert not any("cudnn" in c for c in _causes(cpu, "recipe"))


def _target_with(**recipe_changes) -> Target:
    ngc = load_reference("ngc")
    changed = replace(ngc, recipe={**ngc.recipe, **recipe_changes})
    return Target(changed, changed.get("v100_16gb_amp"), 1, 1200.0)


def test_a_reference_that_compiles_or_uses_cuda_graphs_names_compile_with_no_effect_figure():
    target = _target_with(cuda_graphs=True)  # no shipped reference does: NVIDIA's recipe with graphs on
    found = [f for f in recipe(Context(_run(), target)) if isinstance(f, Finding) and "compile" in f.cause]
    assert [f.cause for f in found] == ["no torch.compile / CUDA graphs; the reference uses them"]
    assert found[0].effect.factor is None and found[0].change == "--compile-mode reduce-overhead"
    train = [f for f in recipe(Context(_run("train"), target)) if isinstance(f, Finding) and "compile" in f.cause]
    assert train[0].change == "--set speed.compile=true"
    for done in (_run(compile=True), _run(cuda_graphs=True)):  # torch.compile, or bench's eager capture
        assert not [f for f in recipe(Context(done, target)) if isinstance(f, Finding) and "compile" in f.cause]


def test_more_compute_threads_than_cores_on_cpu_ranks_is_bounded_by_threads_over_cores():
    # 4 ranks on one node with 4 threads each on 8 cores: 16 threads, at most 2x slower than one per core.
    cpu = {"device": "cpu", "device_name": "x86_64", "world_size": 4, "num_nodes": 1, "precision": "fp32"}
    env = {"torch_threads": 4, "cpu_count": 8, "env_vars": {"OMP_NUM_THREADS": "4"}}
    found = _found(explain_run(_run(env=env, **cpu), "ngc:v100_16gb_amp"), "host", "compute threads")
    assert found.cause == "oversubscribed: 16 compute threads on 8 cores"
    assert found.change == "set OMP_NUM_THREADS=2 (now 4)"
    assert found.effect.factor == pytest.approx(16 / 8) and found.effect.bound
    assert "OMP_NUM_THREADS=4" in found.evidence
    fits = explain_run(_run(env={**env, "torch_threads": 2}, **cpu), "ngc:v100_16gb_amp")
    assert not any("threads" in c for c in _causes(fits, "host"))
    assert any("4 rank(s) per node x 2 threads on 8 cores: 8 compute threads fit" in r.evidence
               for r in fits.ruled_out)


def _gpu(uuid, app_mhz, limit_w):
    """One entry of env.json's nvml_devices, the fields metrics/nvml.py writes (a V100-SXM2: 1530 MHz, 300 W)."""
    return {"name": "Tesla V100-SXM2-16GB", "uuid": uuid, "pci_bus_id": "00000000:06:00.0",
            "memory_total_bytes": 16 * 2**30, "sm_clock_mhz": 135, "sm_clock_max_mhz": 1530,
            "sm_clock_applications_mhz": app_mhz, "memory_clock_mhz": 877, "memory_clock_max_mhz": 877,
            "power_draw_w": 40.0, "power_limit_w": limit_w, "power_limit_default_w": 300.0,
            "power_limit_enforced_w": limit_w, "mig_mode": None, "persistence_mode": 1}


def test_clocks_and_power_limit_are_read_from_the_runs_own_gpu():
    # Two GPUs in the node: the first at the board's own settings, the run's (by UUID) clocked and capped down.
    env = {"device_uuid": "GPU-bbbb", "nvml_devices": [_gpu("GPU-aaaa", 1530, 300.0), _gpu("GPU-bbbb", 1200, 250.0)]}
    e = explain_run(_run(env=env), "ngc:v100_16gb_amp")
    clock = _found(e, "device", "applications clock")
    assert clock.cause == "applications clock 1200 MHz below the board's 1530 MHz"
    assert clock.effect.factor == pytest.approx(1530 / 1200) and clock.effect.bound
    assert "nvidia-smi -rac" in clock.change
    power = _found(e, "device", "power limit")
    assert power.cause == "power limit 250 W below the board's default 300 W" and power.effect.factor is None
    assert "nvidia-smi -pl" in power.change
    own = explain_run(_run(env={**env, "device_uuid": "GPU-aaaa"}), "ngc:v100_16gb_amp")
    assert not [f for f in own.findings if f.category == "device"]
    assert any(r.evidence.startswith("clocks and power limit: the board's own") for r in own.ruled_out)


def test_a_mig_slice_is_bounded_by_its_share_of_the_sms():
    # A100 3g.20gb: 42 of the A100's 108 SMs (metrics/hardware.py); both at AMP's fp16 peak, 312 TFLOP/s.
    run = _run(device_name="NVIDIA A100-SXM4-40GB MIG 3g.20gb", env={"device_sm_count": 42})
    found = _found(explain_run(run, "ngc:a100_80gb_amp"), "device", "MIG")
    assert found.cause == "a MIG slice of the GPU" and "42 SMs" in found.evidence
    assert found.effect.factor == pytest.approx(108 / 42) and found.effect.bound


def test_a_pcie_board_against_nvidias_sxm2_figures_is_bounded_by_the_datasheet_peaks():
    # V100-PCIe 112 and V100-SXM2 125 TFLOP/s of fp16 (NVIDIA's datasheets, docs/references.md#nvidia-peak-tflops).
    found = _found(explain_run(_run(device_name="Tesla V100-PCIE-16GB"), "ngc:v100_16gb_amp"), "device", "PCIe")
    assert found.cause == "a PCIe board; the reference ran SXM boards"
    assert found.effect.factor == pytest.approx(125 / 112) and found.effect.bound


def test_a_train_run_is_costed_at_its_data_sets_image_size_and_its_model_width():
    """A digits run of resnet18_cifar at width 16 records neither in summary.json: its data set's own 32 px and
    config.json's width, not 224 px at the standard width (27.6 GMACs, far more work than ResNet-50's 4.1)."""
    config = {"model": {"name": "resnet18_cifar", "width": 16}, "data": {"name": "digits", "image_size": None}}
    run = _run(kind="train", model="resnet18_cifar", image_size=None, data="digits", config=config)
    (said,) = [r.evidence for r in recipe(Context(run, _target_with())) if "GMACs per image" in r.evidence]
    # width 16 is a quarter of the channels: a sixteenth of the MACs of every conv between the stem and fc (0.5649
    # GMACs at width 64 less the stem's 9,408 x 32^2 and fc's 512 x 1000), a quarter of those two:
    # (0.5649e9 - 9.63e6 - 0.51e6) / 16 + 9.63e6 / 4 + 0.51e6 / 4 = 0.037e9
    assert said.startswith("run: resnet18_cifar (width 16) at 32 px, 0.037 GMACs per image")
