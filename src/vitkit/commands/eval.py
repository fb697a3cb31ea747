"""`vitkit eval --weights W`: top-1 / top-5 accuracy, per-class accuracy by name and a confusion-matrix PNG.

A run directory is evaluated on its own data (its validation split when it held one out, else test) and the
results go into it (vitkit.evaluation.run_directory); `--data`, `--split` and `--out` choose otherwise.
"""

from __future__ import annotations

import argparse

from vitkit.evaluation.run_directory import evaluate_weights


def run(args: argparse.Namespace) -> int:
    evaluate_weights(  # prints what it scores, a progress bar and the results
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
    return 0
