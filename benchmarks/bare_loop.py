"""A training loop in plain PyTorch over torchvision's ResNet: the baseline `dlscale bench` is
measured against (benchmarks/gpu.py runs both, alternated, with the same settings).

    python benchmarks/bare_loop.py --batch-size 256 --precision amp_bf16 --channels-last \
        --fused-optimizer --cudnn-benchmark --json bare.json

No dlscale code runs here (unless --model-source dlscale, which builds dlscale's ResNet instead,
for checking this script where torchvision is missing). The protocol is dlscale bench's (and
Horovod's): untimed warm-up steps, then timed iterations of several steps, each iteration ended
by a device synchronisation; batches are random tensors made on the device before timing. The
optimizer is SGD with momentum 0.9 and no weight decay, as dlscale bench's; precision modes set
TF32 as dlscale does (off in fp32, on otherwise) and scale the loss in amp_fp16 only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn

AUTOCAST = {"fp32": None, "tf32": None, "amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}


def build_model(source: str, name: str, num_classes: int) -> nn.Module:
    if source == "torchvision":
        import torchvision

        return torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    from dlscale.models import build_model as dlscale_model

    return dlscale_model(name, num_classes=num_classes)


def set_tf32(enabled: bool) -> None:
    """The legacy switches, which keep every TF32 getter readable (docs/references.md#pytorch-tf32)."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def timed_rates(model: nn.Module, optimizer: torch.optim.Optimizer, precision: str, pool: list, *,
                warmup: int, iters: int, per_iter: int, device: torch.device,
                clock=time.perf_counter, on_iter=lambda i, rate: None) -> list[float]:
    """Horovod's protocol in plain torch calls: `warmup` untimed steps, then `iters` timed
    iterations of `per_iter` steps, each ended by a device synchronisation; img/s per iteration."""
    dtype = AUTOCAST[precision]
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "amp_fp16")
    loss_fn = nn.CrossEntropyLoss()

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(i: int) -> None:
        images, labels = pool[i % len(pool)]
        with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    for i in range(warmup):
        step(i)
    sync()
    rates = []
    for it in range(iters):
        start = clock()
        for i in range(per_iter):
            step(i)
        sync()
        rates.append(pool[0][0].shape[0] * per_iter / (clock() - start))
        on_iter(it, rates[-1])
    return rates


def run(args: argparse.Namespace) -> dict:
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda":
        set_tf32(args.precision != "fp32")
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
    torch.manual_seed(args.seed)
    layout = torch.channels_last if args.channels_last else torch.contiguous_format
    model = build_model(args.model_source, args.model, args.num_classes).to(device, memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=0.0,
                                **({"fused": True} if args.fused_optimizer else {}))
    generator = torch.Generator(device=device).manual_seed(args.seed)
    shape = (args.batch_size, 3, args.image_size, args.image_size)
    pool = [(torch.randn(shape, device=device, generator=generator).contiguous(memory_format=layout),
             torch.randint(0, args.num_classes, (args.batch_size,), device=device, generator=generator))
            for _ in range(args.pool_batches)]

    rates = timed_rates(model, optimizer, args.precision, pool, warmup=args.num_warmup_batches,
                        iters=args.num_iters, per_iter=args.num_batches_per_iter, device=device,
                        on_iter=lambda it, rate: print(f"Iter #{it}: {rate:.1f} img/sec", flush=True))
    mean = statistics.mean(rates)
    ci95 = 1.96 * statistics.pstdev(rates)
    print(f"Img/sec: {mean:.1f} +-{ci95:.1f}", flush=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"program": "bare_loop", "model_source": args.model_source, "model": args.model,
            "device": device.type, "device_name": name,
            "precision": args.precision, "batch_size": args.batch_size, "image_size": args.image_size,
            "channels_last": args.channels_last, "fused_optimizer": args.fused_optimizer,
            "cudnn_benchmark": args.cudnn_benchmark, "img_per_sec_mean": mean, "img_per_sec_ci95": ci95,
            "iterations": rates, "torch": torch.__version__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--model-source", choices=("torchvision", "dlscale"), default="torchvision")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--precision", choices=sorted(AUTOCAST), default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--fused-optimizer", action="store_true")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--num-warmup-batches", type=int, default=10)
    p.add_argument("--num-batches-per-iter", type=int, default=10)
    p.add_argument("--num-iters", type=int, default=10)
    p.add_argument("--pool-batches", type=int, default=8)
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the result object here")
    args = p.parse_args()
    result = run(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
