"""torch's fused attention kernel against two batched matrix products and a softmax (vitkit's unfused path), the
attention of one ViT-S/16 layer at batch 8 (197 tokens, 6 heads of 64), no-grad, in fp32 and in bf16, side by
side on this CPU: what `vitkit.models.vit.fused_attention_pays` decides from.

    python benchmarks/cpu_attention_kernels.py [--threads 2] [--rounds 15] [--tokens 197]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from vitkit.bench.table import environment, format_table
from vitkit.bench.timing import alternate, paired_ratio


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=197)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    B, H, T, hd = 8, 6, args.tokens, 64
    torch.manual_seed(0)
    q, k, v = torch.randn(3, B, H, T, hd).unbind(0)
    scale = hd**-0.5

    def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, scale=scale)

    def unfused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return ((q * scale) @ k.transpose(-2, -1)).softmax(dim=-1) @ v  # as vitkit.models.vit.Attention

    candidates = {}
    for dtype in (torch.float32, torch.bfloat16):
        inputs = [t.to(dtype) for t in (q, k, v)]
        torch.testing.assert_close(fused(*inputs), unfused(*inputs), atol=2e-2, rtol=2e-2)
        name = str(dtype).removeprefix("torch.")
        candidates[f"fused {name}"] = lambda inputs=inputs: fused(*inputs)
        candidates[f"unfused {name}"] = lambda inputs=inputs: unfused(*inputs)
    with torch.no_grad():
        results = alternate(candidates, rounds=args.rounds, warmup=2)
    print(f"<!-- {environment()} -->")
    rows = []
    for name, result in results.items():
        reference = "fused " + name.split()[1]
        ratio = paired_ratio(results, name, reference)
        rows.append(
            {"attention of one layer": name, "median ms": 1e3 * result.median, "speed vs fused": ratio}
        )
    print(format_table(rows))


if __name__ == "__main__":
    main()
