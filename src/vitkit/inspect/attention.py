"""Attention probes of §4.5 / Appendix D.7-D.8: attention maps, mean attention distance, attention rollout.

All functions take the per-layer attention probabilities of `VisionTransformer.forward_attention`: one
[B, heads, T, T] tensor per layer, rows = queries, columns = keys, every row summing to 1, with the
`num_prefix_tokens` prefix tokens (the class token, then any register tokens) first and the gh x gw patches after
them in row-major order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from vitkit.models.vit import VisionTransformer

Grid = tuple[int, int]
PREFIX_KEYS = ("renormalise", "zero")


def attention_maps(model: VisionTransformer, images: torch.Tensor) -> list[torch.Tensor]:
    """One [B, heads, T, T] attention-probability tensor per layer for preprocessed `images` [B, C, H, W].

    Runs the model's explicit attention path (`forward_attention`, equal to the fused path) in eval mode
    without gradients; the model's train/eval mode is restored afterwards.
    """
    if not hasattr(model, "forward_attention"):
        raise ValueError(f"{type(model).__name__} has no attention to inspect (expected a VisionTransformer)")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _, maps = model.forward_attention(images)
    finally:
        model.train(was_training)
    return list(maps)


def token_grid(model: VisionTransformer, images: torch.Tensor) -> Grid:
    """The (gh, gw) patch grid `model` makes of `images` (hybrids: through the backbone's stride)."""
    stride = model.config.input_stride
    return (images.shape[-2] // stride, images.shape[-1] // stride)


def patch_distances(grid: Grid, stride: float = 1.0) -> torch.Tensor:
    """[N, N] Euclidean distances between the centres of the gh x gw patches (row-major), in units of `stride`.

    With `stride` = pixels per token side (`ViTConfig.input_stride`, which includes a hybrid's backbone
    stride) the distances are in input pixels.
    """
    gh, gw = grid
    rows, cols = torch.meshgrid(torch.arange(gh), torch.arange(gw), indexing="ij")
    centres = torch.stack([rows.flatten(), cols.flatten()], dim=1).to(torch.float64)
    return torch.cdist(centres, centres) * float(stride)


def _check_map(attn: torch.Tensor, num_tokens: int, what: str) -> None:
    if attn.ndim != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"{what}: expected attention [B, heads, T, T], got {list(attn.shape)}")
    if attn.shape[-1] != num_tokens:
        raise ValueError(
            f"{what}: {attn.shape[-1]} tokens do not match the grid and prefix ({num_tokens} expected)"
        )


def attention_distance(
    attn: torch.Tensor,
    grid: Grid,
    stride: float = 1.0,
    num_prefix_tokens: int = 0,
    prefix_keys: str = "renormalise",
) -> torch.Tensor:
    """Mean attention distance [B, heads] of one layer: for each patch query the attention-weighted distance
    (in pixels, see `patch_distances`) to the patches it attends to, averaged over the patch queries.

    Prefix (class and register) tokens have no position in the image: they are never queries, and as keys
    `prefix_keys='renormalise'` (the default) drops them and renormalises each query's attention over the
    patches, so the result is the mean distance *among the patches attended to*; `prefix_keys='zero'` drops
    them without renormalising, i.e. attention to the class token counts as distance 0 (what the widely used
    Keras/"probing-ViTs" re-implementation does by slicing ``attn[..., 1:, 1:]``). The paper publishes no code
    for Fig. 7 (right); for a model without prefix tokens both choices are the same.
    """
    if prefix_keys not in PREFIX_KEYS:
        raise ValueError(f"prefix_keys must be one of {list(PREFIX_KEYS)}, got {prefix_keys!r}")
    num_patches = grid[0] * grid[1]
    _check_map(attn, num_prefix_tokens + num_patches, "attention_distance")
    patches = attn[..., num_prefix_tokens:, num_prefix_tokens:].to(torch.float64)
    if prefix_keys == "renormalise" and num_prefix_tokens:
        patches = patches / patches.sum(-1, keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    distances = patch_distances(grid, stride).to(patches.device)
    per_query = (patches * distances).sum(-1)  # [B, H, N]
    return per_query.mean(-1)


def mean_attention_distance(
    maps: Sequence[torch.Tensor] | torch.Tensor,
    grid: Grid,
    stride: float = 1.0,
    num_prefix_tokens: int = 0,
    prefix_keys: str = "renormalise",
) -> torch.Tensor:
    """Fig. 7 (right) / Fig. 11: mean attention distance [layers, heads] in pixels, averaged over the images
    of the batch and over the patch queries (see `attention_distance` for how prefix tokens are treated)."""
    if isinstance(maps, torch.Tensor):
        maps = [maps]
    return torch.stack(
        [attention_distance(a, grid, stride, num_prefix_tokens, prefix_keys).mean(0) for a in maps]
    )


def attention_rollout(maps: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema 2020; the paper's Fig. 6 / D.8): joint attention [B, T, T].

    Per layer the heads are averaged, the identity is added for the residual connection and rows are
    renormalised; the layers are then multiplied through: R = A_L ... A_2 A_1, so R[b, i, j] is how much
    output token i draws on input token j.
    """
    if isinstance(maps, torch.Tensor):
        maps = [maps]
    if not maps:
        raise ValueError("attention_rollout needs at least one layer of attention")
    joint: torch.Tensor | None = None
    for attn in maps:
        _check_map(attn, attn.shape[-1], "attention_rollout")
        a = attn.to(torch.float64).mean(1)
        a = a + torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        a = a / a.sum(-1, keepdim=True)
        joint = a if joint is None else a @ joint
    assert joint is not None  # maps is not empty
    return joint


def rollout_to_patches(
    joint: torch.Tensor, grid: Grid, num_prefix_tokens: int, classifier: str = "token"
) -> torch.Tensor:
    """Rolled-out attention [B, gh, gw] of the classifier's input on the patches, summing to 1 per image.

    'token' models: the class token's row (the first prefix token). 'gap' and 'map' models read the patch tokens
    (their mean, or attention pooling over them), so the mean of the patch rows; 'token_gap' reads both, so the
    mean of those two. Prefix columns (class and register tokens, which have no place in the image) are dropped
    and the rest renormalised: attention that passed through a register on its way to a patch is kept.
    """
    num_patches = grid[0] * grid[1]
    if joint.ndim != 3 or joint.shape[-1] != num_prefix_tokens + num_patches:
        raise ValueError(
            f"rollout of shape {list(joint.shape)} does not fit grid {grid} + {num_prefix_tokens} prefix"
        )
    if classifier in ("token", "token_gap") and not num_prefix_tokens:
        raise ValueError(f"a {classifier!r} classifier needs a class token (num_prefix_tokens >= 1)")
    patch_rows = joint[:, num_prefix_tokens:].mean(1)
    if classifier == "token":
        row = joint[:, 0]
    elif classifier == "token_gap":
        row = (joint[:, 0] + patch_rows) / 2
    elif classifier in ("gap", "map"):
        row = patch_rows
    else:
        raise ValueError(f"classifier must be one of 'token', 'gap', 'map', 'token_gap', got {classifier!r}")
    patches = row[:, num_prefix_tokens:]
    patches = patches / patches.sum(-1, keepdim=True).clamp_min(torch.finfo(patches.dtype).tiny)
    return patches.reshape(-1, *grid)


def rollout_note(classifier: str, num_reg_tokens: int) -> str:
    """Which rows of the rollout a figure shows for `classifier`, and what happens to register tokens."""
    source = {
        "token": "from the class token",
        "token_gap": "from the class token and the mean of the patch tokens, averaged",
        "gap": "from the mean of the patch tokens (GAP)",
        "map": "from the mean of the patch tokens (the attention-pooling head reads the patches)",
    }.get(classifier, f"for classifier {classifier!r}")
    registers = (
        f"; the {num_reg_tokens} register token(s) are left out (attention rolled through them is kept, "
        "what rests on them is dropped) and the map renormalised over the patches"
        if num_reg_tokens
        else ""
    )
    return f"{source} to the patches{registers}"


def rollout_masks(model: VisionTransformer, images: torch.Tensor) -> torch.Tensor:
    """Fig. 6: [B, gh, gw] rolled-out attention on the patches of what the classifier reads (`rollout_to_patches`)."""
    cfg = model.config
    joint = attention_rollout(attention_maps(model, images))
    return rollout_to_patches(joint, token_grid(model, images), cfg.num_prefix_tokens, cfg.classifier)
