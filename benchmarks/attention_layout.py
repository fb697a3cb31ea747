"""How q, k and v are cut from the one qkv projection, forward + backward of one attention layer of the default
Fashion-MNIST model (batch 128, 49 tokens, width 96, 3 heads), side by side:

- timm's layout: `reshape(B, T, 3, H, hd).permute(2, 0, 3, 1, 4).unbind(0)`; its backward stacks the three
  gradients and copies the stack back through the permutation;
- vitkit's: `split(D, -1)` then per-head views; its backward is one concatenation into the projection's layout.

    python benchmarks/attention_layout.py [--threads 1] [--clock cpu] [--rounds 15]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from vitkit.bench.table import format_table
from vitkit.bench.timing import alternate, paired_ratio
from vitkit.models.self_attention import Attention


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    B, T, H, D = 128, 49, 3, 96
    torch.manual_seed(0)
    vitkit_attention = Attention(D, H, attn_drop=0.0, proj_drop=0.0)
    x = torch.randn(B, T, D, requires_grad=True)
    grad = torch.randn(B, T, D)

    def timm_layout(x: torch.Tensor) -> torch.Tensor:
        a = vitkit_attention
        q, k, v = a.qkv(x).reshape(B, T, 3, H, D // H).permute(2, 0, 3, 1, 4).unbind(0)
        return a.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, D))

    def vitkit_layout(x: torch.Tensor) -> torch.Tensor:
        return vitkit_attention(x)[0]

    torch.testing.assert_close(vitkit_layout(x), timm_layout(x))
    candidates = {
        "timm: permute + unbind": lambda: timm_layout(x).backward(grad),
        "vitkit: split + head views": lambda: vitkit_layout(x).backward(grad),
    }
    results = alternate(candidates, rounds=args.rounds, warmup=2, clock=args.clock)
    layer = f"one attention layer, forward + backward ({args.threads} thread(s), {args.clock} clock, {args.rounds} rounds)"
    print(
        format_table(
            [
                {
                    layer: name,
                    "median ms": 1e3 * r.median,
                    "vs timm's layout": paired_ratio(results, name, "timm: permute + unbind"),
                }
                for name, r in results.items()
            ]
        )
    )


if __name__ == "__main__":
    main()
