"""One torch thread against two, side by side, for a model forward and the GEMM ceiling.

On a machine whose cores are busy with other jobs, two OpenMP threads can be slower than one: every parallel region
ends in a barrier, and a thread that has been descheduled holds the others up for a time slice. The GEMM, one long
parallel region, hardly notices; a ViT forward, hundreds of short ones, does. This is why docs/BENCHMARKS.md measures
with `--threads 1 --clock cpu` on the shared machine.

    python benchmarks/threads_under_load.py [--model ViT-S/16] [--batch-size 8] [--rounds 4]
"""

from __future__ import annotations

import argparse

import torch

import vitkit
from vitkit.bench.table import format_table
from vitkit.bench.timing import alternate, gemm_candidate
from vitkit.flops import count_flops


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="ViT-S/16")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    model = vitkit.create_model(args.model).eval()
    x = torch.randn(args.batch_size, 3, *model.config.img_size)
    flops = count_flops(model, tuple(x.shape[1:]), args.batch_size)
    gemm, gemm_flops = gemm_candidate()

    def with_threads(n, fn):
        def run():
            torch.set_num_threads(n)
            with torch.inference_mode():
                fn()

        return run

    candidates = {}
    for n in (1, 2):
        candidates[f"{args.model} x{args.batch_size}, {n} thread(s)"] = (
            with_threads(n, lambda: model(x)),
            flops,
        )
        candidates[f"GEMM 2048^3, {n} thread(s)"] = (with_threads(n, gemm), gemm_flops)
    results = alternate({k: fn for k, (fn, _) in candidates.items()}, rounds=args.rounds)
    print(
        format_table(
            [
                {
                    "candidate": name,
                    "wall s (median)": results[name].median,
                    "GFLOP/s": work / results[name].median / 1e9,
                }
                for name, (_, work) in candidates.items()
            ]
        )
    )


if __name__ == "__main__":
    main()
