"""Weights in and out: official .npz checkpoints, vitkit directories, timm and transformers models.

The names below are resolved lazily: the model modules import `vitkit.weights.store` (for `save_pretrained`),
and this package must not import them back while they are half-initialised. timm and transformers are
imported only by the functions that need them (`from_timm`, `to_timm`, `from_hf`, `to_hf`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vitkit.weights.hf import from_hf, to_hf
    from vitkit.weights.load import load_weights
    from vitkit.weights.official import export_npz
    from vitkit.weights.store import from_pretrained, save_pretrained
    from vitkit.weights.timm import from_timm, to_timm

_EXPORTS = {
    "export_npz": "official",
    "from_hf": "hf",
    "from_pretrained": "store",
    "from_timm": "timm",
    "load_weights": "load",
    "save_pretrained": "store",
    "to_hf": "hf",
    "to_timm": "timm",
}
__all__ = [
    "export_npz",
    "from_hf",
    "from_pretrained",
    "from_timm",
    "load_weights",
    "save_pretrained",
    "to_hf",
    "to_timm",
]


def __getattr__(name: str) -> Any:
    """Import the submodule defining `name` on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'vitkit.weights' has no attribute {name!r}")
    return getattr(importlib.import_module(f"vitkit.weights.{_EXPORTS[name]}"), name)
