"""Command-line options that several benchmarks share (each benchmark module declares its own parser)."""

from __future__ import annotations

import argparse

import torch

from vitkit.bench.timing import CLOCKS
from vitkit.precision import Precision, inference_precision


def comma_ints(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]."""
    return [int(v) for v in text.split(",") if v]


def comma_names(text: str) -> list[str]:
    """'ViT-S/16, ViT-B/16' -> ['ViT-S/16', 'ViT-B/16']."""
    return [v.strip() for v in text.split(",") if v.strip()]


def add_clock(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="wall time, or this process's CPU time (less noisy on a shared machine; use --threads 1)",
    )


def add_bench_precision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16", "both"),
        default="fp32",
        help="fp32, bf16 autocast (with vitkit fp32 and the bf16 GEMM ceiling in the same rounds), or both; "
        "a last row says what --precision auto picks here and why",
    )


def add_bench_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]")
    add_gemm_size(parser)


def add_gemm_size(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gemm-size",
        type=int,
        default=2048,
        help="n of the n^3 GEMM ceiling (default 2048; smaller where bf16 is emulated and slow)",
    )


def bench_dtypes(precision: str) -> dict[str, torch.dtype | None]:
    """The autocast dtypes a benchmark's --precision times: {'fp32': None, 'bf16': torch.bfloat16} or one."""
    dtypes = {"fp32": None, "bf16": torch.bfloat16}
    return dtypes if precision == "both" else {precision: dtypes[precision]}


def auto_row(model: torch.nn.Module, batch_size: int) -> dict[str, str]:
    """What `--precision auto` picks for inference of `model` at `batch_size` on its device, and why."""
    chosen = inference_precision("auto", model, batch_size)
    return {"implementation": auto_label(chosen), "precision": chosen.name}


def auto_label(chosen: Precision) -> str:
    """'auto picks fp32 on cpu: this CPU has no native bf16 ...': a table cell that says what and why."""
    return f"auto picks {chosen.name} on {chosen.record()['device']}: {chosen.reason.removeprefix('auto: ')}"
