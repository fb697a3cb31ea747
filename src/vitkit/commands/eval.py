"""`vitkit eval --weights W`: top-1 / top-5 accuracy, per-class accuracy by name and a confusion-matrix PNG.

A run directory is evaluated on its own data (its validation split when it held one out, else test) and the
results go into it (vitkit.evaluate.weights); `--data`, `--split` and `--out` choose otherwise.
"""

from __future__ import annotations

import argparse

from vitkit.commands import positive_int
from vitkit.commands._arguments import add_compile_argument, add_precision_argument
from vitkit.evaluate.weights import SPLITS, evaluate_weights

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
        choices=SPLITS,
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


def run(args: argparse.Namespace) -> int:
    report = evaluate_weights(
        args.weights,
        args.data,
        split=args.split,
        data_dir=args.data_dir,
        out=args.out,
        batch_size=args.batch_size,
        device=args.device,
        precision=args.precision,
        compile=args.compile,
        workers=args.workers,
        on_corrupt=args.on_corrupt,
        confusion=args.confusion,
        overwrite=args.overwrite,
    )
    print(f"device {report['device']}, precision {report['precision']} ({report['precision_reason']})")
    print(f"{report['data']} ({report['split']}, {report['images']} images)")
    print(f"top-1 {100 * report['top1']:.2f}%  top-5 {100 * report['top5']:.2f}%  loss {report['loss']:.4f}")
    width = max(len(name) for name in report["per_class"])
    print(f"  {'class':<{width}}  {'images':>6}  {'top-1':>7}")
    for name, row in report["per_class"].items():
        top1 = f"{100 * row['top1']:6.2f}%" if row["top1"] is not None else "      -"
        print(f"  {name:<{width}}  {row['images']:>6}  {top1}")
    for key, what in (("confusion", "confusion matrix"), ("report", "results")):
        if key in report:
            print(f"{what}: {report[key]}")
    return 0
