"""`vitkit train` with one part of a bf16 run kept in float32, to see whether that part is what bf16 costs.

    python benchmarks/bf16_training_variants.py ends train --out runs/ends --precision bf16 --seed S
    python benchmarks/bf16_training_variants.py attention train --out runs/attn --precision bf16 --seed S

`ends`: the patch embedding and the classifier head run in float32 (autocast off for them); `attention`: q k^T,
the softmax and the product with v in float32 (the projections stay bf16). The change is made in this process
only, so the recipe must train in one process (train.processes = 1, as the default recipe does).
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from vitkit.cli import main
from vitkit.models import self_attention, vit


def float32_ends() -> None:
    patchify, forward_head = vit.VisionTransformer.patchify, vit.VisionTransformer.forward_head

    def patchify_fp32(self, x):
        with torch.autocast(x.device.type, enabled=False):
            return patchify(self, x.float())

    def forward_head_fp32(self, x, pre_logits=False):
        with torch.autocast(x.device.type, enabled=False):
            return forward_head(self, x.float(), pre_logits)

    vit.VisionTransformer.patchify = patchify_fp32
    vit.VisionTransformer.forward_head = forward_head_fp32


def float32_attention() -> None:
    def forward(self, x, need_weights=False, queries=None):
        B, T, D = x.shape
        q, k, v = (
            t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2) for t in self.project(x, queries)
        )
        with torch.autocast(x.device.type, enabled=False):
            out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), scale=self.scale)
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(B, q.shape[2], D))), None

    self_attention.Attention.forward = forward


VARIANTS = {"ends": float32_ends, "attention": float32_attention}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in VARIANTS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(VARIANTS)}}} train [vitkit train arguments]")
    VARIANTS[sys.argv[1]]()
    sys.exit(main(sys.argv[2:]))
