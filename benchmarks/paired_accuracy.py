"""Are two models' test accuracies different? Both classify the same test set; the exact McNemar test (a binomial
test on the images exactly one of them gets right) says whether the difference is more than chance, and the share
of images given the same top-1 class says how alike they are.

    python benchmarks/paired_accuracy.py RUN_A RUN_B [--data fashion_mnist] [--threads 1]
    python benchmarks/paired_accuracy.py RUN RUN --precision fp32,bf16   # one model, inferred in two precisions

Each model sees the evaluation preprocessing at its own resolution (vitkit.data.eval_transform), so a 28x28 run
and its 56x56 fine-tuning compare directly.
"""

from __future__ import annotations

import argparse

import torch

import vitkit
from vitkit.data import load_dataset
from vitkit.evaluation.paired import paired_test, predictions
from vitkit.precision import choose_precision


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--data", default="fashion_mnist")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--precision",
        default="fp32,fp32",
        help="inference precision of the first and second model (fp32, bf16)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    precisions = args.precision.split(",")
    if len(precisions) != 2 or not set(precisions) <= {"fp32", "bf16"}:
        parser.error(f"--precision takes two of fp32, bf16 separated by a comma, got {args.precision!r}")
    test = load_dataset(args.data, "test")
    first, second = (
        predictions(vitkit.load_weights(w).eval(), test, choose_precision(p, "cpu"))
        for w, p in zip((args.first, args.second), precisions, strict=True)
    )
    same = int((first == second).sum())
    print(
        f"{args.first} ({precisions[0]}) against {args.second} ({precisions[1]}): "
        f"{paired_test(first, second, test.labels).describe()}; same top-1 class: {same} = "
        f"{100 * same / len(test):.2f}%"
    )


if __name__ == "__main__":
    main()
