"""`vitkit bench inference`: vitkit against timm, transformers and torchvision at identical weights."""

from __future__ import annotations

import argparse
import contextlib
import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from vitkit.allocator import keep_freed_memory
from vitkit.bench.candidates import bench_model, forward_call, forward_flops, performed_flops
from vitkit.bench.options import (
    auto_row,
    bench_dtypes,
)
from vitkit.bench.peers import PEERS, build_peer, check_same_outputs
from vitkit.bench.timing import alternate, gemm_candidate, mfu, paired_ratio, ratio_range, round_logger
from vitkit.inference_weights import compiled_for_inference, inference_module, weights_in

NAME = "inference"
HELP = "images/s, GFLOP/s and MFU of vitkit and its peers (timm, transformers, torchvision), same weights"
COLUMNS = [
    "model",
    "batch",
    "implementation",
    "precision",
    "images/s",
    "GFLOP/s",
    "MFU",
    "GFLOPs/image",
    "vs vitkit",
    "vs vitkit fp32",
    "ratio range",
    "best GFLOP/s",
    "spread",
]


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    return inference_vs_peers(
        args.model,
        args.batch_size,
        args.peers,
        args.rounds,
        args.warmup,
        img_size=args.img_size,
        compile=args.compile,
        log=log,
        clock=args.clock,
        precision=args.precision,
        device=args.device,
        gemm_size=args.gemm_size,
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
    precision: str = "fp32",
    device: str = "cpu",
    gemm_size: int = 2048,
) -> list[dict]:
    """Images/s, GFLOP/s, MFU and speed relative to vitkit for vitkit and its peers at identical weights, timed in
    alternation with a 2048^3 GEMM (the ceiling) in the same rounds.

    `precision` 'bf16' runs everyone under the same bf16 autocast, with vitkit in fp32 and the bf16 GEMM ceiling
    in the same rounds; 'both' times every implementation in both. vitkit is its inference path
    (`Precision.inference`: dense layers packed on a CPU; in bf16 the weights held in bf16, so the whole forward
    pass runs in bf16); the row 'vitkit-autocast' is the same model under autocast alone, as the peers run.
    `compile` compiles every candidate for inference (`compiled_for_inference`: inductor with frozen weights). On
    a CPU the process keeps freed memory (`keep_freed_memory`), for every candidate alike. A last row says what
    `auto` picks here, and why.
    GFLOP/s and MFU count the FLOPs each implementation performs: a class-token ViT's logits skip the last layer's
    patch tokens in vitkit (`VisionTransformer.forward`), not in the peers. A peer that cannot express the model
    (torchvision's ViT for a DINOv2, say) gets a row saying why instead of a timing.
    """
    model = bench_model(model_name, img_size).to(device)
    x = torch.randn(batch_size, *model.config.input_size, device=device)
    flops, peer_flops = forward_flops(model, x), forward_flops(model, x, every_token=True)
    modules: dict[str, nn.Module] = {"vitkit": model}
    skipped: list[dict[str, Any]] = []
    for peer in peers:
        try:
            built = build_peer(peer, model)
        except ValueError as error:  # a peer without the model's parts (torchvision's ViT has no registers)
            skipped.append({"implementation": peer, "precision": f"not timed: {error}"})
            if log:
                log(f"{peer}: not timed: {error}")
            continue
        modules[peer] = built.to(device)
        diff = check_same_outputs(model, modules[peer], x[:2])
        if log:
            log(f"{peer}: same weights, max |logits diff| {diff:.2e}")
    dtypes = bench_dtypes(precision)
    if "bf16" in dtypes:
        modules["vitkit-autocast"] = copy.deepcopy(model)  # not packed: autocast alone, as the peers run
    if torch.device(device).type == "cpu":
        keep_freed_memory()  # no candidate, nor the ceiling's GEMM, faults its memory in again at every call
    bf16_copy = copy.deepcopy(model) if "bf16" in dtypes else model  # vitkit's bf16 inference path
    with contextlib.ExitStack() as stack:
        compiled = {  # vitkit as it infers (dense layers packed on a CPU), the others as they run
            name: stack.enter_context(
                (inference_module if name == "vitkit" else compiled_for_inference)(m, compile)
            )
            for name, m in modules.items()
        }
        stack.enter_context(weights_in(bf16_copy, dtypes.get("bf16")))
        vitkit_bf16 = stack.enter_context(inference_module(bf16_copy, compile))
        candidates = {"vitkit fp32": forward_call(compiled["vitkit"], x)}  # the reference of every ratio
        for p, dtype in dtypes.items():
            for name, m in compiled.items():
                if dtype is None and name == "vitkit-autocast":
                    continue
                if dtype is not None and name == "vitkit":
                    m = vitkit_bf16
                candidates[f"{name} {p}"] = forward_call(m, x, dtype)
        for p, dtype in dtypes.items():
            candidates[f"gemm {p}"], gemm_flops = gemm_candidate(
                gemm_size, dtype=dtype or torch.float32, device=device
            )
        results = alternate(
            candidates,
            rounds=rounds,
            warmup=warmup + (2 if compile else 0),
            iters=iters,
            on_round=round_logger(log, rounds),
            clock=clock,
        )
    rows: list[dict[str, Any]] = []
    for name in candidates:
        if name.startswith("gemm"):
            continue
        implementation, p = name.rsplit(" ", 1)
        r = results[name]
        r.images, r.flops = batch_size, performed_flops(implementation, flops, peer_flops)
        lo, hi = ratio_range(results, name, f"vitkit {p}")
        rows.append(
            {
                "implementation": implementation,
                "precision": p,
                "images/s": r.images_per_s,
                "GFLOP/s": r.gflops_per_s,
                "GFLOPs/image": r.flops / batch_size / 1e9,
                "vs vitkit": paired_ratio(results, name, f"vitkit {p}"),
                "vs vitkit fp32": paired_ratio(results, name, "vitkit fp32"),
                "ratio range": f"{lo:.3f}-{hi:.3f}",
                "spread": r.spread,
            }
        )
    for p in dtypes:
        g = results[f"gemm {p}"]
        g.flops = gemm_flops
        rows.append(
            {
                "implementation": f"GEMM {gemm_size}^3 (ceiling)",
                "precision": p,
                "GFLOP/s": g.gflops_per_s,
                "best GFLOP/s": g.flops / g.best / 1e9,
                "spread": g.spread,
            }
        )
    for row in rows[: len(rows) - len(dtypes)]:
        if row["precision"] in dtypes:
            row["MFU"] = mfu(
                results, f"{row['implementation']} {row['precision']}", f"gemm {row['precision']}"
            )
    rows += skipped
    rows.append(auto_row(model, batch_size))
    for row in rows:
        row.update(model=model_name, batch=batch_size)
    return rows
