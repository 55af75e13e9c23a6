"""The device side of the input pipeline, in one package (it imports data/ below it; nothing in data/ imports it).

    feed = DeviceFeed(device, DeviceNormalizer(info.mean, info.std, device), feed=cfg.device_feed,
                      depth=cfg.device_feed_depth)                 # built once per run
    for images, labels, skipped in feed.batches(train_loader):  # training; evaluation the same way
        ...

loop.py      DeviceFeed: the one loop that brings batches to the device (a CUDA stream or a null context);
             DevicePrefetcher: one loader through a feed of its own
feeds.py     where its work runs (data.device_feed: inline, thread, process)
stage.py     DeviceDecodeStage: an EncodedBatch decoded, cropped, resized and flipped on the device in chunks
process.py   DecodeProcess: that stage in a spawned process of its own
decoders/    the image decoders (nvImageCodec, nvJPEG, Pillow) behind one interface; resolve_decode
normalize.py DeviceNormalizer
"""

from __future__ import annotations

from dataclasses import replace

import torch

from dlscale.config.data import DataConfig
from dlscale.data.device.decoders import DECODERS, ImageDecoder, build_decoder, decoder_name, resolve_decode
from dlscale.data.device.feeds import FEEDS
from dlscale.data.device.loop import DeviceFeed, DevicePrefetcher, device_plan
from dlscale.data.device.normalize import DeviceNormalizer, normalize
from dlscale.data.device.process import DecodeProcess
from dlscale.data.device.stage import DecodeCounts, DeviceDecodeStage


def for_device(cfg: DataConfig, device: torch.device | str | None) -> DataConfig:
    """The data configuration on the decode path its batches take to `device` (data.decode "auto" resolved;
    "gpu" refused in one line where no decoder can run there) and with its kind of loader workers resolved
    (data.workers_kind "auto": threads for JPEGs on CUDA): what build_loaders is given."""
    kind = cfg.workers_kind_on(torch.device(device).type if device is not None else None)
    cfg = replace(cfg, workers_kind=kind) if kind != cfg.workers_kind else cfg
    if cfg.name != "imagefolder":
        return cfg
    return cfg.on_path(resolve_decode(cfg.decode, device, cfg.decoder) if device is not None else
                       "fast" if cfg.decode == "auto" else cfg.decode)


__all__ = ["DECODERS", "FEEDS", "DecodeCounts", "DecodeProcess", "DeviceDecodeStage", "DeviceFeed",
           "DeviceNormalizer", "DevicePrefetcher", "ImageDecoder", "build_decoder", "decoder_name", "device_plan",
           "for_device", "normalize", "resolve_decode"]
