"""How vitkit puts files on disk: atomic writes, safetensors (no pickle), and the save_pretrained directory.

A save_pretrained directory (config.json + model.safetensors) round-trips a model bit for bit with
`vitkit.from_pretrained`; every file is written under a temporary name, fsynced and renamed into place.
This module imports nothing of vitkit, so the models can inherit `SavePretrainedMixin` from it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
FINAL_DIR = "final"  # a training run's final weights: a save_pretrained directory inside the run directory


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> None:
    """Call `write(tmp)` then fsync and rename onto `path`, so a reader never sees a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def save_state_dict(
    state_dict: dict[str, torch.Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None
) -> None:
    """Write tensors as safetensors, atomically (shared storage is cloned, safetensors refuses aliases)."""
    tensors = {k: v.detach().contiguous().clone() for k, v in state_dict.items()}
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def load_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read a safetensors file; a truncated or corrupt one is a ValueError naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such weights file")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise ValueError(f"{path}: not a readable safetensors file ({error})") from None


def save_pretrained(model: nn.Module, directory: str | os.PathLike) -> Path:
    """Write `model.config` as config.json and the weights as model.safetensors into `directory`."""
    directory = Path(directory)
    config: Any = model.config
    save_state_dict(
        model.state_dict(), directory / WEIGHTS_NAME, metadata={"format": "pt", "library": "vitkit"}
    )
    atomic_write_text(directory / CONFIG_NAME, json.dumps(config.to_dict(), indent=2) + "\n")
    return directory


class SavePretrainedMixin:
    """Gives models `model.save_pretrained(directory)`; read back with `vitkit.from_pretrained(directory)`."""

    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write config.json + model.safetensors atomically into `directory`."""
        return save_pretrained(self, directory)  # type: ignore[arg-type]


def read_config(directory: str | os.PathLike) -> dict[str, Any]:
    """The config.json of a save_pretrained directory, as a dict."""
    path = Path(directory) / CONFIG_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: missing; a vitkit weights directory holds {CONFIG_NAME} and {WEIGHTS_NAME}"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: invalid JSON ({error})") from None
