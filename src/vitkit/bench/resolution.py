"""`vitkit bench resolution`: Appendix D.5 in miniature, throughput and the largest batch against resolution."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

import torch
from torch import nn

from vitkit.bench.candidates import bench_model, forward_call, forward_flops
from vitkit.bench.memory import MemoryFit, fit_memory, peak_allocated_bytes, resident_bytes
from vitkit.bench.plots import plot_resolution
from vitkit.bench.timing import alternate, gemm_candidate, mfu
from vitkit.precision import autocast

NAME = "resolution"
HELP = "Appendix D.5: images/s and the largest inference / training batch in a memory budget, per resolution"
COLUMNS = None
GIB = 2**30
MIB = 2**20


def run(args: argparse.Namespace, log: Callable[[str], None] | None) -> list[dict]:
    rows = resolution_sweep(
        args.models,
        args.sizes,
        args.batch_size,
        args.rounds,
        args.budget_gib,
        not args.no_memory,
        log,
        args.clock,
        args.precision,
        args.gemm_size,
    )
    if args.plot:
        title = (
            f"inference batch {args.batch_size}, {torch.get_num_threads()} torch thread(s), {args.clock} clock, "
            f"{args.precision}; memory budget {args.budget_gib:g} GiB"
        )
        print(f"<!-- figure: {plot_resolution(rows, args.plot, title)} -->")
    return rows


def memory_fit(
    model: nn.Module,
    shape: tuple[int, ...],
    train: bool,
    batches: tuple[int, int] = (1, 2),
    dtype: torch.dtype | None = None,
) -> MemoryFit:
    """Affine peak-memory model: resident + fixed + per_image * batch, forward passes under autocast to `dtype`.

    Inference (`train=False`): the peak of one no-grad forward at two batch sizes, plus parameters and buffers.
    Training (`train=True`): at the small batches that are cheap to run, the peak of a full step is set by the
    gradients and optimizer temporaries, not by the activations, so an affine fit through them says nothing about
    large batches. Instead the forward pass with autograd is measured (its peak = the activations kept for the
    backward pass), the gradients (one copy of the parameters) are added to `fixed`, and the parameters with their
    two AdamW moments are `resident`. This bounds the step's peak from above (`vitkit bench memory` measures the
    whole step to compare), so the largest training batch is a slight underestimate.
    """
    was_training = model.training
    try:
        if not train:
            model.eval()
            return fit_memory(
                lambda b: peak_allocated_bytes(forward_call(model, torch.randn(b, *shape), dtype)),
                resident_bytes(model),
                batches,
            )
        model.train()

        def measure(b: int) -> int:
            x = torch.randn(b, *shape)
            with autocast(x.device, dtype):
                # The graph (saved activations) dies with the output.
                return peak_allocated_bytes(lambda: model(x))

        params = sum(p.numel() * p.element_size() for p in model.parameters())
        fit = fit_memory(measure, resident_bytes(model) + 2 * params, batches)
        fit.fixed += params
        return fit
    finally:
        model.train(was_training)


def resolution_sweep(
    model_names: Sequence[str] = ("ViT-S/16", "ViT-B/16", "R50+ViT-B/16"),
    sizes: Sequence[int] = (160, 224, 288, 384),
    batch_size: int = 4,
    rounds: int = 3,
    budget_gib: float = 16.0,
    memory: bool = True,
    log: Callable[[str], None] | None = None,
    clock: str = "wall",
    precision: str = "fp32",
    gemm_size: int = 2048,
) -> list[dict]:
    """Appendix D.5 in miniature: inference images/s against resolution (all sizes of one model alternated, with the
    GEMM ceiling), and the largest inference and training batch that fits `budget_gib` (16 GiB: a TPUv3 core);
    `precision` 'bf16' runs the models under bf16 autocast, against the bf16 GEMM."""
    dtype = torch.bfloat16 if precision == "bf16" else None
    rows = []
    for name in model_names:
        models, candidates = {}, {}
        for size in sizes:
            model = bench_model(name, img_size=size)
            x = torch.randn(batch_size, model.config.in_chans, size, size)
            models[size] = (model, x, forward_flops(model, x))
            candidates[str(size)] = forward_call(model, x, dtype)
        gemm, gemm_flops = gemm_candidate(gemm_size, dtype=dtype or torch.float32)
        candidates["gemm"] = gemm
        results = alternate(candidates, rounds=rounds, warmup=1, clock=clock)
        results["gemm"].flops = gemm_flops
        for size, (model, x, flops) in models.items():
            r = results[str(size)]
            r.images, r.flops = batch_size, flops
            row = {
                "model": name,
                "precision": precision,
                "resolution": size,
                "images/s": r.images_per_s,
                "GFLOPs/image": flops / batch_size / 1e9,
                "MFU": mfu(results, str(size)),
                "spread": r.spread,
            }
            if memory:
                shape = tuple(x.shape[1:])
                infer = memory_fit(model, shape, train=False, dtype=dtype)
                train = memory_fit(model, shape, train=True, dtype=dtype)
                budget = budget_gib * GIB
                row.update(
                    {
                        "MiB/image (inference)": infer.per_image / MIB,
                        "largest batch (inference)": infer.largest_batch(budget),
                        "MiB/image (training)": train.per_image / MIB,
                        "largest batch (training)": train.largest_batch(budget),
                    }
                )
            rows.append(row)
            if log:
                log(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    return rows
