"""Google's JAX/Flax checkpoints (.npz): vision_transformer (both key layouts) and big_vision, read, written.

Every variant is first normalised to one canonical layout - the Linen names of vit_jax, no prefix, GroupNorm
parameters as [C], one `encoderblock_{i}` per layer, the class-token row inside the position embedding - and
one table maps that layout to vitkit and back:

* legacy (the published ViT-B_16.npz, R50+ViT-B_16.npz, AugReg files): pre-Linen numbering inside each
  block (`MultiHeadDotProductAttention_1`, `LayerNorm_2`, `MlpBlock_3`), GroupNorm parameters as [1, 1, 1, C];
* big_vision: a `params/` prefix, the position embedding at the top level without a class-token row
  (big_vision adds it before prepending the class token, so the row is zero here and the class token carries
  the rest), optionally every block stacked along a leading depth axis under `Transformer/encoderblock`
  (nn.scan), and no position table at all for its fixed 'sincos2d' embedding.

The official models use the tanh GELU and LayerNorm/GroupNorm epsilon 1e-6; loaded models are configured so.
"""

from __future__ import annotations

import os
import re
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vitkit.models.config import ViTConfig
from vitkit.models.registry import Model
from vitkit.storage import atomic_write
from vitkit.weights.mapping import CONV, LINEAR, Rule, Table, Transform, linear
from vitkit.weights.vitkit_state import load_vitkit_state

LAYOUTS = ("linen", "legacy")
OFFICIAL_ACTIVATION = "gelu_tanh"
OFFICIAL_EPS = 1e-6
_QKV = ("query", "key", "value")
# pre-Linen name -> Linen name, inside each encoder block
_LEGACY_NAMES = (
    ("MultiHeadDotProductAttention_1", "MultiHeadDotProductAttention_0"),
    ("LayerNorm_2", "LayerNorm_1"),
    ("MlpBlock_3", "MlpBlock_0"),
)
_GROUP_NORM = re.compile(r"(^|/)(gn_root|gn\d+|gn_proj)/(scale|bias)$")
_POSEMB = "Transformer/posembed_input/pos_embedding"
_PREFIXES = ("params/", "opt/target/")
_SCAN = "Transformer/encoderblock/"


def _heads(ctx: Any) -> int:
    return int(ctx["num_heads"])


# Attention kernels keep heads on their own axis: q/k/v [D, H, hd] and out [H, hd, D]; biases [H, hd].
HEADS_IN = Transform(
    lambda ts, ctx: [torch.cat([t.reshape(t.shape[0], -1).T for t in ts])],
    lambda ts, ctx: [w.T.reshape(w.shape[1], _heads(ctx), -1) for w in ts[0].chunk(3)],
)
HEADS_BIAS = Transform(
    lambda ts, ctx: [torch.cat([t.reshape(-1) for t in ts])],
    lambda ts, ctx: [b.reshape(_heads(ctx), -1) for b in ts[0].chunk(3)],
)
HEADS_OUT = Transform(
    lambda ts, ctx: [ts[0].reshape(-1, ts[0].shape[-1]).T],
    lambda ts, ctx: [ts[0].T.reshape(_heads(ctx), -1, ts[0].shape[0])],
)


def _table() -> Table:
    block = "Transformer/encoderblock_{i}/"
    mha = block + "MultiHeadDotProductAttention_0/"
    unit = "block{s}/unit{u}/"
    return Table(
        "official",
        [
            *linear("patch_embed.proj", "embedding/", "kernel", transform=CONV),
            Rule.of("cls_token", "cls"),
            Rule.of("pos_embed.weight", _POSEMB),
            *linear("blocks.{i}.norm1", block + "LayerNorm_0/", "scale"),
            Rule.of("blocks.{i}.attn.qkv.weight", [mha + f"{n}/kernel" for n in _QKV], HEADS_IN),
            Rule.of("blocks.{i}.attn.qkv.bias", [mha + f"{n}/bias" for n in _QKV], HEADS_BIAS),
            *linear("blocks.{i}.attn.proj", mha + "out/", "kernel", transform=HEADS_OUT),
            *linear("blocks.{i}.norm2", block + "LayerNorm_1/", "scale"),
            *linear("blocks.{i}.mlp.fc1", block + "MlpBlock_0/Dense_0/", "kernel", transform=LINEAR),
            *linear("blocks.{i}.mlp.fc2", block + "MlpBlock_0/Dense_1/", "kernel", transform=LINEAR),
            *linear("norm", "Transformer/encoder_norm/", "scale"),
            *linear("pre_logits.fc", "pre_logits/", "kernel", transform=LINEAR),
            *linear("head", "head/", "kernel", transform=LINEAR),
            Rule.of("backbone.conv_root.weight", "conv_root/kernel", CONV),
            *linear("backbone.gn_root", "gn_root/", "scale"),
            Rule.of("backbone.block{s}.unit{u}.conv{k}.weight", unit + "conv{k}/kernel", CONV),
            *linear("backbone.block{s}.unit{u}.gn{k}", unit + "gn{k}/", "scale"),
            Rule.of("backbone.block{s}.unit{u}.conv_proj.weight", unit + "conv_proj/kernel", CONV),
            *linear("backbone.block{s}.unit{u}.gn_proj", unit + "gn_proj/", "scale"),
        ],
    )


TABLE = _table()


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All arrays of an .npz, never unpickling (object arrays are refused); damage: a ValueError naming it."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as error:
        raise ValueError(f"{path}: not a readable .npz file ({type(error).__name__}: {error})") from None


def normalize(arrays: dict[str, np.ndarray], source: str) -> tuple[dict[str, np.ndarray], str]:
    """Any official variant -> the canonical Linen layout; returns (arrays, name of the detected layout)."""
    prefix = next((p for p in _PREFIXES if f"{p}embedding/kernel" in arrays), "")
    arrays = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
    if "embedding/kernel" not in arrays:
        raise ValueError(
            f"{source}: no 'embedding/kernel' array; not a ViT checkpoint of vision_transformer or "
            f"big_vision (first keys: {sorted(arrays)[:5]})"
        )
    unsupported = sorted(
        {k.split("/")[0] for k in arrays if k.startswith(("MAPHead", "probe", "img/", "txt/"))}
    )
    if unsupported:
        raise ValueError(
            f"{source}: {unsupported} (attention-pooling head or multi-tower model) cannot be "
            "represented: vitkit's classifiers are the paper's class token and global average pooling"
        )
    big_vision = prefix == "params/" or "pos_embedding" in arrays or any(k.startswith(_SCAN) for k in arrays)
    legacy = any(f"/{old}/" in k for k in arrays for old, _ in _LEGACY_NAMES)
    out: dict[str, np.ndarray] = {}
    for key, value in arrays.items():
        if key.startswith(_SCAN):  # nn.scan: one array per parameter with the layers on axis 0
            for i, layer in enumerate(value):
                out[f"Transformer/encoderblock_{i}/{key[len(_SCAN) :]}"] = layer
            continue
        for old, new in _LEGACY_NAMES:
            key = key.replace(f"/{old}/", f"/{new}/")
        if _GROUP_NORM.search(key):
            value = value.reshape(-1)
        out[key] = value
    for old_key in ("pos_embedding", "Transformer/pos_embedding"):
        if old_key in out:
            out[_POSEMB] = _with_class_row(out.pop(old_key), "cls" in out)
    layout = "big_vision" if big_vision else "legacy" if legacy else "linen"
    return out, layout


def _with_class_row(posemb: np.ndarray, has_cls: bool) -> np.ndarray:
    """big_vision adds its table to the patches only; vitkit's table has a class-token row, here zero."""
    rows = posemb.shape[1]
    side = round((rows - 1) ** 0.5)
    combined = side * side + 1 == rows and round(rows**0.5) ** 2 != rows  # very old: row already included
    if not has_cls or combined:
        return posemb
    return np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)


def _to_torch(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in arrays.items():
        if value.dtype.kind not in "fiu" or value.dtype.itemsize > 8:
            raise ValueError(f"array {key!r} has dtype {value.dtype}; expected floating point parameters")
        out[key] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))
    return out


def load_official(
    arrays: dict[str, np.ndarray],
    source: str,
    *,
    source_img_size: Any = None,
    **options: Any,
) -> Model:
    """Build and load a VisionTransformer from official arrays; the config comes from the arrays alone."""
    canonical, layout = normalize(arrays, source)
    try:
        tensors = _to_torch(canonical)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None
    converted = TABLE.to_vitkit(tensors, source)
    query = canonical.get("Transformer/encoderblock_0/MultiHeadDotProductAttention_0/query/kernel")
    hints: dict[str, Any] = dict(activation=OFFICIAL_ACTIVATION, layer_norm_eps=OFFICIAL_EPS)
    if query is not None:
        hints["num_heads"] = int(query.shape[1])
    if _POSEMB not in canonical:
        hints["pos_embed"] = "sincos"  # big_vision's fixed posemb_sincos_2d has no parameters
        source_img_size = source_img_size or options.get("img_size")
    if source_img_size is not None:
        hints["img_size"] = source_img_size
    return load_vitkit_state(converted, f"{source} ({layout} layout)", hints=hints, **options)


def export_npz(model: nn.Module, path: str | os.PathLike, *, layout: str = "linen") -> Path:
    """Write a vitkit ViT as an official vit_jax .npz (`layout` 'linen' or 'legacy'), atomically.

    The file loads with vit_jax's `checkpoint.load` (and timm's/vitkit's loaders). The JAX model always uses
    the tanh GELU and epsilon 1e-6, so a model trained otherwise is exported with a warning.
    """
    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        raise ValueError(
            f"{path}: only Vision Transformers export to the official layout, got {type(model).__name__}"
        )
    if layout not in LAYOUTS:
        raise ValueError(f"{path}: layout must be one of {list(LAYOUTS)}, got {layout!r}")
    if config.pos_embed != "learned":
        raise ValueError(
            f"{path}: the official model has a learned 1-D position embedding; this model's is "
            f"{config.pos_embed!r}, which vit_jax cannot represent"
        )
    if config.activation != OFFICIAL_ACTIVATION or config.layer_norm_eps != OFFICIAL_EPS:
        warnings.warn(
            f"{path}: vit_jax runs the tanh GELU with LayerNorm eps 1e-6; this model uses "
            f"{config.activation!r} with eps {config.layer_norm_eps}, so JAX outputs will differ slightly",
            stacklevel=2,
        )
    converted = TABLE.from_vitkit(model.state_dict(), str(path), {"num_heads": config.num_heads})
    arrays = {}
    for key, value in converted.tensors.items():
        value = value.detach().cpu()
        array = (
            value if value.dtype in (torch.float16, torch.float32, torch.float64) else value.float()
        ).numpy()
        if layout == "legacy":
            for old, new in _LEGACY_NAMES:
                key = key.replace(f"/{new}/", f"/{old}/")
            if _GROUP_NORM.search(key):
                array = array.reshape(1, 1, 1, -1)
        arrays[key] = array

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub reads ** as allow_pickle

    atomic_write(path, write)
    return Path(path)
