"""The options of `vitkit eval`: its parser, built without importing torch (vitkit.cli imports
vitkit.commands.eval only to run it)."""

from __future__ import annotations

import argparse

from vitkit.commands import positive_int
from vitkit.commands._arguments import add_compile_argument, add_precision_argument, literal

HELP = "evaluate weights (a run: on its own data) — top-1, top-5, per-class accuracy and a confusion matrix"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--weights", required=True, help="run directory, vitkit weights dir, official .npz, timm/HF file"
    )
    parser.add_argument(
        "--data",
        help="data source: dataset name, folder:PATH, hf:PATH, wds:DIR (DATA.md); default: the run's own",
    )
    parser.add_argument("--data-dir", help="where the named dataset lives")
    parser.add_argument(
        "--split",
        choices=literal("vitkit.evaluation.run_directory", "SPLITS"),
        help="default: the run's held-out validation images when it has them (data.val_split), else test",
    )
    parser.add_argument("--on-corrupt", default="stop", choices=("stop", "skip"), help="unreadable images")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader processes decoding a lazy source")
    parser.add_argument("--batch-size", type=positive_int, default=500)
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda:1', ...")
    add_precision_argument(parser)
    add_compile_argument(parser)
    parser.add_argument(
        "--out", help="directory for eval_<split>.json and the confusion matrix (default: the run directory)"
    )
    parser.add_argument("--confusion", help="write the confusion-matrix PNG to this path instead")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace files of --out or --confusion that exist"
    )
