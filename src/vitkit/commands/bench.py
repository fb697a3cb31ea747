"""`vitkit bench WHAT`: throughput against timm / transformers / torchvision, MFU, memory, the D.5 sweep.

    vitkit bench inference  --model ViT-B/16 --batch-size 8 --rounds 5      # vitkit vs peers, same weights
    vitkit bench batch      --model ViT-B/16 --batch-sizes 1,2,4,8,16,32    # best batch size
    vitkit bench resolution --models ViT-S/16,ViT-B/16 --sizes 160,224,288,384 --plot out.png   # Appendix D.5
    vitkit bench memory     --model ViT-B/16 --batch-size 32                # gradient-checkpointing saving
    vitkit bench train      --rounds 5 [--config R.toml] [--processes 2]    # training step vs timm in a plain loop (wall clock)
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from vitkit.bench import suite
from vitkit.bench.plots import plot_resolution
from vitkit.bench.training import training_vs_timm

HELP = "throughput (vs timm, transformers, torchvision), MFU, peak memory, resolution sweep"
WHAT = ("inference", "batch", "resolution", "memory", "train")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v]


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=WHAT, help="which benchmark")
    parser.add_argument("--model", default=None, help="registered model (default ViT-B/16; not for train)")
    parser.add_argument("--models", type=_names, default=["ViT-S/16", "ViT-B/16", "R50+ViT-B/16"], help="resolution: comma-separated models")
    parser.add_argument("--batch-size", type=int, default=None, help="default 8 (inference), 4 (resolution), 32 (memory), 128 (train)")
    parser.add_argument("--batch-sizes", type=_ints, default=[1, 2, 4, 8, 16, 32], help="batch: comma-separated batch sizes")
    parser.add_argument("--sizes", type=_ints, default=[160, 224, 288, 384], help="resolution: input sizes")
    parser.add_argument("--img-size", type=int, default=None, help="input size (default: the model's)")
    parser.add_argument("--peers", type=_names, default=["timm", "transformers", "torchvision"],
                        help="inference: comma-separated peers")
    parser.add_argument("--peer", default=None, help="batch: also sweep this peer")
    parser.add_argument("--rounds", type=int, default=5, help="alternation rounds (medians over rounds)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time, or this process's CPU time (less noisy on a shared machine; use --threads 1)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for everyone (default: torch's)")
    parser.add_argument("--compile", action="store_true", help="torch.compile every candidate (model / train step)")
    parser.add_argument("--budget-gib", type=float, default=16.0, help="memory budget for the largest batch")
    parser.add_argument("--no-memory", action="store_true", help="resolution: skip the largest-batch measurement")
    parser.add_argument("--time-rounds", type=int, default=0, help="memory: also time both steps, alternated")
    parser.add_argument("--steps", type=int, default=10, help="train: steps per round per candidate")
    parser.add_argument("--config", default=None, help="train: the recipe (TOML) whose model and data to time "
                        "(default: the default recipe)")
    parser.add_argument("--processes", type=int, default=0,
                        help="train: also time the engine in N one-thread processes (train.processes=N; wall clock)")
    parser.add_argument("--plot", default=None, help="resolution: write the D.5 figure (PNG) here")
    parser.add_argument("--json", default=None, help="also write the rows as JSON here")
    parser.add_argument("--quiet", action="store_true", help="no per-round log on stderr")


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    print(f"<!-- {suite.environment()}; {args.clock} clock -->")
    if args.what == "inference":
        rows = suite.inference_vs_peers(
            args.model or "ViT-B/16", args.batch_size or 8, args.peers, args.rounds, args.warmup,
            img_size=args.img_size, compile=args.compile, log=log, clock=args.clock,
        )
        columns = ["model", "batch", "implementation", "images/s", "GFLOP/s", "MFU", "vs vitkit", "ratio range",
                   "best GFLOP/s", "spread"]
    elif args.what == "batch":
        rows = suite.batch_sweep(args.model or "ViT-B/16", args.batch_sizes, args.rounds, args.img_size, args.peer, log,
                                 args.clock)
        columns = ["model", "implementation", "batch", "images/s", "GFLOP/s", "MFU", "spread"]
    elif args.what == "resolution":
        rows = suite.resolution_sweep(
            args.models, args.sizes, args.batch_size or 4, args.rounds, args.budget_gib, not args.no_memory, log,
            args.clock,
        )
        columns = None
        if args.plot:
            title = (f"inference batch {args.batch_size or 4}, {torch.get_num_threads()} torch thread(s), {args.clock} clock, "
                     f"fp32; memory budget {args.budget_gib:g} GiB")
            print(f"<!-- figure: {plot_resolution(rows, args.plot, title)} -->")
    elif args.what == "memory":
        rows = suite.checkpointing_memory(args.model or "ViT-B/16", args.batch_size or 32, args.img_size,
                                          args.time_rounds, log, args.clock)
        columns = None
    else:
        if args.model:
            raise ValueError("bench train measures the default recipe's model (vitkit.train.recipe.RunConfig); drop --model")
        if args.clock != "wall":
            raise ValueError("bench train runs every candidate in processes of its own: time it with --clock wall")
        rows = training_vs_timm(batch_size=args.batch_size, rounds=args.rounds, steps=args.steps,
                                compile=args.compile, log=log, recipe=args.config, processes=args.processes)
        columns = None
    print(suite.format_table(rows, columns))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return 0
