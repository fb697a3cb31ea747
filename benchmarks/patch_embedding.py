"""Eq. 1's patch embedding as vitkit computes it (one matrix product over the flattened patches) against the
strided convolution of the same kernel (timm's and torchvision's way), forward and backward, in fp32 and under bf16
autocast, side by side on this CPU, for three models' embeddings at their training batch: the Fashion-MNIST
recipe's ViT-Mini/4 (28x28 grey, patches of 4), ViT-B/16 at 224, and the budget recipe's R50 hybrid (1x1 patches
of a 7x7 feature map of 256 channels, which carries a gradient).

    python benchmarks/patch_embedding.py [--threads 2] [--rounds 15]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch

from vitkit.bench.table import environment, format_table
from vitkit.bench.timing import alternate, paired_ratio, ratio_range
from vitkit.models.vit import PatchEmbed

# name: (batch, input channels, input size, patch, width, whether the input carries a gradient)
EMBEDDINGS = {
    "ViT-Mini/4 at 28, batch 128": (128, 1, 28, 4, 96, False),
    "ViT-B/16 at 224, batch 32": (32, 3, 224, 16, 768, False),
    "R50 hybrid's 1x1 patches, batch 128": (128, 256, 7, 1, 96, True),
}


def convolution(embed: PatchEmbed, x: torch.Tensor) -> torch.Tensor:
    """The same projection as a strided convolution, tokens laid out as vitkit's."""
    return embed.proj(x).flatten(2).transpose(1, 2)


def product(embed: PatchEmbed, x: torch.Tensor) -> torch.Tensor:
    return embed(x)[0]


def candidate(way: Callable, embed: PatchEmbed, x: torch.Tensor, bf16: bool) -> Callable[[], None]:
    """One forward and backward pass of `way` (gradients of E, its bias, and the input where it has one)."""

    def run() -> None:
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            tokens = way(embed, x)
        tokens.float().sum().backward()

    return run


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    candidates = {}
    for name, (batch, channels, size, patch, width, input_grad) in EMBEDDINGS.items():
        embed = PatchEmbed(channels, width, (patch, patch))
        x = torch.randn(batch, channels, size, size, requires_grad=input_grad)
        torch.testing.assert_close(product(embed, x), convolution(embed, x), rtol=1e-4, atol=1e-4)
        for dtype, bf16 in (("fp32", False), ("bf16", True)):
            for way in (convolution, product):
                candidates[f"{name} | {dtype} | {way.__name__}"] = candidate(way, embed, x, bf16)
    results = alternate(candidates, rounds=args.rounds, warmup=2)
    print(f"<!-- {environment()} -->")
    rows = []
    for key, result in results.items():
        name, dtype, way = key.split(" | ")
        reference = f"{name} | {dtype} | convolution"
        low, high = ratio_range(results, key, reference)
        rows.append(
            {
                "embedding": name,
                "dtype": dtype,
                "computed as": way,
                "median ms": round(1e3 * result.median, 2),
                "speed vs convolution": f"{paired_ratio(results, key, reference):.2f} ({low:.2f}-{high:.2f})",
            }
        )
    print(format_table(rows))
    return rows


if __name__ == "__main__":
    main()
