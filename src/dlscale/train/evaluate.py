"""evaluate(): top-1, top-5 and loss over the validation set, every sample counted once over all ranks,
and its speed as NVIDIA ConvNets' validate() measures it (docs/references.md#ngc-throughput-metrics).
"""

from __future__ import annotations

import time

import torch
from torch import nn

from dlscale.data import all_reduce_eval_sums
from dlscale.data.dataset import EXCLUDED_LABEL
from dlscale.data.device import DeviceFeed
from dlscale.distributed import sum_over_ranks
from dlscale.metrics.timing import IterationTimes, device_synchronizer
from dlscale.precision import Precision


@torch.no_grad()
def evaluate(model: nn.Module, loader, feed: DeviceFeed, precision: Precision) -> tuple[dict, list[str]]:
    """The validation metrics over all ranks (val_skipped: the unreadable files of all ranks, left out),
    and this rank's unreadable files. Per batch the data wait and the compute time up to a device
    synchronisation, as ConvNets' validate(); two collectives at the end, none per batch.

    model: the unwrapped model. DDP's forward would broadcast buffers, a collective that ranks with
    different numbers of validation batches would not all join. feed: the run's DeviceFeed (the training's).
    """
    device = feed.device
    model.eval()
    zero = torch.zeros((), dtype=torch.float64, device=device)
    correct1, correct5, loss_sum, count = zero.clone(), zero.clone(), zero.clone(), zero.clone()
    skipped: list[str] = []
    times, synchronize = IterationTimes(), device_synchronizer(device)
    end = time.perf_counter()
    for images, labels, unreadable in feed.batches(loader):
        data_s = time.perf_counter() - end
        with precision.autocast():
            logits = model(images)
        readable = labels != EXCLUDED_LABEL  # placeholders of unreadable files: counted apart, never scored
        loss_sum += nn.functional.cross_entropy(logits.float()[readable], labels[readable], reduction="sum")
        top = logits.topk(min(5, logits.shape[1]), dim=1).indices
        hits = top.eq(labels[:, None]) & readable[:, None]
        correct1 += hits[:, 0].sum()
        correct5 += hits.any(dim=1).sum()
        count += readable.sum()
        skipped.extend(unreadable)
        synchronize()  # the batch's latency, as ConvNets' torch.cuda.synchronize() per batch
        times.add(data_s, time.perf_counter() - end - data_s, labels.shape[0])
        end = time.perf_counter()
    totals = all_reduce_eval_sums(correct1, correct5, loss_sum, count, device=device)
    model.train()
    return {"val_top1_pct": totals.top1, "val_top5_pct": totals.top5, "val_loss": totals.loss,
            "val_count": int(totals.count), **_speed_and_skipped(times, len(skipped), device)}, skipped


def _speed_and_skipped(times: IterationTimes, skipped: int, device: torch.device) -> dict:
    """Images/s summed over ranks (each rank's images over its own time, as the training rates are) and
    the unreadable files of all ranks (one all_reduce); data wait and compute latencies of this rank
    (rank 0's are recorded, as ConvNets')."""
    total, compute = times.rates()
    summed = sum_over_ranks({"skipped": skipped, "total_img_per_s": total, "compute_img_per_s": compute}, device)
    return {"val_skipped": int(summed["skipped"]), "val_total_img_per_s": summed["total_img_per_s"],
            "val_compute_img_per_s": summed["compute_img_per_s"],
            **{f"val_{key}": value for key, value in times.latency_ms().items()}}
