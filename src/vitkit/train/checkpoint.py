"""Atomic, resumable checkpoints: one directory per step, written under a temporary name and renamed.

A checkpoint holds the weights as safetensors (a save_pretrained directory, so it also loads as weights), the
EMA weights as safetensors, the optimizer state as torch.save'd tensors and plain values (loaded with
weights_only=True, never arbitrary objects) and `state.json` (step, clocks). The data order, augmentation,
dropout RNG and learning rate are pure functions of (seed, step), so the step is the whole data/RNG position.
A directory only gets its final name after every file in it is fsync'd, so a killed writer leaves at most a
`.tmp-*` directory, which is never read and is removed when the run resumes (vitkit.train.rundir). A write that
fails (a full disk: DiskFull) removes its temporary directory and leaves the earlier checkpoints as they were.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitkit.storage import (
    WEIGHTS_NAME,
    DiskFull,
    follow_umask,
    is_disk_full,
    load_state_dict,
    save_pretrained,
    save_state_dict,
)

CHECKPOINT_DIR = "checkpoints"
STATE_NAME = "state.json"
EMA_NAME = "ema.safetensors"
OPTIMIZER_NAME = "optimizer.pt"
_NAME = re.compile(r"^step_(\d+)$")


def checkpoint_dirs(run_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _NAME.match(p.name) and (p / STATE_NAME).is_file()]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(path: str | os.PathLike) -> int:
    """The step of a checkpoint directory `step_N`."""
    match = _NAME.match(Path(path).name)
    if match is None:
        raise ValueError(f"{path}: not a checkpoint directory (expected a name step_N)")
    return int(match.group(1))


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    dirs = checkpoint_dirs(run_dir)
    return dirs[-1] if dirs else None


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    ema: nn.Module | None,
    state: dict[str, Any],
    keep: int,
) -> Path:
    """Write checkpoint `step` atomically, then delete all but the newest `keep`."""
    root = Path(run_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    with temporary_directory(root, final) as tmp:
        save_pretrained(model, tmp)
        if ema is not None:
            save_state_dict(ema.state_dict(), tmp / EMA_NAME)
        torch.save(optimizer.state_dict(), tmp / OPTIMIZER_NAME)
        _fsync(tmp / OPTIMIZER_NAME)
        write_state(tmp, step, state)
        _fsync(tmp)
    publish(tmp, final, keep)
    return final


def publish(tmp: Path, final: Path, keep: int) -> None:
    """Rename a filled temporary directory to `final` (replacing an older copy of that step), then delete all
    but the newest `keep` checkpoints."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync(final.parent)
    for old in checkpoint_dirs(final.parent.parent)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def temporary_directory(root: Path, final: Path) -> Iterator[Path]:
    """A `.tmp-*` directory (with the umask's permissions) to fill for `final`; removed again if filling it
    fails, a full disk raised as DiskFull naming `final`."""
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-{final.name}-"))
    follow_umask(tmp)
    try:
        yield tmp
    except Exception as error:
        full = is_disk_full(error, tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            raise DiskFull(final) from error
        raise


def load_checkpoint(
    path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer, ema: nn.Module | None
) -> dict[str, Any]:
    """Restore model, optimizer and EMA in place; returns state.json (with the step to continue from)."""
    path = Path(path)
    model.load_state_dict(load_state_dict(path / WEIGHTS_NAME))
    device = next(model.parameters()).device
    optimizer.load_state_dict(torch.load(path / OPTIMIZER_NAME, map_location=device, weights_only=True))
    if ema is not None:
        if not (path / EMA_NAME).is_file():
            raise ValueError(f"{path}: has no {EMA_NAME}, but train.ema_decay is set")
        ema.load_state_dict(load_state_dict(path / EMA_NAME))
    return read_state(path)


def write_state(directory: Path, step: int, state: dict[str, Any]) -> None:
    """A checkpoint's state.json: its step, clocks, precision and data position, flushed to disk."""
    (directory / STATE_NAME).write_text(json.dumps({"step": step, **state}, indent=2) + "\n")
    _fsync(directory / STATE_NAME)


def read_state(checkpoint: str | os.PathLike) -> dict[str, Any]:
    """The state.json of `checkpoint`."""
    return json.loads((Path(checkpoint) / STATE_NAME).read_text())


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
