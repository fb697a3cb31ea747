"""Weights in and out: official .npz checkpoints, vitkit directories, timm and transformers models.

timm and transformers are optional: only the functions that convert to or from them (`from_timm`, `to_timm`,
`from_hf`, `to_hf`) import them.
"""

from vitkit.storage import save_pretrained
from vitkit.weights.hf import from_hf, to_hf
from vitkit.weights.load import load_weights
from vitkit.weights.official import export_npz
from vitkit.weights.pretrained import from_pretrained
from vitkit.weights.timm import from_timm, to_timm

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
