"""Fig. 7 (left, centre): principal components of the patch-embedding filters, position-embedding similarity."""

from __future__ import annotations

import torch

from vitkit.models.posemb import (
    Learned2dPositionEmbedding,
    LearnedPositionEmbedding,
    SinCos2dPositionEmbedding,
)
from vitkit.models.vit import VisionTransformer

Grid = tuple[int, int]
NUM_FILTER_COMPONENTS = 28  # as many as the paper's Fig. 7 (left) shows


def filter_components(
    weight: torch.Tensor, k: int = NUM_FILTER_COMPONENTS
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k principal components of the patch-embedding filters: ([k, C, P, P], explained-variance ratio [k]).

    The conv weight [D, C, P, P] is read as D filters of length C*P*P, centred over the D filters; the
    components are the right singular vectors of that centred [D, CPP] matrix (largest singular value
    first), each with its sign fixed so that its largest-magnitude entry is positive. Computed in float64.
    """
    if weight.ndim != 4:
        raise ValueError(f"expected a conv weight [D, C, P, P], got {list(weight.shape)}")
    d, c, ph, pw = weight.shape
    w = weight.detach().to("cpu", torch.float64).reshape(d, c * ph * pw)
    w = w - w.mean(0, keepdim=True)
    _, s, vh = torch.linalg.svd(w, full_matrices=False)
    k = max(0, min(k, vh.shape[0]))
    comps = vh[:k]
    peak = comps.gather(1, comps.abs().argmax(1, keepdim=True))
    comps = comps * torch.where(peak < 0, -1.0, 1.0).to(comps.dtype)
    var = s**2
    ratio = var[:k] / var.sum().clamp_min(torch.finfo(torch.float64).tiny)
    return comps.reshape(k, c, ph, pw), ratio


def position_embedding_table(model: VisionTransformer) -> tuple[torch.Tensor, Grid] | None:
    """The patch rows of the position embedding as ([gh*gw, D], grid), class- and register-token rows excluded
    (models without `prefix_pos_embed` have none).

    'learned' (1-D), 'learned_2d' (X and Y halves concatenated per patch, as the model adds them) and the
    fixed 'sincos' table; None for kinds without an additive table ('none', 'relative').
    """
    cfg = model.config
    pos = model.pos_embed
    with torch.no_grad():
        if isinstance(pos, LearnedPositionEmbedding):
            return pos.weight[0, pos.num_prefix_tokens :].detach().float().cpu(), pos.grid
        if isinstance(pos, Learned2dPositionEmbedding):
            row, col = pos.row.detach().float().cpu(), pos.col.detach().float().cpu()
            gh, gw = row.shape[0], col.shape[0]
            table = torch.cat(
                [col[None, :, :].expand(gh, -1, -1), row[:, None, :].expand(-1, gw, -1)], dim=-1
            )
            return table.reshape(gh * gw, -1), (gh, gw)
        if isinstance(pos, SinCos2dPositionEmbedding):
            grid = cfg.grid_size
            table = pos.table(grid, torch.device("cpu"), torch.float32)
            return table[0, pos.num_prefix_tokens :], grid
    return None


def position_embedding_note(kind: str) -> str:
    """What Fig. 7 (centre) shows for a position-embedding kind, or why it is not applicable."""
    return {
        "learned": "learned 1-D position embedding: cosine similarity of each patch's embedding with every other",
        "learned_2d": "learned 2-D (X and Y) position embedding, halves concatenated per patch: cosine similarity",
        "sincos": "fixed 2-D sine-cosine features (not learned): their cosine similarity, for comparison",
        "none": "not applicable: the model has no position embedding",
        "relative": "not applicable: relative position embeddings have no per-patch vector (they bias attention)",
    }.get(kind, f"not applicable: unknown position embedding kind {kind!r}")


def cosine_similarity_grid(table: torch.Tensor, grid: Grid) -> torch.Tensor:
    """[gh, gw, gh, gw]: entry [r, c] is the similarity map of patch (r, c)'s embedding with every patch."""
    gh, gw = grid
    if table.ndim != 2 or table.shape[0] != gh * gw:
        raise ValueError(f"table of shape {list(table.shape)} does not fit grid {grid}")
    t = table.to(torch.float64)
    t = t / t.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (t @ t.T).reshape(gh, gw, gh, gw)


def position_similarity(model: VisionTransformer) -> torch.Tensor | None:
    """Fig. 7 (centre) for `model`: [gh, gw, gh, gw] cosine similarities, or None when not applicable."""
    found = position_embedding_table(model)
    if found is None:
        return None
    table, grid = found
    return cosine_similarity_grid(table, grid)
