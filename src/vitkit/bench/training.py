"""Training throughput: the vitkit engine's full step against timm's model of the same shape in a plain loop.

The engine side is the engine's own step, `vitkit.training.build.build_train_step` (seeding, learning rate, batched data,
forward, backward, loss averaging, foreach clipping, fused AdamW, EMA when the recipe has it, glibc keeping freed
memory), built from the recipe as `vitkit train` builds it, minus logging, evaluation and checkpoints (none of
which runs on an ordinary step). It runs in one process at the benchmark's thread count, compiled with `compile`,
and with `processes` N as `train.processes = N` runs it: N one-thread processes, DDP over gloo.

The plain loop is what one writes by hand around timm: the same weights (`vitkit.to_timm`), `torch.optim.AdamW`
with its defaults, `F.cross_entropy` with the same label smoothing, `clip_grad_norm_`, fed two ways:
  - "same data": batches from the same `TrainTransform` on the same indices, so data work is identical and only
    model, optimizer and loop differ;
  - "DataLoader": the conventional input pipeline, a `torch.utils.data.DataLoader` (batch 128, shuffled,
    `num_workers=0`: on 2 cores a worker process would take a core from the model) over the in-memory uint8 images
    with the equivalent torchvision transforms per sample (the recipe's crop and flip, to float, normalise);
and each of the two again with glibc tuned as the engine tunes it ("freed memory kept", vitkit.allocator),
to show how much of the difference that alone is.

Every candidate runs in processes of its own (`vitkit.bench.processes.StepProcesses`), all started alike, so none inherits another's
allocator state or threads; this process only alternates them and times them on the wall clock.
"""

from __future__ import annotations

import argparse
import copy
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.transforms import v2

import vitkit
from vitkit.allocator import keep_freed_memory
from vitkit.bench.candidates import performed_flops
from vitkit.bench.processes import StepProcesses
from vitkit.bench.timing import alternate, gemm_candidate, mfu, paired_ratio, ratio_range, round_logger
from vitkit.collectives import world
from vitkit.data import ImageDataset, TrainTransform, global_batch_indices, load_dataset, steps_per_epoch
from vitkit.flops import count_flops, count_parameters
from vitkit.models.registry import Trainable
from vitkit.precision import choose_precision
from vitkit.recipe.resolve import load_config
from vitkit.recipe.run_config import ModelSection, RunConfig
from vitkit.training.build import build_run_model, build_train_step, optimizer_and_average, train_transform
from vitkit.training.distributed import resolve_strategy
from vitkit.training.objectives import objective_for

NAME = "train"
HELP = "the engine's training step against timm's model in a plain loop (each in processes of its own; wall clock)"
COLUMNS = None


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    return training_vs_timm(
        batch_size=args.batch_size,
        rounds=args.rounds,
        steps=args.steps,
        compile=args.compile,
        log=log,
        recipe=args.config,
        processes=args.processes,
    )


@dataclass
class Workload:
    """The recipe's training set and model as `vitkit train` builds them (the model initialised from train.seed)."""

    config: RunConfig
    dataset: ImageDataset
    model: Trainable

    @classmethod
    def load(
        cls, batch_size: int | None = None, recipe: str | None = None, *, model: str | None = None
    ) -> Workload:
        """The default recipe, or the TOML file `recipe`, its batch size (and registry model) optionally replaced."""
        config = load_config(recipe, RunConfig()) if recipe else RunConfig()
        if model:
            config.model = ModelSection(name=model)  # the registered variant as it is
        if batch_size:
            config.train.batch_size = batch_size
        config.follow_data()  # no model named: the data's default
        dataset = load_dataset(config.data.source, "train", config.data.data_dir)
        torch.manual_seed(config.train.seed)
        return cls(
            config, dataset, build_run_model(config, objective_for(config.train), list(dataset.classes), None)
        )

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(len(self.dataset), self.config.train.batch_size)

    def transform(self) -> TrainTransform:
        """The recipe's batched training augmentation, as the engine builds it."""
        return train_transform(self.config, self.model, len(self.dataset.classes))


def engine_step(workload: Workload, compile: bool) -> Callable[[], float]:
    """The engine's own step (DDP when a process group is initialised), called at steps 0, 1, 2, ...; returns
    the loss."""
    config = copy.deepcopy(workload.config)
    config.train.compile = compile
    strategy = resolve_strategy(config.train.strategy, world()[1])
    cpu = torch.device("cpu")
    optimizer, ema = optimizer_and_average(config, workload.model, cpu)
    fp32 = choose_precision("fp32", cpu)
    step = build_train_step(
        config, objective_for(config.train), workload.dataset, workload.model, optimizer, ema, fp32, strategy
    )
    workload.model.train()
    counter = itertools.count()
    return lambda: step(next(counter))[0].item()


def plain_timm_step(workload: Workload) -> Callable[[], float]:
    """The hand-written loop around timm's model with the same weights and the same batches."""
    config, dataset, per_epoch, transform = (
        workload.config,
        workload.dataset,
        workload.steps_per_epoch,
        workload.transform(),
    )
    train, optim = config.train, config.optim
    peer = vitkit.to_timm(workload.model).train()
    optimizer = torch.optim.AdamW(
        peer.parameters(), lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
    )
    counter = [0]

    def step() -> float:
        s = counter[0]
        counter[0] += 1
        indices = global_batch_indices(len(dataset), train.batch_size, train.seed, s)
        x, y = transform(dataset.images[indices], dataset.labels[indices], indices, s // per_epoch)
        return _plain_update(peer, optimizer, x, y, train.label_smoothing, optim.grad_clip)

    return step


def _plain_update(
    peer: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    smoothing: float,
    clip: float,
) -> float:
    """The textbook step of a hand-written loop: loss, backward, optional clipping, optimizer step."""
    loss = F.cross_entropy(peer(x), y, label_smoothing=smoothing)
    optimizer.zero_grad()
    loss.backward()
    if clip:
        nn.utils.clip_grad_norm_(peer.parameters(), clip)
    optimizer.step()
    return loss.item()


class TorchvisionImages(torch.utils.data.Dataset):
    """The in-memory uint8 images with per-sample torchvision transforms equivalent to the engine's `crop`:
    'none' nothing, 'pad_crop' RandomCrop with black padding, 'resize_crop' Resize to 8/7 then RandomCrop."""

    def __init__(self, dataset, img_size: int, crop: str, flip: bool) -> None:
        if crop not in ("none", "pad_crop", "resize_crop"):
            raise ValueError(f"the DataLoader baseline has no torchvision equivalent of crop {crop!r}")
        self.images, self.labels = dataset.images, dataset.labels
        pad = img_size * 8 // 7 - img_size
        crops = {
            "none": [],
            "pad_crop": [
                v2.RandomCrop(img_size, padding=[pad // 2, pad // 2, pad - pad // 2, pad - pad // 2])
            ],
            "resize_crop": [v2.Resize(img_size * 8 // 7, antialias=True), v2.RandomCrop(img_size)],
        }[crop]
        self.transform = v2.Compose(
            [
                *crops,
                *([v2.RandomHorizontalFlip()] if flip else []),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize([0.5] * dataset.images.shape[1], [0.5] * dataset.images.shape[1]),
            ]
        )

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.transform(self.images[i]), self.labels[i]


def plain_timm_dataloader_step(workload: Workload) -> Callable[[], float]:
    """The hand-written loop around timm with a conventional DataLoader and per-sample torchvision transforms."""
    config, dataset, model = workload.config, workload.dataset, workload.model
    train, optim = config.train, config.optim
    peer = vitkit.to_timm(model).train()
    optimizer = torch.optim.AdamW(
        peer.parameters(), lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay
    )
    loader = torch.utils.data.DataLoader(
        TorchvisionImages(dataset, model.config.input_size[1], config.data.crop, config.data.flip),
        batch_size=train.batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=0,
        generator=torch.Generator().manual_seed(train.seed),
    )
    batches = [iter(loader)]

    def step() -> float:
        try:
            x, y = next(batches[0])
        except StopIteration:
            batches[0] = iter(loader)
            x, y = next(batches[0])
        return _plain_update(peer, optimizer, x, y, train.label_smoothing, optim.grad_clip)

    return step


def engine_in_worker(setup: tuple, compile: bool) -> Callable[[], float]:
    """A worker's engine step, built as `vitkit train` builds it (for `StepProcesses`); `setup` are the
    arguments of `Workload.load`."""
    return engine_step(Workload.load(*setup), compile)


def timm_in_worker(setup: tuple, data: str, keep_memory: bool) -> Callable[[], float]:
    """A worker's plain timm loop, fed `data` ('same data' or 'DataLoader'); with `keep_memory`, glibc tuned as
    the engine tunes it, to show what that alone is worth to a hand-written loop."""
    workload = Workload.load(*setup)
    if keep_memory:
        keep_freed_memory()
    if data == "DataLoader":
        return plain_timm_dataloader_step(workload)
    return plain_timm_step(workload)


def training_vs_timm(
    batch_size: int | None = None,
    rounds: int = 5,
    steps: int = 10,
    compile: bool = False,
    log: Callable[[str], None] | None = None,
    recipe: str | None = None,
    processes: int = 0,
) -> list[dict]:
    """Images/s of the engine step (in one process of this process's thread count, compiled too with `compile`,
    and in `processes` one-thread processes when > 1) and of the plain timm loop, every candidate in processes
    of its own, alternated `steps` steps at a time on the wall clock, with the training FLOPs (3x forward) as a
    fraction of a GEMM ceiling measured here. `recipe` (a TOML file) replaces the default recipe."""
    setup = (batch_size, recipe)
    workload = Workload.load(*setup)
    config, model = workload.config, workload.model
    b = config.train.batch_size
    size = model.config.input_size
    flops = 3.0 * count_flops(model, size, batch_size=b)  # fwd + bwd
    peer_flops = 3.0 * count_flops(model, size, batch_size=b, every_token=True)  # timm: every token
    threads = torch.get_num_threads()
    peers = {
        data + (", freed memory kept" if keep else ""): (data, keep)
        for data in ("same data", "DataLoader")
        for keep in (False, True)
    }
    builds: dict[str, tuple[int, int, tuple[Any, ...]]] = {
        f"timm, plain loop ({peer})": (1, threads, (timm_in_worker, setup, data, keep))
        for peer, (data, keep) in peers.items()
    }
    for comp in [False, True] if compile else [False]:
        suffix = ", torch.compile" if comp else ""
        builds[f"vitkit engine (1 process x {threads} threads{suffix})"] = (
            1,
            threads,
            (engine_in_worker, setup, comp),
        )
        if processes > 1:
            builds[f"vitkit engine ({processes} processes x 1 thread{suffix})"] = (
                processes,
                1,
                (engine_in_worker, setup, comp),
            )
    gemm, gemm_flops = gemm_candidate()

    candidates: dict[str, StepProcesses] = {}
    try:
        for name, (n, t, build) in builds.items():
            candidates[name] = StepProcesses(n, t, steps, build)
        results = alternate(
            {**candidates, "gemm": gemm},
            rounds,
            warmup=2 if compile else 1,
            on_round=round_logger(log, rounds, digits=2),
        )
    finally:
        for group in candidates.values():
            group.close()
    results["gemm"].flops = gemm_flops
    for name in candidates:
        results[name].images = b * steps
        results[name].flops = performed_flops(name, flops, peer_flops) * steps
    rows = []
    for name in candidates:
        r = results[name]
        rows.append(
            {
                "implementation": name,
                "images/s": r.images_per_s,
                "GFLOP/s": r.gflops_per_s,
                "MFU": mfu(results, name),
            }
        )
        for peer in peers:
            lo, hi = ratio_range(results, name, f"timm, plain loop ({peer})")
            rows[-1][f"vs timm ({peer})"] = paired_ratio(results, name, f"timm, plain loop ({peer})")
            rows[-1][f"range ({peer})"] = f"{lo:.2f}-{hi:.2f}"
        rows[-1]["spread"] = r.spread
    g = results["gemm"]
    rows.append({"implementation": "GEMM 2048^3 (ceiling)", "GFLOP/s": g.gflops_per_s, "spread": g.spread})
    desc = f"{config.model.name} {count_parameters(model) / 1e6:.2f}M, batch {b}"
    for row in rows:
        row["model"] = desc
    return rows
