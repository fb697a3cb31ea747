"""Tiny models of today's ViT families, one definition for the tests of every path (resolution, export,
inspection, training): each keeps its registry entry's parts (registers, LayerScale, pre-norm, QuickGELU, the
'map' head, patch-only position embeddings) at the size of `TINY_VIT_GRID_CONFIG`, every parameter random."""

from __future__ import annotations

import torch

import vitkit
from tiny import TINY_VIT_GRID_CONFIG
from vitkit.models.registry import Model

# name -> the registry entry whose parts it keeps
FAMILY_LIKE = {
    "deit3": "DeiT3-S/16",  # LayerScale, no position rows for the class token
    "dinov2_reg": "DINOv2-S/14-reg4",  # + 4 registers, pooling class token and patch mean
    "clip": "CLIP-B/16-quickgelu",  # pre-norm, no patch bias, QuickGELU, position rows for the class token
    "siglip": "SigLIP-B/16",  # attention pooling ('map'), no class token
}


def build_tiny_family(kind: str, **overrides) -> Model:
    """The tiny model of `kind` (a FAMILY_LIKE key) in eval mode, the same random weights at every call: norm
    scales and LayerScale around 1, everything else (tokens, position rows, heads) N(0, 0.05), so that every part
    changes the output."""
    torch.manual_seed(0)
    fields = {**TINY_VIT_GRID_CONFIG, "patch_size": 8, **overrides}
    model = vitkit.create_model(FAMILY_LIKE[kind], **fields)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            is_scale = p.ndim == 1 and name.endswith(("weight", "gamma", "scale"))
            p.copy_(1 + 0.2 * noise if is_scale else 0.05 * noise)
    return model.eval()
