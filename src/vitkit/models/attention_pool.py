"""Multihead attention pooling ('map'; Lee et al. 2019, as big_vision's MAPHead and SigLIP use it): one learned
query attends over the encoded patch tokens, and a residual MLP follows, in place of a class token."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.mlp import build_mlp


class AttentionPool(nn.Module):
    """y = a + MLP(LN(a)) with a = MHA(query=latent, keys=values=tokens). Names follow timm's
    AttentionPoolLatent (latent, q, kv, proj, norm, mlp), so its state dicts map one-to-one."""

    def __init__(self, dim: int, num_heads: int, mlp_dim: int, activation: str, eps: float) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.latent = nn.Parameter(torch.zeros(1, 1, dim))
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim, eps=eps)
        self.mlp = build_mlp(dim, mlp_dim, activation, 0.0)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """The pooled vector [B, D] of tokens [B, T, D]."""
        B, T, D = tokens.shape
        heads = (self.num_heads, D // self.num_heads)
        q = self.q(self.latent).unflatten(-1, heads).transpose(1, 2).expand(B, -1, -1, -1)
        k, v = (t.unflatten(-1, heads).transpose(1, 2) for t in self.kv(tokens).split(D, -1))
        pooled = self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, 1, D))
        return (pooled + self.mlp(self.norm(pooled)))[:, 0]
