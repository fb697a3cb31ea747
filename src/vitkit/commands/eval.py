"""`vitkit eval --weights W`: top-1 / top-5 accuracy, per-class accuracy by name and a confusion-matrix PNG.

A run directory is evaluated on its own data (its validation split when it held one out, else test) and the
results go into it (vitkit.evaluation.run_directory); `--data`, `--split` and `--out` choose otherwise.
"""

from __future__ import annotations

import argparse

from vitkit.evaluation.run_directory import evaluate_weights


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
