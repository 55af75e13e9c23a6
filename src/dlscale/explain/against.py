"""`dlscale explain RUN --against RUN2`: what differs between two runs' records (config.json, the
settings in summary.json, env.json with its packages), and their rates side by side."""

from __future__ import annotations

from dlscale.rundir import Run

IGNORED = ("name", "output_dir", "json", "argv", "command", "parent_command", "hostname_lock", "plan.", "changes")
"""Keys that name or place a run rather than set it up (the run directory's name, where it was written,
the command line, which repeats those): left out of the settings that differ (the command lines are
shown apart)."""

SUMMARY_SETTINGS = ("precision", "batch_size", "global_batch_size", "image_size", "world_size", "num_nodes",
                    "device", "device_name", "dist_optimizer", "channels_last", "cudnn_benchmark", "fused_optimizer",
                    "compile", "compile_mode", "cuda_graphs", "launcher", "data")
"""Settings a summary records that config.json may not hold in the same form."""


def flatten(value, prefix: str = "") -> dict:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def _ignored(key: str) -> bool:
    last = key.split(".")[-1]
    return last in IGNORED or any(key.startswith(rule) for rule in IGNORED if rule.endswith("."))


def differences(a: Run, b: Run) -> dict[str, list[tuple[str, object, object]]]:
    """{section: [(key, a's value, b's value)]} for config, summary settings, environment and packages."""
    def diff(left: dict, right: dict) -> list[tuple[str, object, object]]:
        keys = sorted(set(left) | set(right))
        return [(k, left.get(k), right.get(k)) for k in keys if left.get(k) != right.get(k) and not _ignored(k)]

    env_a = {k: v for k, v in a.env.items() if k != "packages"}
    env_b = {k: v for k, v in b.env.items() if k != "packages"}
    return {
        "config": diff(flatten(a.config), flatten(b.config)),
        "summary": diff(*({k: run.summary.get(k) for k in SUMMARY_SETTINGS} for run in (a, b))),
        "environment": diff(flatten(env_a), flatten(env_b)),
        "packages": diff(a.env.get("packages") or {}, b.env.get("packages") or {}),
    }


def lines(a: Run, b: Run) -> list[str]:
    found = differences(a, b)
    rate = lambda run: f"{run.total_ips:.1f} img/s" if run.total_ips else "no rate"  # noqa: E731
    out = [f"A: {a.path} ({a.kind}, {rate(a)})", f"B: {b.path} ({b.kind}, {rate(b)})"]
    if a.total_ips and b.total_ips:
        out.append(f"B / A: {b.total_ips / a.total_ips:.3f}x")
    seen: set[str] = set()  # a summary setting already shown as a config key (batch_size, speed.channels_last)
    titles = {"config": "Settings (config.json)", "summary": "Recorded settings (summary.json)",
              "environment": "Environment (env.json)", "packages": "Packages"}
    for section, rows in found.items():
        if section == "summary":
            rows = [r for r in rows if not any(k == r[0] or k.endswith("." + r[0]) for k in seen)]
        seen.update(r[0] for r in rows)
        if rows:
            out += ["", f"{titles[section]}: {len(rows)} differ"]
            out += [f"  {key}: {_show(old)} -> {_show(new)}" for key, old, new in rows]
    if not any(found.values()):
        out += ["", "The records do not differ in any setting, version or package."]
    commands = [(label, run.env["command"]) for label, run in (("A", a), ("B", b)) if run.env.get("command")]
    if commands:
        out += ["", *(f"{label}'s command: {command}" for label, command in commands)]
    return out


def _show(value) -> str:
    text = "(none)" if value is None else str(value)
    return text if len(text) <= 80 else text[:77] + "..."
