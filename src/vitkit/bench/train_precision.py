"""`vitkit bench precision`: the engine's training step in bf16 autocast against float32, same model, data and
steps, alternated in one process with the fp32 and bf16 GEMM ceilings; and what `train.precision = "auto"`
picks for this model and batch, with its reason. With `--table FILE` or `--check` it measures a grid of models,
batches and modes instead (vitkit.bench.precision_grid): the table `auto` decides by, or a check of its choices.

Each precision trains its own copy of the recipe's model (the same initial weights) through the engine's own
step (`build_train_step`: optimizer, EMA, augmentation as `vitkit train` builds them), `--steps` steps per sample.
"""

from __future__ import annotations

import argparse
import copy
import itertools
from collections.abc import Callable

import torch

from vitkit.bench import precision_grid
from vitkit.bench.candidates import synchronize
from vitkit.bench.options import auto_label
from vitkit.bench.timing import alternate, gemm_candidate, mfu, paired_ratio, ratio_range, round_logger
from vitkit.bench.training import Workload
from vitkit.flops import count_flops, count_parameters
from vitkit.precision import Precision
from vitkit.training.build import build_train_step, optimizer_and_average, run_precision
from vitkit.training.objectives import objective_for

NAME = "precision"
HELP = "the engine's training step in bf16 against fp32 (same model and data, alternated) and what auto picks"
COLUMNS = ["model", "batch", "precision", "images/s", "GFLOP/s", "MFU", "vs fp32", "ratio range", "spread"]
GRID_COLUMNS = ["model", "mode", "batch", "bf16 vs fp32", "ratio range", "fp32 ms"]
CHECK_COLUMNS = [*GRID_COLUMNS, "faster", "auto", "auto vs faster", "ok", "auto's reason"]
DTYPES = {"fp32": None, "bf16": torch.bfloat16}  # what each precision autocasts to


def columns(args: argparse.Namespace) -> list[str]:
    """The table's columns: the training step's, or the grid's (--table), with auto's choice (--check)."""
    if args.check:
        return CHECK_COLUMNS
    return GRID_COLUMNS if args.table else COLUMNS


def exit_status(rows: list[dict]) -> int:
    return precision_grid.exit_status(rows)


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    if args.table or args.check:
        return precision_grid.run(args, log)
    return training_precision(
        args.model,
        args.batch_size,
        args.config,
        args.rounds,
        args.steps,
        args.device,
        log,
        args.gemm_size,
        args.clock,
    )


def training_precision(
    model_name: str | None = None,
    batch_size: int | None = None,
    recipe: str | None = None,
    rounds: int = 5,
    steps: int = 3,
    device: str = "cpu",
    log: Callable[[str], None] | None = None,
    gemm_size: int = 2048,
    clock: str = "wall",
) -> list[dict]:
    """Images/s of the engine's step in fp32 and in bf16, their paired ratio, MFU against the GEMM ceiling of the
    same precision, and a last row with what `auto` picks (its own short measurement where it measures)."""
    workload = Workload.load(batch_size, recipe, model=model_name)
    config, target = workload.config, torch.device(device)
    config.train.device = device
    objective = objective_for(config.train)
    dataset = workload.dataset.to_device(target)
    model = workload.model.to(target)
    b = config.train.batch_size
    flops = 3.0 * count_flops(model, model.config.input_size, batch_size=b)  # fwd + bwd
    candidates: dict[str, Callable[[], object]] = {}
    for name, dtype in DTYPES.items():
        copied = copy.deepcopy(model).train()
        optimizer, ema = optimizer_and_average(config, copied, target)
        fixed = Precision(name, "measured", target)
        step = build_train_step(config, objective, dataset, copied, optimizer, ema, fixed, "none")
        candidates[name] = _steps(step, steps, target)
        candidates[f"gemm {name}"], gemm_flops = gemm_candidate(
            gemm_size, dtype=dtype or torch.float32, device=target
        )
    results = alternate(
        candidates, rounds=rounds, warmup=1, on_round=round_logger(log, rounds, 2), clock=clock
    )
    rows = []
    for name in DTYPES:
        r, g = results[name], results[f"gemm {name}"]
        r.images, r.flops, g.flops = b * steps, flops * steps, gemm_flops
        lo, hi = ratio_range(results, name, "fp32")
        rows.append(
            {
                "precision": name,
                "images/s": r.images_per_s,
                "GFLOP/s": r.gflops_per_s,
                "MFU": mfu(results, name, f"gemm {name}"),
                "vs fp32": paired_ratio(results, name, "fp32"),
                "ratio range": f"{lo:.2f}-{hi:.2f}",
                "spread": r.spread,
            }
        )
    for name in DTYPES:
        g = results[f"gemm {name}"]
        rows.append(
            {
                "precision": f"GEMM {gemm_size}^3 {name} (ceiling)",
                "GFLOP/s": g.gflops_per_s,
                "spread": g.spread,
            }
        )
    config.train.precision = "auto"
    chosen: Precision = run_precision(config, objective, model.train(), dataset, target, None)
    rows.append({"precision": auto_label(chosen)})
    desc = f"{config.model.name} {count_parameters(model) / 1e6:.2f}M at {model.config.input_size[1]}"
    for row in rows:
        row.update(model=desc, batch=b)
    return rows


def _steps(step: Callable, steps: int, device: torch.device) -> Callable[[], None]:
    """`steps` consecutive engine steps (continuing where the last call stopped), waiting for the GPU at the end."""
    counter = itertools.count()

    def run() -> None:
        for _ in range(steps):
            step(next(counter))
        synchronize(device)

    return run
