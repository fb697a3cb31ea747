"""transformers' vision towers of today's ViT families, both ways: DINOv2 (`Dinov2Model`,
`Dinov2WithRegistersModel`), CLIP (`CLIPVisionModel`, `CLIPVisionModelWithProjection`) and SigLIP
(`SiglipVisionModel`). A vitkit model's output with `pre_logits=True` is their `pooler_output`.

* DINOv2: the final LayerNorm on every token, then the class token. `layer_scale1/2.lambda1` are vitkit's
  `ls1/ls2.gamma`. SwiGLU (`use_swiglu_ffn`, DINOv2-g): `gate_proj` over `up_proj` is vitkit's fused first
  layer (the 4.x checkpoints' `weights_in` already is), `down_proj` its second. The registers model adds the
  position embedding before it inserts its register tokens, so the class token has a position row and the
  registers none: vitkit holds that as `prefix_pos_embed=False` with the class token's row added into the class
  token (the same sum, so exact), and `to_hf` gives the class token a zero row. The same unfolding makes a
  head-less model with position rows for the patches only (DeiT III's) a `Dinov2Model`. `mask_token`
  (masked-image modelling, unused by the features) is dropped, and comes back as zeros.
* CLIP: a LayerNorm before the encoder (`pre_layrnorm`: vitkit's `norm_pre`), a patch embedding without bias,
  QuickGELU by default. `post_layernorm` normalises the pooled class token only, vitkit's final norm every token:
  the pooled output is the same (transformers' `last_hidden_state` is not normalised). The bias-free projection
  of `CLIPVisionModelWithProjection` is vitkit's head with a zero bias.
* SigLIP: no class token, position rows for the patches only, the tanh GELU, and the attention-pooling head
  (`head.probe`; an nn.MultiheadAttention whose packed `in_proj` is vitkit's `q` over `kv`): classifier 'map'.

The name tables and the renaming of the 4.x names are in `hf_family_names`. Each family's image
normalisation travels as `image_mean` / `image_std`, and DINOv2's own linear evaluation (the class token beside
the patch mean) as `probe_classifier='token_gap'`. transformers is imported only inside `to_hf_family`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from vitkit.models.config import ViTConfig, to_pair
from vitkit.models.registry import FAMILIES, Model
from vitkit.weights.hf_family_names import (
    CLIP_SIGLIP_TABLE,
    DINOV2_TABLES,
    LEGACY_PREFIX,
    PROJECTION,
    family_of_state,
    modern_family_names,
)
from vitkit.weights.vitkit_state import load_vitkit_state

# transformers' names (ACT2FN) of vitkit's activations; gelu_new / gelu_fast are the tanh formula written out
TO_HF_ACT = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "quick_gelu": "quick_gelu"}
FROM_HF_ACT = {**{v: k for k, v in TO_HF_ACT.items()}, "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh"}

# model_type (config.json) -> what transformers' config defaults to and what the family's weights expect
_FAMILY_OF_TYPE = {
    "dinov2": "dinov2",
    "dinov2_with_registers": "dinov2",
    "clip_vision_model": "clip",
    "siglip_vision_model": "siglip",
}
MODEL_TYPES = tuple(_FAMILY_OF_TYPE)
CLASSES = (
    "Dinov2Model",
    "Dinov2WithRegistersModel",
    "CLIPVisionModel",
    "CLIPVisionModelWithProjection",
    "SiglipVisionModel",
)
_CONFIG_DEFAULTS = {
    "dinov2": dict(hidden_act="gelu", layer_norm_eps=1e-6),
    "clip": dict(hidden_act="quick_gelu", layer_norm_eps=1e-5),
    "siglip": dict(hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
}
_WEIGHTS_EXPECT = {
    "dinov2": {k: FAMILIES["DINOv2"][k] for k in ("image_mean", "image_std", "probe_classifier")},
    "clip": {k: FAMILIES["CLIP"][k] for k in ("image_mean", "image_std")},
    "siglip": {},  # 0.5 for every channel: vitkit's default
}


def _getter(config: Any) -> Callable[..., Any]:
    return (
        config.get if isinstance(config, Mapping) else lambda key, default=None: getattr(config, key, default)
    )


def family_hints(config: Any, family: str, source: str) -> dict[str, Any]:
    """What a transformers config (object or config.json dict; empty for a bare state dict: transformers'
    defaults) says beyond the tensors, and what the family's weights expect of their inputs."""
    get = _getter(config)
    defaults = _CONFIG_DEFAULTS[family]
    act = get("hidden_act", defaults["hidden_act"])
    if act not in FROM_HF_ACT and not get("use_swiglu_ffn", False):
        raise ValueError(
            f"{source}: hidden_act {act!r} has no vitkit equivalent (expected one of {sorted(FROM_HF_ACT)})"
        )
    if family == "siglip" and not get("vision_use_head", True):
        raise ValueError(
            f"{source}: vision_use_head=False: without its attention-pooling head it pools nothing"
        )
    hints: dict[str, Any] = dict(
        activation=FROM_HF_ACT.get(act, "gelu"),
        layer_norm_eps=get("layer_norm_eps", defaults["layer_norm_eps"]),
        num_heads=get("num_attention_heads"),
        img_size=get("image_size"),
        **_WEIGHTS_EXPECT[family],
    )
    return {k: v for k, v in hints.items() if v is not None}


def load_family_state(
    state: Mapping[str, torch.Tensor],
    source: str,
    config: Any = None,
    *,
    hints: Mapping[str, Any] | None = None,
    **options: Any,
) -> Model:
    """A vitkit model from a DINOv2 / CLIP / SigLIP vision-tower state dict (4.x or 5.x names); `config` is its
    transformers config (object or dict), None for a bare state dict; `hints` (the caller's) win."""
    state = modern_family_names(state)
    family = family_of_state(state)
    if family is None:
        raise ValueError(
            f"{source}: not a DINOv2, CLIP or SigLIP vision tower (first keys: {sorted(state)[:5]})"
        )
    derived = family_hints(config or {}, family, source)
    if family == "dinov2":
        folded = "embeddings.register_tokens" in state
        swiglu = any(k.endswith("mlp.gate_proj.weight") for k in state)
        derived["prefix_pos_embed"] = not folded
        table = DINOV2_TABLES[folded, swiglu]
    else:
        table = CLIP_SIGLIP_TABLE
    converted = table.to_vitkit(state, source)
    return load_vitkit_state(converted, source, hints={**derived, **(hints or {})}, **options)


def from_hf_family(hf_model: nn.Module, **options: Any) -> Model:
    """The vitkit model of a live transformers DINOv2 / CLIP / SigLIP vision tower (`from_hf` dispatches here)."""
    where = f"transformers {type(hf_model).__name__}"
    state = {k: v.detach() for k, v in hf_model.state_dict().items()}
    return load_family_state(state, where, hf_model.config, **options)


def hf_class_for(config: ViTConfig) -> str | None:
    """The transformers class `to_hf` builds for a vitkit config: a family's vision tower when the model has
    one of its parts ('map': SigLIP, `pre_norm`: CLIP, LayerScale: DINOv2), None for the paper's ViT."""
    if config.classifier == "map":
        return "SiglipVisionModel"
    if config.pre_norm:
        return "CLIPVisionModelWithProjection" if config.num_classes else "CLIPVisionModel"
    if config.layer_scale is not None:
        return "Dinov2WithRegistersModel" if config.num_reg_tokens else "Dinov2Model"
    return None


def _dinov2_mlp_ratio(config: ViTConfig) -> int | None:
    """The (integer) `mlp_ratio` of transformers' Dinov2Config that builds `mlp_dim` (SwiGLU: 2/3 of
    hidden x ratio, rounded up to a multiple of 8), None when none does."""
    swiglu = config.activation == "swiglu"
    ratio = max(1, round(config.mlp_dim * (1.5 if swiglu else 1) / config.hidden_size))
    width = config.hidden_size * ratio
    return ratio if ((int(width * 2 / 3) + 7) // 8 * 8 if swiglu else width) == config.mlp_dim else None


def _problems(config: ViTConfig, cls: str, head_bias: torch.Tensor | None) -> list[str]:
    """What of a vitkit model the transformers class `cls` cannot hold."""
    problems = []
    if config.resnet_layers is not None:
        problems.append("a ResNet hybrid")
    if config.pos_embed != "learned":
        problems.append(f"pos_embed {config.pos_embed!r} (transformers' towers have a learned 1-D table)")
    if config.representation_size:
        problems.append("a pre-logits layer")
    if config.classifier == "token_gap":
        problems.append(f"classifier 'token_gap' ({cls} pools the class token alone)")
    if len(set(to_pair(config.img_size))) > 1:
        problems.append(f"a non-square img_size {config.img_size} (transformers resamples those)")
    swiglu = config.activation == "swiglu"
    if swiglu and not cls.startswith("Dinov2"):
        problems.append(f"a SwiGLU MLP ({cls} has a plain one)")
    if cls.startswith("Dinov2"):
        if config.num_classes:
            problems.append(f"a {config.num_classes}-class head ({cls} has none; use num_classes=0)")
        if not config.patch_bias:
            problems.append("a patch embedding without bias")
        if config.num_reg_tokens and config.prefix_pos_embed:
            problems.append(
                "position rows for the register tokens (Dinov2WithRegistersModel gives them none)"
            )
        if _dinov2_mlp_ratio(config) is None:
            problems.append(f"mlp_dim {config.mlp_dim}, which no integer mlp_ratio of Dinov2Config gives")
    else:
        if config.layer_scale is not None:
            problems.append("LayerScale")
        if config.num_reg_tokens:
            problems.append("register tokens")
        if not config.qkv_bias:
            problems.append("q, k, v without bias")
        if not config.prefix_pos_embed and config.has_class_token:
            problems.append("no position row for the class token")
    if cls.startswith("CLIP"):
        if config.classifier != "token":
            problems.append(f"classifier {config.classifier!r} (CLIP pools the class token)")
        if config.patch_bias:
            problems.append("a patch embedding with bias (CLIP's has none)")
        if head_bias is not None and bool(head_bias.abs().max() > 0):
            problems.append("a head with a bias (CLIP's projection has none)")
    if cls.startswith("Siglip"):
        if config.num_classes:
            problems.append(
                f"a {config.num_classes}-class head (SiglipVisionModel has none; use num_classes=0)"
            )
        if not config.patch_bias:
            problems.append("a patch embedding without bias")
    return problems


def _hf_model(config: ViTConfig, cls: str) -> nn.Module:
    """A fresh transformers `cls` shaped like `config`."""
    # transformers is optional (extras bench and test): only the conversions to and from it import it.
    import transformers

    common: dict[str, Any] = dict(
        hidden_size=config.hidden_size,
        num_hidden_layers=config.depth,
        num_attention_heads=config.num_heads,
        num_channels=config.in_chans,
        image_size=to_pair(config.img_size)[0],
        patch_size=to_pair(config.patch_size)[0],
        layer_norm_eps=config.layer_norm_eps,
        hidden_act=TO_HF_ACT.get(config.activation, "gelu"),
    )
    if cls.startswith("Dinov2"):
        swiglu = config.activation == "swiglu"
        registers = dict(num_register_tokens=config.num_reg_tokens) if config.num_reg_tokens else {}
        hf_config = getattr(transformers, cls.replace("Model", "Config"))(
            **common,
            **registers,
            mlp_ratio=_dinov2_mlp_ratio(config),
            use_swiglu_ffn=swiglu,
            qkv_bias=config.qkv_bias,
            layerscale_value=config.layer_scale,
            hidden_dropout_prob=config.dropout,
            attention_probs_dropout_prob=config.attention_dropout,
            drop_path_rate=config.drop_path,
        )
    else:
        family = "CLIP" if cls.startswith("CLIP") else "Siglip"
        extra = dict(projection_dim=config.num_classes) if config.num_classes else {}
        hf_config = getattr(transformers, f"{family}VisionConfig")(
            **common, **extra, intermediate_size=config.mlp_dim, attention_dropout=config.attention_dropout
        )
    return getattr(transformers, cls)(hf_config)


def to_hf_family(model: nn.Module, config: ViTConfig, cls: str) -> nn.Module:
    """`model` as transformers' `cls` (from `hf_class_for`), eval mode: weights loaded strictly, pooled outputs
    equal; what the class cannot hold is a ValueError in one line."""
    state = model.state_dict()
    problems = _problems(config, cls, state.get("head.bias"))
    if problems:
        raise ValueError(f"to_hf: cannot represent this model as transformers' {cls}: " + "; ".join(problems))
    if cls.startswith("Dinov2"):
        table = DINOV2_TABLES[not config.prefix_pos_embed, config.activation == "swiglu"]
    else:
        table = CLIP_SIGLIP_TABLE
    tensors = table.from_vitkit(state, "to_hf").tensors
    if cls.startswith("Dinov2"):
        tensors["embeddings.mask_token"] = torch.zeros(1, config.hidden_size)
    if cls == "CLIPVisionModelWithProjection":
        tensors = {k if k == PROJECTION else LEGACY_PREFIX + k: v for k, v in tensors.items()}
    hf_model = _hf_model(config, cls)
    hf_model.load_state_dict(tensors, strict=True)
    return hf_model.eval()
