"""`vitkit bench inference`: vitkit against timm, transformers and torchvision at identical weights."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch

from vitkit.bench.candidates import bench_model, forward_call, forward_flops
from vitkit.bench.options import add_clock, comma_names
from vitkit.bench.peers import PEERS, build_peer, check_same_outputs
from vitkit.bench.timing import alternate, gemm_candidate, mfu, paired_ratio, ratio_range, round_logger

NAME = "inference"
HELP = "images/s, GFLOP/s and MFU of vitkit and its peers (timm, transformers, torchvision), same weights"
COLUMNS = ["model", "batch", "implementation", "images/s", "GFLOP/s", "MFU", "vs vitkit", "ratio range",
           "best GFLOP/s", "spread"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="ViT-B/16", help="registered plain ViT (default ViT-B/16)")
    parser.add_argument("--batch-size", type=int, default=8, help="default 8")
    parser.add_argument("--img-size", type=int, default=None, help="input size (default: the model's)")
    parser.add_argument("--peers", type=comma_names, default=list(PEERS), help="comma-separated peers")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls of each candidate first")
    parser.add_argument("--compile", action="store_true", help="torch.compile every candidate")
    add_clock(parser)


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    return inference_vs_peers(
        args.model, args.batch_size, args.peers, args.rounds, args.warmup,
        img_size=args.img_size, compile=args.compile, log=log, clock=args.clock,
    )


def inference_vs_peers(
    model_name: str = "ViT-B/16",
    batch_size: int = 8,
    peers: Sequence[str] = PEERS,
    rounds: int = 5,
    warmup: int = 1,
    iters: int = 1,
    img_size: int | None = None,
    compile: bool = False,
    log: Callable[[str], None] | None = None,
    clock: str = "wall",
) -> list[dict]:
    """Images/s, GFLOP/s, MFU and speed relative to vitkit for vitkit and its peers at identical weights, timed in
    alternation with a 2048^3 GEMM (the ceiling) in the same rounds."""
    model = bench_model(model_name, img_size)
    x = torch.randn(batch_size, model.config.in_chans, *model.config.img_size)
    flops = forward_flops(model, x)
    modules = {"vitkit": model}
    for peer in peers:
        modules[peer] = build_peer(peer, model)
        diff = check_same_outputs(model, modules[peer], x[:2])
        if log:
            log(f"{peer}: same weights, max |logits diff| {diff:.2e}")
    candidates = {name: forward_call(torch.compile(m) if compile else m, x) for name, m in modules.items()}
    gemm, gemm_flops = gemm_candidate()
    candidates["gemm"] = gemm
    results = alternate(candidates, rounds=rounds, warmup=warmup + (2 if compile else 0), iters=iters,
                        on_round=round_logger(log, rounds), clock=clock)
    for name in modules:
        results[name].images, results[name].flops = batch_size, flops
    results["gemm"].flops = gemm_flops
    rows = []
    for name in modules:
        r = results[name]
        lo, hi = ratio_range(results, name, "vitkit")
        rows.append(
            {
                "implementation": name,
                "images/s": r.images_per_s,
                "GFLOP/s": r.gflops_per_s,
                "MFU": mfu(results, name),
                "vs vitkit": paired_ratio(results, name, "vitkit"),
                "ratio range": f"{lo:.3f}-{hi:.3f}",
                "spread": r.spread,
            }
        )
    g = results["gemm"]
    rows.append({"implementation": "GEMM 2048^3 (ceiling)", "GFLOP/s": g.gflops_per_s,
                 "best GFLOP/s": g.flops / g.best / 1e9, "spread": g.spread})
    for row in rows:
        row.update(model=model_name, batch=batch_size, GFLOPs_per_image=flops / batch_size / 1e9)
    return rows
