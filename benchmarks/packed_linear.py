#!/usr/bin/env python3
"""The inference forward pass with dense layers packed for oneDNN and the MLP's GELU fused
(vitkit.packed_linear, what every CPU inference path runs) against the same model with torch's nn.Linear, in
float32 and in bf16 (weights held in bf16), paired rounds in one process; speed ratios (> 1: packed is faster).

    python benchmarks/packed_linear.py --models ViT-S/16,ViT-B/16 --batch 32 --rounds 5
"""

from __future__ import annotations

import argparse
import contextlib
import copy
from functools import partial

import torch

import vitkit
from vitkit.bench.table import environment, format_table
from vitkit.bench.timing import alternate, paired_ratio, ratio_range
from vitkit.inference_weights import weights_in
from vitkit.packed_linear import packed_linears
from vitkit.precision import autocast
from vitkit.sizes import to_pair


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="ViT-S/16,ViT-B/16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cpu, rows = torch.device("cpu"), []
    print(f"<!-- {environment()} -->")
    for name in args.models.split(","):
        torch.manual_seed(0)
        model = vitkit.create_model(name).eval()
        x = torch.randn(args.batch, 3, *to_pair(model.config.img_size))
        twin = copy.deepcopy(model)  # the same weights, packed
        for dtype in (None, torch.bfloat16):
            with contextlib.ExitStack() as stack:
                stack.enter_context(torch.no_grad())
                stack.enter_context(autocast(cpu, dtype))
                stack.enter_context(weights_in(model, dtype))
                packed = stack.enter_context(packed_linears(stack.enter_context(weights_in(twin, dtype))))
                results = alternate(
                    {"packed": partial(packed, x), "plain": partial(model, x)}, rounds=args.rounds, warmup=1
                )
            low, high = ratio_range(results, "packed", "plain")
            rows.append(
                {
                    "model": name,
                    "precision": "bf16" if dtype else "fp32",
                    "batch": args.batch,
                    "packed s": results["packed"].median,
                    "plain s": results["plain"].median,
                    "packed speed / plain": paired_ratio(results, "packed", "plain"),
                    "range": f"{low:.2f}-{high:.2f}",
                }
            )
    print(format_table(rows))


if __name__ == "__main__":
    main()
