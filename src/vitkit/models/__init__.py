"""Models: the Vision Transformer (plain and hybrid), its position embeddings, ResNet backbones and baselines."""

from vitkit.models.config import ResNetConfig, ViTConfig, config_from_dict
from vitkit.models.registry import (
    as_model,
    build_model,
    create_model,
    list_models,
    model_config,
)

__all__ = [
    "ResNetConfig",
    "ViTConfig",
    "as_model",
    "build_model",
    "config_from_dict",
    "create_model",
    "list_models",
    "model_config",
]
