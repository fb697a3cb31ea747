"""Everything the inspect command computes for one model and a set of preprocessed images, in one pass."""

from __future__ import annotations

from typing import Any

import torch

from vitkit.data.transforms import normalise
from vitkit.inspect.attention import (
    attention_distance,
    attention_maps,
    attention_rollout,
    rollout_note,
    rollout_to_patches,
    token_grid,
)
from vitkit.inspect.embeddings import (
    NUM_FILTER_COMPONENTS,
    filter_components,
    position_embedding_note,
    position_similarity,
)
from vitkit.models.vit import VisionTransformer

MAP_BUDGET_BYTES = 1 << 30


def auto_batch_size(depth: int, heads: int, tokens: int, budget: int = MAP_BUDGET_BYTES) -> int:
    """Images per forward pass so that the float32 attention maps of all layers fit in `budget` (1 to 16)."""
    per_image = depth * heads * tokens * tokens * 4
    return max(1, min(16, budget // max(per_image, 1)))


def inspect_model(
    model: VisionTransformer,
    images: torch.Tensor,
    *,
    batch_size: int | None = None,
    rollout_images: int = 8,
    num_components: int = NUM_FILTER_COMPONENTS,
    prefix_keys: str = "renormalise",
) -> dict[str, Any]:
    """Fig. 6/7 quantities for `model` on preprocessed `images` [N, C, H, W] (model size, values in [-1, 1], the
    figures' pixels; the model reads them normalised as its weights expect, `config.mean_std`).

    Returns a dict with `mean_attention_distance` [layers, heads] in input pixels (averaged over all images and
    patch queries), `rollout` (the first `rollout_images` inputs and their [gh, gw] masks),
    `filter_components` ((components, explained-variance ratio), or None for hybrids, with `filter_note`),
    `position_similarity` ([gh, gw, gh, gw] or None, with `position_note`), and the grid and stride used.
    Attention is computed `batch_size` images at a time (default: as many as keep all layers' maps within
    about `MAP_BUDGET_BYTES`, at most 16), so memory stays bounded for many images and large models.
    """
    cfg = model.config
    if len(images) == 0:
        raise ValueError("inspect needs at least one image")
    device = next(model.parameters()).device
    grid = token_grid(model, images)
    stride = cfg.input_stride
    prefix = cfg.num_prefix_tokens
    if batch_size is None:
        batch_size = auto_batch_size(cfg.depth, cfg.num_heads, prefix + grid[0] * grid[1])
    total: torch.Tensor | None = None
    masks = []
    for start in range(0, len(images), batch_size):
        batch = normalise(images[start : start + batch_size], cfg.mean_std).to(device)
        maps = [a.float() for a in attention_maps(model, batch)]  # float32 also under bf16 autocast
        dist = torch.stack([attention_distance(a, grid, stride, prefix, prefix_keys).sum(0) for a in maps])
        total = dist if total is None else total + dist
        if start < rollout_images:
            take = min(rollout_images - start, len(batch))
            joint = attention_rollout([a[:take] for a in maps])
            masks.append(rollout_to_patches(joint, grid, prefix, cfg.classifier).cpu())
        del maps
    assert total is not None  # at least one image
    result: dict[str, Any] = {
        "grid": grid,
        "input_stride": stride,
        "num_images": len(images),
        "prefix_keys": prefix_keys,
        "mean_attention_distance": (total / len(images)).cpu(),
        "distance_title": f"Mean attention distance ({len(images)} image{'s' * (len(images) != 1)})",
    }
    if masks:
        result["rollout"] = (images[:rollout_images].cpu(), torch.cat(masks))
        result["rollout_note"] = rollout_note(cfg.classifier, cfg.num_reg_tokens)
    if cfg.resnet_layers is not None:
        result["filter_components"] = None
        result["filter_note"] = (
            "not applicable as images: a hybrid embeds 1x1 patches of the ResNet feature map "
            f"({model.patch_embed.proj.weight.shape[1]} channels), not pixels"
        )
    else:
        comps, ratio = filter_components(model.patch_embed.proj.weight, num_components)
        result["filter_components"] = (comps, ratio)
        result["filter_note"] = (
            f"top {len(comps)} principal components of the {cfg.hidden_size} patch-embedding filters "
            f"({'x'.join(str(n) for n in model.patch_embed.proj.weight.shape[1:])}), centred over the filters"
        )
    result["position_similarity"] = position_similarity(model)
    result["position_note"] = position_embedding_note(cfg.pos_embed)
    result["position_title"] = {
        "learned": "Position embedding similarity (1-D learned)",
        "learned_2d": "Position embedding similarity (2-D learned)",
        "sincos": "Position embedding similarity (fixed sin-cos)",
    }.get(cfg.pos_embed, "")
    return result


def summary_json(result: dict[str, Any], config: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The JSON-serialisable record of an `inspect_model` result (inspect.json)."""
    dist = result["mean_attention_distance"]
    out: dict[str, Any] = dict(extra)
    out["config"] = config
    out["grid_size"] = list(result["grid"])
    out["input_stride"] = result["input_stride"]
    out["num_images"] = result["num_images"]
    out["mean_attention_distance"] = [[round(float(v), 4) for v in row] for row in dist.tolist()]
    out["mean_attention_distance_per_layer"] = [round(float(v), 4) for v in dist.mean(1).tolist()]
    out["mean_attention_distance_notes"] = (
        "pixels of the model input: per patch query the attention-weighted distance between patch centres, "
        "averaged over patch queries and images; "
        + (
            "prefix (class and register) tokens are neither queries nor keys, attention renormalised over the "
            "patches"
            if result["prefix_keys"] == "renormalise"
            else "prefix (class and register) tokens are not queries, attention to them counts as distance 0"
        )
    )
    if "rollout_note" in result:
        out["rollout_note"] = result["rollout_note"]
    comps = result.get("filter_components")
    out["filter_components"] = {
        "applicable": comps is not None,
        "note": result["filter_note"],
        "explained_variance_ratio": [round(float(v), 6) for v in comps[1].tolist()]
        if comps is not None
        else [],
    }
    out["position_embedding"] = {
        "kind": config.get("pos_embed"),
        "applicable": result.get("position_similarity") is not None,
        "note": result["position_note"],
    }
    return out
