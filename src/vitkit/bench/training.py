"""Training throughput: the vitkit engine's full step against timm's model of the same shape in a plain loop.

The engine side is the engine's own `vitkit.train.engine.TrainStep` (seeding, learning rate, batched data,
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
and each of the two again with glibc tuned as the engine tunes it ("freed memory kept", vitkit.train.allocator),
to show how much of the difference that alone is.

Every candidate runs in processes of its own (`StepProcesses`), all started alike, so none inherits another's
allocator state or threads; this process only alternates them and times them on the wall clock.
"""

from __future__ import annotations

import contextlib
import socket
import statistics
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torchvision.transforms import v2

import vitkit
from vitkit.bench.timing import alternate, gemm_candidate, paired_ratio, ratio_range
from vitkit.collectives import world
from vitkit.data import global_batch_indices, load_dataset, steps_per_epoch
from vitkit.flops import count_flops, count_parameters
from vitkit.train.allocator import keep_freed_memory
from vitkit.train.averaging import ema_model
from vitkit.train.distributed import data_parallel, environment, resolve_strategy
from vitkit.train.engine import TrainStep, build_run_model, train_transform
from vitkit.train.optim import build_optimizer
from vitkit.train.recipe import ModelSection, RunConfig, load_config


def _setup(model_name: str | None, batch_size: int | None, recipe: str | None = None):
    """The recipe (the default one unless `recipe` names a TOML file), its training set, model and transform."""
    config = load_config(recipe, RunConfig()) if recipe else RunConfig()
    if model_name:
        config.model = ModelSection(name=model_name)
    if batch_size:
        config.train.batch_size = batch_size
    dataset = load_dataset(config.data.source, "train", config.data.data_dir)
    torch.manual_seed(config.train.seed)
    model = build_run_model(config, len(dataset.classes), None)
    transform = train_transform(config, model, len(dataset.classes))
    per_epoch = steps_per_epoch(len(dataset), config.train.batch_size)
    return config, dataset, model, transform, per_epoch


def engine_step(config, dataset, model: nn.Module, transform, compile: bool) -> Callable[[], float]:
    """The engine's own `TrainStep` (DDP when a process group is initialised), called at steps 0, 1, 2, ...;
    returns the loss."""
    cpu = torch.device("cpu")
    optimizer = build_optimizer(model, config.optim, cpu)
    forward = data_parallel(model, resolve_strategy(config.train.strategy, world()[1]), cpu)
    forward = torch.compile(forward) if compile else forward
    model.train()
    ema = ema_model(model, config.train.ema_decay) if config.train.ema_decay else None
    train_step = TrainStep(config, dataset, model, forward, optimizer, ema, transform, cpu, None)
    counter = iter(range(10**9))
    return lambda: train_step(next(counter))[0].item()


def plain_timm_step(config, dataset, model: nn.Module, transform, per_epoch: int) -> Callable[[], float]:
    """The hand-written loop around timm's model with the same weights and the same batches."""
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


def engine_in_worker(setup: tuple, compile: bool) -> Callable[[], float]:
    """A worker's engine step, built as `vitkit train` builds it (for `StepProcesses`)."""
    config, dataset, model, transform, _ = _setup(*setup)
    return engine_step(config, dataset, model, transform, compile)


def timm_in_worker(setup: tuple, data: str, keep_memory: bool) -> Callable[[], float]:
    """A worker's plain timm loop, fed `data` ('same data' or 'DataLoader'); with `keep_memory`, glibc tuned as
    the engine tunes it, to show what that alone is worth to a hand-written loop."""
    config, dataset, model, transform, per_epoch = _setup(*setup)
    if keep_memory:
        keep_freed_memory()
    if data == "DataLoader":
        return plain_timm_dataloader_step(config, dataset, model)
    return plain_timm_step(config, dataset, model, transform, per_epoch)


def _worker(rank: int, processes: int, threads: int, port: int, connection, build: tuple) -> None:
    """One process of a candidate: joins a gloo group when there are several, builds its step with
    `build[0](*build[1:])`, then runs as many steps as each request asks for until asked for 0."""
    torch.set_num_threads(threads)
    if processes > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=processes)
    try:
        step = build[0](*build[1:])
        connection.send("ready")
        while (steps := connection.recv()) > 0:
            connection.send([step() for _ in range(steps)][-1])
    finally:
        if processes > 1:
            dist.destroy_process_group()


class StepProcesses:
    """One candidate in processes of its own: `processes` spawned workers of `threads` threads (data-parallel
    over gloo when more than one, as `train.processes = N` runs the engine), each building its step from `build`
    (a module-level function and its arguments). A call runs `steps` steps in every worker and returns when all
    are done. Every candidate thus starts from the same fresh process state, and this process only waits
    meanwhile, so the workers have the cores to themselves; time it on the wall clock."""

    def __init__(self, processes: int, threads: int, steps: int, build: tuple) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        context = torch.multiprocessing.get_context("spawn")
        self.steps, self.connections, self.workers = steps, [], []
        # As the launcher sets it: OpenMP sized at start-up, not only narrowed later by torch.set_num_threads
        # (measured here: ~15% slower without).
        with environment(OMP_NUM_THREADS=str(threads)):
            for rank in range(processes):
                ours, theirs = context.Pipe()
                worker = context.Process(
                    target=_worker, args=(rank, processes, threads, port, theirs, build), daemon=True
                )
                worker.start()
                theirs.close()  # so a worker that dies is an EOFError here, not a hang
                self.connections.append(ours)
                self.workers.append(worker)
        for rank, connection in enumerate(self.connections):
            try:
                connection.recv()
            except EOFError:
                self.close()
                raise RuntimeError(f"benchmark worker {rank} failed to start (its traceback is above)") from None

    def __call__(self) -> float:
        for connection in self.connections:
            connection.send(self.steps)
        losses = [connection.recv() for connection in self.connections]  # every worker's, so all are done
        return losses[0]

    def close(self) -> None:
        for connection in self.connections:
            with contextlib.suppress(OSError):
                connection.send(0)
        for worker in self.workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()


def training_vs_timm(
    model_name: str | None = None,
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
    setup = (model_name, batch_size, recipe)
    config, _, model, _, _ = _setup(*setup)
    b = config.train.batch_size
    flops = 3.0 * count_flops(model, (model.config.in_chans, *model.config.img_size), batch_size=b)
    threads = torch.get_num_threads()
    peers = {
        data + (", freed memory kept" if keep else ""): (data, keep)
        for data in ("same data", "DataLoader") for keep in (False, True)
    }
    builds = {
        f"timm, plain loop ({peer})": (1, threads, (timm_in_worker, setup, data, keep))
        for peer, (data, keep) in peers.items()
    }
    for comp in [False, True] if compile else [False]:
        suffix = ", torch.compile" if comp else ""
        builds[f"vitkit engine (1 process x {threads} threads{suffix})"] = (1, threads, (engine_in_worker, setup, comp))
        if processes > 1:
            builds[f"vitkit engine ({processes} processes x 1 thread{suffix})"] = (
                processes, 1, (engine_in_worker, setup, comp))
    gemm, gemm_flops = gemm_candidate()

    def on_round(r: int, timed: dict[str, float]) -> None:
        if log:
            log(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:.2f}s" for k, v in timed.items()))

    candidates: dict[str, StepProcesses] = {}
    try:
        for name, (n, t, build) in builds.items():
            candidates[name] = StepProcesses(n, t, steps, build)
        results = alternate({**candidates, "gemm": gemm}, rounds, warmup=2 if compile else 1, on_round=on_round)
    finally:
        for group in candidates.values():
            group.close()
    results["gemm"].flops = gemm_flops
    for name in candidates:
        results[name].images, results[name].flops = b * steps, flops * steps
    rows = []
    for name in candidates:
        r = results[name]
        mfu = statistics.median(
            (r.flops / tm) / (gemm_flops / tg) for tm, tg in zip(r.samples, results["gemm"].samples, strict=True)
        )
        rows.append({"implementation": name, "images/s": r.images_per_s, "GFLOP/s": r.gflops_per_s, "MFU": mfu})
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
