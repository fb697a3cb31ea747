"""Masked patch prediction (§4.6, Appendix B.1.2): the paper's self-supervised pre-training, never released.

50% of the patch embeddings are corrupted — 80% of those replaced by a learnable [mask] embedding, 10% by a
random other patch embedding, 10% kept — and every corrupted patch's output token predicts a target of that
patch with a linear head. Targets (B.1.2): the 3-bit mean colour (512 classes), a 4 x 4 downsized patch in
3-bit colour (16 predictions of 512 classes), or an L2 regression on the full patch. On grayscale input the
colour target degenerates to grey levels: 2^bits classes (8 for 3 bits) instead of 512.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from vitkit.models.config import ViTConfig
from vitkit.models.init import normal_
from vitkit.models.vit import VisionTransformer

TARGETS = ("mean_color", "downsized", "pixels")


def quantize_colors(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Colour class of [..., C] values in [-1, 1]: each channel to `bits` bits, channels combined (R major)."""
    levels = 2**bits
    q = ((values.clamp(-1, 1) + 1) / 2 * levels).floor().clamp(max=levels - 1).long()
    weights = levels ** torch.arange(q.shape[-1] - 1, -1, -1, device=q.device)
    return (q * weights).sum(-1)


def patch_targets(
    images: torch.Tensor, patch: int, target: str, bits: int = 3, cells: int = 4
) -> torch.Tensor:
    """Per-patch targets in row-major token order: [B, N] classes, [B, N, cells^2] classes or [B, N, P*P*C] values."""
    B, C, H, W = images.shape
    if target == "pixels":
        patches = F.unfold(images, kernel_size=patch, stride=patch)  # [B, C*P*P, N]
        return patches.transpose(1, 2)
    side = 1 if target == "mean_color" else cells
    if patch % side:
        raise ValueError(f"patch size {patch} is not divisible by the {side}x{side} target grid")
    pooled = F.avg_pool2d(images, kernel_size=patch // side)  # [B, C, gh*side, gw*side]
    gh, gw = H // patch, W // patch
    cells_last = pooled.view(B, C, gh, side, gw, side).permute(0, 2, 4, 3, 5, 1)  # [B, gh, gw, side, side, C]
    classes = quantize_colors(cells_last, bits).reshape(B, gh * gw, side * side)
    return classes[..., 0] if target == "mean_color" else classes


def corrupt_patches(
    patches: torch.Tensor,
    mask_token: torch.Tensor,
    rate: float = 0.5,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT-style corruption of [B, N, D] patch embeddings; returns (corrupted, selected mask [B, N])."""
    B, N, D = patches.shape
    draw = lambda: torch.rand(B, N, device=patches.device, generator=generator)  # noqa: E731
    selected, kind = draw() < rate, draw()
    masked = selected & (kind < 0.8)
    replaced = selected & (kind >= 0.8) & (kind < 0.9)
    # a random *other* patch of the batch: shift every flat index by 1 .. B*N-1
    flat = patches.reshape(B * N, D)
    offset = torch.randint(1, max(B * N, 2), (B * N,), device=patches.device, generator=generator)
    others = flat[(torch.arange(B * N, device=patches.device) + offset) % (B * N)].view(B, N, D)
    corrupted = torch.where(masked[..., None], mask_token.to(patches.dtype).expand(B, N, D), patches)
    corrupted = torch.where(replaced[..., None], others, corrupted)
    return corrupted, selected


class MaskedPatchPrediction(nn.Module):
    """A ViT with a [mask] embedding and a linear prediction head; `forward(images)` returns the loss."""

    def __init__(
        self, vit: VisionTransformer, target: str = "mean_color", corrupt_rate: float = 0.5, bits: int = 3
    ):
        super().__init__()
        if target not in TARGETS:
            raise ValueError(f"mpp target must be one of {list(TARGETS)}, got {target!r}")
        self.vit = vit
        self.target = target
        self.corrupt_rate = corrupt_rate
        self.bits = bits
        self.patch = vit.config.input_stride
        dim, channels = vit.config.hidden_size, vit.config.in_chans
        self.num_colors = 2 ** (bits * channels)
        outputs = {
            "mean_color": self.num_colors,
            "downsized": 16 * self.num_colors,
            "pixels": channels * self.patch**2,
        }[target]
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        normal_(self.mask_token, 0.02)
        self.head = nn.Linear(dim, outputs)

    def forward(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Mean loss over the corrupted patches of a batch of images in [-1, 1]."""
        vit = self.vit
        patches, grid = vit.patchify(images)
        corrupted, selected = corrupt_patches(patches, self.mask_token, self.corrupt_rate, generator)
        encoded = vit.encode(vit.add_position(corrupted, grid))[:, vit.config.num_prefix_tokens :]
        predictions = self.head(encoded[selected])
        targets = patch_targets(images, self.patch, self.target, self.bits)[selected]
        if self.target == "pixels":
            return F.mse_loss(predictions, targets)
        return F.cross_entropy(predictions.reshape(-1, self.num_colors), targets.reshape(-1))

    @property
    def config(self) -> ViTConfig:
        """The ViT's config: a checkpoint of the wrapper stores it, and a resume rebuilds the ViT and re-wraps it."""
        return self.vit.config

    def no_weight_decay(self) -> set[str]:
        """The ViT's exemptions, the [mask] embedding and the head bias."""
        return {f"vit.{name}" for name in self.vit.no_weight_decay()} | {"mask_token", "head.bias"}
