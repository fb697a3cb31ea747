"""`vitkit bench BENCHMARK`: throughput against timm / transformers / torchvision, MFU, memory, the D.5 sweep.

    vitkit bench inference  --model ViT-B/16 --batch-size 8 --rounds 5      # vitkit vs peers, same weights
    vitkit bench batch      --model ViT-B/16 --batch-sizes 1,2,4,8,16,32    # best batch size
    vitkit bench resolution --models ViT-S/16,ViT-B/16 --sizes 160,224,288,384 --plot out.png   # Appendix D.5
    vitkit bench memory     --model ViT-B/16 --batch-size 32                # gradient-checkpointing saving
    vitkit bench train      --rounds 5 [--config R.toml] [--processes 2]    # training step vs timm (wall clock)
    vitkit bench precision  --model ViT-S/16 --batch-size 32                # training step bf16 vs fp32, auto
    vitkit bench precision  --check                                         # auto's unmeasured choices vs measured
    vitkit bench data ROOT  --workers 0,1,2 --models ViT-S/16,ViT-B/16      # input pipeline vs torchvision, training
    vitkit bench serve      --models ViT-S/16,ViT-B/16 --batch-sizes 1,8    # eager, packed, compiled, ONNX Runtime

Each benchmark is a module of vitkit.bench listed in BENCHMARKS of vitkit.commands.parsers.bench, which holds its
options and those everyone has: NAME, HELP, COLUMNS (None: every key of the rows) and run(args, log) -> rows;
optionally columns(args), where the options choose the columns, and exit_status(rows), where rows can fail.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

import torch

from vitkit.bench.table import environment, format_table


def run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    module = importlib.import_module(args.benchmark_module)  # with torch: only the benchmark that runs
    print(f"<!-- {environment()}; {getattr(args, 'clock', 'wall')} clock -->")
    rows = module.run(args, log)
    columns = module.columns(args) if hasattr(module, "columns") else module.COLUMNS
    print(format_table(rows, columns))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)
    return module.exit_status(rows) if hasattr(module, "exit_status") else 0
