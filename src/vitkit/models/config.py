"""Model configurations as data: every architectural choice of the paper is a field."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

CLASSIFIERS = ("token", "gap")
ACTIVATIONS = ("gelu", "gelu_tanh")
POS_EMBEDS = ("none", "learned", "learned_2d", "sincos", "relative")


def to_pair(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """(h, w) from an int or a pair, so square and non-square sizes share one code path."""
    if isinstance(value, int):
        return (value, value)
    h, w = value
    return (int(h), int(w))


@dataclass
class ViTConfig:
    """A Vision Transformer (Eq. 1-4), optionally on a ResNet v1 feature map (the hybrid of §3.1)."""

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

    model_type = "vit"

    def __post_init__(self) -> None:
        self.img_size = to_pair(self.img_size)
        self.patch_size = to_pair(self.patch_size)
        if self.resnet_layers is not None:
            self.resnet_layers = tuple(int(n) for n in self.resnet_layers)
        check_choice("classifier", self.classifier, CLASSIFIERS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("pos_embed", self.pos_embed, POS_EMBEDS)
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by num_heads {self.num_heads}")
        if self.pos_embed == "learned_2d" and self.hidden_size % 2:
            raise ValueError(f"pos_embed 'learned_2d' needs an even hidden_size, got {self.hidden_size}")
        if self.pos_embed == "sincos" and self.hidden_size % 4:
            raise ValueError(f"pos_embed 'sincos' needs hidden_size divisible by 4, got {self.hidden_size}")
        stride = self.input_stride
        for side, size in zip(("height", "width"), self.img_size):
            if size % stride:
                raise ValueError(f"img_size {side} {size} must be divisible by the input stride {stride}")

    @property
    def backbone_stride(self) -> int:
        """Downsampling of the ResNet in front of the patch embedding (1 for a plain ViT)."""
        return resnet_stride(self.resnet_layers)

    @property
    def input_stride(self) -> int:
        """Pixels per token side: backbone stride times patch size (square patches only)."""
        if self.patch_size[0] != self.patch_size[1]:
            raise ValueError(f"patch_size must be square, got {self.patch_size}")
        return self.backbone_stride * self.patch_size[0]

    @property
    def grid_size(self) -> tuple[int, int]:
        """Token grid (gh, gw) at the configured image size."""
        return (self.img_size[0] // self.input_stride, self.img_size[1] // self.input_stride)

    @property
    def num_prefix_tokens(self) -> int:
        return 1 if self.classifier == "token" else 0

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
        self.layers = tuple(int(n) for n in self.layers)
        self.img_size = to_pair(self.img_size)

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
