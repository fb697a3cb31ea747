"""vitkit: Vision Transformers exactly as "An Image is Worth 16x16 Words" (Dosovitskiy et al., ICLR 2021)."""

import importlib
import importlib.metadata
from typing import Any

from vitkit import inspect  # noqa: E402,F401  (vitkit.inspect: the paper's Fig. 6/7 probes)
from vitkit.models import ResNetConfig, ViTConfig, build_model, create_model, list_models, model_config
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
    "from_hf",
    "from_pretrained",
    "from_timm",
    "load_weights",
    "save_pretrained",
    "to_hf",
    "to_timm",
    "train",
    "finetune",
    "evaluate",
]
# The Python API of the commands, imported on first use (the training engine is not needed to load weights):
# vitkit.train(...) and vitkit.evaluate(...) are their packages, called; vitkit.finetune(...) a function.
_API = {"train": "vitkit.train", "evaluate": "vitkit.evaluate", "finetune": "vitkit.train.api"}


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'vitkit' has no attribute {name!r}")
    module = importlib.import_module(_API[name])
    return getattr(module, name) if name == "finetune" else module


try:
    __version__ = importlib.metadata.version("vitkit")  # pyproject.toml's [project] version, once installed
except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
