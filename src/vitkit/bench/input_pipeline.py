"""`vitkit bench data`: is the input pipeline what limits training at 224?

Candidates measured in the same rounds (order rotated each round, as `timing.alternate` does):
  - vitkit's pipeline over an ImageFolder (`data.source = folder:ROOT`): per-sample decode, Inception crop + flip
    at `img_size`, in `workers` DataLoader worker processes (0: in this process), batches as the engine gets them;
  - torchvision's ImageFolder + DataLoader as timm uses them: Pillow decode, RandomResizedCrop + RandomHorizontalFlip
    + ToTensor + Normalize per sample, shuffled, the same batch size, workers and images (ROOT/train);
  - the training step of each model at `img_size` (forward, cross-entropy, backward, AdamW) on a fixed batch: what
    training consumes, to set the pipeline's images/s against.

A loader is timed in steady state: each round starts a fresh iterator (so nothing was prefetched while another
candidate ran), lets the first max(workers, 1) batches pass (worker start-up; w workers deliver their first batches
together) and times the next `batches`. Ratios are paired per round (`timing.paired_ratio`): vitkit against
torchvision at the same workers, and the data share of a step, per-image pipeline time over pipeline plus training
time, when the pipeline runs in the training process (0 workers).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import torch
from torch import nn
from torchvision import datasets, transforms

from vitkit.bench.candidates import bench_model
from vitkit.bench.timing import Result, paired_ratio, ratio_range
from vitkit.data import FolderSource, ReadOptions, TrainBatches, TrainTransform

NAME = "data"
HELP = "images/s of the input pipeline at 224 (0/1/2 workers) vs torchvision's, and vs training ViT-S/B"
COLUMNS = ["candidate", "images/s", "best images/s", "spread", "against", "ratio", "ratio range", "per round"]
# A loader factory: () -> a fresh iterable of batches.
LoaderFactory = Callable[[], Iterable]


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    return data_vs_training(
        Path(args.root),
        args.workers,
        args.models,
        args.img_size,
        args.batch_size,
        args.train_batch_size or args.batch_size,
        args.rounds,
        args.batches,
        log,
    )


def vitkit_loader(root: Path, img_size: int, batch_size: int, workers: int, seed: int = 0) -> LoaderFactory:
    """The engine's own batches (vitkit.data.TrainBatches) of a folder source with the paper's pre-training crop."""
    source = FolderSource(root, "train", ReadOptions(workers=workers))
    transform = TrainTransform(img_size, crop="inception", flip=True, seed=seed)
    steps = 10**6  # the stream's length; a round reads a few dozen

    def loader() -> Iterable:
        batches = TrainBatches(source, transform, batch_size, seed, steps, torch.device("cpu"))
        return (batches(step) for step in range(steps))

    return loader


def torchvision_loader(
    root: Path, img_size: int, batch_size: int, workers: int, seed: int = 0
) -> LoaderFactory:
    """torchvision's ImageFolder and DataLoader with the training transform timm builds for ImageNet
    (`timm.data.create_transform(is_training=True)` less colour jitter): Pillow decode to RGB, RandomResizedCrop
    (scale 0.08-1, ratio 3/4-4/3, bilinear), flip, ToTensor, Normalize to [-1, 1]."""
    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(img_size),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize([0.5] * 3, [0.5] * 3),
        ]
    )
    folder = datasets.ImageFolder(str(root / "train"), transform=transform)

    def loader() -> Iterable:
        return torch.utils.data.DataLoader(
            folder,
            batch_size=batch_size,
            shuffle=True,
            drop_last=True,
            num_workers=workers,
            generator=torch.Generator().manual_seed(seed),
        )

    return loader


def time_batches(factory: LoaderFactory, skip: int, batches: int) -> float:
    """Seconds for `batches` batches of a fresh iterator of `factory`, after `skip` batches that are not timed."""
    iterator = iter(factory())
    for _ in range(skip):
        next(iterator)
    start = time.perf_counter()
    for _ in itertools.islice(iterator, batches):
        pass
    seconds = time.perf_counter() - start
    del iterator  # stops its workers before the next candidate runs
    return seconds


def train_step(name: str, img_size: int, batch_size: int, num_classes: int = 1000) -> Callable[[], float]:
    """One timed training step of `name` at `img_size` on a fixed batch: forward, cross-entropy, backward, AdamW."""
    model: nn.Module = bench_model(name, img_size, num_classes).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(batch_size, 3, img_size, img_size)
    y = torch.randint(0, num_classes, (batch_size,))

    def step() -> float:
        start = time.perf_counter()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    return step


def data_share(results: dict[str, Result], pipeline: str, training: str) -> list[float]:
    """Per round: the pipeline's time per image as a share of (pipeline + training) time per image, i.e. of a
    step whose data is prepared in the training process."""
    p, t = results[pipeline], results[training]
    shares = []
    for tp, tt in zip(p.samples, t.samples, strict=True):
        data, train = tp / p.images, tt / t.images
        shares.append(data / (data + train))
    return shares


def data_vs_training(
    root: Path,
    workers: Sequence[int],
    models: Sequence[str],
    img_size: int = 224,
    batch_size: int = 32,
    train_batch_size: int = 32,
    rounds: int = 3,
    batches: int = 20,
    log: Callable[[str], None] | None = None,
) -> list[dict]:
    """Rows: images/s of every loader and training step, vitkit against torchvision at each worker count, and the
    data share of a step for each model, every ratio paired per round."""
    timed: dict[str, Callable[[], float]] = {}
    results: dict[str, Result] = {}
    for w in workers:
        for name, make in (("vitkit", vitkit_loader), ("torchvision", torchvision_loader)):
            key = f"{name} pipeline, {w} workers"
            factory = make(root, img_size, batch_size, w)
            timed[key] = functools.partial(time_batches, factory, max(w, 1), batches)
            results[key] = Result(key, images=batches * batch_size)
    for model_name in models:
        key = f"train {model_name} at {img_size} (batch {train_batch_size})"
        step = train_step(model_name, img_size, train_batch_size)
        step()  # untimed: first-touch allocation of activations and optimizer state
        timed[key] = step
        results[key] = Result(key, images=train_batch_size)
    names = list(timed)
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].samples.append(timed[name]())
        if log:
            log(
                f"round {r + 1}/{rounds}: "
                + ", ".join(f"{n} {results[n].images / results[n].samples[-1]:.1f} img/s" for n in names)
            )
    rows = [
        {
            "candidate": name,
            "images/s": r.images_per_s,
            "best images/s": r.images / r.best,
            "spread": r.spread,
        }
        for name, r in results.items()
    ]
    for w in workers:
        rows.append(compare(results, f"vitkit pipeline, {w} workers", f"torchvision pipeline, {w} workers"))
    if 0 in workers:
        for model_name in models:
            training = f"train {model_name} at {img_size} (batch {train_batch_size})"
            shares = data_share(results, "vitkit pipeline, 0 workers", training)
            rows.append(
                {
                    "candidate": "data share of a step (vitkit pipeline, 0 workers)",
                    "against": training,
                    "ratio": statistics.median(shares),
                    "ratio range": f"{min(shares):.3f}-{max(shares):.3f}",
                    "per round": " ".join(f"{s:.3f}" for s in shares),
                }
            )
    return rows


def compare(results: dict[str, Result], name: str, reference: str) -> dict:
    """`name` against `reference`: the median over rounds of the per-round speed ratio (> 1: `name` is faster),
    its range and every round's ratio."""
    a, b = results[name], results[reference]
    per_round = [(tb / b.images) / (ta / a.images) for ta, tb in zip(a.samples, b.samples, strict=True)]
    low, high = ratio_range(results, name, reference)
    return {
        "candidate": name,
        "against": reference,
        "ratio": paired_ratio(results, name, reference),
        "ratio range": f"{low:.2f}-{high:.2f}",
        "per round": " ".join(f"{v:.2f}" for v in per_round),
    }
