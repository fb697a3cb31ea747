"""torch's fused attention kernel against two batched matrix products and a softmax (vitkit's unfused path), in fp32
and in bf16, without gradients and forward+backward, side by side on this CPU: what
`vitkit.models.self_attention.Attention.fused_pays` decides from. Two layers: one of ViT-S/16 at batch 8 (197
tokens, 6 heads of 64) and one of the Fashion-MNIST recipe's model at its batch of 128 (49 tokens, 3 heads of
32).

    python benchmarks/cpu_attention_kernels.py [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F

from vitkit.bench.table import environment, format_table
from vitkit.bench.timing import alternate, paired_ratio

LAYERS = {"ViT-S/16, batch 8": (8, 6, 197, 64), "recipe model, batch 128": (128, 3, 49, 32)}


def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, scale=q.shape[-1] ** -0.5)


def unfused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return ((q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)).softmax(
        dim=-1
    ) @ v  # as vitkit.models.self_attention.Attention


def candidate(kernel: Callable, inputs: list[torch.Tensor], backward: bool) -> Callable[[], object]:
    """One call of `kernel`: under no_grad, or forward and backward of the sum (gradients of q, k and v)."""
    if not backward:
        return lambda: torch.no_grad()(kernel)(*inputs)
    leaves = [t.detach().requires_grad_() for t in inputs]
    return lambda: kernel(*leaves).sum().backward()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    candidates = {}
    for layer, shape in LAYERS.items():
        q, k, v = torch.randn(3, *shape).unbind(0)
        for dtype in (torch.float32, torch.bfloat16):
            inputs = [t.to(dtype) for t in (q, k, v)]
            torch.testing.assert_close(fused(*inputs), unfused(*inputs), atol=2e-2, rtol=2e-2)
            for mode, backward in (("no grad", False), ("forward+backward", True)):
                for name, kernel in (("fused", fused), ("unfused", unfused)):
                    key = (layer, str(dtype).removeprefix("torch."), mode, name)
                    candidates[" | ".join(key)] = candidate(kernel, inputs, backward)
    results = alternate(candidates, rounds=args.rounds, warmup=2)
    print(f"<!-- {environment()} -->")
    rows = []
    for name, result in results.items():
        layer, dtype, mode, kernel = name.split(" | ")
        rows.append(
            {
                "layer": layer,
                "dtype": dtype,
                "pass": mode,
                "kernel": kernel,
                "median ms": 1e3 * result.median,
                "speed vs fused": paired_ratio(results, name, name.rsplit(" | ", 1)[0] + " | fused"),
            }
        )
    print(format_table(rows))


if __name__ == "__main__":
    main()
