"""Command-line options that several benchmarks share (each benchmark module declares its own parser)."""

from __future__ import annotations

import argparse

from vitkit.bench.timing import CLOCKS


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
