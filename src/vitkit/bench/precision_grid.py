"""`vitkit bench precision --table FILE | --check`: bf16 against fp32 over a grid of models, batches and modes,
measured on this machine, written as the table `auto` decides by (vitkit.precision_table) or checked against
what `auto` picks without measuring.

Each cell times the work of one mode in both precisions, alternated, on a copy of the model with `--depth`
encoder blocks (default 1: the blocks are alike, so one block with the patch embedding and the head has the
model's bf16/fp32 ratio at a fraction of the time; 0 keeps them all): inference is vitkit's forward pass with the
weights held in bf16 (`Precision.inference`), training a forward, backward and AdamW step under autocast.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
from torch import nn

from vitkit.bench.table import environment
from vitkit.bench.timing import alternate, paired_ratio, ratio_range, round_logger, time_call
from vitkit.bench.training import Workload
from vitkit.device import cpu_flags, cpu_model
from vitkit.models import create_model
from vitkit.models.registry import Model
from vitkit.precision import Precision, table_precision
from vitkit.precision_table import WorkShape, cpu_kind, model_shape, table_rows

RECIPE = "recipe"  # in --models: the recipe's model at its image size and batch
SAMPLE_SECONDS = 0.3  # each timed sample runs the work this long at least
TOLERANCE = 1.10  # --check: auto's choice may take this many times the faster precision's time


@dataclass(frozen=True)
class Cell:
    """One model at one batch in one mode; `model` builds it (with `depth` blocks) for timing."""

    label: str
    mode: str
    batch: int
    model: Callable[[int], Model]


def cells(args: argparse.Namespace) -> Iterator[Cell]:
    """The grid of --models x --batches x --modes; the recipe's model at its own batch."""
    for name in args.models:
        if name == RECIPE:
            workload = Workload.load(None, args.config)
            label = f"{workload.config.model.name} at {workload.model.config.input_size[1]} (recipe)"
            for mode in args.modes:
                yield Cell(label, mode, workload.config.train.batch_size, _recipe_model(workload))
            continue
        for batch in args.batches:
            for mode in args.modes:
                yield Cell(f"{name} at {args.img_size}", mode, batch, _registry_model(name, args.img_size))


def _registry_model(name: str, img_size: int) -> Callable[[int], Model]:
    def build(depth: int) -> Model:
        return (
            create_model(name, img_size=img_size, depth=depth)
            if depth
            else create_model(name, img_size=img_size)
        )

    return build


def _recipe_model(workload: Workload) -> Callable[[int], Model]:
    def build(depth: int) -> Model:
        return cast(Model, workload.model)  # a classifier (the default objective), small: timed whole

    return build


def calls_per_sample(call: Callable[[], object], clock: str) -> int:
    """How many calls a timed sample takes the median of: enough for SAMPLE_SECONDS (one call of a few
    milliseconds is mostly the scheduler's noise on a shared machine), after one call to warm up."""
    call()
    return max(1, math.ceil(SAMPLE_SECONDS / max(time_call(call, 1, clock), 1e-6)))


def measure_cell(
    cell: Cell, depth: int, rounds: int, log: Callable[[str], None] | None, clock: str = "wall"
) -> dict:
    """bf16's speed over fp32's for `cell` (median of per-round ratios, and their range)."""
    torch.manual_seed(0)
    full = cell.model(0)
    timed = cell.model(depth).eval() if depth else full
    x = torch.randn(cell.batch, *timed.config.input_size)
    with contextlib.ExitStack() as stack:
        candidates = {
            name: _step(copy.deepcopy(timed), cell.mode, Precision(name, "measured", x.device), x, stack)
            for name in ("fp32", "bf16")
        }
        iters = calls_per_sample(candidates["fp32"], clock)
        results = alternate(
            candidates,
            rounds=rounds,
            warmup=1,
            iters=iters,
            on_round=round_logger(log, rounds, 2),
            clock=clock,
        )
    lo, hi = ratio_range(results, "bf16", "fp32")
    work = model_shape(full, cell.mode, cell.batch)
    return {
        "model": cell.label,
        "mode": cell.mode,
        "batch": cell.batch,
        "width": work.width,
        "tokens": work.tokens,
        "bf16 vs fp32": paired_ratio(results, "bf16", "fp32"),
        "ratio range": f"{lo:.2f}-{hi:.2f}",
        "fp32 ms": results["fp32"].median * 1e3,
    }


def _step(
    model: nn.Module, mode: str, precision: Precision, x: torch.Tensor, stack: contextlib.ExitStack
) -> Callable[[], object]:
    """One call of the work in `precision`: an inference forward pass, or a training step."""
    if mode == "inference":
        forward = stack.enter_context(precision.weights_held(model))  # autocast only around each call

        def infer() -> None:
            with torch.inference_mode(), precision.autocast():
                forward(x)

        return infer
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def train() -> None:
        optimizer.zero_grad(set_to_none=True)
        with precision.autocast():
            logits = model(x)
        logits.float().logsumexp(-1).mean().backward()
        optimizer.step()

    return train


def check_row(measured: dict, device: torch.device) -> dict:
    """`measured` with what auto picks unmeasured, the faster precision measured and auto's time over it."""
    work = WorkShape(measured["mode"], measured["width"], measured["tokens"], measured["batch"])
    chosen, _ = table_precision(work, device)
    ratio = measured["bf16 vs fp32"]
    faster = "bf16" if ratio >= 1 else "fp32"
    slowdown = 1.0 if chosen.name == faster else max(ratio, 1 / ratio)
    return {
        **measured,
        "faster": faster,
        "auto": chosen.name,
        "auto vs faster": f"{slowdown:.2f}x the time",
        "ok": "yes" if slowdown <= TOLERANCE else "NO",
        "auto's reason": chosen.reason.removeprefix("auto: "),
    }


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    device = torch.device("cpu")
    rows = [measure_cell(cell, args.depth, args.rounds, log, args.clock) for cell in cells(args)]
    if args.table:
        write_table(Path(args.table), rows, args.depth)
    return [check_row(row, device) for row in rows] if args.check else rows


def write_table(path: Path, rows: list[dict], depth: int) -> None:
    """Write `rows` into the table at `path` as this CPU kind's, replacing the rows of the same kind and shape
    (kept: every other row)."""
    kind = cpu_kind(cpu_flags())
    kept = json.loads(path.read_text())["rows"] if path.exists() else []
    measured = {(kind, row["mode"], row["width"], row["tokens"], row["batch"]) for row in rows}
    others = [r for r in kept if (r["kind"], r["mode"], r["width"], r["tokens"], r["batch"]) not in measured]
    what = f"{depth} encoder block(s) of each model" if depth else "each whole model"
    source = f"vitkit bench precision --table on {cpu_model()}, {what}; {environment()}"
    mine = [
        {
            "kind": kind,
            "mode": row["mode"],
            "width": row["width"],
            "tokens": row["tokens"],
            "batch": row["batch"],
            "bf16_speedup": round(row["bf16 vs fp32"], 3),
            "model": row["model"],
            "source": source,
        }
        for row in rows
    ]
    document = table_rows(
        others + mine, json.loads(path.read_text()).get("source", "") if path.exists() else ""
    )
    path.write_text(json.dumps(document, indent=1) + "\n")


def exit_status(rows: list[dict]) -> int:
    """1 where a checked row says auto's choice is more than TOLERANCE times the faster precision's time."""
    return 1 if any(row.get("ok") == "NO" for row in rows) else 0
