"""`vitkit bench serve`: what serving a ViT costs per runtime, side by side in one process.

PyTorch eager in float32 and in bf16 (weights held in bf16), the same with the dense layers packed for oneDNN
(`packed`: what `vitkit serve` runs on a CPU, `packed_linears`), torch.compile'd (inductor, frozen weights) in
both, and ONNX Runtime on the exported file in float32 and int8 (dynamic quantisation), at
each batch size, timed in alternation (`timing.alternate`: medians over rounds, paired ratios against eager
float32). The PyTorch candidates run on --device (CUDA when present with 'auto'); ONNX Runtime runs on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitkit.allocator import keep_freed_memory
from vitkit.bench.candidates import bench_model, forward_call
from vitkit.bench.timing import alternate, paired_ratio, ratio_range, round_logger
from vitkit.device import resolve_device
from vitkit.export import export_onnx
from vitkit.export.onnx_export import runner
from vitkit.inference_weights import compiled_for_inference, weights_in
from vitkit.models.registry import Model
from vitkit.packed_linear import packed_linears, packs

NAME = "serve"
HELP = (
    "serving latency and throughput: PyTorch eager/packed/compiled fp32 and bf16, ONNX Runtime fp32 and int8"
)
COLUMNS = [
    "model",
    "batch",
    "runtime",
    "precision",
    "device",
    "latency ms",
    "images/s",
    "vs eager fp32",
    "ratio range",
    "max |logit diff|",
    "top-1 agree",
    "spread",
]
REFERENCE = "eager fp32"
Log = Callable[[str], None] | None


def run(args: argparse.Namespace, log: Log) -> list[dict]:
    device = resolve_device(args.device)
    if device.type == "cpu":
        keep_freed_memory()  # for every candidate alike, as `bench inference` does
    rows = []
    for name in args.models:
        model = bench_model(name).to(device)
        with tempfile.TemporaryDirectory(prefix="vitkit-bench-serve-") as directory:
            sessions = onnx_runners(model, Path(directory), log)
            for batch in args.batch_sizes:
                rows += serve_rows(model, name, batch, sessions, args, log)
    return rows


def onnx_runners(model: Model, directory: Path, log: Log) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """ONNX Runtime sessions of the float32 and int8 exports of `model` (exported from a CPU copy), as many
    intra-op threads as torch uses."""
    cpu_model = copy.deepcopy(model).cpu()
    out = {}
    for precision in ("fp32", "int8"):
        path = directory / f"{precision}.onnx"
        export_onnx(cpu_model, path, int8=precision == "int8", log=log)
        out[precision] = runner(path, threads=torch.get_num_threads())
    return out


def serve_rows(
    model: Model,
    name: str,
    batch: int,
    sessions: dict[str, Callable[[np.ndarray], np.ndarray]],
    args: argparse.Namespace,
    log: Log,
) -> list[dict[str, Any]]:
    """Every candidate at one batch size, timed in the same rounds; one row each."""
    device = next(model.parameters()).device
    x = torch.rand(batch, *model.config.input_size, device=device) * 2 - 1
    x_numpy = x.cpu().numpy()
    bf16_model = copy.deepcopy(model)
    compile = not args.no_compile
    if compile:
        torch._dynamo.reset()  # each batch size compiled for its own shape, not as a dynamic graph
    with contextlib.ExitStack() as stack:
        stack.enter_context(weights_in(bf16_model, torch.bfloat16))
        torch_models = {"fp32": (model, None), "bf16": (bf16_model, torch.bfloat16)}
        candidates: dict[str, Callable[[], object]] = {}
        for precision, (module, dtype) in torch_models.items():
            candidates[f"eager {precision}"] = forward_call(module, x, dtype)
        for precision, (module, dtype) in torch_models.items():
            if packs(module):  # a copy: the eager rows keep plain PyTorch's layers
                packed = stack.enter_context(packed_linears(copy.deepcopy(module)))
                candidates[f"packed {precision}"] = forward_call(packed, x, dtype)
        if compile:
            for precision, (module, dtype) in torch_models.items():
                compiled = stack.enter_context(compiled_for_inference(module))
                candidates[f"compiled {precision}"] = forward_call(compiled, x, dtype)
        for precision, session in sessions.items():
            candidates[f"onnxruntime {precision}"] = partial(session, x_numpy)
        logits = {key: _logits(call()) for key, call in candidates.items()}
        if log:
            log(f"{name} batch {batch}: timing {', '.join(candidates)}")
        results = alternate(
            candidates,
            rounds=args.rounds,
            warmup=args.warmup,
            on_round=round_logger(log, args.rounds),
            clock=args.clock,
        )
    reference = logits[REFERENCE]
    rows = []
    for key, result in results.items():
        runtime, precision = key.rsplit(" ", 1)
        result.images = batch
        low, high = ratio_range(results, key, REFERENCE)
        rows.append(
            {
                "model": name,
                "batch": batch,
                "runtime": runtime,
                "precision": precision,
                "device": "cpu" if runtime == "onnxruntime" else device.type,
                "latency ms": 1000 * result.median,
                "images/s": result.images_per_s,
                "vs eager fp32": paired_ratio(results, key, REFERENCE),
                "ratio range": f"{low:.2f}-{high:.2f}",
                "max |logit diff|": float((logits[key] - reference).abs().max()),
                "top-1 agree": f"{int((logits[key].argmax(-1) == reference.argmax(-1)).sum())}/{batch}",
                "spread": result.spread,
            }
        )
    return rows


def _logits(output: object) -> torch.Tensor:
    """A candidate's output as float32 CPU logits (numpy from ONNX Runtime, a tensor from PyTorch)."""
    if isinstance(output, np.ndarray):
        return torch.from_numpy(output).float()
    assert isinstance(output, torch.Tensor)
    return output.detach().float().cpu()
