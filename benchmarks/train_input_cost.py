"""Cost per batch of the two input pipelines compared in `vitkit bench train`: the engine's batched TrainTransform
and a conventional DataLoader with per-sample torchvision v2 transforms (Fashion-MNIST, batch 128), side by side.

    python benchmarks/train_input_cost.py [--threads 1] [--clock cpu] [--rounds 7]
"""

from __future__ import annotations

import argparse

import torch

from vitkit.bench.timing import alternate
from vitkit.bench.training import _TorchvisionImages
from vitkit.data import TrainTransform, global_batch_indices, load_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dataset = load_dataset("fashion_mnist", "train")
    transform = TrainTransform(28, crop="resize_crop", in_chans=1, num_classes=len(dataset.classes))
    step = [0]

    def engine_batch() -> None:
        step[0] += 1
        indices = global_batch_indices(len(dataset), args.batch_size, 0, step[0])
        transform(dataset.images[indices], dataset.labels[indices], indices, 0)

    loader = torch.utils.data.DataLoader(
        _TorchvisionImages(dataset, 28), batch_size=args.batch_size, shuffle=True, num_workers=0
    )
    batches = [iter(loader)]

    def dataloader_batch() -> None:
        try:
            next(batches[0])
        except StopIteration:
            batches[0] = iter(loader)
            next(batches[0])

    results = alternate(
        {"engine: TrainTransform (batched)": engine_batch, "DataLoader + torchvision v2 per sample": dataloader_batch},
        rounds=args.rounds, iters=3, clock=args.clock,
    )
    print(f"| input pipeline ({args.threads} thread(s), {args.clock} clock) | ms per batch of {args.batch_size} | images/s |")
    print("|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {1000 * r.median:.1f} | {args.batch_size / r.median:,.0f} |")


if __name__ == "__main__":
    main()
