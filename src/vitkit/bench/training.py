"""Training throughput: the vitkit engine's full step against timm's model of the same shape in a plain loop.

The engine side is the engine's own `vitkit.train.engine.TrainStep` (seeding, learning rate, batched data,
forward, backward, loss averaging, foreach clipping, fused AdamW, EMA when the recipe has it), built from the
recipe as `vitkit train` builds it, minus logging, evaluation and checkpoints (none of which runs on an ordinary
step). It runs in this process at the benchmark's thread count, compiled with `compile`, and with `processes` N
as `train.processes = N` runs it: N one-thread processes, DDP over gloo (`EngineProcesses`).

The plain loop is what one writes by hand around timm: the same weights (`vitkit.to_timm`), `torch.optim.AdamW`
with its defaults, `F.cross_entropy` with the same label smoothing, `clip_grad_norm_`. It runs twice:
  - "same data": batches from the same `TrainTransform` on the same indices, so data work is identical and only
    model, optimizer and loop differ;
  - "+ DataLoader": the conventional input pipeline, a `torch.utils.data.DataLoader` (batch 128, shuffled,
    `num_workers=0`: on 2 cores a worker process would take a core from the model) over the in-memory uint8 images
    with the equivalent torchvision transforms per sample (the recipe's crop and flip, to float, normalise).
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.bench.timing import alternate, gemm_candidate, paired_ratio, ratio_range


def _setup(model_name: str | None, batch_size: int | None, recipe: str | None = None):
    """The recipe (the default one unless `recipe` names a TOML file), its training set, model and transform."""
    from vitkit.config import ModelSection, RunConfig, load_config
    from vitkit.data import load_dataset, steps_per_epoch
    from vitkit.train.engine import build_run_model, train_transform

    config = load_config(recipe, RunConfig()) if recipe else RunConfig()
    if model_name:
        config.model = ModelSection(name=model_name)
    if batch_size:
        config.train.batch_size = batch_size
    dataset = load_dataset(config.data.dataset, "train", config.data.data_dir)
    torch.manual_seed(config.train.seed)
    model = build_run_model(config, len(dataset.classes), None)
    transform = train_transform(config, model, len(dataset.classes))
    per_epoch = steps_per_epoch(len(dataset), config.train.batch_size)
    return config, dataset, model, transform, per_epoch


def engine_step(config, dataset, model: nn.Module, transform, compile: bool) -> Callable[[], float]:
    """The engine's own `TrainStep` (DDP when a process group is initialised), called at steps 0, 1, 2, ...;
    returns the loss."""
    from vitkit.train.averaging import ema_model
    from vitkit.train.distributed import data_parallel, resolve_strategy, world
    from vitkit.train.engine import TrainStep
    from vitkit.train.optim import build_optimizer

    cpu = torch.device("cpu")
    optimizer = build_optimizer(model, config.optim, cpu)
    forward = data_parallel(model, resolve_strategy(config.train.strategy, world()[1]), cpu)
    forward = torch.compile(forward) if compile else forward
    model.train()
    ema = ema_model(model, config.train.ema_decay) if config.train.ema_decay else None
    train_step = TrainStep(config, dataset, model, forward, optimizer, ema, transform, cpu, None)
    counter = iter(range(10**9))
    return lambda: train_step(next(counter))[0]


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


def _engine_rank(rank: int, processes: int, threads: int, port: int, connection, setup: tuple, compile: bool) -> None:
    """One worker of the multi-process engine: joins a gloo group of `processes`, builds the engine step (DDP),
    then runs as many steps as each request asks for until asked for 0."""
    import torch.distributed as dist

    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=processes)
    try:
        config, dataset, model, transform, _ = _setup(*setup)
        step = engine_step(config, dataset, model, transform, compile)
        connection.send("ready")
        while (steps := connection.recv()) > 0:
            connection.send([step() for _ in range(steps)][-1])
    finally:
        dist.destroy_process_group()


class EngineProcesses:
    """The engine as `train.processes = N` runs it (N data-parallel processes of `threads` threads, DDP over
    gloo), driven from this process: a call runs `steps` steps in every worker and returns when all are done.
    This process only waits meanwhile, so the workers have the cores to themselves; time it on the wall clock."""

    def __init__(self, processes: int, threads: int, steps: int, setup: tuple, compile: bool) -> None:
        import socket

        from vitkit.train.distributed import environment

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
                    target=_engine_rank, args=(rank, processes, threads, port, theirs, setup, compile), daemon=True
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
                raise RuntimeError(f"engine worker {rank} failed to start (its traceback is above)") from None

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
    clock: str = "wall",
    recipe: str | None = None,
    processes: int = 0,
) -> list[dict]:
    """Images/s of the engine step (eager, compiled with `compile`, and in `processes` one-thread processes when
    > 1) and of the plain timm loop, alternated `steps` steps at a time, with the training FLOPs (3x forward) as
    a fraction of a GEMM ceiling. `recipe` (a TOML file) replaces the default recipe."""
    from vitkit.flops import count_flops, count_parameters

    if processes > 1 and clock != "wall":
        raise ValueError("the multi-process engine runs in other processes: time it with clock='wall'")
    setup = (model_name, batch_size, recipe)
    config, dataset, model, transform, per_epoch = _setup(*setup)
    b = config.train.batch_size
    flops = 3.0 * count_flops(model, (model.config.in_chans, *model.config.img_size), batch_size=b)
    steps_fns = {
        "timm, plain loop (same data)": plain_timm_step(config, dataset, model, transform, per_epoch),
        "timm, plain loop + DataLoader": plain_timm_dataloader_step(config, dataset, model),  # same init
    }
    variants = [("vitkit engine (eager)", False)] + ([("vitkit engine (torch.compile)", True)] if compile else [])
    for label, comp in variants:
        _, _, own, _, _ = _setup(*setup)  # each candidate trains its own copy from the same init
        steps_fns[label] = engine_step(config, dataset, own, transform, comp)
    candidates = {k: (lambda f=f: [f() for _ in range(steps)]) for k, f in steps_fns.items()}
    compiled = [False, True] if compile else [False]
    groups = [EngineProcesses(processes, 1, steps, setup, compile=c) for c in compiled] if processes > 1 else []
    for group, comp in zip(groups, compiled, strict=False):
        candidates[f"vitkit engine ({processes} processes x 1 thread{', torch.compile' if comp else ''})"] = group
    gemm, gemm_flops = gemm_candidate()

    def on_round(r: int, timed: dict[str, float]) -> None:
        if log:
            log(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:.2f}s" for k, v in timed.items()))

    try:
        results = alternate({**candidates, "gemm": gemm}, rounds, warmup=2 if compile else 1, on_round=on_round,
                            clock=clock)
    finally:
        for group in groups:
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
