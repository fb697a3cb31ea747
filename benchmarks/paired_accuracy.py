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
from scipy.stats import binomtest

import vitkit
from vitkit.data import eval_transform, load_dataset
from vitkit.precision import choose_precision


@torch.no_grad()
def predictions(weights: str, dataset, precision: str = "fp32", batch_size: int = 500) -> torch.Tensor:
    """The top-1 class [N] of every test image, inferred in `precision` as `vitkit eval` does."""
    model = vitkit.load_weights(weights).eval()
    cfg = model.config
    chosen = choose_precision(precision, "cpu")
    top1 = []
    with chosen.inference(model):
        for chunk in torch.arange(len(dataset)).split(batch_size):
            logits = model(eval_transform(dataset.images[chunk], cfg.img_size, cfg.in_chans))
            top1.append(logits.argmax(-1))
    return torch.cat(top1)


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
        predictions(w, test, p) for w, p in zip((args.first, args.second), precisions, strict=True)
    )
    a, b = first == test.labels, second == test.labels
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    p = binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
    same = int((first == second).sum())
    print(
        f"{args.first} ({precisions[0]}): {100 * a.float().mean():.2f}%  {args.second} ({precisions[1]}): "
        f"{100 * b.float().mean():.2f}%  ({len(test)} images; only the first right: {only_a}, only the second: "
        f"{only_b}; exact McNemar p = {p:.3f}; same top-1 class: {same} = {100 * same / len(test):.2f}%)"
    )


if __name__ == "__main__":
    main()
