"""Where a training step of the default Fashion-MNIST model goes, at a given thread count: forward + backward alone,
then with each optimizer variant (fused / foreach / for-loop AdamW) and gradient clipping, side by side.

    python benchmarks/train_step_parts.py [--threads 2] [--clock wall] [--rounds 7] [--steps 3]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn

import vitkit
from vitkit.bench.table import format_table
from vitkit.bench.timing import alternate, paired_ratio
from vitkit.recipe.run_config import RunConfig


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = RunConfig().validate()  # the model settled: the default for the default data
    x = torch.randn(config.train.batch_size, 1, 28, 28)
    y = torch.randint(0, 10, (config.train.batch_size,))

    def variant(optimizer_kwargs: dict | None, clip: str | None):
        torch.manual_seed(0)
        model = vitkit.create_model(config.model.name, num_classes=10, **config.model.overrides).train()
        opt = (
            torch.optim.AdamW(model.parameters(), lr=1e-3, **optimizer_kwargs)
            if optimizer_kwargs is not None
            else None
        )

        def steps() -> None:
            for _ in range(args.steps):
                F.cross_entropy(model(x), y).backward()
                if clip:
                    nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=clip == "foreach")
                if opt is not None:
                    opt.step()
                model.zero_grad(set_to_none=True)

        return steps

    candidates = {
        "forward + backward only": variant(None, None),
        "+ AdamW fused": variant({"fused": True}, None),
        "+ AdamW foreach": variant({"foreach": True}, None),
        "+ AdamW for-loop": variant({"foreach": False}, None),
        "+ AdamW fused + clip (foreach)": variant({"fused": True}, "foreach"),
        "+ AdamW for-loop + clip (per tensor)": variant({"foreach": False}, "loop"),
    }
    results = alternate(candidates, rounds=args.rounds, clock=args.clock)
    base = "forward + backward only"
    setting = (
        f"{args.threads} thread(s), {args.clock} clock, {args.steps} steps of batch {config.train.batch_size}"
    )
    print(
        format_table(
            [
                {
                    setting: name,
                    "median s": r.median,
                    "time vs forward + backward": 1 / paired_ratio(results, name, base),
                }
                for name, r in results.items()
            ]
        )
    )


if __name__ == "__main__":
    main()
