"""vitkit: Vision Transformers exactly as "An Image is Worth 16x16 Words" (Dosovitskiy et al., ICLR 2021)."""

from vitkit import inspect  # noqa: E402,F401  (vitkit.inspect: the paper's Fig. 6/7 probes)
from vitkit.export import export_onnx, export_program, load_program, read_onnx_metadata
from vitkit.models import ResNetConfig, ViTConfig, build_model, create_model, list_models, model_config
from vitkit.version import __version__ as __version__
from vitkit.weights import (  # timm / transformers are imported only inside from_/to_timm, from_/to_hf
    export_npz,
    from_hf,
    from_pretrained,
    from_timm,
    load_weights,
    save_pretrained,
    to_hf,
    to_timm,
)

__all__ = [
    "ResNetConfig",
    "ViTConfig",
    "build_model",
    "create_model",
    "list_models",
    "model_config",
    "export_npz",
    "export_onnx",
    "export_program",
    "load_program",
    "read_onnx_metadata",
    "from_hf",
    "from_pretrained",
    "from_timm",
    "load_weights",
    "save_pretrained",
    "to_hf",
    "to_timm",
]
