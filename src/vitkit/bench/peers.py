"""Peer implementations of the same ViT with identical weights: timm, transformers and torchvision.

timm and transformers go through the weight converters of `vitkit.weights` (`vitkit.to_timm`, `vitkit.to_hf`);
torchvision, which has no converter there, is mapped here. Every peer is checked against the vitkit model on one
input before it is timed (`check_same_outputs`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
from torch import nn
from torchvision.models.vision_transformer import VisionTransformer

import vitkit

PEERS = ("timm", "transformers", "torchvision")


def _plain_vit_config(model: nn.Module):
    """The config of a plain ViT (class token, learned 1-D position embedding, no pre-logits), or a ValueError."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) != "vit":
        raise ValueError("peers are built from a vitkit VisionTransformer")
    if cfg.resnet_layers is not None or cfg.pos_embed != "learned" or cfg.representation_size:
        raise ValueError(
            "peers exist for plain ViTs only (no hybrid, learned 1-D position embedding, no pre-logits)"
        )
    later = [name for name, paper in LATER_PARTS.items() if getattr(cfg, name) != paper]
    if later:
        raise ValueError(f"this peer has the paper's ViT only, not {', '.join(later)}")
    return cfg


# The parts of later ViTs (DeiT III, CLIP, SigLIP, DINOv2) with the paper's value, which torchvision's ViT has.
LATER_PARTS = dict(
    layer_scale=None,
    num_reg_tokens=0,
    prefix_pos_embed=True,
    pre_norm=False,
    patch_bias=True,
    qkv_bias=True,
    fc_norm=False,
)


def _load_mapped(
    target: nn.Module,
    source: dict[str, torch.Tensor],
    mapping: Callable[[str, torch.Tensor], dict[str, torch.Tensor]],
) -> None:
    """Load `source` into `target` through a key mapping; strict, so nothing is silently left at its init."""
    state = {}
    for key, value in source.items():
        state.update(mapping(key, value))
    target.load_state_dict(state, strict=True)


# --- timm --------------------------------------------------------------------------------------------------------


def timm_peer(model: nn.Module) -> nn.Module:
    """timm's VisionTransformer with the vitkit model's weights (`vitkit.to_timm`: fused qkv, F.sdpa)."""
    return vitkit.to_timm(model)


def hf_peer(model: nn.Module) -> nn.Module:
    """transformers' model with the vitkit model's weights (`vitkit.to_hf`: ViTForImageClassification, or the
    vision tower of DINOv2, CLIP or SigLIP), SDPA attention."""
    peer = vitkit.to_hf(model)
    peer.config._attn_implementation = "sdpa"
    return _LogitsOnly(peer)


class _LogitsOnly(nn.Module):
    """Calls a transformers model on pixel values and returns what the vitkit model returns, like the other
    peers: the logits, a CLIP tower's projected image embedding, else a tower's pooled output."""

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        self.hf = hf_model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.hf(pixel_values=x)
        for name in ("logits", "image_embeds", "pooler_output"):
            if getattr(out, name, None) is not None:
                return getattr(out, name)
        raise ValueError(f"{type(self.hf).__name__} returned none of logits, image_embeds, pooler_output")


# --- torchvision ----------------------------------------------------------------------------------------------------


def torchvision_peer(model: nn.Module) -> nn.Module:
    """torchvision's VisionTransformer (nn.MultiheadAttention, fused in_proj) with the vitkit model's weights."""
    cfg = _plain_vit_config(model)
    if cfg.classifier != "token" or cfg.activation != "gelu" or cfg.in_chans != 3:
        raise ValueError("torchvision's ViT has a class-token head, exact GELU and RGB input only")
    if cfg.img_size[0] != cfg.img_size[1] or cfg.layer_norm_eps != 1e-6:
        raise ValueError("torchvision's ViT takes square images and LayerNorm eps 1e-6 only")
    peer = VisionTransformer(
        image_size=cfg.img_size[0],
        patch_size=cfg.patch_size[0],
        num_layers=cfg.depth,
        num_heads=cfg.num_heads,
        hidden_dim=cfg.hidden_size,
        mlp_dim=cfg.mlp_dim,
        num_classes=cfg.num_classes,
    )

    def mapping(key: str, value: torch.Tensor) -> dict[str, torch.Tensor]:
        fixed = {
            "cls_token": "class_token",
            "pos_embed.weight": "encoder.pos_embedding",
            "patch_embed.proj.weight": "conv_proj.weight",
            "patch_embed.proj.bias": "conv_proj.bias",
            "norm.weight": "encoder.ln.weight",
            "norm.bias": "encoder.ln.bias",
            "head.weight": "heads.head.weight",
            "head.bias": "heads.head.bias",
        }
        if key in fixed:
            return {fixed[key]: value}
        m = re.fullmatch(r"blocks\.(\d+)\.(.+)\.(weight|bias)", key)
        if m is None:
            raise KeyError(key)
        i, part, kind = m.groups()
        layer = f"encoder.layers.encoder_layer_{i}"
        if part == "attn.qkv":
            return {f"{layer}.self_attention.in_proj_{kind}": value}
        new = {
            "norm1": "ln_1",
            "norm2": "ln_2",
            "attn.proj": "self_attention.out_proj",
            "mlp.fc1": "mlp.0",
            "mlp.fc2": "mlp.3",
        }[part]
        return {f"{layer}.{new}.{kind}": value}

    _load_mapped(peer, model.state_dict(), mapping)
    return peer


BUILDERS = {"timm": timm_peer, "transformers": hf_peer, "torchvision": torchvision_peer}


def build_peer(name: str, model: nn.Module) -> nn.Module:
    """The `name` peer ('timm', 'transformers', 'torchvision') of a vitkit ViT, same weights, same mode."""
    if name not in BUILDERS:
        raise ValueError(f"unknown peer {name!r}; expected one of {list(PEERS)}")
    peer = BUILDERS[name](model)
    return peer.train(model.training)


def check_same_outputs(model: nn.Module, peer: nn.Module, x: torch.Tensor, atol: float = 1e-4) -> float:
    """Max |logits difference| between vitkit and a peer on `x`; a ValueError beyond `atol` (scaled by the
    logits' magnitude) -- a benchmark of a peer that computes something else would be meaningless."""
    with torch.inference_mode():
        ours, theirs = model(x), peer(x)
    diff = (ours - theirs).abs().max().item()
    scale = max(1.0, ours.abs().max().item())
    if diff > atol * scale:
        raise ValueError(f"peer disagrees with vitkit: max |diff| {diff:.3g} (logits up to {scale:.3g})")
    return diff
