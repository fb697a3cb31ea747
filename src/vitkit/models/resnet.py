"""ResNets with weight standardisation and GroupNorm: the hybrid's backbone (v1), the BiT baselines (v2).

* `ResNetV1` is the feature extractor of the hybrid ViT (§3.1), exactly as vit_jax/models_resnet.py:
  post-activation bottlenecks, GroupNorm eps 1e-6, weight-standardisation eps 1e-5 added to the std,
  TensorFlow 'SAME' padding. Module names equal the official parameter names (`conv_root`, `gn_root`,
  `block{s}.unit{u}.conv1`, ...), so a checkpoint loader maps keys mechanically.
* `ResNetV2` is the BiT model used as the CNN baseline (§4.1): pre-activation bottlenecks, GroupNorm eps
  1e-5, weight standardisation with eps 1e-8 inside the square root and symmetric padding, as timm's
  `resnetv2_*_bit` (the converted BiT checkpoints). Same naming scheme, with BiT's `a/b/c` sub-blocks as
  `conv1/2/3` and their pre-activation norms as `gn1/2/3`.

Both stack stages the same way (`_add_stages`): stage s has width F = W * 2**(s-1) and 4F output channels;
the first unit of every stage but the first has stride 2, on its 3x3 conv and on its projection.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from vitkit.models.config import ResNetConfig, resnet_stride
from vitkit.storage import SavePretrainedMixin

SAME_TF = "same_tf"
EXPANSION = 4  # bottleneck output channels per unit width
GN_GROUPS = 32
HYBRID_GN_EPS = 1e-6  # flax nn.GroupNorm default, used by vit_jax
HYBRID_WS_EPS = 1e-5  # vit_jax weight_standardize: added to the std
BIT_GN_EPS = 1e-5  # torch / timm GroupNorm default, used for the BiT models
BIT_WS_EPS = 1e-8  # timm's BiT StdConv2d, added to the variance (BiT's own PyTorch code: 1e-10)


def pad_same_tf(
    x: torch.Tensor, kernel_size: tuple[int, ...], stride: tuple[int, ...], value: float = 0.0
) -> torch.Tensor:
    """TensorFlow 'SAME' padding for a following VALID conv/pool: out = ceil(in / s), and an odd total puts
    the extra pixel after (bottom/right). PyTorch's symmetric padding differs for stride 2 on even inputs."""
    pads: list[int] = []
    # F.pad lists the last dimension first: (left, right, top, bottom)
    for size, k, s in zip(reversed(x.shape[-2:]), reversed(kernel_size), reversed(stride), strict=True):
        total = max((-(-size // s) - 1) * s + k - size, 0)
        pads += [total // 2, total - total // 2]
    return F.pad(x, pads, value=value) if any(pads) else x


class StdConv2d(nn.Conv2d):
    """Bias-free conv whose kernel is standardised per output channel, over (in, kh, kw), at every forward.

    The stored weight stays raw (that is what checkpoints hold); the conv uses
    `(w - mean) / (std + eps)` with the population std (vit_jax), or `(w - mean) / sqrt(var + eps)` when
    `eps_in_sqrt` (BiT / timm). `padding` is an int (symmetric, PyTorch style) or `"same_tf"`
    (TensorFlow SAME, computed from the input size at every call).
    Initialisation is PyTorch's default (kaiming-uniform) rather than flax's lecun-normal: standardisation
    removes the kernel's scale and mean, so only the shape of the distribution differs.
    """

    keeps_float32_weights = True  # standardising needs float32 (read by vitkit.inference_weights.weights_in)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int | str = 0,
        *,
        eps: float = HYBRID_WS_EPS,
        eps_in_sqrt: bool = False,
    ) -> None:
        if not isinstance(padding, int) and padding != SAME_TF:
            raise ValueError(f"padding must be an int or {SAME_TF!r}, got {padding!r}")
        same_tf = padding == SAME_TF
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding=0 if same_tf else padding, bias=False
        )
        self.same_tf = same_tf
        self.eps = eps
        self.eps_in_sqrt = eps_in_sqrt

    def standardized_weight(self) -> torch.Tensor:
        var, mean = torch.var_mean(self.weight, dim=(1, 2, 3), correction=0, keepdim=True)
        scale = (var + self.eps).sqrt() if self.eps_in_sqrt else var.sqrt() + self.eps
        return (self.weight - mean) / scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.same_tf:
            x = pad_same_tf(x, self.kernel_size, self.stride)
        return self._conv_forward(x, self.standardized_weight(), None)


def _group_norm(channels: int, eps: float) -> nn.GroupNorm:
    """32 contiguous channel groups, scale 1, bias 0: both ResNets' normalisation, differing only in eps."""
    return nn.GroupNorm(GN_GROUPS, channels, eps=eps)


_hybrid_conv = partial(StdConv2d, padding=SAME_TF, eps=HYBRID_WS_EPS)
_bit_conv = partial(StdConv2d, eps=BIT_WS_EPS, eps_in_sqrt=True)


def _needs_projection(in_chs: int, features: int, stride: int) -> bool:
    """The shortcut needs a 1x1 conv when the unit changes the channel count or the resolution."""
    return in_chs != EXPANSION * features or stride != 1


class BottleneckV1(nn.Module):
    """Post-activation bottleneck of the hybrid (vit_jax `ResidualUnit`): relu(shortcut + gn3(conv3(...)))."""

    def __init__(self, in_chs: int, features: int, stride: int) -> None:
        super().__init__()
        out_chs = EXPANSION * features
        self.conv1 = _hybrid_conv(in_chs, features, 1)
        self.gn1 = _group_norm(features, HYBRID_GN_EPS)
        self.conv2 = _hybrid_conv(features, features, 3, stride)
        self.gn2 = _group_norm(features, HYBRID_GN_EPS)
        self.conv3 = _hybrid_conv(features, out_chs, 1)
        self.gn3 = _group_norm(out_chs, HYBRID_GN_EPS)
        nn.init.zeros_(self.gn3.weight)  # official scale_init=zeros: each residual branch starts switched off
        if _needs_projection(in_chs, features, stride):
            self.conv_proj: StdConv2d | None = _hybrid_conv(in_chs, out_chs, 1, stride)
            self.gn_proj: nn.GroupNorm | None = _group_norm(out_chs, HYBRID_GN_EPS)
        else:
            self.conv_proj = self.gn_proj = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.conv_proj is None or self.gn_proj is None:
            shortcut = x
        else:
            shortcut = self.gn_proj(self.conv_proj(x))
        y = F.relu(self.gn1(self.conv1(x)))
        y = F.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return F.relu(shortcut + y)


class BottleneckV2(nn.Module):
    """Pre-activation bottleneck of BiT: x + conv3(relu(gn3(...))); the projection reads relu(gn1(x))."""

    def __init__(self, in_chs: int, features: int, stride: int) -> None:
        super().__init__()
        out_chs = EXPANSION * features
        self.gn1 = _group_norm(in_chs, BIT_GN_EPS)
        self.conv1 = _bit_conv(in_chs, features, 1)
        self.gn2 = _group_norm(features, BIT_GN_EPS)
        self.conv2 = _bit_conv(features, features, 3, stride, padding=1)
        self.gn3 = _group_norm(features, BIT_GN_EPS)
        self.conv3 = _bit_conv(features, out_chs, 1)
        needs_projection = _needs_projection(in_chs, features, stride)
        self.conv_proj = _bit_conv(in_chs, out_chs, 1, stride) if needs_projection else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        preact = F.relu(self.gn1(x))
        shortcut = x if self.conv_proj is None else self.conv_proj(preact)
        y = self.conv1(preact)
        y = self.conv2(F.relu(self.gn2(y)))
        y = self.conv3(F.relu(self.gn3(y)))
        return shortcut + y


def _add_stages(parent: nn.Module, unit: type[nn.Module], width: int, layers: tuple[int, ...]) -> int:
    """Register `block1..blockN` (each `unit1..unitK`) on `parent`; returns the output channel count."""
    in_chs = width
    for s, depth in enumerate(layers, start=1):
        features = width * 2 ** (s - 1)
        units = OrderedDict()
        for u in range(1, depth + 1):
            units[f"unit{u}"] = unit(in_chs, features, stride=2 if s > 1 and u == 1 else 1)
            in_chs = EXPANSION * features
        parent.add_module(f"block{s}", nn.Sequential(units))
    return in_chs


def _stages(parent: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    return ((name, m) for name, m in parent.named_children() if name.startswith("block"))


class ResNetV1(nn.Module):
    """The hybrid's CNN (vit_jax): StdConv 7x7/2, GroupNorm, ReLU, max-pool 3x3/2 (all SAME), then stages.

    `layers=()` is the stem alone. `stride` is the total downsampling, `out_channels` the feature-map width.
    """

    def __init__(self, layers: tuple[int, ...], width_factor: float = 1.0, in_chans: int = 3) -> None:
        super().__init__()
        self.layers = tuple(layers)
        width = int(64 * width_factor)
        self.conv_root = _hybrid_conv(in_chans, width, 7, 2)
        self.gn_root = _group_norm(width, HYBRID_GN_EPS)
        self.out_channels = _add_stages(self, BottleneckV1, width, self.layers)
        self.stride = resnet_stride(self.layers)

    def _walk(self, x: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
        """The forward pass step by step: (name, NCHW output) per named step; the last is the output."""
        x = self.conv_root(x)
        yield "conv_root", x
        x = self.gn_root(x)
        yield "gn_root", x
        x = F.max_pool2d(pad_same_tf(F.relu(x), (3, 3), (2, 2), value=float("-inf")), 3, 2)
        yield "pool", x
        for name, stage in _stages(self):
            x = stage(x)
            yield name, x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Run to the end: the last output is the feature map.
        ((_, features),) = deque(self._walk(x), maxlen=1)
        return features

    def forward_intermediates(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """NCHW outputs keyed 'conv_root' (standardised conv, before GN), 'gn_root' (before ReLU), 'pool'
        (stem output), 'block1', ...: the official probe points, without hooks."""
        return dict(self._walk(x))


class ResNetV2(SavePretrainedMixin, nn.Module):
    """BiT (Kolesnikov et al. 2020), the ResNet baseline of §4.1: pre-activation ResNet v2 with GN + WS.

    Stem: StdConv 7x7/2 (padding 3) -> zero pad 1 -> max-pool 3x3/2 (BiT's fixed stand-in for SAME); stages of
    pre-activation bottlenecks; final GroupNorm + ReLU, global average pool, linear head.
    The head is an `nn.Linear` rather than BiT's 1x1 conv: after pooling they are the same map, a Linear
    matches the ViT's head (same `forward_head` / `reset_classifier` semantics), and BiT's [K, C, 1, 1]
    kernel converts by dropping the two unit axes. It starts at zero, as BiT's fine-tuning head does.

    Parameters at 1000 classes (identical to timm's ResNetV2 with BiT settings):

    | name   | layers      | width | parameters  |
    | ------ | ----------- | ----- | ----------- |
    | R50x1  | (3,4,6,3)   | 1     |  25,549,352 |
    | R50x2  | (3,4,6,3)   | 2     |  97,988,712 |
    | R101x1 | (3,4,23,3)  | 1     |  44,541,480 |
    | R152x1 | (3,8,36,3)  | 1     |  60,185,128 |
    | R152x2 | (3,8,36,3)  | 2     | 236,335,208 |
    | R200x3 | (3,24,36,3) | 3     | 568,633,000 |
    """

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        self.config = config
        width = 64 * config.width_factor
        self.conv_root = _bit_conv(config.in_chans, width, 7, 2, padding=3)
        self.num_features = _add_stages(self, BottleneckV2, width, config.layers)
        self.norm = _group_norm(self.num_features, BIT_GN_EPS)
        self.grad_checkpointing = False
        self.reset_classifier(config.num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Feature map [B, C, H/s, W/s] after the final GroupNorm and ReLU (s = 32 for four stages)."""
        if x.ndim != 4 or x.shape[1] != self.config.in_chans:
            raise ValueError(f"expected input [B, {self.config.in_chans}, H, W], got {list(x.shape)}")
        x = self.conv_root(x)
        x = F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 3, 2)  # zeros, not -inf: BiT's padding of the raw conv
        for _, stage in _stages(self):
            x = checkpoint(stage, x, use_reentrant=False) if self.grad_checkpointing else stage(x)
        return F.relu(self.norm(x))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Global average pool, then the head (skipped with `pre_logits`)."""
        x = x.mean(dim=(2, 3))
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Logits (with `pre_logits`, the pooled features the head reads)."""
        return self.forward_head(self.forward_features(x), pre_logits)

    def reset_classifier(self, num_classes: int) -> None:
        """A fresh zero-initialised head (BiT's fine-tuning recipe); 0 classes gives an identity head."""
        self.config.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()
        self.head.to(self.norm.weight.device)
        for p in self.head.parameters():
            nn.init.zeros_(p)

    def no_weight_decay(self) -> set[str]:
        """Parameters exempt from weight decay: every GroupNorm scale and bias, and the head bias."""
        return {name for name, p in self.named_parameters() if p.ndim <= 1}

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each stage in the backward pass: activation memory for compute."""
        self.grad_checkpointing = enable
