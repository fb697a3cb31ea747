"""Model configurations as data: every architectural choice of the paper is a field."""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

from vitkit.sizes import to_pair

CLASSIFIERS = ("token", "gap", "map", "token_gap")
ACTIVATIONS = ("gelu", "gelu_tanh", "quick_gelu", "swiglu")
POS_EMBEDS = ("none", "learned", "learned_2d", "sincos", "relative")


@dataclass
class ViTConfig:
    """A Vision Transformer (Eq. 1-4), optionally on a ResNet v1 feature map (the hybrid of §3.1).

    Later ViTs add parts that are off by default, so every model of the paper is unchanged: `layer_scale`
    (DeiT III, DINOv2: a learned per-channel scale on each residual branch, initialised to this value),
    `num_reg_tokens` (DINOv2 with registers: learned tokens after the class token that no head reads),
    `prefix_pos_embed=False` (DeiT III, DINOv2 with registers: position embeddings for the patches only),
    `pre_norm` (CLIP: a LayerNorm on z_0), `patch_bias` and `qkv_bias` (off in CLIP's patch embedding),
    activation 'quick_gelu' (OpenAI's CLIP) or 'swiglu' (DINOv2-g: SiLU of one half of the first layer gates the
    other half; `mlp_dim` is the width after gating), classifier 'map' (SigLIP: attention pooling by one learned
    query, then a residual MLP) or 'token_gap' (the class token beside the mean of the patch tokens, DINOv2's
    linear evaluation), `fc_norm` (GAP with the final norm after pooling instead of before).
    `probe_classifier` is the pooling that a head fitted on frozen features reads, as each family evaluates its
    features (None: the classifier's own); `image_mean` / `image_std` the normalisation the weights were
    trained with (None: 0.5 for every channel, the paper's inputs in [-1, 1]).
    """

    img_size: int | tuple[int, int] = 224
    patch_size: int | tuple[int, int] = 16
    in_chans: int = 3
    num_classes: int = 1000
    hidden_size: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    classifier: str = "token"
    representation_size: int | None = None
    dropout: float = 0.0
    attention_dropout: float = 0.0
    drop_path: float = 0.0
    activation: str = "gelu"
    pos_embed: str = "learned"
    layer_norm_eps: float = 1e-6
    resnet_layers: tuple[int, ...] | None = None
    resnet_width: float = 1.0
    dynamic_img_size: bool = False
    # Parts of later ViTs (DeiT III, CLIP, SigLIP, DINOv2), each off by default: the paper's models are unchanged.
    qkv_bias: bool = True
    patch_bias: bool = True
    pre_norm: bool = False
    layer_scale: float | None = None
    num_reg_tokens: int = 0
    prefix_pos_embed: bool = True
    fc_norm: bool = False
    probe_classifier: str | None = None
    image_mean: tuple[float, ...] | None = None
    image_std: tuple[float, ...] | None = None

    model_type = "vit"

    def __post_init__(self) -> None:
        self.img_size = to_pair(self.img_size)
        self.patch_size = to_pair(self.patch_size)
        if self.resnet_layers is not None:
            _check_sizes("resnet_layers", self.resnet_layers, pair=False)
            self.resnet_layers = tuple(int(n) for n in self.resnet_layers)
        check_choice("classifier", self.classifier, CLASSIFIERS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("pos_embed", self.pos_embed, POS_EMBEDS)
        if self.probe_classifier is not None:
            check_choice("probe_classifier", self.probe_classifier, ("token", "gap", "token_gap"))
            if self.probe_classifier != "gap" and not self.has_class_token:
                raise ValueError(f"probe_classifier {self.probe_classifier!r} needs a class token")
        for name in ("hidden_size", "depth", "num_heads", "mlp_dim", "in_chans"):
            _check_int(name, getattr(self, name), 1)
        _check_int("num_classes", self.num_classes, 0)
        _check_int("num_reg_tokens", self.num_reg_tokens, 0)
        if self.layer_scale is not None and not (_is_number(self.layer_scale) and self.layer_scale > 0):
            raise ValueError(f"layer_scale must be None or a number > 0, got {self.layer_scale!r}")
        if self.fc_norm and self.classifier != "gap":
            raise ValueError(
                f"fc_norm (the final norm after pooling) needs classifier 'gap', got {self.classifier!r}"
            )
        if self.num_reg_tokens and self.pos_embed != "learned":
            raise ValueError(f"register tokens need pos_embed 'learned', got {self.pos_embed!r}")
        for name in ("image_mean", "image_std"):
            self._check_per_channel(name)
        _check_sizes("img_size", self.img_size)
        _check_sizes("patch_size", self.patch_size)
        if self.representation_size is not None:
            _check_int("representation_size", self.representation_size, 1)
        for name in ("dropout", "attention_dropout", "drop_path"):
            _check_fraction(name, getattr(self, name))
        if not (_is_number(self.layer_norm_eps) and self.layer_norm_eps > 0):
            raise ValueError(f"layer_norm_eps must be a number > 0, got {self.layer_norm_eps!r}")
        if not (_is_number(self.resnet_width) and self.resnet_width > 0):
            raise ValueError(f"resnet_width must be a number > 0, got {self.resnet_width!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}"
            )
        if self.pos_embed == "learned_2d" and self.hidden_size % 2:
            raise ValueError(f"pos_embed 'learned_2d' needs an even hidden_size, got {self.hidden_size}")
        if self.pos_embed == "sincos" and self.hidden_size % 4:
            raise ValueError(f"pos_embed 'sincos' needs hidden_size divisible by 4, got {self.hidden_size}")
        stride = self.input_stride
        for side, size in zip(("height", "width"), self.img_size, strict=True):
            if size % stride:
                raise ValueError(f"img_size {side} {size} must be divisible by the input stride {stride}")

    def _check_per_channel(self, name: str) -> None:
        """`image_mean` / `image_std`: None (0.5, the paper's [-1, 1] inputs) or one number a channel."""
        values = getattr(self, name)
        if values is None:
            return
        if not isinstance(values, (tuple, list)) or len(values) != self.in_chans:
            raise ValueError(f"{name} must hold one number per channel ({self.in_chans}), got {values!r}")
        if not all(_is_number(v) for v in values) or (name == "image_std" and min(values) <= 0):
            raise ValueError(
                f"{name} must hold finite numbers{' > 0' if name == 'image_std' else ''}, got {values!r}"
            )
        setattr(self, name, tuple(float(v) for v in values))

    @property
    def backbone_stride(self) -> int:
        """Downsampling of the ResNet in front of the patch embedding (1 for a plain ViT)."""
        return resnet_stride(self.resnet_layers)

    @property
    def input_stride(self) -> int:
        """Pixels per token side: backbone stride times patch size (square patches only)."""
        ph, pw = to_pair(self.patch_size)
        if ph != pw:
            raise ValueError(f"patch_size must be square, got {self.patch_size}")
        return self.backbone_stride * ph

    @property
    def grid_size(self) -> tuple[int, int]:
        """Token grid (gh, gw) at the configured image size."""
        height, width = to_pair(self.img_size)
        return (height // self.input_stride, width // self.input_stride)

    @property
    def has_class_token(self) -> bool:
        return self.classifier in ("token", "token_gap")

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: the class token, then the register tokens."""
        return int(self.has_class_token) + self.num_reg_tokens

    @property
    def num_pos_prefix_tokens(self) -> int:
        """Prefix tokens with a row of the learned position table (none when `prefix_pos_embed` is off)."""
        return self.num_prefix_tokens if self.prefix_pos_embed else 0

    @property
    def mean_std(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The per-channel normalisation its weights expect: x = (pixels / 255 - mean) / std."""
        return (self.image_mean or (0.5,) * self.in_chans, self.image_std or (0.5,) * self.in_chans)

    @property
    def input_size(self) -> tuple[int, int, int]:
        """(channels, height, width) of one input image."""
        return (self.in_chans, *to_pair(self.img_size))

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": self.model_type, **dataclasses.asdict(self)}


@dataclass
class ResNetConfig:
    """A pre-activation ResNet v2 with weight standardisation and GroupNorm: the BiT baselines of §4.1."""

    layers: tuple[int, ...] = (3, 4, 6, 3)
    width_factor: int = 1
    in_chans: int = 3
    num_classes: int = 1000
    img_size: int | tuple[int, int] = 224

    model_type = "resnetv2"

    def __post_init__(self) -> None:
        _check_sizes("layers", self.layers, pair=False)
        self.layers = tuple(int(n) for n in self.layers)
        self.img_size = to_pair(self.img_size)
        _check_sizes("img_size", self.img_size)
        for name, low in (("width_factor", 1), ("in_chans", 1), ("num_classes", 0)):
            _check_int(name, getattr(self, name), low)

    @property
    def input_size(self) -> tuple[int, int, int]:
        """(channels, height, width) of one input image."""
        return (self.in_chans, *to_pair(self.img_size))

    @property
    def mean_std(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """The paper's inputs in [-1, 1], as for its ViTs: 0.5 for every channel."""
        return ((0.5,) * self.in_chans, (0.5,) * self.in_chans)

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": self.model_type, **dataclasses.asdict(self)}


CONFIG_CLASSES = {cls.model_type: cls for cls in (ViTConfig, ResNetConfig)}


def config_from_dict(data: dict[str, Any], **overrides: Any) -> ViTConfig | ResNetConfig:
    """Rebuild a config from `to_dict()` output (e.g. config.json), applying overrides; unknown keys are errors."""
    data = dict(data)
    model_type = data.pop("model_type", "vit")
    if model_type not in CONFIG_CLASSES:
        raise ValueError(f"unknown model_type {model_type!r}; expected one of {sorted(CONFIG_CLASSES)}")
    cls = CONFIG_CLASSES[model_type]
    data.update(overrides)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; valid fields: {sorted(fields)}")
    return cls(**data)


def resnet_stride(resnet_layers: tuple[int, ...] | None) -> int:
    """Downsampling of a hybrid's ResNet v1 with `resnet_layers` units per stage: 4 for the stem (7x7/2 conv,
    3x3/2 max-pool), 2 more per stage after the first; 1 without a ResNet."""
    return 1 if resnet_layers is None else 4 * 2 ** max(len(resnet_layers) - 1, 0)


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """A ValueError naming `name` unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_int(name: str, value: Any, low: int) -> None:
    if not _is_int(value) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _check_sizes(name: str, values: Any, pair: bool = True) -> None:
    """A pair (or, with pair=False, a list) of integers >= 1."""
    if not isinstance(values, (tuple, list)) or (pair and len(values) != 2):
        raise ValueError(
            f"{name} must be {'a pair of' if pair else 'a list of'} integers >= 1, got {values!r}"
        )
    for value in values:
        if not _is_int(value) or value < 1:
            raise ValueError(f"{name} must hold integers >= 1, got {values!r}")


def _check_fraction(name: str, value: Any) -> None:
    if not (_is_number(value) and 0.0 <= value < 1.0):
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
