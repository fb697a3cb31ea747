"""Named variants: paper names ('ViT-B/16', 'R50+ViT-B/16', 'R50x1') and timm names ('vit_base_patch16_224')."""

from __future__ import annotations

import contextlib
import fnmatch
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from vitkit.models.config import ResNetConfig, ViTConfig, config_from_dict
from vitkit.models.mpp import MaskedPatchPrediction
from vitkit.models.resnet import ResNetV2
from vitkit.models.vit import VisionTransformer

# Table 1 of the paper: (hidden size D, layers, heads, MLP size).
VIT_SIZES = {
    "Ti": dict(hidden_size=192, depth=12, num_heads=3, mlp_dim=768),
    "S": dict(hidden_size=384, depth=12, num_heads=6, mlp_dim=1536),
    "B": dict(hidden_size=768, depth=12, num_heads=12, mlp_dim=3072),
    "L": dict(hidden_size=1024, depth=24, num_heads=16, mlp_dim=4096),
    "H": dict(hidden_size=1280, depth=32, num_heads=16, mlp_dim=5120),
}
TIMM_SIZE_NAMES = {"Ti": "tiny", "S": "small", "B": "base", "L": "large", "H": "huge"}
# Not in the paper: a ViT small enough to train on 28x28 images in minutes on a CPU (the default recipe's model,
# with 4x4 patches: 49 tokens of a 28x28 image).
MINI_VIT = dict(hidden_size=96, depth=4, num_heads=3, mlp_dim=192)
# BiT baselines of §4.1: (layers per stage, width factor).
RESNET_SIZES = {
    "R50x1": ((3, 4, 6, 3), 1),
    "R50x2": ((3, 4, 6, 3), 2),
    "R50x3": ((3, 4, 6, 3), 3),
    "R101x1": ((3, 4, 23, 3), 1),
    "R101x3": ((3, 4, 23, 3), 3),
    "R152x1": ((3, 8, 36, 3), 1),
    "R152x2": ((3, 8, 36, 3), 2),
    "R152x4": ((3, 8, 36, 3), 4),
    "R200x3": ((3, 24, 36, 3), 3),
}


@dataclass(frozen=True)
class ModelEntry:
    name: str
    aliases: tuple[str, ...]
    config: dict[str, Any] = field(default_factory=dict)


def _vit_entries() -> list[ModelEntry]:
    entries = []
    for size, dims in VIT_SIZES.items():
        for patch in (8, 14, 16, 32):
            timm = f"vit_{TIMM_SIZE_NAMES[size]}_patch{patch}_224"
            config: dict[str, Any] = dict(model_type="vit", patch_size=patch, **dims)
            entries.append(ModelEntry(f"ViT-{size}/{patch}", (timm,), config))
    # Hybrids (§4.1): option (ii) stage 4 folded into stage 3 -> stride 16; option (i) full ResNet50 -> stride 32.
    # R26+ViT-S/32 (two units a stage) is AugReg's hybrid for small compute (Steiner et al. 2021).
    for resnet, size, layers, stride in (
        ("R50", "B", (3, 4, 9), 16),
        ("R50", "L", (3, 4, 9), 16),
        ("R50", "B", (3, 4, 6, 3), 32),
        ("R50", "L", (3, 4, 6, 3), 32),
        ("R26", "S", (2, 2, 2, 2), 32),
    ):
        timm = f"vit_{TIMM_SIZE_NAMES[size]}_{resnet.lower()}_s{stride}_224"
        config = dict(model_type="vit", patch_size=1, resnet_layers=layers, **VIT_SIZES[size])
        entries.append(ModelEntry(f"{resnet}+ViT-{size}/{stride}", (timm,), config))
    entries.append(ModelEntry("ViT-Mini/4", (), dict(model_type="vit", patch_size=4, **MINI_VIT)))
    return entries


IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLIP_MEAN, CLIP_STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
# Later ViT families as timm builds them: the ViTConfig fields of their parts (models/config.py); the
# feature extractors (DINOv2, SigLIP) have no head, as timm's.
FAMILIES: dict[str, dict[str, Any]] = {
    "DINOv2": dict(
        num_classes=0,
        layer_scale=1e-5,
        img_size=518,
        probe_classifier="token_gap",
        image_mean=IMAGENET_MEAN,
        image_std=IMAGENET_STD,
    ),
    "CLIP": dict(
        pre_norm=True, patch_bias=False, layer_norm_eps=1e-5, image_mean=CLIP_MEAN, image_std=CLIP_STD
    ),
    "SigLIP": dict(num_classes=0, classifier="map"),  # timm: the erf GELU (transformers: its tanh form)
    "DeiT3": dict(layer_scale=1e-6, prefix_pos_embed=False, image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD),
}
REGISTERS: dict[str, Any] = dict(num_reg_tokens=4, prefix_pos_embed=False)
# DINOv2-g: 1536 wide, 40 layers, 24 heads, a SwiGLU MLP 4096 wide after gating (Oquab et al. 2023).
GIANT = dict(hidden_size=1536, depth=40, num_heads=24, mlp_dim=4096, activation="swiglu")


def _family_entries() -> list[ModelEntry]:
    """DINOv2 (with and without 4 registers), CLIP (GELU, and QuickGELU as OpenAI trained it), SigLIP and
    SigLIP 2 (one architecture; timm tells them apart by their weights' tag), DeiT III: named as
    'FAMILY-SIZE/PATCH', timm's architecture names as aliases."""
    entries = []
    for size, timm_size in (("S", "small"), ("B", "base"), ("L", "large"), ("g", "giant")):
        dims: dict[str, Any] = GIANT if size == "g" else VIT_SIZES[size]
        no_registers: dict[str, Any] = {}
        for suffix, extra in (("", no_registers), ("-reg4", REGISTERS)):
            timm = f"vit_{timm_size}_patch14{suffix.replace('-', '_')}_dinov2"
            config = dict(model_type="vit", patch_size=14, **dims, **FAMILIES["DINOv2"], **extra)
            entries.append(ModelEntry(f"DINOv2-{size}/14{suffix}", (timm,), config))
    for size, patch in (("B", 16), ("B", 32), ("L", 14)):
        # OpenAI's weights (QuickGELU) end in the image projection into the joint embedding, timm's head
        projection = 768 if size == "L" else 512
        quickgelu: dict[str, Any] = dict(activation="quick_gelu", num_classes=projection)
        for suffix, extra in (("", {}), ("-quickgelu", quickgelu)):
            timm = f"vit_{TIMM_SIZE_NAMES[size]}_patch{patch}_clip{suffix.replace('-', '_')}_224"
            config = dict(model_type="vit", patch_size=patch, **VIT_SIZES[size], **FAMILIES["CLIP"], **extra)
            entries.append(ModelEntry(f"CLIP-{size}/{patch}{suffix}", (timm,), config))
    siglip = dict(model_type="vit", patch_size=16, **VIT_SIZES["B"], **FAMILIES["SigLIP"])
    entries.append(ModelEntry("SigLIP-B/16", ("vit_base_patch16_siglip_224",), siglip))
    entries.append(ModelEntry("SigLIP2-B/16", (), siglip))
    for size in ("S", "B", "L"):
        timm = f"deit3_{TIMM_SIZE_NAMES[size]}_patch16_224"
        config = dict(model_type="vit", patch_size=16, **VIT_SIZES[size], **FAMILIES["DeiT3"])
        entries.append(ModelEntry(f"DeiT3-{size}/16", (timm,), config))
    return entries


def _resnet_entries() -> list[ModelEntry]:
    entries = []
    for name, (layers, width) in RESNET_SIZES.items():
        depth = name[1:].split("x")[0]
        timm = f"resnetv2_{depth}x{width}_bit"
        entries.append(
            ModelEntry(name, (timm,), dict(model_type="resnetv2", layers=layers, width_factor=width))
        )
    return entries


MODELS: dict[str, ModelEntry] = {e.name: e for e in _vit_entries() + _family_entries() + _resnet_entries()}
_LOOKUP = {key.lower(): e for e in MODELS.values() for key in (e.name, *e.aliases)}


def list_models(pattern: str = "*") -> list[str]:
    """Registered paper names whose name or timm alias matches the glob `pattern` (case-insensitive)."""
    pattern = pattern.lower()
    return [
        e.name
        for e in MODELS.values()
        if any(fnmatch.fnmatch(k.lower(), pattern) for k in (e.name, *e.aliases))
    ]


def model_config(name: str, **overrides: Any) -> ViTConfig | ResNetConfig:
    """The config of a registered variant with any field overridden."""
    entry = _LOOKUP.get(name.lower())
    if entry is None:
        raise ValueError(
            f"unknown model {name!r}; see vitkit.list_models() (e.g. 'ViT-B/16', 'vit_base_patch16_224')"
        )
    return config_from_dict(dict(entry.config), **overrides)


Model = VisionTransformer | ResNetV2  # what build_model makes from a config
Trainable = (
    Model | MaskedPatchPrediction
)  # what the engine trains: a model, or a ViT inside masked patch prediction


def as_model(module: nn.Module) -> Model:
    """The vitkit model (its `.config` the architecture) that `module` is, or that DistributedDataParallel or
    torch.compile wrap; a one-line error for any other module."""
    seen = set()
    while id(module) not in seen:
        seen.add(id(module))
        for attr in ("module", "_orig_mod"):
            inner = getattr(module, attr, None)
            if isinstance(inner, nn.Module):
                module = inner
                break
    if not isinstance(module, Model):
        raise TypeError(f"{type(module).__name__} is not a vitkit model (VisionTransformer or ResNetV2)")
    return module


def build_model(config: ViTConfig | ResNetConfig) -> Model:
    """The module for a config: VisionTransformer (plain or hybrid) or the ResNet v2 baseline."""
    return VisionTransformer(config) if isinstance(config, ViTConfig) else ResNetV2(config)


def create_model(name: str, *, device: str | torch.device | None = None, **overrides: Any) -> Model:
    """Build a registered variant, e.g. create_model('ViT-B/16', num_classes=10, img_size=384).

    `device='meta'` builds without allocating, to count the parameters of the largest variants.
    """
    config = model_config(name, **overrides)
    with torch.device(device) if device is not None else contextlib.nullcontext():
        return build_model(config)
