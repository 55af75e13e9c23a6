"""gpu.md's tables of the real-data stage and of the wheels it needs: each way of feeding JPEGs with its train run
against synthetic input, its loader's figures, the decoder's backends, and NVML's JPEG-engine utilisation."""

from __future__ import annotations


def fmt(value, digits: int = 1) -> str:
    """A table cell: "-" for none, a float with thousands separators and `digits` decimals (report.py's too)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _ok(runs: list[dict], name: str) -> dict | None:
    return next((r for r in runs if r["name"] == name and r.get("status") == "ok"), None)


def _said(runs: list[dict], name: str) -> str:
    """A run's figure, or its status and why there is none."""
    found = [r for r in runs if r["name"] == name]
    if not found:
        return "-"
    return found[-1]["status"].replace("_", " ")


def backends(best: dict) -> str:
    """Which decoder decoded, and how many files each of its backends took: "nvimgcodec: hw_gpu_only 20,480"."""
    if not best.get("decoder"):
        return "the loader workers (CPU)"
    counts = best.get("decoded_by_backend") or {"all": best.get("decoded_on_device") or 0}
    taken = ", ".join(f"{kind} {count:,}" for kind, count in counts.items() if count) or "none"
    workers = best.get("decoded_by_workers")
    return f"{best['decoder']}: {taken}" + (f"; the workers {workers:,}" if workers else "")


def engines(record: dict | None) -> str:
    """NVML's JPEG-engine utilisation during a command, or why it is unavailable (never a zero for a missing one)."""
    figures = (record or {}).get("nvjpg")
    if figures is None:
        return "-"
    if "unavailable" in figures:  # no NVML at all
        return f"unavailable ({figures['unavailable']})"
    jpg, gpm = figures.get("jpg_utilization", {}), figures.get("gpm_nvjpg", {})
    if "unavailable" in jpg:
        said = f"unavailable ({jpg['unavailable']})"
    else:
        said = (f"mean {jpg['mean_pct']:.0f}%, max {jpg['max_pct']}%, busy in {jpg['busy_samples']} of "
                f"{jpg['samples']} samples ({jpg['mean_busy_pct']:.0f}% then)")
    if "unavailable" not in gpm:
        said += "; per engine (GPM) " + ", ".join(f"{k}: {v:.0f}%" for k, v in gpm["engines_pct"].items())
    return said


def arrangement_table(result: dict, names: list[str]) -> list[str]:
    """Per way of feeding JPEGs: the train run against synthetic, the loader alone, the decoder's backends."""
    runs = result.get("runs", [])
    ratios = {r["numerator"]: r["ratio"] for r in result.get("ratios", [])}
    synthetic = _ok(runs, "train synthetic")
    lines = ["| arrangement | train img/s | of synthetic | CPU ms/img in training | loader img/s | loader CPU ms/img "
             "| loader device ms/img | decoded by |", "|---|---|---|---|---|---|---|---|"]
    if synthetic:
        lines.append(f"| synthetic | {fmt(synthetic['value'])} | 1.000 | "
                     f"{fmt(synthetic['details'].get('host_cpu_ms_per_image'), 3)} | - | - | - | - |")
    for name in names:
        train, loader = _ok(runs, f"train JPEG {name}"), _ok(runs, f"loader {name}")
        best = (loader or {}).get("details", {}).get("best", {})
        lines.append(
            f"| {name} | {fmt(train['value']) if train else _said(runs, f'train JPEG {name}')} | "
            f"{fmt(ratios.get(f'train JPEG {name}'), 3)} | "
            f"{fmt(train['details'].get('host_cpu_ms_per_image'), 3) if train else '-'} | "
            f"{fmt(best.get('images_per_s')) if loader else _said(runs, f'loader {name}')} | "
            f"{fmt(best.get('cpu_ms_per_image'), 3)} | {fmt(best.get('device_ms_per_image'), 3)} | "
            f"{backends(best) if loader else '-'} |")
    return lines


def engines_lines(result: dict) -> list[str]:
    """NVML's JPEG-engine utilisation during each command that sampled it."""
    sampled = [r for r in result.get("runs", []) if r.get("nvjpg") is not None]
    if not sampled:
        return []
    return ["NVML's JPEG engines (NVJPG) during each command:", "",
            *[f"- {r['name']}: {engines(r)}" for r in sampled], ""]


def shared_line(result: dict) -> list[str]:
    loader = next((r for r in result.get("runs", []) if (r.get("details") or {}).get("share") is not None), None)
    if loader is None:
        return []
    return [f"The shared decode's share (data.device_decode_share), from {loader['name']} and the CPU path's loader: "
            f"{loader['details']['share']:.2f}.", ""]


def wheels_lines(result: dict) -> list[str]:
    record = next((r for r in result.get("runs", []) if r.get("details")), None)
    if record is None:
        return [f"Not run: {next((r.get('error', '') for r in result.get('runs', [])), '')}"]
    details = record["details"]
    versions = ", ".join(f"{name} {version or 'absent'}" for name, version in details.get("versions", {}).items())
    lines = [f"Wheels: {', '.join(details.get('wheels', [])) or 'none'}; installed into "
             f"{details.get('target') or 'nothing'}; {versions}."]
    if details.get("unavailable"):
        lines.append(f"nvImageCodec's rows are skipped: {details['unavailable']}.")
    else:
        probe = details.get("probe_backend") or {}
        lines.append("nvImageCodec decodes here: a 500 x 375 JPEG's region went to "
                     f"{probe.get('region') or '-'}, the whole image to {probe.get('whole') or '-'}.")
    return lines
