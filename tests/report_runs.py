"""Run, sweep and predict directories written by hand for the report's tests, as dlscale writes them."""

import json

CPU_ENV = {"device_type": "cpu", "device_name": "x86_64", "torch_threads": 1, "cpu_available": 16, "cpu_count": 16}
H100_ENV = {"device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "torch_threads": 1, "cpu_available": 16}


def write_run(root, name, env=None, config=None, **summary):
    path = root / name
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(summary))
    if env is not None:
        (path / "env.json").write_text(json.dumps({**env, "world_size": summary.get("world_size", 1)}))
    if config is not None:
        (path / "config.json").write_text(json.dumps(config))
    return path


def bench(root, name, world, total, ci=1.0, precision="fp32", dist="allreduce", batch=4, env=None, **extra):
    return write_run(root, name, env=env, kind="bench", model="resnet18", precision=precision, dist_optimizer=dist,
                     image_size=32, batch_size=batch, global_batch_size=batch * world, world_size=world,
                     img_per_sec_total_mean=total, img_per_sec_total_ci95=ci,
                     img_per_sec_per_rank_mean=total / world, img_per_sec_per_rank_ci95=ci / world, **extra)


def train(root, name, world, global_batch, top1s, seconds_per_epoch=10.0, ips=100.0, data="digits", top5s=None,
          epochs_planned=None, workers=None, env=None, nodes=1, first_epoch_s=None, **extra):
    """A train run whose epoch n ends at first_epoch_s + n x seconds_per_epoch (first_epoch_s defaults to
    seconds_per_epoch): every epoch but the first takes seconds_per_epoch."""
    first = seconds_per_epoch if first_epoch_s is None else first_epoch_s
    history = [{"epoch": e, "val_top1_pct": t, "elapsed_s": first + seconds_per_epoch * e,
                "global_batch": global_batch, "throughput_img_per_s": ips,
                **({"val_top5_pct": top5s[e]} if top5s else {})} for e, t in enumerate(top1s)]
    epochs = epochs_planned or len(top1s)
    config = {"kind": "train", "schedule": {"name": "cosine", "epochs": epochs, "warmup_epochs": 1.0},
              "max_steps_per_epoch": None, "data": {"name": data, "num_workers": 0 if workers is None else workers}}
    return write_run(root, name, env=env, config=config, kind="train", model="resnet18_cifar", data=data,
                     precision="fp32", dist_optimizer="allreduce", world_size=world, num_nodes=nodes,
                     batch_size=global_batch // world, global_batch_size=global_batch, epochs_planned=epochs,
                     final_top1_pct=top1s[-1], best_top1_pct=max(top1s),
                     final_top5_pct=top5s[-1] if top5s else None, train_time_s=history[-1]["elapsed_s"],
                     total_ips=ips, history=history, **extra)


def sweep(root, name, points, command="bench", mode="weak", grouped=False):
    """sweep.json over run directories already written in root/name: points are (run_dir, world, nnodes,
    settings) or (run_dir, world, nnodes, settings, status). grouped: as `dlscale scale --nproc 1,2 --nnodes
    1,2` does, each processes-per-node value is a group of its own."""
    entries = []
    for run_dir, world, nnodes, settings, *status in points:
        group = f"{world // nnodes}/node" if grouped else ""
        entries.append({"name": run_dir, "run_dir": run_dir, "world_size": world, "nnodes": nnodes,
                        "nproc_per_node": world // nnodes, "settings": settings, "group": group,
                        "series": " ".join([*settings.values(), group]).strip(),
                        "status": status[0] if status else "ok"})
    (root / name).mkdir(parents=True, exist_ok=True)
    (root / name / "sweep.json").write_text(json.dumps({"kind": "sweep", "mode": mode, "command": command,
                                                         "points": entries}))
    return root / name


def predict(root, name, devices, per_device, model="resnet50", from_run=None):
    points = [{"devices": n, "nodes": max(1, n // 8), "img_per_s_per_device": per_device * 0.98 ** k,
               "img_per_s_total": n * per_device * 0.98 ** k, "efficiency": 0.98 ** k, "limit": "compute"}
              for k, n in enumerate(devices)]
    argv = ["predict", "--from-run", f"runs/{from_run}"] if from_run else ["predict", "--platform", "dgx-h100"]
    return write_run(root, name, config={"kind": "predict", "argv": argv}, kind="predict", model=model,
                     title=f"{model} on {from_run or 'DGX H100'}", points=points)


def many_runs(root):
    """About 34 directories as a user's runs/ holds them: CPU sweeps (bench over precisions, train over ranks
    and nodes, bench over strategies), loose CPU runs at 1 to 128 ranks, loose H100 runs, trains of two
    schedules, H100 and CPU predictions; one 2-rank point measured above 100% efficiency."""
    runs = root / "runs"
    precisions = []
    for world, fp32, amp in ((1, 100.0, 150.0), (2, 215.0, 290.0), (4, 380.0, 560.0), (8, 700.0, 1050.0)):
        for precision, total in (("fp32", fp32), ("amp_bf16", amp)):
            bench(runs / "sweep-precisions", f"world{world}-{precision}", world, total, precision=precision,
                  env=CPU_ENV)
            precisions.append((f"world{world}-{precision}", world, 1, {"precision": precision}))
    sweep(runs, "sweep-precisions", precisions)
    layout = ((1, 1, 40.0), (2, 1, 22.0), (2, 2, 24.0), (4, 2, 13.0))
    for world, nodes, seconds in layout:
        name = f"world{world}" + (f"-nodes{nodes}" if nodes > 1 else "")
        train(runs / "sweep-train", name, world, 32 * world, [30.0, 55.0, 70.0], seconds_per_epoch=seconds,
              ips=3000 / seconds, top5s=[60.0, 80.0, 90.0], env=CPU_ENV, nodes=nodes)
    sweep(runs, "sweep-train", [(f"world{w}" + (f"-nodes{n}" if n > 1 else ""), w, n, {})
                                for w, n, _ in layout], command="train", grouped=True)
    strategies = []
    for world in (1, 2, 4):
        for dist, factor in (("allreduce", 1.0), ("neighbor_allreduce", 1.05)):
            bench(runs / "sweep-strategies", f"world{world}-{dist}", world, 90.0 * world * factor * 0.9 ** world,
                  dist=dist, env=CPU_ENV)
            strategies.append((f"world{world}-{dist}", world, 1, {"dist_optimizer": dist}))
    sweep(runs, "sweep-strategies", strategies)
    for k in range(8):  # loose CPU benches at 1 to 128 ranks
        bench(runs, f"cpu-bench-{2 ** k}", 2 ** k, 50.0 * 2 ** k * 0.95 ** k, env=CPU_ENV)
    for world, total in ((1, 3000.0), (8, 23000.0)):
        bench(runs, f"h100-bench-{world}", world, total, precision="amp_bf16", batch=256, env=H100_ENV)
    for world, epochs, top1 in ((1, 2, 20.0), (2, 2, 19.5), (1, 30, 80.0), (4, 30, 76.0)):
        train(runs, f"train-e{epochs}-w{world}", world, 64 * world, [top1 - 5, top1], epochs_planned=epochs,
              env=CPU_ENV)
    predict(runs, "predict-h100", [8, 64, 512, 4096, 32768], 2900.0)
    predict(runs, "predict-cpu", [1, 2, 4, 8], 50.0, model="resnet18", from_run="cpu-bench-1")
    return [runs]
