"""Multi-head self-attention (MSA of Eq. 2, Appendix A): fused SDPA, or an explicit path that also returns the
attention probabilities (Fig. 6/7) and that is the faster one for bf16 on a CPU without AMX tiles."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.device import cpu_flags
from vitkit.models.posemb import RelativePositionBias


class Attention(nn.Module):
    """Multi-head self-attention: fused SDPA, or an explicit path that also returns the probabilities.

    Which of the two computes bf16 on a CPU is fixed when the module is built, from the CPU's flags
    (`fused_bf16_on_cpu`); the rest of the choice follows the tensors of each call (device, autocast dtype,
    gradients)."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        attn_drop: float,
        proj_drop: float,
        num_rel_tokens: int = 0,
        qkv_bias: bool = True,
    ):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.rel_pos = RelativePositionBias(num_rel_tokens, self.head_dim) if num_rel_tokens else None
        self.fused_bf16_on_cpu = has_amx_tiles()

    def forward(
        self, x: torch.Tensor, need_weights: bool = False, queries: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attention of every token, or of the first `queries` tokens only (over the keys and values of all)."""
        B, T, D = x.shape
        # One projection, split into per-head views [B, heads, T, head_dim]: the backward of split is one
        # concatenation into the layout the projection's backward reads (permute + unbind costs two copies).
        q, k, v = (
            t.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2) for t in self.project(x, queries)
        )
        bias = self.rel_pos(q * self.scale, T) if self.rel_pos is not None else None
        dropout_p = self.attn_drop if self.training else 0.0
        if need_weights or not self.fused_pays(q):
            logits = (q * self.scale) @ k.transpose(-2, -1)
            weights = (logits if bias is None else logits + bias).softmax(dim=-1)
            out = F.dropout(weights, dropout_p, self.training) @ v
        else:
            weights = None
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=dropout_p, scale=self.scale
            )
        out = out.transpose(1, 2).reshape(B, q.shape[2], D)
        return self.proj_drop(self.proj(out)), weights if need_weights else None

    def project(self, x: torch.Tensor, queries: int | None) -> tuple[torch.Tensor, ...]:
        """q, k, v [B, T, D] from the fused projection; q of the first `queries` tokens only when given."""
        D = x.shape[-1]
        if queries is None:
            return self.qkv(x).split(D, -1)
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(x[:, :queries], weight[:D], None if bias is None else bias[:D])
        return q, *F.linear(x, weight[D:], None if bias is None else bias[D:]).split(D, -1)

    def fused_pays(self, q: torch.Tensor) -> bool:
        """Whether torch's fused attention is the fast way for `q`. Everywhere but in bf16 on a CPU, where its
        kernel pays only without gradients and with AMX tiles: without AMX it gains nothing over float32, and
        forward and backward it is slower than two batched bf16 products and a softmax, as timm's and
        torchvision's unfused attention compute (benchmarks/cpu_attention_kernels.py measures both;
        docs/PRECISION.md has the figures)."""
        if q.device.type != "cpu" or q.dtype != torch.bfloat16:
            return True
        return self.fused_bf16_on_cpu and not q.requires_grad


def has_amx_tiles() -> bool:
    """Whether this CPU has AMX bf16 tiles."""
    return "amx_bf16" in cpu_flags()
