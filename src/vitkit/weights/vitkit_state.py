"""From a vitkit-named state dict to a loaded model: config inference, fine-tuning overrides (§3.2), checks.

Every format ends here: the official .npz, timm and transformers tables first rename their tensors to vitkit's
names, and a vitkit directory already has them. So the config inference, the position-embedding resampling,
the head replacement and the key/shape checks exist once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

import torch

from vitkit.models.config import ResNetConfig, ViTConfig, config_from_dict, resnet_stride, to_pair
from vitkit.models.posemb import resample_grid, resample_position_embedding, square_grid
from vitkit.models.registry import Model, build_model
from vitkit.weights.mapping import Converted, check_fits

Config = ViTConfig | ResNetConfig
_BLOCK = re.compile(r"blocks\.(\d+)\.")
_UNIT = re.compile(r"backbone\.block(\d+)\.unit(\d+)\.")
# LayerScale's starting value where the tensors hold trained scales and nothing says it (DINOv2's; DeiT III: 1e-6).
DEFAULT_LAYER_SCALE = 1e-5
# Paper Table 1 widths -> heads; other widths fall back to 64-dimensional heads.
_HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}


def default_num_heads(hidden_size: int, source: str) -> int:
    """Heads for formats whose tensors do not record them (timm, transformers): Table 1, else 64 per head."""
    if hidden_size in _HEADS_BY_WIDTH:
        return _HEADS_BY_WIDTH[hidden_size]
    if hidden_size % 64 == 0:
        return hidden_size // 64
    raise ValueError(
        f"{source}: the number of heads cannot be read from the tensors (hidden size {hidden_size}); "
        "pass num_heads="
    )


def _require(state: Mapping[str, torch.Tensor], key: str, source: str) -> torch.Tensor:
    if key not in state:
        raise ValueError(f"{source}: missing key {key!r}; cannot infer the model config without it")
    return state[key]


def infer_vit_config(state: Mapping[str, torch.Tensor], source: str, **hints: Any) -> ViTConfig:
    """The ViTConfig a vitkit-named state dict was made with, from tensor shapes alone.

    `hints` supply what shapes do not record: num_heads, activation, layer_norm_eps, pos_embed and `img_size`
    (the size the weights were trained at; needed only for a non-square or parameter-free position embedding).
    """
    hints = dict(hints)
    patch = _require(state, "patch_embed.proj.weight", source)
    hidden, embed_in = patch.shape[0], patch.shape[1]
    units: dict[int, int] = {}
    for key in state:
        if m := _UNIT.match(key):
            units[int(m[1])] = max(units.get(int(m[1]), 0), int(m[2]))
    if "backbone.conv_root.weight" in state:
        root = state["backbone.conv_root.weight"]
        resnet_layers: tuple[int, ...] | None = tuple(
            units.get(s, 0) for s in range(1, max(units, default=0) + 1)
        )
        resnet_width, in_chans = root.shape[0] / 64, root.shape[1]
    else:
        resnet_layers, resnet_width, in_chans = None, 1.0, embed_in
    depth = len({int(m[1]) for k in state if (m := _BLOCK.match(k))})
    classifier = "map" if "attn_pool.latent" in state else "token" if "cls_token" in state else "gap"
    mlp_dim, swiglu = 4 * hidden, False
    if depth:  # a SwiGLU's first layer is twice as wide as its second layer's input, a plain MLP's as wide
        fc1 = _require(state, "blocks.0.mlp.fc1.weight", source).shape[0]
        mlp_dim = _require(state, "blocks.0.mlp.fc2.weight", source).shape[1]
        swiglu = fc1 == 2 * mlp_dim
    if swiglu:
        hints["activation"] = "swiglu"
    reg = state.get("reg_token")
    config: dict[str, Any] = dict(
        hidden_size=hidden,
        patch_size=tuple(patch.shape[2:]),
        in_chans=in_chans,
        depth=depth,
        mlp_dim=mlp_dim,
        classifier=classifier,
        num_reg_tokens=reg.shape[1] if reg is not None and reg.ndim == 3 else 0,
        qkv_bias="blocks.0.attn.qkv.bias" in state or not depth,
        patch_bias="patch_embed.proj.bias" in state,
        pre_norm="norm_pre.weight" in state,
        fc_norm="fc_norm.weight" in state,
        layer_scale=(hints.pop("layer_scale", None) or DEFAULT_LAYER_SCALE)
        if "blocks.0.ls1.gamma" in state
        else None,
        resnet_layers=resnet_layers,
        resnet_width=resnet_width,
        representation_size=state["pre_logits.fc.weight"].shape[0]
        if "pre_logits.fc.weight" in state
        else None,
        num_classes=state["head.weight"].shape[0] if "head.weight" in state else 0,
        num_heads=hints.pop("num_heads", None) or default_num_heads(hidden, source),
        pos_embed="learned" if "pos_embed.weight" in state else hints.pop("pos_embed", None),
    )
    hints.pop("pos_embed", None)
    hints.pop("layer_scale", None)
    if config["pos_embed"] is None:
        raise ValueError(f"{source}: no position embedding found (expected 'pos_embed.weight')")
    stride = config["patch_size"][0] * resnet_stride(resnet_layers)
    img_size = hints.pop("img_size", None)
    prefix = int(classifier == "token") + config["num_reg_tokens"]
    if "pos_embed.weight" in state and "prefix_pos_embed" not in hints:
        rows = state["pos_embed.weight"].shape[1]
        if img_size is not None:
            grid = to_pair(img_size)
            patches = (grid[0] // stride) * (grid[1] // stride)
            hints["prefix_pos_embed"] = rows != patches or not prefix
        else:  # a table without rows for the prefix tokens has a square number of rows
            hints["prefix_pos_embed"] = math.isqrt(rows - prefix) ** 2 == rows - prefix
    if img_size is None:
        if "pos_embed.weight" not in state:
            raise ValueError(
                f"{source}: the image size cannot be read from a {config['pos_embed']!r} position "
                "embedding; pass img_size="
            )
        rows = state["pos_embed.weight"].shape[1] - (prefix if hints["prefix_pos_embed"] else 0)
        grid = square_grid(rows, f"{source}: position embedding")
        img_size = (grid[0] * stride, grid[1] * stride)
    try:
        return ViTConfig(**config, img_size=img_size, **hints)
    except ValueError as error:
        raise ValueError(f"{source}: the tensors describe no valid ViT config ({error})") from None


def adapt_position_embeddings(state: dict[str, torch.Tensor], source: Config, target: Config) -> None:
    """Resample learned position tables from the source token grid to the target one, in place (§3.2).

    Bilinear with aligned corners, class-token rows kept: what the official fine-tuning loader does. The
    source config gives the old grid, so non-square grids resample as exactly as square ones.
    """
    if not isinstance(source, ViTConfig) or not isinstance(target, ViTConfig):
        return
    old, new = source.grid_size, target.grid_size
    if old == new:
        return
    kind = target.pos_embed
    if kind == "learned" and "pos_embed.weight" in state:
        state["pos_embed.weight"] = resample_position_embedding(
            state["pos_embed.weight"], target.num_pos_prefix_tokens, old, new
        )
    elif kind == "learned_2d":
        for key, size in (("pos_embed.row", new[0]), ("pos_embed.col", new[1])):
            if key in state:
                state[key] = resample_grid(state[key][:, None], (size, 1))[:, 0]
    elif kind == "relative":
        tokens = target.num_prefix_tokens + new[0] * new[1]
        for key in [k for k in state if k.endswith(".attn.rel_pos.offsets")]:
            state[key] = resample_grid(state[key][:, None], (2 * tokens - 1, 1))[:, 0]


def instantiate(
    config: Config,
    state: Mapping[str, torch.Tensor],
    source: str,
    *,
    origins: Mapping[str, tuple[str, ...]] | None = None,
    keep_pre_logits: bool = False,
    allow_non_finite: bool = False,
    reset_head: bool = False,
    **overrides: Any,
) -> Model:
    """Build the model for `config` with `overrides`, load `state` strictly, return it in eval mode.

    `img_size=` resamples the position embeddings. `num_classes=K` keeps the stored head when it has K classes
    (as timm's `pretrained=True, num_classes=K` and transformers' `num_labels` do); a different K, or
    `reset_head=True`, swaps it for a zero-initialised one (D x K) and drops the pre-logits layer unless
    `keep_pre_logits` (the paper's fine-tuning recipe, §3.2).
    NaN or infinite weights are refused (they only give NaN outputs) unless `allow_non_finite`.
    """
    state = dict(state)
    num_classes = overrides.pop("num_classes", None)
    if num_classes is not None and num_classes == config.num_classes and not reset_head:
        num_classes = None  # the stored head already fits
    elif num_classes is None and reset_head:
        num_classes = config.num_classes
    target = config_from_dict(config.to_dict(), **overrides)
    dropped: list[str] = []
    if num_classes is not None:
        target.num_classes = num_classes
        dropped.append("head.")
        if isinstance(target, ViTConfig) and not keep_pre_logits and target.representation_size:
            target.representation_size = None
            dropped.append("pre_logits.")
        state = {k: v for k, v in state.items() if not k.startswith(tuple(dropped))}
    if not allow_non_finite:
        refuse_non_finite(state, source, origins)
    adapt_position_embeddings(state, config, target)
    with torch.device("meta"):  # no random init of parameters that are about to be overwritten
        model = build_model(target)
    head_keys = [k for k in model.state_dict() if k.startswith("head.")] if num_classes is not None else []
    check_fits(model, state, source, origins, ignore=head_keys)
    if any(True for _ in model.buffers()):  # buffers are not all in state dicts: materialise them properly
        model = build_model(target)
        model.load_state_dict(state, strict=not head_keys)
    else:  # own copies in float32, never views of the caller's tensors (e.g. a live timm model's parameters)
        fresh = {
            k: v.detach().to("cpu", torch.float32 if v.is_floating_point() else v.dtype, copy=True)
            for k, v in state.items()
        }
        model.load_state_dict(fresh, strict=not head_keys, assign=True)
    if num_classes is not None:
        model.reset_classifier(num_classes)
    return model.eval()


def refuse_non_finite(
    state: Mapping[str, torch.Tensor], source: str, origins: Mapping[str, tuple[str, ...]] | None = None
) -> None:
    """A ValueError naming the tensors (by the file's own keys where known) that hold NaN or inf."""
    floats = {k: v for k, v in state.items() if v.is_floating_point()}
    # A sum is finite only if every element is (NaN and inf propagate): one read, no mask, ~5x faster than
    # isfinite().all(); a non-finite sum (also a finite overflow) is counted element by element.
    bad = {k: int((~v.isfinite()).sum()) for k, v in floats.items() if not v.sum().isfinite()}
    bad = {k: count for k, count in bad.items() if count}
    if bad:
        name, count = next(iter(bad.items()))
        where = "/".join(origins[name]) if origins and name in origins else name
        more = f" and {len(bad) - 1} more tensor(s)" if len(bad) > 1 else ""
        raise ValueError(
            f"{source}: {count} NaN or infinite value(s) in {where}{more}; expected finite weights "
            f"(load_weights(..., allow_non_finite=True) or vitkit convert/inspect --allow-non-finite read them)"
        )


def load_vitkit_state(
    state: Mapping[str, torch.Tensor] | Converted,
    source: str,
    *,
    hints: Mapping[str, Any] | None = None,
    **options: Any,
) -> Model:
    """A model from vitkit-named tensors without a config: infer it (`hints`: what shapes hide), then load.

    `state` may be a table's `Converted` result, whose origins then name the file's own keys in errors.
    `options` are those of `instantiate` (overrides, keep_pre_logits).
    """
    origins = state.origins if isinstance(state, Converted) else None
    tensors = state.tensors if isinstance(state, Converted) else state
    hints = dict(hints or {})
    # Torch-layout tensors do not record it: the caller's word describes the source.
    if options.get("num_heads"):
        hints["num_heads"] = options["num_heads"]
    config = infer_vit_config(tensors, source, **hints)
    return instantiate(config, tensors, source, origins=origins, **options)
