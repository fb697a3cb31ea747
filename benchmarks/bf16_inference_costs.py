"""What the parts of a bf16 forward pass cost: vitkit's inference path (`Precision.inference`) against the same
model with one part left out, alternated in one process with the bf16 GEMM ceiling.

    python benchmarks/bf16_inference_costs.py [--model ViT-B/16] [--batch-size 8] [--threads 2] [--rounds 9]

Variants: `no GELU` (the MLP's activation replaced by the identity), `no bias` (every Linear without its bias),
`no attention` (each layer's attention output replaced by its values: the projections stay, the products and
softmax of the attention go), `weights packed` (every Linear's bf16 weight reordered once into oneDNN's blocked
layout, which an eager product otherwise does at every call; through torch's private `torch.ops.mkldnn` operators
that compiling with frozen weights calls: a measurement, not a path vitkit takes), `autocast alone` (the weights
float32, cast by autocast at every call). A variant's speed relative to the full path says what the part costs;
the variants other than `weights packed` compute other functions, so only their time is meaningful.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import types

import torch
from torch import nn

from vitkit.allocator import keep_freed_memory
from vitkit.bench.candidates import bench_model, forward_call, forward_flops
from vitkit.bench.timing import alternate, gemm_candidate, mfu, paired_ratio
from vitkit.inference_weights import weights_in
from vitkit.models.self_attention import Attention


def values_only(self: Attention, x: torch.Tensor, need_weights: bool = False) -> tuple[torch.Tensor, None]:
    """Attention.forward with the attention left out: the values go straight to the output projection."""
    v = self.qkv(x).chunk(3, dim=-1)[2]
    return self.proj_drop(self.proj(v)), None


def without(model: nn.Module, part: str) -> nn.Module:
    """A copy of `model` with `part` ('gelu', 'bias' or 'attention') left out."""
    model = copy.deepcopy(model)
    for module in model.modules():
        if part == "gelu" and isinstance(module, nn.GELU):
            module.forward = nn.Identity().forward  # type: ignore[method-assign]
        if part == "bias" and isinstance(module, nn.Linear):
            module.bias = None
        if part == "attention" and isinstance(module, Attention):
            module.forward = types.MethodType(values_only, module)  # type: ignore[method-assign]
    return model


def pack_weights(model: nn.Module, rows: int) -> None:
    """Reorder every Linear's weight once into oneDNN's layout for products of `rows` rows, in place."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            packed = torch.ops.mkldnn._reorder_linear_weight(module.weight.detach(), rows)

            def forward(self: nn.Linear, x: torch.Tensor, packed: torch.Tensor = packed) -> torch.Tensor:
                return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")

            module.forward = types.MethodType(forward, module)  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="ViT-B/16")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keep_freed_memory()  # as `vitkit bench inference`: no call faults its activations in again
    model = bench_model(args.model)
    x = torch.randn(args.batch_size, *model.config.input_size)
    flops = forward_flops(model, x)
    parts = {"no GELU": "gelu", "no bias": "bias", "no attention": "attention"}
    variants = {"full": model, **{name: without(model, part) for name, part in parts.items()}}
    if torch.backends.mkldnn.is_available():  # the packing goes through oneDNN's operators
        variants["weights packed"] = copy.deepcopy(model)
    stride, size = model.config.input_stride, x.shape[-2:]
    tokens = (size[0] // stride) * (size[1] // stride) + (model.config.classifier == "token")
    with contextlib.ExitStack() as stack:
        candidates = {}
        for name, variant in variants.items():
            held = copy.deepcopy(variant)
            stack.enter_context(weights_in(held, torch.bfloat16))
            if name == "weights packed":
                pack_weights(held, rows=x.shape[0] * tokens)
            candidates[name] = forward_call(held, x, torch.bfloat16)
        candidates["autocast alone"] = forward_call(model, x, torch.bfloat16)
        candidates["gemm"], gemm_flops = gemm_candidate(dtype=torch.bfloat16)
        results = alternate(candidates, rounds=args.rounds, warmup=2)
    results["gemm"].flops = gemm_flops
    print(f"{args.model}, batch {args.batch_size}, {args.threads} threads, {args.rounds} rounds, bf16")
    print("| variant | ms per batch | MFU | speed vs full |")
    print("|---|---|---|---|")
    for name in candidates:
        if name == "gemm":
            continue
        results[name].flops = flops
        ms = 1e3 * results[name].median
        print(f"| {name} | {ms:.1f} | {mfu(results, name):.1%} | {paired_ratio(results, name, 'full'):.3f} |")
    print(f"| GEMM 2048^3 ceiling | {results['gemm'].gflops_per_s:,.0f} GFLOP/s | | |")


if __name__ == "__main__":
    main()
