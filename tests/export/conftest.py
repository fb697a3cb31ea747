"""Small models of every kind the exports must carry, with random weights so that nothing hides."""

from __future__ import annotations

import pytest
import torch

import vitkit
from tiny import TINY_VIT_CONFIG

pytest.importorskip("onnxruntime")

TINY_VIT = dict(TINY_VIT_CONFIG, patch_size=8, num_classes=5, mlp_dim=48, activation="gelu_tanh")
TINY_FAMILY = dict(
    TINY_VIT_CONFIG, img_size=24, patch_size=8, num_classes=5, mlp_dim=48
)  # the family's activation
# (registry name, overrides): the heads, every position embedding of D.4, pre-logits, the hybrid, BiT, and today's
# families: registers with LayerScale, attention pooling ('map'), CLIP's pre-norm with QuickGELU.
KINDS = {
    "token": ("ViT-B/16", TINY_VIT),
    "gap": ("ViT-B/16", dict(TINY_VIT, classifier="gap")),
    "relative": ("ViT-B/16", dict(TINY_VIT, pos_embed="relative")),
    "learned_2d": ("ViT-B/16", dict(TINY_VIT, pos_embed="learned_2d")),
    "sincos": ("ViT-B/16", dict(TINY_VIT, pos_embed="sincos")),
    "none": ("ViT-B/16", dict(TINY_VIT, pos_embed="none")),
    "pre_logits": ("ViT-B/16", dict(TINY_VIT, representation_size=24)),
    "hybrid": (
        "R50+ViT-B/16",
        dict(TINY_VIT, img_size=32, patch_size=1, resnet_layers=(1, 1), resnet_width=0.5),
    ),
    "bit": ("R50x1", dict(img_size=32, num_classes=5, layers=(1, 1, 1, 1))),
    "dinov2_reg": ("DINOv2-S/14-reg4", TINY_FAMILY),
    "siglip_map": ("SigLIP-B/16", TINY_FAMILY),
    "clip_quickgelu": ("CLIP-B/16-quickgelu", TINY_FAMILY),
}


def tiny_model(kind: str, seed: int = 0) -> torch.nn.Module:
    """A random-weight model of `kind` (norm scales near 1, small kernels) with class names."""
    name, overrides = KINDS[kind]
    model = vitkit.create_model(name, **overrides)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param_name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            is_scale = p.ndim == 1 and param_name.endswith(("weight", "gamma"))  # norms, LayerScale
            p.copy_(1 + 0.1 * noise if is_scale else 0.05 * noise)
    model.class_names = [f"class {i}" for i in range(model.config.num_classes)]
    return model.eval()
