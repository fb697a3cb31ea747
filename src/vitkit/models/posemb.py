"""Position embeddings of Appendix D.4 and their resampling to a new token grid (§3.2).

Every kind is a module `forward(tokens, grid) -> tokens + E_pos` (Eq. 1), except 'relative', whose information
enters each attention layer as a logit bias (`RelativePositionBias`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.init import normal_

Grid = tuple[int, int]


def resample_grid(grid_embed: torch.Tensor, new_grid: Grid, mode: str = "bilinear") -> torch.Tensor:
    """Resample a [gh, gw, D] table to `new_grid`, corners aligned: bilinear equals scipy.ndimage.zoom(order=1)."""
    if mode not in ("bilinear", "bicubic"):
        raise ValueError(f"resample mode must be 'bilinear' or 'bicubic', got {mode!r}")
    if tuple(grid_embed.shape[:2]) == tuple(new_grid):
        return grid_embed
    compute_dtype = torch.promote_types(grid_embed.dtype, torch.float32)  # half types interpolate in float32
    image = grid_embed.permute(2, 0, 1).unsqueeze(0).to(compute_dtype)
    out = F.interpolate(image, size=tuple(new_grid), mode=mode, align_corners=True)
    return out[0].permute(1, 2, 0).to(grid_embed.dtype)


def resample_position_embedding(
    posemb: torch.Tensor, num_prefix_tokens: int, old_grid: Grid, new_grid: Grid, mode: str = "bilinear"
) -> torch.Tensor:
    """Resample a learned [1, prefix + gh*gw, D] embedding to a new grid, prefix (class-token) rows kept as they are."""
    expected = num_prefix_tokens + old_grid[0] * old_grid[1]
    if posemb.ndim != 3 or posemb.shape[1] != expected:
        raise ValueError(
            f"position embedding of shape {tuple(posemb.shape)} does not fit grid {old_grid} with "
            f"{num_prefix_tokens} prefix token(s): expected [1, {expected}, D]"
        )
    prefix, grid_rows = posemb[:, :num_prefix_tokens], posemb[0, num_prefix_tokens:]
    grid_embed = grid_rows.reshape(old_grid[0], old_grid[1], -1)
    resized = resample_grid(grid_embed, new_grid, mode).reshape(1, new_grid[0] * new_grid[1], -1)
    return torch.cat([prefix, resized], dim=1)


def square_grid(num_rows: int, what: str) -> Grid:
    """The square grid with `num_rows` positions; a stored non-square grid needs its config to be resampled."""
    side = math.isqrt(num_rows)
    if side * side != num_rows:
        raise ValueError(
            f"{what}: {num_rows} grid positions do not form a square grid; pass the source img_size"
        )
    return (side, side)


class NoPositionEmbedding(nn.Module):
    """'none': the sequence is a bag of patches (D.4 row 1)."""

    def forward(self, x: torch.Tensor, grid: Grid) -> torch.Tensor:
        return x


class LearnedPositionEmbedding(nn.Module):
    """'learned' (the default): one D-vector per token, class token included, as in the official checkpoints."""

    def __init__(self, num_prefix_tokens: int, grid: Grid, dim: int) -> None:
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        self.grid: Grid = (grid[0], grid[1])
        self.weight = nn.Parameter(torch.empty(1, num_prefix_tokens + grid[0] * grid[1], dim))
        normal_(self.weight, 0.02)

    def forward(self, x: torch.Tensor, grid: Grid) -> torch.Tensor:
        posemb: torch.Tensor = self.weight
        if tuple(grid) != self.grid:
            posemb = resample_position_embedding(posemb, self.num_prefix_tokens, self.grid, grid)
        return x + posemb

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # noqa: ANN001
        """Loading a table trained at another resolution resamples it to this grid (§3.2)."""
        key = prefix + "weight"
        stored = state_dict.get(key)
        if stored is not None and stored.shape != self.weight.shape and stored.ndim == 3:
            old_grid = square_grid(stored.shape[1] - self.num_prefix_tokens, key)
            state_dict[key] = resample_position_embedding(stored, self.num_prefix_tokens, old_grid, self.grid)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


class Learned2dPositionEmbedding(nn.Module):
    """'learned_2d': X and Y tables of D/2 each, concatenated per patch; the class token has its own D-vector."""

    def __init__(self, num_prefix_tokens: int, grid: Grid, dim: int) -> None:
        super().__init__()
        self.prefix = nn.Parameter(torch.zeros(1, num_prefix_tokens, dim))
        self.row = nn.Parameter(torch.empty(grid[0], dim // 2))
        self.col = nn.Parameter(torch.empty(grid[1], dim // 2))
        for table in (self.prefix, self.row, self.col):
            normal_(table, 0.02)

    def forward(self, x: torch.Tensor, grid: Grid) -> torch.Tensor:
        row: torch.Tensor = self.row
        col: torch.Tensor = self.col
        if (row.shape[0], col.shape[0]) != tuple(grid):
            row = resample_grid(row[:, None], (grid[0], 1))[:, 0]
            col = resample_grid(col[:, None], (grid[1], 1))[:, 0]
        gh, gw = grid
        patches = torch.cat([col[None, :, :].expand(gh, -1, -1), row[:, None, :].expand(-1, gw, -1)], dim=-1)
        return x + torch.cat([self.prefix, patches.reshape(1, gh * gw, -1)], dim=1)


class SinCos2dPositionEmbedding(nn.Module):
    """'sincos': fixed 2-D sine-cosine features (as big_vision's posemb_sincos_2d); the class token gets zeros."""

    def __init__(self, num_prefix_tokens: int, dim: int, temperature: float = 10_000.0) -> None:
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        self.dim = dim
        self.temperature = temperature

    def table(self, grid: Grid, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        y, x = torch.meshgrid(
            torch.arange(grid[0], device=device, dtype=torch.float32),
            torch.arange(grid[1], device=device, dtype=torch.float32),
            indexing="ij",
        )
        omega = torch.arange(self.dim // 4, device=device, dtype=torch.float32) / (self.dim // 4 - 1 or 1)
        omega = 1.0 / self.temperature**omega
        y = y.flatten()[:, None] * omega[None]
        x = x.flatten()[:, None] * omega[None]
        patches = torch.cat([x.sin(), x.cos(), y.sin(), y.cos()], dim=1)
        prefix = patches.new_zeros(self.num_prefix_tokens, self.dim)
        return torch.cat([prefix, patches])[None].to(dtype)

    def forward(self, x: torch.Tensor, grid: Grid) -> torch.Tensor:
        return x + self.table(grid, x.device, x.dtype)


class RelativePositionBias(nn.Module):
    """'relative' (D.4): an extra attention of each query against learned embeddings of the 1-D offset q - k.

    The resulting logits are a bias added to the content logits before the softmax. Offsets run over the
    flattened token sequence (class token included), so the table has 2T - 1 rows.
    """

    def __init__(self, num_tokens: int, head_dim: int) -> None:
        super().__init__()
        self.num_tokens = num_tokens
        self.offsets = nn.Parameter(torch.empty(2 * num_tokens - 1, head_dim))
        normal_(self.offsets, 0.02)

    def forward(self, q: torch.Tensor, num_tokens: int) -> torch.Tensor:
        """Bias [B, heads, Q, T] from the scaled queries [B, heads, Q, hd] of the first Q of `num_tokens` tokens."""
        table: torch.Tensor = self.offsets
        if num_tokens != self.num_tokens:
            table = resample_grid(table[:, None], (2 * num_tokens - 1, 1))[:, 0]
        logits = q @ table.T  # [B, H, Q, 2T-1]: every query against every offset
        rows, cols = torch.arange(q.shape[-2], device=q.device), torch.arange(num_tokens, device=q.device)
        index = (rows[:, None] - cols[None, :] + num_tokens - 1).expand(*q.shape[:-2], -1, -1)
        return logits.gather(-1, index)


def build_position_embedding(kind: str, num_prefix_tokens: int, grid: Grid, dim: int) -> nn.Module:
    """The additive position embedding of Eq. 1 for `kind` ('relative' adds nothing here: see attention)."""
    if kind == "learned":
        return LearnedPositionEmbedding(num_prefix_tokens, grid, dim)
    if kind == "learned_2d":
        return Learned2dPositionEmbedding(num_prefix_tokens, grid, dim)
    if kind == "sincos":
        return SinCos2dPositionEmbedding(num_prefix_tokens, dim)
    if kind in ("none", "relative"):
        return NoPositionEmbedding()
    raise ValueError(f"unknown position embedding kind {kind!r}")
