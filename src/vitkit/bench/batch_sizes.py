"""`vitkit bench batch`: per-image throughput and MFU against the batch size, every size alternated."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch
from torch import nn

from vitkit.bench.candidates import bench_model, forward_call, forward_flops, performed_flops
from vitkit.bench.options import bench_dtypes
from vitkit.bench.peers import build_peer
from vitkit.bench.timing import alternate, gemm_candidate, mfu

NAME = "batch"
HELP = "the best batch size: images/s and MFU of vitkit (and a peer) at several batch sizes"
COLUMNS = [
    "model",
    "implementation",
    "precision",
    "batch",
    "images/s",
    "GFLOP/s",
    "MFU",
    "GFLOPs/image",
    "spread",
]


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    return batch_sweep(
        args.model,
        args.batch_sizes,
        args.rounds,
        args.img_size,
        args.peer,
        log,
        args.clock,
        args.precision,
        args.device,
        args.gemm_size,
    )


def batch_sweep(
    model_name: str = "ViT-B/16",
    batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32),
    rounds: int = 3,
    img_size: int | None = None,
    peer: str | None = None,
    log: Callable[[str], None] | None = None,
    clock: str = "wall",
    precision: str = "fp32",
    device: str = "cpu",
    gemm_size: int = 2048,
) -> list[dict]:
    """Per-image throughput and MFU of vitkit (and optionally one peer) at several batch sizes, all alternated;
    `precision` 'bf16' or 'both' times bf16 autocast too, each MFU against the GEMM of its own precision."""
    model = bench_model(model_name, img_size).to(device)
    shape = model.config.input_size
    modules: dict[str, nn.Module] = {"vitkit": model}
    if peer:
        modules[peer] = build_peer(peer, model).to(device)
    dtypes = bench_dtypes(precision)
    candidates, meta = {}, {}
    for b in batch_sizes:
        x = torch.randn(b, *shape, device=device)
        flops, peer_flops = forward_flops(model, x), forward_flops(model, x, every_token=True)
        for p, dtype in dtypes.items():
            for name, m in modules.items():
                key = f"{name} {p}@{b}"
                candidates[key] = forward_call(m, x, dtype)
                meta[key] = (name, p, b, performed_flops(name, flops, peer_flops))
    gemm_flops = {}
    for p, dtype in dtypes.items():
        candidates[f"gemm {p}"], gemm_flops[p] = gemm_candidate(
            gemm_size, dtype=dtype or torch.float32, device=device
        )
    on_round = (lambda r, t: log(f"round {r + 1}/{rounds} done")) if log else None
    results = alternate(candidates, rounds=rounds, warmup=1, on_round=on_round, clock=clock)
    rows = []
    for p in dtypes:
        results[f"gemm {p}"].flops = gemm_flops[p]
    for key, (name, p, b, flops) in meta.items():
        r = results[key]
        r.images, r.flops = b, flops
        rows.append(
            {
                "model": model_name,
                "implementation": name,
                "precision": p,
                "batch": b,
                "images/s": r.images_per_s,
                "GFLOP/s": r.gflops_per_s,
                "MFU": mfu(results, key, f"gemm {p}"),
                "GFLOPs/image": flops / b / 1e9,
                "spread": r.spread,
            }
        )
    for p in dtypes:
        g = results[f"gemm {p}"]
        rows.append(
            {
                "model": model_name,
                "implementation": f"GEMM {gemm_size}^3 (ceiling)",
                "precision": p,
                "GFLOP/s": g.gflops_per_s,
                "spread": g.spread,
            }
        )
    return rows
