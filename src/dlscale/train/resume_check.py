"""Which settings may differ between a run's checkpoint and the command that resumes it.

A resumed run must be the run that was checkpointed: a change of what is trained (model, data,
precision, optimizer, schedule shape, batch, world size, seed) would mix two runs under one name,
so it is refused in one line. Settings that change only how the run is carried out or reported
(logging, checkpoint frequency, timeouts, loader workers, speed options, the device, validation
batching) may change; each change is recorded with the step it took effect at, so config.json
never claims a value the run did not use.
"""

from __future__ import annotations

from typing import Any

from dlscale.errors import ConfigError, shown

MAY_CHANGE = (
    "log_every", "checkpoint.", "pg_timeout_s", "target_accuracy", "name", "val_batch_size", "device",
    "deterministic", "speed.", "data.num_workers", "data.pin_memory", "data.persistent_workers",
    "data.prefetch_factor", "data.max_consecutive_bad", "data.on_bad_sample", "data.path", "data.download",
    "data.val_image_size", "data.val_resize", "data.decode_chunk",
    "data.device_ahead", "data.device_decode_process",  # data.device_feed's earlier settings, in older checkpoints
    "data.workers_kind", "data.decoder", "data.device_feed", "data.device_feed_depth", "price_per_device_hour",
    "model.conv_init",
)
"""Settings (keys, or section prefixes ending in '.') that do not change what is trained (model.conv_init
draws the first weights only, which a resumed run loads from its checkpoint; data.workers_kind makes the same
batches; data.decoder the same crops and flips, its pixels within the decoders' tolerance, as a change of device)."""
ADDED = {"data.device_decode_share": 1.0}
"""Settings that change what is trained, added after runs were checkpointed: a checkpoint without one ran with
this value."""
EPOCHS_MAY_CHANGE = ("constant", "step", "plateau")
"""Schedules whose learning rate at a step does not depend on the number of epochs: a run with one
of them may be extended or shortened. Cosine and linear decay to the last epoch: refused."""


def flatten(settings: dict, prefix: str = "") -> dict[str, Any]:
    """{'optim': {'lr': 0.1}} -> {'optim.lr': 0.1}."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def changed_settings(saved: dict, current: dict) -> dict[str, tuple[Any, Any]]:
    """Every flattened key whose value differs: {key: (saved, current)}."""
    old, new = flatten(saved), flatten(current)
    old.update({key: value for key, value in ADDED.items() if key in new and key not in old})
    return {key: (old.get(key), new.get(key)) for key in sorted(old.keys() | new.keys())
            if old.get(key) != new.get(key)}


def check_resume(saved: dict, current: dict, *, run: str) -> dict[str, tuple[Any, Any]]:
    """The allowed changes between a checkpoint's settings and the resuming command's; ConfigError
    naming every refused one."""
    changes = changed_settings(saved, current)
    schedule = flatten(current).get("schedule.name")

    def allowed(key: str) -> bool:
        if key == "schedule.epochs":
            return schedule in EPOCHS_MAY_CHANGE
        return any(key == rule or (rule.endswith(".") and key.startswith(rule)) for rule in MAY_CHANGE)

    refused = {key: change for key, change in changes.items() if not allowed(key)}
    if refused:
        listed = ", ".join(f"{key} {shown(old)} -> {shown(new)}" for key, (old, new) in refused.items())
        raise ConfigError(f"{run} was trained with other settings ({listed}); resuming would mix two runs: "
                          "start a new one with --name NEW, or resume with the run's own settings")
    return changes
