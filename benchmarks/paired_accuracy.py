"""Are two models' test accuracies different? Both classify the same test set; the exact McNemar test (a binomial
test on the images exactly one of them gets right) says whether the difference is more than chance.

    python benchmarks/paired_accuracy.py RUN_A RUN_B [--data fashion_mnist] [--threads 1]

Each model sees the evaluation preprocessing at its own resolution (vitkit.data.eval_transform), so a 28x28 run
and its 56x56 fine-tuning compare directly.
"""

from __future__ import annotations

import argparse

import torch
from scipy.stats import binomtest

import vitkit
from vitkit.data import eval_transform, load_dataset


@torch.no_grad()
def correct(weights: str, dataset, batch_size: int = 500) -> torch.Tensor:
    """Boolean [N]: which test images the model classifies correctly."""
    model = vitkit.load_weights(weights).eval()
    cfg = model.config
    hits = []
    for chunk in torch.arange(len(dataset)).split(batch_size):
        logits = model(eval_transform(dataset.images[chunk], cfg.img_size, cfg.in_chans))
        hits.append(logits.argmax(-1) == dataset.labels[chunk])
    return torch.cat(hits)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--data", default="fashion_mnist")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    test = load_dataset(args.data, "test")
    a, b = correct(args.first, test), correct(args.second, test)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    p = binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else 1.0
    print(
        f"{args.first}: {100 * a.float().mean():.2f}%  {args.second}: {100 * b.float().mean():.2f}%  "
        f"({len(test)} images; only the first right: {only_a}, only the second: {only_b}; exact McNemar p = {p:.3f})"
    )


if __name__ == "__main__":
    main()
