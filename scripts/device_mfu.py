"""Write src/dlscale/references/device_mfu.json from the GPU campaign's records in docs/results/: every MFU a
`dlscale bench` run of the campaign measured, under its device's type, each with the run it comes from.

    .venv/bin/python scripts/device_mfu.py            # rewrites the file
    .venv/bin/python scripts/device_mfu.py --check    # exit 1 where the shipped file differs from the records

`dlscale predict --mfu` warns when asked for more than the highest of these on the device at the peak's precision
(predict/caveats.py). tests/unit/test_check_figures.py runs --check, so the file cannot drift from its records.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
TARGET = ROOT / "src" / "dlscale" / "references" / "device_mfu.json"

PEAK_DTYPE = {"amp_bf16": "bf16", "amp_fp16": "fp16", "tf32": "tf32", "fp32": "fp32"}
"""A run's precision -> the datasheet peak its MFU divides by (metrics/hardware.py)."""

HEADER = {
    "name": "device_mfu",
    "title": "Model FLOPs utilisation that dlscale measured per device: training FLOPs per second of a dlscale bench "
             "run over the device's dense datasheet peak at the run's precision",
    "how": "Every mfu a dlscale bench run of the GPU campaign recorded in docs/results/ (bench/synthetic.py: img/s x "
           "counted training FLOPs per image / metrics/hardware.py's peak), under the device's type, with the "
           "command, date, machine and the record's field it was read from; written by scripts/device_mfu.py. "
           "dlscale predict --peak-tflops DEVICE --mfu M warns when M is above the highest figure here for that "
           "device and the peak's precision.",
}


def _option(command: str, name: str) -> str | None:
    words = shlex.split(command)
    return words[words.index(name) + 1] if name in words[:-1] else None


def _device_type(name: str) -> str | None:
    from dlscale.metrics.hardware import known_device

    return known_device(name)


OUTPUTS = ("--json", "--output-dir", "--name")
"""Options that name where a run writes, not what it measures: left out of the command shown."""


def _settings(command: str) -> str:
    """The command as recorded, without the options that name its outputs."""
    words, kept = shlex.split(command), []
    for i, word in enumerate(words):
        if word not in OUTPUTS and (i == 0 or words[i - 1] not in OUTPUTS):
            kept.append(word)
    return shlex.join(kept).replace("'PYTHONPATH=src' ", "PYTHONPATH=src ")


def _machine(env: dict) -> str:
    cudnn = env.get("cudnn")
    cudnn = f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if isinstance(cudnn, int) else cudnn
    return (f"one {env.get('device_name')} (driver {env.get('driver')}), torch {env.get('torch')}, CUDA "
            f"{env.get('cuda')}, cuDNN {cudnn}, {env.get('available_cores')} cores")


def entries(record: Path) -> tuple[str | None, list[dict]]:
    """The device type of one campaign record and an entry per bench run that recorded an MFU."""
    document = json.loads(record.read_text())
    env = document.get("environment") or {}
    out = []
    for stage, result in document.get("stages", {}).items():
        for index, run in enumerate(result.get("runs", [])):
            details = run.get("details") or {}
            if run.get("status") != "ok" or run.get("reused_from") or not details.get("mfu"):
                continue
            command = run["command"]
            settings = (result.get("medians", {}).get(run["name"]) or {}).get("settings") or "-"
            out.append({
                "mfu": round(details["mfu"], 4), "peak_dtype": PEAK_DTYPE[details["precision"]],
                "peak_tflops": details["peak_tflops"], "model": _option(command, "--model") or "resnet50",
                "image_size": int(_option(command, "--image-size") or 224),
                "batch_size": int(details.get("batch_size") or _option(command, "--batch-size")),
                "img_per_s": round(run["value"], 1), "what": f"stage {stage}, {run['name']}: {settings}",
                "command": _settings(command), "date": document["started"][:10], "machine": _machine(env),
                "source": f"docs/results/{record.name}, stages.{stage}.runs[{index}].details.mfu = "
                          f"{details['mfu']:.5f}",
                "record": f"docs/results/{record.name}", "field": f"stages.{stage}.runs[{index}].details.mfu"})
    return _device_type(env.get("device_name") or ""), out


def build(results: Path = RESULTS) -> dict:
    devices: dict[str, list[dict]] = {}
    for record in sorted(results.glob("gpu-*.json")):
        device, found = entries(record)
        if device and found:
            devices.setdefault(device, []).extend(found)
    return {**HEADER, "devices": dict(sorted(devices.items()))}


def text(document: dict) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true", help="compare the shipped file with the records; write nothing")
    args = p.parse_args(argv)
    wanted = text(build())
    if args.check:
        if TARGET.read_text() != wanted:
            print(f"{TARGET.relative_to(ROOT)} differs from the records in docs/results/: run scripts/device_mfu.py",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
