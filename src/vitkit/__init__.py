"""vitkit: Vision Transformers exactly as "An Image is Worth 16x16 Words" (Dosovitskiy et al., ICLR 2021).

The public names below are imported on first use (PEP 562), so `import vitkit` and `vitkit --help` do not load
torch; `from vitkit import create_model` imports what it needs then.
"""

import importlib
from typing import Any

# public name -> the module that defines it (timm / transformers are imported only inside from_/to_timm, _hf)
_EXPORTS = {
    "ResNetConfig": "vitkit.models",
    "ViTConfig": "vitkit.models",
    "build_model": "vitkit.models",
    "list_models": "vitkit.models",
    "model_config": "vitkit.models",
    "create_model": "vitkit.weights.create",  # the models' builder, with pretrained= weights
    "list_pretrained": "vitkit.weights.hub",
    "export_npz": "vitkit.weights",
    "from_hf": "vitkit.weights",
    "from_pretrained": "vitkit.weights",
    "from_timm": "vitkit.weights",
    "load_weights": "vitkit.weights",
    "save_pretrained": "vitkit.weights",
    "to_hf": "vitkit.weights",
    "to_timm": "vitkit.weights",
    "train": "vitkit.api",  # the commands' Python API: vitkit.train(...), vitkit.finetune(...), vitkit.evaluate(...)
    "finetune": "vitkit.api",
    "evaluate": "vitkit.api",
    "export_onnx": "vitkit.export",  # serving: ONNX and torch.export files checked against PyTorch
    "export_program": "vitkit.export",
    "load_program": "vitkit.export",
    "read_onnx_metadata": "vitkit.export",
}
_SUBPACKAGES = ("inspect",)  # vitkit.inspect: the paper's Fig. 6/7 probes

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = importlib.import_module("vitkit.version").__version__
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"vitkit.{name}")
    else:
        raise AttributeError(f"module 'vitkit' has no attribute {name!r}")
    globals()[name] = value  # found once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, *_SUBPACKAGES])
