"""Preset files, inheritance and --set: a checked TrainConfig from `FILE_OR_NAME:PRESET` and overrides.

    dlscale train --config cifar100:bs256-amp --set optim.lr=0.2 --set schedule.epochs=10

`cifar100:bs256-amp` names preset `bs256-amp` of the shipped file presets/cifar100.yaml; a path
to a YAML file of the same form works too (`my.yaml:fast`). Every preset inherits from the
file's `default` entry, or from the preset named by its `base` key; nested sections merge key by
key. Values are checked against the dataclass field types (sections.py), so a typo is an error
that lists the keys that exist, not a silently ignored setting.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml

from dlscale.config.sections import TrainConfig
from dlscale.errors import ConfigError, line_of, shown, too_many_digits
from dlscale.rundir.files import is_file, read_bounded

# ----------------------------------------------------------------------------- presets


def preset_files() -> dict[str, Path]:
    """Shipped preset files by name (`cifar100` -> .../presets/cifar100.yaml)."""
    folder = resources.files("dlscale") / "presets"
    return {Path(p.name).stem: Path(str(p)) for p in folder.iterdir() if p.name.endswith(".yaml")}


PRESET_LIMIT_BYTES = 1 << 20
"""The most a preset file may hold: the shipped ones are a few kilobytes."""
YAML_VALUES_LIMIT = 100_000
"""The most values a preset file or a --set value may stand for, its aliases written out: the shipped files
hold a few hundred; an alias bomb (`&a [1, 1]`, `&b [*a, *a]`, ...) doubles with every line."""


def read_yaml(text: str, where: str) -> Any:
    """YAML as dlscale reads it (safe_load): one line naming `where` for anything that does not parse, and for a
    document whose aliases stand for more than YAML_VALUES_LIMIT values (an alias bomb, which every walk over it,
    an error message's included, would take the machine's memory to write out)."""
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as error:  # ValueError: an integer of 5,000 digits
        why = too_many_digits(error) or line_of(error, 120) or type(error).__name__
        raise ConfigError(f"{where} is not YAML dlscale reads ({why})") from None
    _count_values(data, where, [0])
    return data


def _count_values(value: Any, where: str, seen: list[int], depth: int = 0) -> None:
    seen[0] += 1
    if seen[0] > YAML_VALUES_LIMIT or depth > 100:
        raise ConfigError(f"{where} stands for more than {YAML_VALUES_LIMIT:,} values, or nests them more than 100 "
                          "deep, once its aliases are written out: not a configuration")
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        _count_values(child, where, seen, depth + 1)


def load_presets(source: str) -> tuple[Path, dict[str, dict]]:
    shipped = preset_files()
    path = shipped.get(source) or Path(source)
    if not is_file(path):
        raise ConfigError(f"no preset file {shown(source)}; shipped: {', '.join(sorted(shipped))}, or a path to a "
                          "YAML file")
    fix = "give a YAML file of presets"
    try:
        data = read_yaml(read_bounded(path, PRESET_LIMIT_BYTES, fix).decode("utf-8"), str(path)) or {}
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a YAML file of presets (not UTF-8 text)") from None
    except FileNotFoundError:
        raise ConfigError(f"no preset file {shown(source)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must map preset names to sections, not be a {type(data).__name__}")
    wrong = next((name for name, value in data.items() if not isinstance(name, str) or not isinstance(value, dict)),
                 None)
    if wrong is not None:
        raise ConfigError(f"{path}: preset {shown(wrong)} must be a section (key: value pairs), got "
                          f"{shown(data[wrong])}")
    return path, data


def resolve_preset(presets: dict[str, dict], name: str, source: str = "", _seen: tuple = ()) -> dict:
    """The preset's settings merged over its base (`default` unless it names another)."""
    if name not in presets:
        raise ConfigError(f"unknown preset {shown(name)} in {source}; known: {', '.join(presets)}")
    if name in _seen:
        raise ConfigError(f"preset {shown(name)} inherits from itself ({' -> '.join((*_seen, name))})")
    entry = dict(presets[name])
    base = entry.pop("base", None if name == "default" else "default")
    if base is not None and not isinstance(base, str):
        raise ConfigError(f"preset {shown(name)} in {source}: base {shown(base)} must name another preset")
    if base is None or (base == "default" and "default" not in presets):
        return entry
    return deep_merge(resolve_preset(presets, base, source, (*_seen, name)), entry)


def deep_merge(base: dict, override: dict) -> dict:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_override(text: str) -> tuple[list[str], Any]:
    """'optim.lr=0.2' -> (['optim', 'lr'], 0.2); the value is read as YAML (numbers, bools, lists)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {shown(text)} must look like section.key=value, e.g. optim.lr=0.2")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except (yaml.YAMLError, ValueError, RecursionError):
        return key.strip().split("."), raw  # not YAML: the text itself (a path with a ': ' in it)
    _count_values(value, f"--set {shown(text)}", [0])
    return key.strip().split("."), value


Override = str | tuple[str, Any]
"""One setting over a preset: `--set` text ('optim.lr=0.2', its value read as YAML), or a dotted key and its
value already typed ('data.path', '2024': a flag's)."""


def apply_overrides(settings: dict, overrides: Iterable[Override]) -> dict:
    """The settings with each override merged in, in order (a later one wins)."""
    settings = dict(settings)
    for override in overrides:
        if isinstance(override, str):
            path, value = parse_override(override)
        else:
            path, value = override[0].split("."), override[1]
        nested: dict = {path[-1]: value}
        for part in reversed(path[:-1]):
            nested = {part: nested}
        settings = deep_merge(settings, nested)
    return settings


def load_config(spec: str, overrides: Iterable[Override] = ()) -> tuple[TrainConfig, str]:
    """Resolve `FILE_OR_NAME:PRESET` plus overrides into a checked TrainConfig and its preset name."""
    source, preset = split_spec(spec)
    path, presets = load_presets(source)
    settings = apply_overrides(resolve_preset(presets, preset, str(path)), overrides)
    cfg = build(TrainConfig, settings, "")
    return cfg, f"{Path(source).stem}-{preset}"


def split_spec(spec: str) -> tuple[str, str]:
    """`cifar100:bs256-amp` -> ('cifar100', 'bs256-amp'); a file alone names its `default` preset."""
    source, sep, preset = spec.rpartition(":")
    return (source, preset) if sep else (spec, "default")


def shipped_presets() -> list[tuple[str, dict]]:
    """Every shipped preset as `FILE:PRESET` with its resolved settings, file by file in name order."""
    out = []
    for source in sorted(preset_files()):
        path, presets = load_presets(source)
        out += [(f"{source}:{name}", resolve_preset(presets, name, str(path))) for name in presets]
    return out


# ------------------------------------------------------------- dict -> dataclass, type-checked

LARGEST_INT = 2**53
"""The largest magnitude a number of the configuration may have: every integer up to it is exact as a float
(a JSON number), and it is beyond any count, size or seed a run has; the sections bound each setting further."""


def build(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'the configuration'} must be a section (key: value pairs), got {shown(data)}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known, key=str)
    if unknown:
        key = f"{where}{unknown[0]!s}"
        close = closest_keys(key)
        guess = f": did you mean {' or '.join(close)}?" if close else ";"
        section = where.rstrip(".") or "top level"
        raise ConfigError(f"unknown key {key}{guess} {section} has: {', '.join(sorted(known))}")
    values = {name: _coerce(hints[name], value, f"{where}{name}") for name, value in data.items()}
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{where.rstrip('.') or 'configuration'}: {error}") from None


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, f"{where}.")
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(arg, value, where)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(errors[0] if errors else f"{where} must not be null")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}={shown(value)} is not one of {', '.join(map(str, args))}")
        return value
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{where} must be a list, got {shown(value)}")
        item = args[0] if args else Any
        return tuple(_coerce(item, v, where) for v in value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {shown(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} must be an integer, got {shown(value)}")
        if not -LARGEST_INT <= value <= LARGEST_INT:
            raise ConfigError(f"{where}={shown(value)} is beyond any count or size a run has (at most {LARGEST_INT:,})")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where} must be a number, got {shown(value)}")
        if not math.isfinite(value) or abs(value) > LARGEST_INT:
            raise ConfigError(f"{where}={shown(value)} must be a finite number (at most {LARGEST_INT:,})")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where} must be a string, got {shown(value)}")
        return value
    return value


def setting_keys(cls: type = TrainConfig, prefix: str = "") -> list[str]:
    """Every setting of the configuration as its dotted key (`schedule.epochs`), sections included."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        keys.append(f"{prefix}{f.name}")
        if dataclasses.is_dataclass(hints[f.name]):
            keys += setting_keys(hints[f.name], f"{prefix}{f.name}.")
    return keys


def closest_keys(key: str) -> list[str]:
    """The settings a mistyped key most likely meant: those with its last part (`epochs` -> schedule.epochs),
    else the closest spelling of the whole key or of its last part (`optim.lrr` -> optim.lr)."""
    keys = setting_keys()
    leaf = key.rsplit(".", 1)[-1]
    same_leaf = [k for k in keys if k.rsplit(".", 1)[-1] == leaf and k != key]
    if same_leaf:
        return same_leaf
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
    if close:
        return close
    leaves = {k.rsplit(".", 1)[-1]: k for k in keys}
    return [leaves[name] for name in difflib.get_close_matches(leaf, list(leaves), n=1, cutoff=0.8)]


def setting_type(key: str, cls: type = TrainConfig) -> Any:
    """The type hint of a dotted key of the configuration (`data.path` -> str | None)."""
    head, _, rest = key.partition(".")
    hint = typing.get_type_hints(cls)[head]
    return setting_type(rest, hint) if rest else hint
