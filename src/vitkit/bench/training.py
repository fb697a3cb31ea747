"""Training throughput: the vitkit engine's full step against timm's model of the same shape in a plain loop.

`vitkit.train.engine.train` runs the whole loop and has no public single-step function, so `engine_step` repeats
the body of its loop with the engine's own parts -- RunConfig defaults, `build_run_model`, `build_optimizer`
(fused AdamW, decay groups), `TrainTransform`, `global_batch_indices`, `step_seed`, `learning_rate`,
`objective_loss` and `accumulate_gradients` (data, forward, loss, backward),
foreach gradient clipping, `torch.compile` when `train.compile` is set -- minus logging, evaluation and
checkpoints (none of which runs on an ordinary step).

The plain loop is what one writes by hand around timm: the same weights (`vitkit.to_timm`), `torch.optim.AdamW`
with its defaults, `F.cross_entropy` with the same label smoothing, `clip_grad_norm_`. It runs twice:
  - "same data": batches from the same `TrainTransform` on the same indices, so data work is identical and only
    model, optimizer and loop differ;
  - "+ DataLoader": the conventional input pipeline, a `torch.utils.data.DataLoader` (batch 128, shuffled,
    `num_workers=0`: on 2 cores a worker process would take a core from the model) over the in-memory uint8 images
    with the equivalent torchvision transforms per sample (the recipe's crop and flip, to float, normalise).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.bench.timing import alternate, gemm_candidate, paired_ratio, ratio_range


def _setup(model_name: str | None, batch_size: int | None):
    from vitkit.config import RunConfig
    from vitkit.data import TrainTransform, load_dataset, steps_per_epoch
    from vitkit.train.engine import build_run_model

    config = RunConfig()
    if model_name:
        from vitkit.config import ModelSection

        config.model = ModelSection(name=model_name)
    if batch_size:
        config.train.batch_size = batch_size
    dataset = load_dataset(config.data.dataset, "train", config.data.data_dir)
    torch.manual_seed(config.train.seed)
    model = build_run_model(config, len(dataset.classes), None)
    transform = TrainTransform(
        model.config.img_size, crop=config.data.crop, flip=config.data.flip, seed=config.train.seed,
        randaugment=config.data.randaugment, mixup=config.data.mixup, cutmix=config.data.cutmix,
        num_classes=len(dataset.classes), in_chans=model.config.in_chans,
    )
    per_epoch = steps_per_epoch(len(dataset), config.train.batch_size)
    return config, dataset, model, transform, per_epoch


def engine_step(config, dataset, model: nn.Module, transform, per_epoch: int, compile: bool) -> Callable[[], float]:
    """One step of the engine's loop (single process, no micro-batching); returns the loss."""
    from vitkit.data import global_batch_indices
    from vitkit.train.engine import accumulate_gradients, objective_loss, step_seed
    from vitkit.train.optim import build_optimizer, learning_rate, set_learning_rate

    t = config.train
    loss_function = objective_loss(t)
    optimizer = build_optimizer(model, config.optim, torch.device("cpu"))
    forward = torch.compile(model) if compile else model
    model.train()
    counter = [0]

    def step() -> float:
        s = counter[0]
        counter[0] += 1
        torch.manual_seed(step_seed(t.seed, s, 0))
        set_learning_rate(optimizer, learning_rate(s, t.steps, config.optim))
        indices = global_batch_indices(len(dataset), t.batch_size, t.seed, s)
        batch = (dataset, indices, s // per_epoch)  # the engine's own data + forward + backward
        value = accumulate_gradients(
            forward, loss_function, transform, batch, t.batch_size, torch.device("cpu"), None
        ).item()
        if config.optim.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), config.optim.grad_clip, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return value

    return step


def plain_timm_step(config, dataset, model: nn.Module, transform, per_epoch: int) -> Callable[[], float]:
    """The hand-written loop around timm's model with the same weights and the same batches."""
    import vitkit
    from vitkit.data import global_batch_indices

    t, o = config.train, config.optim
    peer = vitkit.to_timm(model).train()
    optimizer = torch.optim.AdamW(peer.parameters(), lr=o.lr, betas=o.betas, weight_decay=o.weight_decay)
    counter = [0]

    def step() -> float:
        s = counter[0]
        counter[0] += 1
        indices = global_batch_indices(len(dataset), t.batch_size, t.seed, s)
        x, y = transform(dataset.images[indices], dataset.labels[indices], indices, s // per_epoch)
        return _plain_update(peer, optimizer, x, y, t.label_smoothing, o.grad_clip)

    return step


def _plain_update(
    peer: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, smoothing: float, clip: float
) -> float:
    """The textbook step of a hand-written loop: loss, backward, optional clipping, optimizer step."""
    loss = F.cross_entropy(peer(x), y, label_smoothing=smoothing)
    optimizer.zero_grad()
    loss.backward()
    if clip:
        nn.utils.clip_grad_norm_(peer.parameters(), clip)
    optimizer.step()
    return loss.item()


class _TorchvisionImages(torch.utils.data.Dataset):
    """The in-memory uint8 images with per-sample torchvision transforms equivalent to the engine's `crop`:
    'none' nothing, 'pad_crop' RandomCrop with black padding, 'resize_crop' Resize to 8/7 then RandomCrop."""

    def __init__(self, dataset, img_size: int, crop: str, flip: bool) -> None:
        from torchvision.transforms import v2

        if crop not in ("none", "pad_crop", "resize_crop"):
            raise ValueError(f"the DataLoader baseline has no torchvision equivalent of crop {crop!r}")
        self.images, self.labels = dataset.images, dataset.labels
        pad = img_size * 8 // 7 - img_size
        crops = {
            "none": [],
            "pad_crop": [v2.RandomCrop(img_size, padding=[pad // 2, pad // 2, pad - pad // 2, pad - pad // 2])],
            "resize_crop": [v2.Resize(img_size * 8 // 7, antialias=True), v2.RandomCrop(img_size)],
        }[crop]
        self.transform = v2.Compose([
            *crops,
            *([v2.RandomHorizontalFlip()] if flip else []),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize([0.5] * dataset.images.shape[1], [0.5] * dataset.images.shape[1]),
        ])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.transform(self.images[i]), self.labels[i]


def plain_timm_dataloader_step(config, dataset, model: nn.Module) -> Callable[[], float]:
    """The hand-written loop around timm with a conventional DataLoader and per-sample torchvision transforms."""
    import vitkit

    t, o = config.train, config.optim
    peer = vitkit.to_timm(model).train()
    optimizer = torch.optim.AdamW(peer.parameters(), lr=o.lr, betas=o.betas, weight_decay=o.weight_decay)
    loader = torch.utils.data.DataLoader(
        _TorchvisionImages(dataset, model.config.img_size[0], config.data.crop, config.data.flip), batch_size=t.batch_size, shuffle=True, drop_last=True,
        num_workers=0, generator=torch.Generator().manual_seed(t.seed),
    )
    batches = [iter(loader)]

    def step() -> float:
        try:
            x, y = next(batches[0])
        except StopIteration:
            batches[0] = iter(loader)
            x, y = next(batches[0])
        return _plain_update(peer, optimizer, x, y, t.label_smoothing, o.grad_clip)

    return step


def training_vs_timm(
    model_name: str | None = None,
    batch_size: int | None = None,
    rounds: int = 5,
    steps: int = 10,
    compile: bool = False,
    log: Callable[[str], None] | None = None,
    clock: str = "wall",
) -> list[dict]:
    """Images/s of the engine step (eager, and compiled with `compile`) and of the plain timm loop, alternated
    `steps` steps at a time, with the training FLOPs (3x forward) as a fraction of a GEMM ceiling."""
    from vitkit.flops import count_flops, count_parameters

    config, dataset, model, transform, per_epoch = _setup(model_name, batch_size)
    b = config.train.batch_size
    flops = 3.0 * count_flops(model, (model.config.in_chans, *model.config.img_size), batch_size=b)
    timm_model = model
    steps_fns = {
        "timm, plain loop (same data)": plain_timm_step(config, dataset, timm_model, transform, per_epoch),
        "timm, plain loop + DataLoader": plain_timm_dataloader_step(config, dataset, timm_model),
    }
    variants = [("vitkit engine (eager)", False)] + ([("vitkit engine (torch.compile)", True)] if compile else [])
    for label, comp in variants:
        _, _, own, _, _ = _setup(model_name, batch_size)  # each candidate trains its own copy from the same init
        steps_fns[label] = engine_step(config, dataset, own, transform, per_epoch, comp)
    candidates = {k: (lambda f=f: [f() for _ in range(steps)]) for k, f in steps_fns.items()}
    gemm, gemm_flops = gemm_candidate()
    candidates["gemm"] = gemm
    on_round = None
    if log:
        on_round = lambda r, t: log(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))  # noqa: E731
    results = alternate(candidates, rounds=rounds, warmup=2 if compile else 1, on_round=on_round, clock=clock)
    results["gemm"].flops = gemm_flops
    for name in steps_fns:
        results[name].images, results[name].flops = b * steps, flops * steps
    rows = []
    for name in steps_fns:
        r = results[name]
        mfu = statistics.median(
            (r.flops / tm) / (gemm_flops / tg) for tm, tg in zip(r.samples, results["gemm"].samples, strict=True)
        )
        rows.append({"implementation": name, "images/s": r.images_per_s, "GFLOP/s": r.gflops_per_s, "MFU": mfu})
        for ref, label in (("timm, plain loop (same data)", "same data"), ("timm, plain loop + DataLoader", "DataLoader")):
            lo, hi = ratio_range(results, name, ref)
            rows[-1][f"vs timm ({label})"] = paired_ratio(results, name, ref)
            rows[-1][f"range ({label})"] = f"{lo:.2f}-{hi:.2f}"
        rows[-1]["spread"] = r.spread
    g = results["gemm"]
    rows.append({"implementation": "GEMM 2048^3 (ceiling)", "GFLOP/s": g.gflops_per_s, "spread": g.spread})
    desc = f"{config.model.name} {count_parameters(model) / 1e6:.2f}M, batch {b}"
    for row in rows:
        row["model"] = desc
    return rows
