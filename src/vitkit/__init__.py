"""vitkit: Vision Transformers exactly as "An Image is Worth 16x16 Words" (Dosovitskiy et al., ICLR 2021)."""

from vitkit.models import ResNetConfig, ViTConfig, build_model, create_model, list_models, model_config

__all__ = ["ResNetConfig", "ViTConfig", "build_model", "create_model", "list_models", "model_config"]
__version__ = "0.1.0"
