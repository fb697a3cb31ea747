"""The benchmarks behind docs/BENCHMARKS.md: inference against peers, best batch, resolution sweep (Appendix D.5),
gradient-checkpointing memory. Each returns rows (dicts) that `format_table` prints as a markdown table."""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable, Sequence

import torch
from torch import nn

import vitkit
from vitkit.bench.memory import MemoryFit, fit_memory, peak_allocated_bytes, resident_bytes
from vitkit.bench.peers import build_peer, check_same_outputs
from vitkit.bench.timing import Result, alternate, gemm_candidate, paired_ratio, ratio_range
from vitkit.flops import count_flops

GIB = 2**30
MIB = 2**20


def environment() -> str:
    """One line on what the numbers were measured on (load average included: the machine is shared)."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.machine()} "
        f"{os.cpu_count()} logical CPUs, load average {load:.1f} at start"
    )


def _model(name: str, img_size: int | None = None, num_classes: int = 1000, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    overrides = {"num_classes": num_classes}
    if img_size is not None:
        overrides["img_size"] = img_size
    model = vitkit.create_model(name, **overrides)
    # The zero-initialised head would make every peer agree trivially; random logits make the check mean something.
    if isinstance(getattr(model, "head", None), nn.Linear):
        nn.init.normal_(model.head.weight, std=0.02)
    return model.eval()


def _forward(model: nn.Module, x: torch.Tensor) -> Callable[[], object]:
    def run() -> object:
        with torch.inference_mode():
            return model(x)

    return run


def _flops(model: nn.Module, x: torch.Tensor) -> float:
    return float(count_flops(model, tuple(x.shape[1:]), batch_size=x.shape[0]))


def _mfu(results: dict[str, Result], name: str) -> float:
    """Median over rounds of (model GFLOP/s) / (GEMM GFLOP/s) in the same round."""
    model, gemm = results[name], results["gemm"]
    return statistics.median(
        (model.flops / tm) / (gemm.flops / tg) for tm, tg in zip(model.samples, gemm.samples, strict=True)
    )


def _maybe_compile(module: nn.Module, compile: bool) -> nn.Module:
    return torch.compile(module) if compile else module


def inference_vs_peers(
    model_name: str = "ViT-B/16",
    batch_size: int = 8,
    peers: Sequence[str] = ("timm", "transformers", "torchvision"),
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
    model = _model(model_name, img_size)
    x = torch.randn(batch_size, model.config.in_chans, *model.config.img_size)
    flops = _flops(model, x)
    modules = {"vitkit": model}
    for peer in peers:
        modules[peer] = build_peer(peer, model)
        diff = check_same_outputs(model, modules[peer], x[:2])
        if log:
            log(f"{peer}: same weights, max |logits diff| {diff:.2e}")
    candidates = {name: _forward(_maybe_compile(m, compile), x) for name, m in modules.items()}
    gemm, gemm_flops = gemm_candidate()
    candidates["gemm"] = gemm
    on_round = None
    if log:
        on_round = lambda r, t: log(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:.3f}s" for k, v in t.items()))  # noqa: E731
    results = alternate(candidates, rounds=rounds, warmup=warmup + (2 if compile else 0), iters=iters, on_round=on_round,
                       clock=clock)
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
                "MFU": _mfu(results, name),
                "vs vitkit": paired_ratio(results, name, "vitkit"),
                "ratio range": f"{lo:.3f}-{hi:.3f}",
                "spread": r.spread,
            }
        )
    g = results["gemm"]
    rows.append({"implementation": "GEMM 2048^3 (ceiling)", "GFLOP/s": g.gflops_per_s, "best GFLOP/s": g.flops / g.best / 1e9,
                 "spread": g.spread})
    for row in rows:
        row.update(model=model_name, batch=batch_size, GFLOPs_per_image=flops / batch_size / 1e9)
    return rows


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
    model = _model(model_name, img_size)
    shape = (model.config.in_chans, *model.config.img_size)
    modules = {"vitkit": model}
    if peer:
        modules[peer] = build_peer(peer, model)
    candidates, meta = {}, {}
    for b in batch_sizes:
        x = torch.randn(b, *shape)
        flops = _flops(model, x)
        for name, m in modules.items():
            key = f"{name}@{b}"
            candidates[key] = _forward(m, x)
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
                     "GFLOP/s": r.gflops_per_s, "MFU": _mfu(results, key), "spread": r.spread})
    g = results["gemm"]
    rows.append({"model": model_name, "implementation": "GEMM 2048^3 (ceiling)", "GFLOP/s": g.gflops_per_s,
                 "spread": g.spread})
    return rows


def memory_fit(model: nn.Module, shape: tuple[int, ...], train: bool, batches: tuple[int, int] = (1, 2)) -> MemoryFit:
    """Affine peak-memory model: resident + fixed + per_image * batch.

    Inference (`train=False`): the peak of one no-grad forward at two batch sizes, plus parameters and buffers.
    Training (`train=True`): at the small batches that are cheap to run, the peak of a full step is set by the
    gradients and optimizer temporaries, not by the activations, so an affine fit through them says nothing about
    large batches. Instead the forward pass with autograd is measured (its peak = the activations kept for the
    backward pass), the gradients (one copy of the parameters) are added to `fixed`, and the parameters with their
    two AdamW moments are `resident`. This bounds the step's peak from above: for ViT-B/16 at batch 32 it gives
    3,936 MiB above resident against 3,655 MiB measured for the whole step (`checkpointing_memory`), 8% high, so the
    largest training batch is a slight underestimate.
    """
    was_training = model.training
    try:
        if not train:
            model.eval()
            return fit_memory(lambda b: peak_allocated_bytes(_forward(model, torch.randn(b, *shape))),
                              resident_bytes(model), batches)
        model.train()

        def measure(b: int) -> int:
            x = torch.randn(b, *shape)
            return peak_allocated_bytes(lambda: model(x))  # the graph (saved activations) dies with the output

        params = sum(p.numel() * p.element_size() for p in model.parameters())
        fit = fit_memory(measure, resident_bytes(model) + 2 * params, batches)
        fit.fixed += params
        return fit
    finally:
        model.train(was_training)


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor):
    """forward, cross-entropy, backward, optimizer step, gradients freed: what a training loop does per batch."""

    def step() -> None:
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def resolution_sweep(
    model_names: Sequence[str] = ("ViT-S/16", "ViT-B/16", "R50+ViT-B/16"),
    sizes: Sequence[int] = (160, 224, 288, 384),
    batch_size: int = 4,
    rounds: int = 3,
    budget_gib: float = 16.0,
    memory: bool = True,
    log: Callable[[str], None] | None = None,
    clock: str = "wall",
) -> list[dict]:
    """Appendix D.5 in miniature: inference images/s against resolution (all sizes of one model alternated, with the
    GEMM ceiling), and the largest inference and training batch that fits `budget_gib` (16 GiB: a TPUv3 core)."""
    rows = []
    for name in model_names:
        models, candidates = {}, {}
        for size in sizes:
            model = _model(name, img_size=size)
            x = torch.randn(batch_size, model.config.in_chans, size, size)
            models[size] = (model, x, _flops(model, x))
            candidates[size] = _forward(model, x)
        gemm, gemm_flops = gemm_candidate()
        candidates["gemm"] = gemm
        results = alternate(candidates, rounds=rounds, warmup=1, clock=clock)
        results["gemm"].flops = gemm_flops
        for size, (model, x, flops) in models.items():
            r = results[size]
            r.images, r.flops = batch_size, flops
            row = {"model": name, "resolution": size, "images/s": r.images_per_s, "GFLOPs/image": flops / batch_size / 1e9,
                   "MFU": _mfu(results, size), "spread": r.spread}
            if memory:
                shape = tuple(x.shape[1:])
                infer = memory_fit(model, shape, train=False)
                train = memory_fit(model, shape, train=True)
                budget = budget_gib * GIB
                row.update({"MiB/image (inference)": infer.per_image / MIB,
                            "largest batch (inference)": infer.largest_batch(budget),
                            "MiB/image (training)": train.per_image / MIB,
                            "largest batch (training)": train.largest_batch(budget)})
            rows.append(row)
            if log:
                log(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    return rows


def checkpointing_memory(
    model_name: str = "ViT-B/16", batch_size: int = 32, img_size: int | None = None, time_rounds: int = 0,
    log: Callable[[str], None] | None = None, clock: str = "wall",
) -> list[dict]:
    """Peak memory of one AdamW training step with and without gradient checkpointing (measured, not fitted); with
    `time_rounds`, also the step time of both, alternated."""
    model = _model(model_name, img_size)
    shape = (model.config.in_chans, *model.config.img_size)
    x, y = torch.randn(batch_size, *shape), torch.randint(0, model.config.num_classes, (batch_size,))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    step = _train_step(model, optimizer, x[:1], y[:1])
    step()
    resident = resident_bytes(model, optimizer)
    rows, steps = [], {}
    for enabled in (False, True):
        model.set_grad_checkpointing(enabled)
        step = _train_step(model, optimizer, x, y)
        peak = peak_allocated_bytes(step)
        label = "checkpointing" if enabled else "no checkpointing"
        steps[label] = (lambda s=step, e=enabled: (model.set_grad_checkpointing(e), s()))
        rows.append({"model": model_name, "batch": batch_size, "gradient checkpointing": enabled,
                     "peak above resident (MiB)": peak / MIB, "resident (MiB)": resident / MIB,
                     "peak total (MiB)": (peak + resident) / MIB})
        if log:
            log(str(rows[-1]))
    base = rows[0]["peak above resident (MiB)"]
    for row in rows:
        row["vs no checkpointing"] = row["peak above resident (MiB)"] / base
    if time_rounds:
        results = alternate(steps, rounds=time_rounds, warmup=0, clock=clock)
        for row, label in zip(rows, steps):
            row["step s (median)"] = results[label].median
            row["images/s"] = batch_size / results[label].median
    model.set_grad_checkpointing(False)
    return rows


def format_table(rows: list[dict], columns: Sequence[str] | None = None) -> str:
    """Markdown table; floats with 3 significant digits (ratios and MFU with 3 decimals)."""
    if not rows:
        return ""
    if columns is None:
        columns = list(dict.fromkeys(k for row in rows for k in row))

    def cell(key: str, value: object) -> str:
        if value is None or value == "":
            return ""
        if isinstance(value, bool):
            return "yes" if value else "no"
        if isinstance(value, float):
            if key in ("MFU", "spread"):
                return f"{100 * value:.1f}%"
            if key.startswith("vs "):
                return f"{value:.3f}"
            return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(c, row.get(c)) for c in columns) + " |")
    return "\n".join(lines)
