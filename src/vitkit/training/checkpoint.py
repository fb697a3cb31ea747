"""The checkpoint manager: it saves and restores every piece of a run's state, for every strategy, and is the one
place a checkpoint is read.

A checkpoint is a directory `checkpoints/step_N/` holding:
- `config.json`: the model's architecture and class names (a save_pretrained directory's, so the checkpoint also
  loads as weights);
- `state.json`: the step, the clocks, the precision the run chose, the data streams and the skipped images;
- the tensors, in one of two formats (vitkit.training.checkpoint_formats): replicated (one process or DDP: rank 0
  writes model, EMA and optimizer files) or sharded (FSDP: every rank writes its shards with
  torch.distributed.checkpoint, which reshards on load, so a run continues on any number of processes).

The data order, augmentation, dropout RNG and learning rate are pure functions of (seed, step), so the step is the
whole data/RNG position. A directory only gets its final name after every file in it is fsync'd, so a killed
writer leaves at most a `.tmp-*` directory, which is never read and is removed when the run resumes
(vitkit.training.rundir). A write that fails (a full disk: DiskFull) removes its temporary directory and leaves the
earlier checkpoints as they were.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn

from vitkit.collectives import all_reduce_sum, barrier, broadcast_object, world
from vitkit.storage import CONFIG_NAME, DiskFull, atomic_write_text, follow_umask, is_disk_full, read_config
from vitkit.training import checkpoint_formats as formats

CHECKPOINT_DIR = "checkpoints"
STATE_NAME = "state.json"
_NAME = re.compile(r"^step_(\d+)$")


@dataclass(frozen=True)
class SavedCheckpoint:
    """What a resume needs of a checkpoint before any model exists: where it is, the model's config.json and
    the run's state.json. The tensors are read into the built model and optimizer by `CheckpointManager.restore`."""

    path: Path
    config: dict[str, Any]
    state: dict[str, Any]

    @property
    def step(self) -> int:
        return int(self.state["step"])


def read_checkpoint(path: str | os.PathLike) -> SavedCheckpoint:
    """A checkpoint's config and state: the one place they are read."""
    path = Path(path)
    return SavedCheckpoint(path, read_config(path), json.loads((path / STATE_NAME).read_text()))


class CheckpointManager:
    """Saves a run's state into `run_dir`'s checkpoints (keeping the newest `keep`) and restores it, under the
    run's `strategy` ('none', 'ddp' or 'fsdp'). Saving and restoring are collective: every rank calls them."""

    def __init__(self, run_dir: str | os.PathLike, strategy: str, keep: int) -> None:
        self.root = Path(run_dir) / CHECKPOINT_DIR
        self.strategy, self.keep = strategy, keep

    def restore(
        self,
        saved: SavedCheckpoint,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        ema: nn.Module | None,
    ) -> None:
        """Load `saved`'s tensors into `model` (plain, or sharded in place by FSDP), `optimizer` and `ema`."""
        if ema is not None and not formats.has_ema(saved.path):
            raise ValueError(f"{saved.path}: has no EMA weights, but train.ema_decay is set")
        if formats.is_sharded(saved.path) or self.strategy == "fsdp":
            formats.load_sharded(saved.path, model, optimizer)
        else:
            formats.load_replicated(saved.path, model, optimizer, ema)

    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        ema: nn.Module | None,
        state: dict[str, Any],
    ) -> Path | None:
        """Write checkpoint `step` with `state` (state.json) atomically, then delete all but the newest `keep`;
        returns its path on rank 0."""
        rank = world()[0]
        final = self.root / f"step_{step:08d}"
        if rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
        # Rank 0 owns the temporary directory: removed again, and a full disk named, if writing it fails there.
        with temporary_directory(self.root, final) if rank == 0 else contextlib.nullcontext() as made:
            tmp = broadcast_object(made)
            if self.strategy == "fsdp":
                formats.save_sharded(tmp, model, optimizer)
            elif rank == 0:
                formats.save_replicated(tmp, model, optimizer, ema)
            barrier()  # every file is written
            if rank == 0:
                atomic_write_text(tmp / CONFIG_NAME, json.dumps(config_fields(model), indent=2) + "\n")
                write_state(tmp, step, state)
                for path in tmp.iterdir():
                    fsync(path)
                fsync(tmp)
        if rank == 0:
            publish(tmp, final, self.keep)
        barrier()
        return final if rank == 0 else None


class CheckpointClock:
    """Checkpoints by time as well as by steps: one is due once `minutes` (train.checkpoint_minutes; 0: never)
    have passed since the last one written (or the run's start), so a killed run loses minutes at most, however
    slow its steps. Every rank takes the same decision: rank 0's clock, and a stop if any rank was signalled."""

    def __init__(self, minutes: float, device: torch.device) -> None:
        self.seconds, self.device = 60.0 * minutes, device
        self.last = time.perf_counter()

    def decide(self, stopping: bool) -> tuple[bool, bool]:
        """(a checkpoint due by time, the run stopping) at this step boundary; collective under several ranks."""
        rank, world_size = world()
        due = self.seconds > 0 and time.perf_counter() - self.last >= self.seconds
        if world_size == 1:
            return due, stopping
        flags = all_reduce_sum(torch.tensor([float(due and rank == 0), float(stopping)], device=self.device))
        return bool(flags[0] > 0), bool(flags[1] > 0)

    def written(self) -> None:
        self.last = time.perf_counter()


def config_fields(model: nn.Module) -> dict[str, Any]:
    """config.json of `model`: its architecture, and its class names when it has them."""
    fields: dict[str, Any] = cast(Any, model).config.to_dict()
    names = getattr(model, "class_names", None)
    return fields | ({"class_names": list(names)} if names is not None else {})


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


def last_good_checkpoint(run_dir: str | os.PathLike) -> str:
    """Which checkpoint a stopped run continues from, for the line that says it stopped."""
    last = latest_checkpoint(run_dir)
    return f"last good checkpoint: step {checkpoint_step(last)}" if last else "no checkpoint written yet"


def publish(tmp: Path, final: Path, keep: int) -> None:
    """Rename a filled temporary directory to `final` (replacing an older copy of that step), then delete all
    but the newest `keep` checkpoints."""
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync(final.parent)
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


def write_state(directory: Path, step: int, state: dict[str, Any]) -> None:
    """A checkpoint's state.json: its step, clocks, precision and data position."""
    (directory / STATE_NAME).write_text(json.dumps({"step": step, **state}, indent=2) + "\n")


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
