"""Time as money: device-hours at a price per device-hour (`--price-per-device-hour`). No torch.

The price is whatever the user pays for one device for one hour (cloud list price, amortised
hardware, power): dlscale multiplies, it does not know prices. Costs carry no currency.
"""

from __future__ import annotations

from dlscale.errors import ConfigError

IMAGENET_TRAIN_IMAGES = 1_281_167
"""Images in the ILSVRC-2012 training set (docs/references.md#imagenet-size): the epoch that bench
and predict price, since neither trains a data set of its own."""


def cost(seconds: float, devices: int, price_per_device_hour: float) -> float:
    """seconds of `devices` devices at the price of one device-hour."""
    return seconds / 3600.0 * devices * price_per_device_hour


def imagenet_epoch_cost(images_per_s: float | None, devices: int, price_per_device_hour: float | None) -> float | None:
    """One ImageNet epoch at a measured or predicted total rate, on `devices` devices; None without a price."""
    if price_per_device_hour is None or not images_per_s:
        return None
    return cost(IMAGENET_TRAIN_IMAGES / images_per_s, devices, price_per_device_hour)


def train_costs(history: list[dict], train_time_s: float | None, devices: int,
                price_per_device_hour: float | None) -> dict:
    """A training run's cost per epoch (the mean epoch: elapsed time over epochs completed, validation
    included) and for the whole run; {} without a price."""
    if price_per_device_hour is None:
        return {}
    epochs = len(history)
    per_epoch = cost(train_time_s / epochs, devices, price_per_device_hour) if epochs and train_time_s else None
    whole = cost(train_time_s, devices, price_per_device_hour) if train_time_s else None
    return {"price_per_device_hour": price_per_device_hour, "cost_per_epoch": per_epoch, "cost_per_run": whole}


def check_price(price: float | None) -> float | None:
    if price is not None and not price > 0:
        raise ConfigError(f"--price-per-device-hour {price:g} must be > 0 (the price of one device for one hour)")
    return price
