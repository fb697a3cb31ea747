"""The figures of §4.5 as PNGs (matplotlib's Agg canvas, no display, no pyplot state)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 110


def _save(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI, bbox_inches="tight", facecolor="white")
    return path


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.full_like(x, 0.5)


def component_image(component: np.ndarray) -> np.ndarray:
    """One [C, P, P] component as a displayable image in [0, 1]: RGB for 3 channels, grey for 1, channels side
    by side (grey) otherwise; min-max normalised per component."""
    c = component.shape[0]
    x = _minmax(component)
    if c == 3:
        return x.transpose(1, 2, 0)
    if c == 1:
        return x[0]
    return np.concatenate(list(x), axis=1)


def plot_filter_components(
    components: torch.Tensor, path: str | Path, ratio: torch.Tensor | None = None
) -> Path:
    """Fig. 7 (left): the principal components of the patch-embedding filters, 7 per row."""
    comps = components.detach().cpu().numpy()
    k = len(comps)
    cols = min(7, max(k, 1))
    rows = max(1, math.ceil(k / cols))
    fig = Figure(figsize=(1.3 * cols, 1.3 * rows + 0.5))
    fig.suptitle(
        "RGB embedding filters (first principal components)"
        if comps.shape[1] == 3
        else "Embedding filters (first principal components)",
        fontsize=10,
    )
    for i in range(rows * cols):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.set_xticks([])
        ax.set_yticks([])
        if i >= k:
            ax.axis("off")
            continue
        image = component_image(comps[i])
        ax.imshow(image, cmap="gray" if image.ndim == 2 else None, vmin=0, vmax=1, interpolation="nearest")
        if ratio is not None:
            ax.set_title(f"{i + 1}: {100 * float(ratio[i]):.1f}%", fontsize=6, pad=2)
    return _save(fig, path)


def plot_position_similarity(similarity: torch.Tensor, path: str | Path, title: str = "") -> Path:
    """Fig. 7 (centre): for each patch (row, column) a small heat map of its embedding's cosine similarity
    with every patch, tiled as the patch grid (one image, white gutters)."""
    sim = similarity.detach().cpu().numpy()
    gh, gw = sim.shape[:2]
    gap = 1
    mosaic = np.full((gh * (gh + gap) - gap, gw * (gw + gap) - gap), np.nan)
    for r in range(gh):
        for c in range(gw):
            top, left = r * (gh + gap), c * (gw + gap)
            mosaic[top : top + gh, left : left + gw] = sim[r, c]
    side = min(8.0, max(3.5, 0.45 * max(gh, gw)))
    fig = Figure(figsize=(side + 1.2, side * gh / gw + 0.6))
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(mosaic, cmap="viridis", vmin=-1, vmax=1, interpolation="nearest")
    ax.set_xticks(
        [c * (gw + gap) + (gw - 1) / 2 for c in range(gw)], [str(c + 1) for c in range(gw)], fontsize=7
    )
    ax.set_yticks(
        [r * (gh + gap) + (gh - 1) / 2 for r in range(gh)], [str(r + 1) for r in range(gh)], fontsize=7
    )
    ax.tick_params(length=0)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    ax.set_title(title or "Position embedding similarity", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03, label="Cosine similarity")
    return _save(fig, path)


def plot_attention_distance(
    distance: torch.Tensor, path: str | Path, title: str = "", max_pixels: float | None = None
) -> Path:
    """Fig. 7 (right) / Fig. 11: mean attention distance in pixels against network depth, one dot per head."""
    d = distance.detach().cpu().numpy()
    layers, heads = d.shape
    fig = Figure(figsize=(4.6, 3.6))
    ax = fig.add_subplot(1, 1, 1)
    colors = [f"C{h % 10}" for h in range(heads)]
    for h in range(heads):
        ax.scatter(np.arange(layers), d[:, h], s=14, color=colors[h], label=f"Head {h + 1}", alpha=0.85)
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_xticks(np.arange(layers), [str(i + 1) for i in range(layers)] if layers <= 16 else None)
    ax.set_xlim(-0.5, layers - 0.5)
    top = max_pixels if max_pixels else float(np.nanmax(d)) * 1.1 if d.size else 1.0
    ax.set_ylim(0, max(top, 1e-6))
    ax.grid(alpha=0.3)
    ax.set_title(title or "Mean attention distance", fontsize=10)
    if heads <= 16:
        ax.legend(fontsize=6, ncol=2 if heads > 8 else 1, loc="lower right", markerscale=0.8)
    return _save(fig, path)


def display_image(x: torch.Tensor) -> np.ndarray:
    """A model input [C, H, W] in [-1, 1] as a [H, W, 3] or [H, W] float image in [0, 1]."""
    img = ((x.detach().cpu().float() + 1) / 2).clamp(0, 1).numpy()
    if img.shape[0] == 1:
        return img[0]
    if img.shape[0] == 3:
        return img.transpose(1, 2, 0)
    return img.mean(0)


def upsample_mask(mask: torch.Tensor, size: tuple[int, int]) -> np.ndarray:
    """A [gh, gw] rollout mask min-max normalised and bilinearly resized to the image."""
    m = mask.detach().cpu().to(torch.float32)
    m = (m - m.min()) / (m.max() - m.min()).clamp_min(1e-12)
    return (
        F.interpolate(m[None, None], size=size, mode="bilinear", align_corners=False)[0, 0]
        .clamp(0, 1)
        .numpy()
    )


def plot_rollout(
    inputs: torch.Tensor,
    masks: torch.Tensor,
    path: str | Path,
    names: list[str] | None = None,
    per_row: int = 8,
) -> Path:
    """Fig. 6 / D.8: each input image above its attention rollout overlaid as a heat map."""
    n = len(inputs)
    cols = min(per_row, max(n, 1))
    groups = max(1, math.ceil(n / cols))
    fig = Figure(figsize=(1.7 * cols, 3.6 * groups))
    for i in range(groups * cols):
        g, c = divmod(i, cols)
        top = fig.add_subplot(2 * groups, cols, 2 * g * cols + c + 1)
        bottom = fig.add_subplot(2 * groups, cols, (2 * g + 1) * cols + c + 1)
        for ax in (top, bottom):
            ax.axis("off")
        if i >= n:
            continue
        image = display_image(inputs[i])
        heat = upsample_mask(masks[i], image.shape[:2])
        cmap = "gray" if image.ndim == 2 else None
        top.imshow(image, cmap=cmap, vmin=0, vmax=1)
        bottom.imshow(image, cmap=cmap, vmin=0, vmax=1)
        bottom.imshow(heat, cmap="jet", alpha=0.5, vmin=0, vmax=1)
        if names:
            top.set_title(_short(names[i]), fontsize=6)
    fig.suptitle("Input (top) and attention rollout (bottom)", fontsize=10)
    return _save(fig, path)


def _short(name: str, limit: int = 22) -> str:
    return name if len(name) <= limit else "…" + name[-(limit - 1) :]


def write_figures(result: dict[str, Any], out: str | Path) -> dict[str, Path]:
    """All figures available in `result` (as made by `vitkit.inspect.inspect_model`), keyed by figure name."""
    out = Path(out)
    written: dict[str, Path] = {}
    if result.get("filter_components") is not None:
        comps, ratio = result["filter_components"]
        written["filters"] = plot_filter_components(comps, out / "fig7_filters.png", ratio)
    if result.get("position_similarity") is not None:
        written["position_similarity"] = plot_position_similarity(
            result["position_similarity"],
            out / "fig7_position_similarity.png",
            result.get("position_title", ""),
        )
    if result.get("mean_attention_distance") is not None:
        written["attention_distance"] = plot_attention_distance(
            result["mean_attention_distance"],
            out / "fig7_attention_distance.png",
            result.get("distance_title", ""),
        )
    if result.get("rollout") is not None:
        inputs, masks = result["rollout"]
        written["rollout"] = plot_rollout(
            inputs, masks, out / "fig6_rollout.png", result.get("rollout_names")
        )
    return written
