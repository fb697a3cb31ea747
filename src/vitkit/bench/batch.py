"""`vitkit bench batch`: per-image throughput and MFU against the batch size, every size alternated."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch

from vitkit.bench.candidates import bench_model, forward_call, forward_flops
from vitkit.bench.options import add_clock, comma_ints
from vitkit.bench.peers import PEERS, build_peer
from vitkit.bench.timing import alternate, gemm_candidate, mfu

NAME = "batch"
HELP = "the best batch size: images/s and MFU of vitkit (and a peer) at several batch sizes"
COLUMNS = ["model", "implementation", "batch", "images/s", "GFLOP/s", "MFU", "spread"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="ViT-B/16", help="registered model (default ViT-B/16)")
    parser.add_argument("--batch-sizes", type=comma_ints, default=[1, 2, 4, 8, 16, 32], help="comma-separated")
    parser.add_argument("--img-size", type=int, default=None, help="input size (default: the model's)")
    parser.add_argument("--peer", choices=PEERS, default=None, help="also sweep this peer")
    add_clock(parser)


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    return batch_sweep(args.model, args.batch_sizes, args.rounds, args.img_size, args.peer, log, args.clock)


def batch_sweep(
    model_name: str = "ViT-B/16",
    batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
    rounds: int = 3,
    img_size: int | None = None,
    peer: str | None = None,
    log: Callable[[str], None] | None = None,
    clock: str = "wall",
) -> list[dict]:
    """Per-image throughput and MFU of vitkit (and optionally one peer) at several batch sizes, all alternated."""
    model = bench_model(model_name, img_size)
    shape = (model.config.in_chans, *model.config.img_size)
    modules = {"vitkit": model}
    if peer:
        modules[peer] = build_peer(peer, model)
    candidates, meta = {}, {}
    for b in batch_sizes:
        x = torch.randn(b, *shape)
        flops = forward_flops(model, x)
        for name, m in modules.items():
            key = f"{name}@{b}"
            candidates[key] = forward_call(m, x)
            meta[key] = (name, b, flops)
    gemm, gemm_flops = gemm_candidate()
    candidates["gemm"] = gemm
    on_round = (lambda r, t: log(f"round {r + 1}/{rounds} done")) if log else None
    results = alternate(candidates, rounds=rounds, warmup=1, on_round=on_round, clock=clock)
    results["gemm"].flops = gemm_flops
    rows = []
    for key, (name, b, flops) in meta.items():
        r = results[key]
        r.images, r.flops = b, flops
        rows.append({"model": model_name, "implementation": name, "batch": b, "images/s": r.images_per_s,
                     "GFLOP/s": r.gflops_per_s, "MFU": mfu(results, key), "spread": r.spread})
    g = results["gemm"]
    rows.append({"model": model_name, "implementation": "GEMM 2048^3 (ceiling)", "GFLOP/s": g.gflops_per_s,
                 "spread": g.spread})
    return rows
