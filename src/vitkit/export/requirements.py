"""onnx, onnxruntime and onnxscript are optional (extra `serve`): imported only where an export or a serving
benchmark needs them, with a one-line error naming the extra when they are missing."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingDependency(ImportError):
    """A serving package that is not installed."""


def require(module: str) -> ModuleType:
    """`import module`, or a MissingDependency that says how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.split(".")[0]
        raise MissingDependency(
            f"{package} is not installed; exports and serving need it: pip install 'vitkit[serve]'"
        ) from None
