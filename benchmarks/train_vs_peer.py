#!/usr/bin/env python3
"""The engine's training step as `vitkit train` runs it with default flags against a plain timm loop under bf16
autocast (benchmarks/peers/timm_train.py), ViT-S/16 at 224, batch 32, on the same batches (the recipe's data and
augmentation at the same indices): images/s of each, alternated round by round in one process, and the median of
the per-round ratios (vitkit over timm) with their range.

    python benchmarks/train_vs_peer.py --runs 20,200 --rounds 5 --steps 3

`--runs` are the lengths of the runs whose precision `auto` picks (`train.precision = "auto"`, the default): each
is timed in that precision for `--steps` steps a round (a run's steady state; its start-up and final evaluation
are left out). The peer has the same weights (`vitkit.to_timm`), AdamW, label smoothing and clipping.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import torch

import vitkit
from vitkit.bench.table import environment
from vitkit.bench.timing import alternate, paired_ratio, ratio_range
from vitkit.bench.training import Workload
from vitkit.data import global_batch_indices
from vitkit.training.build import build_train_step, optimizer_and_average, run_precision
from vitkit.training.objectives import objective_for

sys.path.insert(0, str(Path(__file__).parent / "peers"))
from timm_train import plain_step  # noqa: E402  (the peer script, beside this one)


def engine_steps(workload: Workload, steps: int, run_steps: int) -> tuple[Callable[[], None], str]:
    """`steps` steps of the engine's own step in the precision auto picks for a run of `run_steps` steps."""
    config = copy.deepcopy(workload.config)
    config.train.steps = run_steps
    model = copy.deepcopy(workload.model)
    objective, cpu = objective_for(config.train), torch.device("cpu")
    chosen = run_precision(config, objective, model.train(), workload.dataset, cpu, None, quiet=True)
    optimizer, ema = optimizer_and_average(config, model, cpu)
    step = build_train_step(config, objective, workload.dataset, model, optimizer, ema, chosen, "none")
    counter = itertools.count()

    def run() -> None:
        for _ in range(steps):
            step(next(counter))

    return run, str(chosen)


def peer_steps(workload: Workload, steps: int) -> Callable[[], None]:
    """`steps` steps of the plain timm loop on the batches the engine reads at the same step numbers."""
    config, dataset, transform = workload.config, workload.dataset, workload.transform()
    train, optim = config.train, config.optim
    peer = vitkit.to_timm(copy.deepcopy(workload.model))
    step = plain_step(peer, optim.lr, optim.weight_decay, train.label_smoothing, optim.grad_clip)
    counter = itertools.count()

    def run() -> None:
        for _ in range(steps):
            s = next(counter)
            indices = global_batch_indices(len(dataset), train.batch_size, train.seed, s)
            x, y = transform(
                dataset.images[indices], dataset.labels[indices], indices, s // workload.steps_per_epoch
            )
            step(x, y)

    return run


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="ViT-S/16")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--runs", default="20,200", help="run lengths whose auto precision to time")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per candidate per round")
    args = parser.parse_args()
    workload = Workload.load(args.batch_size, model=args.model)
    print(f"<!-- {environment()} -->")
    print(
        "| run | vitkit precision (auto) | vitkit images/s | timm bf16 images/s | vitkit / timm (range) | rounds |"
    )
    print("|---|---|---:|---:|---|---:|")
    for run_steps in (int(n) for n in args.runs.split(",")):
        engine, chosen = engine_steps(workload, args.steps, run_steps)
        candidates = {"vitkit": engine, "timm": peer_steps(workload, args.steps)}
        results = alternate(candidates, rounds=args.rounds, warmup=1)
        for result in results.values():
            result.images = args.steps * args.batch_size
        lo, hi = ratio_range(results, "vitkit", "timm")
        print(f"| {args.model} at 224, batch {args.batch_size}, {run_steps} steps | {chosen} | "
              f"{results['vitkit'].images_per_s:.2f} | {results['timm'].images_per_s:.2f} | "
              f"{paired_ratio(results, 'vitkit', 'timm'):.2f} ({lo:.2f}-{hi:.2f}) | {args.rounds} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
