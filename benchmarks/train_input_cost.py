"""Cost per batch of the two input pipelines compared in `vitkit bench train`: the engine's batched TrainTransform
and a conventional DataLoader with per-sample torchvision v2 transforms (Fashion-MNIST, batch 128), side by side.

    python benchmarks/train_input_cost.py [--threads 1] [--clock cpu] [--rounds 7] [--config configs/R.toml]
"""

from __future__ import annotations

import argparse

import torch

from vitkit.bench.table import format_table
from vitkit.bench.timing import alternate
from vitkit.bench.training import TorchvisionImages, Workload
from vitkit.data import global_batch_indices


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--config", default=None, help="recipe (TOML) whose crop and flip to time (default: the default)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    workload = Workload.load(recipe=args.config)
    config, dataset, model, transform = (
        workload.config,
        workload.dataset,
        workload.model,
        workload.transform(),
    )
    batch_size = config.train.batch_size
    step = [0]

    def engine_batch() -> None:
        step[0] += 1
        indices = global_batch_indices(len(dataset), batch_size, 0, step[0])
        transform(dataset.images[indices], dataset.labels[indices], indices, 0)

    loader = torch.utils.data.DataLoader(
        TorchvisionImages(dataset, model.config.img_size[0], config.data.crop, config.data.flip),
        batch_size=batch_size,
        shuffle=True,
        num_workers=0,
    )
    batches = [iter(loader)]

    def dataloader_batch() -> None:
        try:
            next(batches[0])
        except StopIteration:
            batches[0] = iter(loader)
            next(batches[0])

    results = alternate(
        {
            "engine: TrainTransform (batched)": engine_batch,
            "DataLoader + torchvision v2 per sample": dataloader_batch,
        },
        rounds=args.rounds,
        iters=3,
        clock=args.clock,
    )
    pipeline = f"input pipeline ({args.threads} thread(s), {args.clock} clock)"
    print(
        format_table(
            [
                {
                    pipeline: name,
                    f"ms per batch of {batch_size}": 1000 * r.median,
                    "images/s": batch_size / r.median,
                }
                for name, r in results.items()
            ]
        )
    )


if __name__ == "__main__":
    main()
