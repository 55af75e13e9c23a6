"""The GPU campaign's real-data stage without a GPU (benchmarks/gpu_campaign/decode.py, wheels.py, nvjpg.py and
what the runner and gpu.py do for them): the order of its runs and their settings, the loader's figures and the
shared decode's share from them, the nvImageCodec rows skipped with the wheels' reason, NVML's JPEG engines
through a stand-in of pynvml (an unsupported query is unavailable, never a zero), and a campaign stopped part
way keeping every command that ended. The whole stage runs on a CPU in tests/smoke/test_gpu_rehearsal.py."""

import argparse
import dataclasses
import io
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu  # noqa: E402
from gpu_campaign import data_report, decode, nvjpg, parts, readers, runner, wheels  # noqa: E402
from gpu_campaign import plan as P  # noqa: E402

GPU = P.Features(device="cuda", torchvision=True, cores=16, gpu_decode=True, loader_decoder=True)


def _context(tmp_path, deadline_s=60.0, **values):
    return runner.Context(python=sys.executable, root=ROOT, work=tmp_path, env={"PATH": "/usr/bin:/bin"},
                          log=io.StringIO(), deadline=time.monotonic() + deadline_s, pythonpath=False,
                          say=lambda line: None, values=dict(values))


def _sets(run: P.Run) -> dict[str, str]:
    return dict(run.argv[i + 1].split("=", 1) for i, arg in enumerate(run.argv) if arg == "--set")


def _option(run: P.Run, name: str) -> str:
    return run.argv[run.argv.index(name) + 1]


# ------------------------------------------------------------------------------------------- the plan

def test_each_arrangement_runs_after_its_loader_in_the_order_of_value():
    stage = decode.decode_stage(GPU)
    assert [r.name for r in stage.runs] == [
        "train synthetic", "loader nvimgcodec", "train JPEG nvimgcodec", "loader threads", "train JPEG threads",
        "loader nvjpeg shared", "train JPEG nvjpeg shared", "loader processes", "train JPEG processes"]
    assert [r.name for r in stage.setup] == ["JPEG tree"] and stage.rounds == 1
    assert stage.ratios == [(f"train JPEG {name}", "train synthetic")
                            for name in ("nvimgcodec", "threads", "nvjpeg shared", "processes")]
    runs = {r.name: r for r in stage.runs}
    assert all(r.nvjpg and r.unavailable is None for r in stage.runs)
    # every train run: the compiled GPU default's model and settings, batch 512, 3 epochs of the 30,720 files
    for run in (r for r in stage.runs if r.reader == "train"):
        sets = _sets(run)
        assert (sets["model.name"], sets["batch_size"], sets["precision"], sets["speed.compile_mode"]) == (
            "resnet50", "512", "amp_bf16", "reduce-overhead"), run.name
        assert sets["schedule.epochs"] == "3" and sets["speed.channels_last"] == "true"
    assert _sets(runs["train synthetic"])["data.synthetic_size"] == "30720"
    hardware = _sets(runs["train JPEG nvimgcodec"])
    assert {k: hardware[k] for k in ("data.decode", "data.decoder", "data.device_feed", "data.workers_kind",
                                     "data.num_workers")} == {"data.decode": "gpu", "data.decoder": "nvimgcodec",
                                                              "data.device_feed": "thread",
                                                              "data.workers_kind": "thread", "data.num_workers": "8"}
    shared = _sets(runs["train JPEG nvjpeg shared"])
    assert (shared["data.decoder"], shared["data.device_feed"], shared["data.device_decode_share"],
            shared["data.num_workers"]) == ("nvjpeg", "thread", "{share}", "15")
    for kind, name in (("thread", "threads"), ("process", "processes")):
        sets = _sets(runs[f"train JPEG {name}"])
        assert (sets["data.decode"], sets["data.workers_kind"], sets["data.num_workers"]) == ("fast", kind, "15")
        assert "data.decoder" not in sets
    # each loader runs its train run's path alone: the same decoder, workers and kind, 4x the batches in flight
    for name in ("nvimgcodec", "threads", "nvjpeg shared", "processes"):
        loader, train = runs[f"loader {name}"], _sets(runs[f"train JPEG {name}"])
        assert _option(loader, "--workers") == train["data.num_workers"]
        assert _option(loader, "--workers-kind") == train["data.workers_kind"]
        assert _option(loader, "--decode") == train["data.decode"]
        assert ("--decoder" in loader.argv) == ("data.decoder" in train)
        assert int(_option(loader, "--batches")) == 8 * int(train["data.num_workers"]) and loader.sets == name
        assert _option(loader, "--device") == "cuda" and "--prewarm" in loader.argv
    assert _option(runs["loader nvimgcodec"], "--decoder") == "nvimgcodec"
    # nvImageCodec's rows need the wheels stage, the CPU path's take simplejpeg from it where it installed; a device
    # path too slow for the epochs is not started
    assert [r.name for r in stage.runs if r.needs == "nvimgcodec"] == ["loader nvimgcodec", "train JPEG nvimgcodec"]
    assert {r.name for r in stage.runs if r.needs == "simplejpeg"} == {
        f"{kind} {name}" for kind in ("loader", "train JPEG") for name in ("threads", "nvjpeg shared", "processes")}
    hw = runs["train JPEG nvimgcodec"]
    assert hw.min_rate == ("nvimgcodec_ips", pytest.approx(3 * 30720 / (4 * hw.estimate_s)))
    # the first train run compiles from the campaign's empty cache: the later ones' estimate, the evaluation
    # graph's compile and the training graph's from nothing
    first, later = runs["train synthetic"].estimate_s, hw.estimate_s
    assert first - later == pytest.approx(decode.TRAIN_COMPILE_S["first"] - decode.TRAIN_COMPILE_S["later"]
                                          + P.COMPILE_S["reduce-overhead"] - P.WARM_COMPILE_S)


def test_the_cpu_rehearsal_runs_the_same_commands_with_stand_ins():
    cpu = dataclasses.replace(GPU, device="cpu", torchvision=False)
    runs = {r.name: r for r in decode.decode_stage(cpu).runs}
    assert all(r.unavailable is None for r in runs.values())
    assert _sets(runs["train JPEG nvimgcodec"])["data.decoder"] == "nvimgcodec"  # its CPU backend, named
    assert _sets(runs["train JPEG nvjpeg shared"])["data.decoder"] == "pillow"
    assert _sets(runs["train JPEG threads"])["data.num_workers"] == "2" and _sets(runs["train synthetic"])[
        "device"] == "cpu"
    assert "the CPU rehearsal: pillow on the CPU device" in runs["loader nvjpeg shared"].settings
    assert "2 loader threads" in runs["train JPEG threads"].settings


def test_the_wheels_stage_runs_before_the_stages_that_use_nvimgcodec():
    assert parts.PARTS[1][:3] == ["wheels", "env", "decode"]
    assert [s.name for s in parts.build_plan(GPU, {"decode": None})] == ["wheels", "env", "decode"]
    assert [s.name for s in parts.build_plan(GPU, {"peers": None, "pytest": None})] == ["env", "peers", "pytest"]
    f = dataclasses.replace(GPU, wheels=("a.whl", "b.whl"), wheels_dir=".whl")
    (run,) = parts.wheels_stage(f).runs
    assert run.argv[:3] == ["benchmarks/gpu_campaign/wheels.py", "--wheels", ".whl"] and "a.whl, b.whl" in run.settings
    assert "scripts/gpu-wheels.sh" in parts.wheels_stage(GPU).runs[0].settings  # none found: where to get them


# ------------------------------------------------------------------------------------ the readers

def _loader_summary(tmp_path: Path, name: str, rows: list[dict], batch: int = 256) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps({"settings": rows, "batch_size": batch, "decode": "gpu"}))
    return folder / "summary.json"


def test_the_loader_reader_keeps_the_arrangements_figures_and_the_shared_decode_takes_its_share(tmp_path):
    """The loader's fastest row: img/s, CPU ms and device ms per image, the decoder and its backends; the shared
    arrangement's loader sets {share} from its device ms per image, the threads' img/s and the synthetic run's."""
    ctx = _context(tmp_path, synthetic_ips="6000.0")
    path = _loader_summary(tmp_path, "threads", [{"workers": 15, "images_per_s": 3000.0, "cpu_ms_per_image": 3.3,
                                                  "device_ms_per_batch": 1.28, "workers_kind": "thread"}])
    got = readers.read_loader(P.Run("loader threads", [], "loader", 1.0, sets="threads"), "", path, ctx)
    assert ctx.values["threads_ips"] == "3000.0" and ctx.values["threads_workers"] == "15"
    assert got["details"]["best"]["device_ms_per_image"] == pytest.approx(1.28 / 256)
    assert "share" not in ctx.values
    rows = [{"workers": 15, "images_per_s": 4000.0, "cpu_ms_per_image": 0.4, "device_ms_per_batch": 25.6,
             "decoder": "nvjpeg", "decoded_by_backend": {"all": 3}, "decoded_on_device": 16384,
             "decoded_by_workers": 0, "refused_by_device": 0}]
    path = _loader_summary(tmp_path, "nvjpeg", rows)
    got = readers.read_loader(P.Run("loader nvjpeg shared", [], "loader", 1.0, sets="nvjpeg shared"), "", path, ctx)
    # workers 3,000 img/s, model 6,000, 0.1 device-ms per image: x = (1 - 0.5) / (1/6000 + 1/10000) = 1,875 on
    # the device, s = 1,875 / 4,875
    assert ctx.values["share"] == f"{1875.0 / 4875.0:.2f}" == "0.38" and got["details"]["share"] == 0.38
    best = got["details"]["best"]
    assert (best["decoder"], best["decoded_on_device"], best["cpu_ms_per_image"]) == ("nvjpeg", 16384, 0.4)
    assert got["details"]["rows"][0]["decoded_by_backend"] == {"all": 3}  # the one dict a row keeps
    assert ctx.fill("data.device_decode_share={share}", 0) == "data.device_decode_share=0.38"


def test_the_shared_decode_balances_the_workers_and_the_device():
    assert decode.device_share(3000.0, 0.1, 6000.0) == pytest.approx(1875.0 / 4875.0)
    assert decode.device_share(7000.0, 0.1, 6000.0) == 0.05  # the workers alone keep up
    assert decode.device_share(None, 0.1, 6000.0) == decode.device_share(3000.0, None, 6000.0) == 0.5
    assert decode.device_share(10.0, 0.001, 6000.0) == pytest.approx(1.0, abs=0.01)  # workers of no use


def test_the_synthetic_run_sets_the_models_rate_for_the_share(tmp_path):
    records = [{"record": "train", "epoch": e, "iteration": i, "throughput_img_per_s": 5000.0, "data_time_ms": 0.1,
                "step_time_ms": 100.0, "window_s": 0.5, "host_cpu_ms_per_image": ms}
               for e, i, ms in ((0, 5, 9.0), (1, 5, 1.0), (1, 10, 0.5), (1, 15, 0.7))]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"total_ips": 4000.0, "decode": None}))
    ctx = _context(tmp_path)
    got = readers.read_train(P.Run("train synthetic", [], "train", 1.0, sets="synthetic_ips"), "", tmp_path, ctx)
    assert ctx.values["synthetic_ips"] == "5000.0" and got["details"]["host_cpu_ms_per_image"] == 0.6


def test_a_device_loader_too_slow_for_the_epochs_keeps_its_train_run_from_starting(tmp_path):
    hw = next(r for r in decode.decode_stage(GPU).runs if r.name == "train JPEG nvimgcodec")
    ctx = _context(tmp_path)
    path = _loader_summary(tmp_path, "slow", [{"workers": 8, "images_per_s": 129.4, "device_ms_per_batch": 1974.0}])
    readers.read_loader(P.Run("loader nvimgcodec", [], "loader", 1.0, sets="nvimgcodec"), "", path, ctx)
    ran = tmp_path / "ran"
    probe = P.Run("probe", ["-c", f"open({str(ran)!r}, 'w').close()"], "none", hw.estimate_s, min_rate=hw.min_rate)
    record = runner.execute(probe, ctx, "decode", 0, time.monotonic() + 600)
    assert record["status"] == "not_run" and "measured 129 img/s" in record["error"] and not ran.exists()
    ctx.values["nvimgcodec_ips"] = "4000.0"
    assert runner.execute(probe, ctx, "decode", 0, time.monotonic() + 600)["status"] == "ok" and ran.exists()


def test_without_nvimgcodec_its_rows_are_skipped_with_the_wheels_reason_and_the_rest_goes_on(tmp_path):
    """The wheels stage's record says nvImageCodec cannot decode here: the runs that need it are recorded as
    unavailable with that reason, never started; where it installed, its folder goes first on their PYTHONPATH."""
    record = tmp_path / "wheels.json"
    why = "nvImageCodec is not installed: pip install 'dlscale[gpu]' (pip could not install x.whl: exit 1)"
    record.write_text(json.dumps({"wheels": ["x.whl"], "target": None, "unavailable": why}))
    ctx = _context(tmp_path)
    readers.read_wheels(P.Run("install wheels", [], "wheels", 1.0), "", record, ctx)
    ran = tmp_path / "ran"
    needs = P.Run("loader nvimgcodec", ["-c", f"open({str(ran)!r}, 'w').close()"], "none", 1.0, needs="nvimgcodec")
    other = P.Run("loader threads", ["-c", "print('ok')"], "none", 1.0)
    result = runner.run_stage(P.Stage("decode", "decode", 60.0, [needs, other]), ctx)
    by_name = {r["name"]: r for r in result["runs"]}
    assert by_name["loader nvimgcodec"]["status"] == "unavailable" and by_name["loader nvimgcodec"]["error"] == why
    assert not ran.exists() and by_name["loader threads"]["status"] == "ok"
    # installed: its folder first on the PYTHONPATH of the runs that need it, and only theirs
    installed = _context(tmp_path)
    installed.env["PYTHONPATH"] = "/src"
    record.write_text(json.dumps({"wheels": ["x.whl"], "target": "/work/wheels", "unavailable": None}))
    readers.read_wheels(P.Run("install wheels", [], "wheels", 1.0), "", record, installed)
    for name, need in (("needs", "nvimgcodec"), ("plain", None)):
        said = f"pathlib.Path({str(tmp_path / name)!r}).write_text(os.environ['PYTHONPATH'])"
        shows = ["-c", f"import os, pathlib; {said}"]
        assert runner.execute(P.Run(name, shows, "none", 1.0, needs=need), installed, "decode", 0,
                              time.monotonic() + 60)["status"] == "ok"
    assert (tmp_path / "needs").read_text() == "/work/wheels:/src" and (tmp_path / "plain").read_text() == "/src"
    # simplejpeg installed though nvImageCodec cannot decode: the CPU path's runs get the folder, and are never refused
    cpu = _context(tmp_path)
    cpu.env["PYTHONPATH"] = "/src"
    record.write_text(json.dumps({"wheels": ["x.whl", "s.whl"], "target": "/work/wheels", "unavailable": why,
                                  "versions": {"simplejpeg": "1.9.0"}}))
    readers.read_wheels(P.Run("install wheels", [], "wheels", 1.0), "", record, cpu)
    said = f"pathlib.Path({str(tmp_path / 'cpu')!r}).write_text(os.environ['PYTHONPATH'])"
    assert runner.execute(P.Run("loader threads", ["-c", f"import os, pathlib; {said}"], "none", 1.0,
                                needs="simplejpeg"), cpu, "decode", 0, time.monotonic() + 60)["status"] == "ok"
    assert (tmp_path / "cpu").read_text() == "/work/wheels:/src"


@pytest.mark.slow
def test_a_wheel_pip_cannot_install_is_recorded_with_pips_exit_and_the_check_says_why(tmp_path, monkeypatch):
    (tmp_path / "whl").mkdir()
    (tmp_path / "whl" / "nvidia_nvimgcodec_cu13-0.9.0.20-py3-none-manylinux_2_28_x86_64.whl").write_bytes(b"junk")
    monkeypatch.setattr(wheels, "check", lambda device: {"unavailable": "nvImageCodec is not installed: pip ..."})
    out = tmp_path / "wheels.json"
    code = wheels.main(["--wheels", str(tmp_path / "whl"), "--target", str(tmp_path / "site"), "--device", "cpu",
                        "--json", str(out)])
    record = json.loads(out.read_text())
    assert code == 1 and record["install"]["returncode"] not in (0, None) and record["target"] is None
    assert "--no-deps --no-index" in record["install"]["command"] and "--target" in record["install"]["command"]
    assert record["unavailable"].startswith("nvImageCodec is not installed")
    assert "(pip could not install nvidia_nvimgcodec_cu13-0.9.0.20-py3-none-manylinux_2_28_x86_64.whl: exit" in \
        record["unavailable"]
    empty = tmp_path / "none"
    empty.mkdir()
    assert wheels.main(["--wheels", str(empty), "--target", str(tmp_path / "site2"), "--device", "cpu", "--json",
                        str(out)]) == 1
    assert "no wheel in" in json.loads(out.read_text())["unavailable"] and "scripts/gpu-wheels.sh" in \
        json.loads(out.read_text())["unavailable"]


# ------------------------------------------------------------------------------- NVML's JPEG engines

class FakeNvml:
    """pynvml's calls the sampler makes, answering as a driver would: JPEG-engine utilisation from a list (or an
    error), GPM samples, and NVJPG metrics per engine (engines the GPU lacks answer with an error status)."""

    NVML_SUCCESS = 0
    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_NVJPG_0_UTIL = 40

    def __init__(self, utilisation=None, engines=None, gpm=True):
        self.utilisation = utilisation if isinstance(utilisation, Exception) else list(utilisation or [])
        self.engines, self.gpm = engines or {}, gpm
        self.freed = 0

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"gpu{index}"

    def nvmlDeviceGetJpgUtilization(self, handle):
        if isinstance(self.utilisation, Exception):
            raise self.utilisation
        value = self.utilisation.pop(0) if len(self.utilisation) > 1 else self.utilisation[0]
        return [value, 166666]

    def nvmlGpmQueryDeviceSupport(self, handle):
        return SimpleNamespace(isSupportedDevice=int(self.gpm))

    def nvmlGpmSampleAlloc(self):
        return object()

    def nvmlGpmSampleGet(self, handle, sample):
        return sample

    def nvmlGpmSampleFree(self, sample):
        self.freed += 1

    def c_nvmlGpmMetricsGet_t(self):
        return SimpleNamespace(metrics=[SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(333)])

    def nvmlGpmMetricsGet(self, query):
        assert query.numMetrics == nvjpg.ENGINES and query.sample1 is not query.sample2
        for metric in query.metrics[:query.numMetrics]:
            engine = metric.metricId - self.NVML_GPM_METRIC_NVJPG_0_UTIL
            metric.value, metric.nvmlReturn = (self.engines[engine], 0) if engine in self.engines else (0.0, 3)


def test_the_jpeg_engines_utilisation_is_sampled_while_a_command_runs():
    nvml = FakeNvml(utilisation=[0, 40, 80, 0], engines={0: 61.5, 1: 59.0, 6: 0.0})
    sampler = nvjpg.JpegEngines(nvml, period_s=0.01)
    sampler.start()
    time.sleep(0.2)
    got = sampler.stop()
    jpg = got["jpg_utilization"]
    assert jpg["source"] == "nvmlDeviceGetJpgUtilization" and jpg["driver_window_us"] == 166666
    values = [value for _, value in jpg["values"]]
    assert values[:4] == [0, 40, 80, 0] and jpg["samples"] == len(values) >= 5 and jpg["max_pct"] == 80
    assert jpg["mean_pct"] == pytest.approx(sum(values) / len(values)) and jpg["busy_samples"] == 2
    assert jpg["mean_busy_pct"] == 60.0
    # GPM: the engines this GPU has, between the command's start and end; both samples freed
    assert got["gpm_nvjpg"]["engines_pct"] == {"0": 61.5, "1": 59.0, "6": 0.0} and nvml.freed == 2
    assert got["gpm_nvjpg"]["mean_pct"] == pytest.approx((61.5 + 59.0) / 3)
    line = data_report.engines({"nvjpg": got})
    assert line.startswith(f"mean {jpg['mean_pct']:.0f}%, max 80%, busy in 2 of") and "0: 62%, 1: 59%, 6: 0%" in line


def test_a_driver_without_the_queries_records_them_unavailable_never_as_zero():
    class NotSupported(Exception):
        pass

    nvml = FakeNvml(utilisation=NotSupported("Not Supported"), gpm=False)
    sampler = nvjpg.JpegEngines(nvml, period_s=0.01)
    sampler.start()
    got = sampler.stop()
    assert got == {"jpg_utilization": {"unavailable": "nvmlDeviceGetJpgUtilization: NotSupported: Not Supported"},
                   "gpm_nvjpg": {"unavailable": "GPM is not supported on this GPU"}}
    assert data_report.engines({"nvjpg": got}) == \
        "unavailable (nvmlDeviceGetJpgUtilization: NotSupported: Not Supported)"
    assert data_report.engines({"nvjpg": {"unavailable": "NVML is not available here"}}) == \
        "unavailable (NVML is not available here)"


def test_no_nvml_is_recorded_in_each_sampled_command(tmp_path, monkeypatch):
    monkeypatch.setattr("dlscale.metrics.nvml.load_nvml", lambda: None)
    why = nvjpg.sampler_factory()
    assert isinstance(why, str) and why.startswith("NVML is not available here")
    ctx = _context(tmp_path)
    ctx.nvjpg = why
    sampled = runner.execute(P.Run("loader", ["-c", "pass"], "none", 1.0, nvjpg=True), ctx, "decode", 0,
                             time.monotonic() + 60)
    plain = runner.execute(P.Run("tree", ["-c", "pass"], "none", 1.0), ctx, "decode", 0, time.monotonic() + 60)
    assert sampled["nvjpg"] == {"unavailable": why} and "nvjpg" not in plain


# ------------------------------------------------------------------------- kept when stopped part way

def test_each_command_is_written_as_it_ends_and_a_stopped_campaign_keeps_them(tmp_path):
    """gpu.json is rewritten after every command; a SIGTERM while a command runs stops it (and what it started),
    and the campaign writes what ended, saying it was stopped."""
    first = P.Run("first", ["-c", "print('done')"], "none", 5.0)
    killer = P.Run("second", ["-c", "import os, signal, time; os.kill(os.getppid(), signal.SIGTERM); time.sleep(600)"],
                   "none", 5.0)
    never = P.Run("third", ["-c", "pass"], "none", 5.0)
    stages = [P.Stage("demo", "demo", 60.0, [first, killer, never]), P.Stage("after", "after", 60.0, [never])]
    args = argparse.Namespace(out=tmp_path / "out", work=str(tmp_path / "work"), inductor_cache=tmp_path / "cache",
                              part=1, combined_flags=None, combined=None, after_stages=None, rounds=None,
                              budget_s=60.0, keep_work=False, compared=None)
    started = time.monotonic()
    code = gpu.run(stages, args, pythonpath=False, device="cpu", f=P.Features(device="cpu"))
    assert code == 143 and time.monotonic() - started < 120  # the sleeping command was stopped, not waited for
    document = json.loads((tmp_path / "out" / "gpu.json").read_text())
    assert document["stopped"].startswith("stopped by signal 15 after") and "what ended is kept" in document["stopped"]
    demo = document["stages"]["demo"]
    assert [(r["name"], r["status"]) for r in demo["runs"]] == [("first", "ok")] and demo["unfinished"]
    assert "after" not in document["stages"] and "The campaign was stopped by signal 15" in \
        (tmp_path / "out" / "gpu.md").read_text()
    saved = []
    ctx = _context(tmp_path)
    ctx.on_record = saved.append
    runner.run_stage(P.Stage("demo", "demo", 60.0, [first, never]), ctx)
    assert [[r["name"] for r in partial["runs"]] for partial in saved] == [["first"], ["first", "third"]]


def test_a_simplejpeg_wheel_pip_refuses_costs_only_simplejpeg(tmp_path, monkeypatch):
    """simplejpeg's wheel goes in a pip call of its own: where pip refuses it, nvImageCodec's wheels still install,
    the folder is still recorded, the failure is reported and the exit is the check's."""
    (tmp_path / "whl").mkdir()
    names = ["nvidia_nvimgcodec_cu13-0.9.0.20-py3-none-manylinux_2_28_x86_64.whl",
             "nvidia_nvjpeg-13.0.2.28-py3-none-manylinux2014_x86_64.whl",
             "simplejpeg-1.9.0-cp312-cp312-manylinux_2_17_x86_64.whl"]
    for name in names:
        (tmp_path / "whl" / name).write_bytes(b"junk")
    calls = []

    def install(found, target):
        calls.append([w.name for w in found])
        return {"command": "pip", "returncode": 1 if found[0].name.startswith("simplejpeg-") else 0, "seconds": 0.0,
                "output": ""}

    monkeypatch.setattr(wheels, "install", install)
    monkeypatch.setattr(wheels, "check", lambda device: {"unavailable": None})
    monkeypatch.setattr(sys, "path", list(sys.path))
    out = tmp_path / "wheels.json"
    code = wheels.main(["--wheels", str(tmp_path / "whl"), "--target", str(tmp_path / "site"), "--device", "cpu",
                        "--json", str(out)])
    record = json.loads(out.read_text())
    assert calls == [names[:2], names[2:]]
    assert code == 0 and record["install"]["returncode"] == 0 and record["install_simplejpeg"]["returncode"] == 1
    assert record["target"] == str(tmp_path / "site") and record["unavailable"] is None
