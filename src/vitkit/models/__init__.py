"""Models: the Vision Transformer (plain and hybrid), its position embeddings, ResNet backbones and baselines."""

from vitkit.models.config import ResNetConfig, ViTConfig, config_from_dict
from vitkit.models.registry import build_model, config_of, create_model, list_models, model_config

__all__ = [
    "ResNetConfig",
    "ViTConfig",
    "build_model",
    "config_from_dict",
    "config_of",
    "create_model",
    "list_models",
    "model_config",
]
