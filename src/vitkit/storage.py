"""How vitkit puts files on disk: atomic writes, safetensors (no pickle), and the save_pretrained directory.

A save_pretrained directory (config.json + model.safetensors) round-trips a model bit for bit with
`vitkit.from_pretrained`; every file is written under a temporary name, fsynced and renamed into place, with
the permissions the umask gives (like any Unix tool: 0644 under umask 022). A write that fails because the
disk is full removes its temporary file and raises DiskFull, which names the device and the file.
This module imports nothing of vitkit, so the models can inherit `SavePretrainedMixin` from it.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
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
CLASS_NAMES_KEY = "class_names"  # config.json: the head's class names in index order, beside the model config


TEMPORARY_SUFFIX = ".tmp"
_RANDOM_NAME = re.compile(r"[a-z0-9_]{8}")  # the random part of tempfile's names


class DiskFull(OSError):
    """A write failed for want of space: "no space left on <device> writing <path>"."""

    def __init__(self, path: str | os.PathLike, detail: str = "") -> None:
        super().__init__(errno.ENOSPC, f"no space left on {device_of(path)} writing {path}{detail}")
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.strerror)


def nearest_existing(path: str | os.PathLike) -> Path:
    """`path`, or its closest ancestor that exists: where a file about to be written will live."""
    existing = Path(path).absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing


def device_of(path: str | os.PathLike) -> str:
    """The file system holding `path`, as 'DEVICE (MOUNT POINT)' from /proc/self/mounts where available."""
    existing = nearest_existing(path)
    device = existing.stat().st_dev
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        mounts = []
    found = None
    for line in mounts:
        source, mount_point = line.split()[:2]
        mount_point = mount_point.replace("\\040", " ")
        try:
            if os.stat(mount_point).st_dev == device:
                found = f"{source} ({mount_point})"
        except OSError:
            continue
    return found or f"the file system of {existing}"


def is_disk_full(error: BaseException, path: str | os.PathLike) -> bool:
    """Whether a failed write was for want of space: ENOSPC/EDQUOT anywhere in the exception chain (or in the
    text of libraries that wrap it), or no space left where `path` lives (torch.save's zip writer reports a full
    disk as "unexpected pos"). Other errors (a diverged loss, a bad value) are never taken for a full disk."""
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(seen) or "StorageFull" in str(seen):
            return True
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    if not any(isinstance(seen, OSError) or "unexpected pos" in str(seen) for seen in chain):
        return False
    return shutil.disk_usage(nearest_existing(path)).free < 1 << 20


def current_umask() -> int:
    """The process umask (read from /proc on Linux, so no other thread sees it change)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike) -> None:
    """Give a file made by mkstemp (0600) or a directory made by mkdtemp (0700) the mode a plain open or mkdir
    would: 0666 or 0777 less the umask."""
    os.chmod(path, (0o777 if Path(path).is_dir() else 0o666) & ~current_umask())


def temporary_prefix(path: str | os.PathLike) -> str:
    """How the temporary files and directories of a write to `path` begin: `.<name>.<pid>.`, so that those of
    a killed process can be told from those of a live one."""
    return f".{Path(path).name}.{os.getpid()}."


def remove_stale_temporaries(path: str | os.PathLike) -> list[Path]:
    """Remove what killed writes to `path` left beside it (`.<name>.<pid>.*.tmp` of a process that is gone, and
    `.<name>.*.tmp` without a pid, as earlier versions named them); returns what was removed."""
    path = Path(path)
    removed: list[Path] = []
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        middle = entry.name.removeprefix(f".{path.name}.")
        if middle == entry.name or not middle.endswith(TEMPORARY_SUFFIX):
            continue
        fields = middle.removesuffix(TEMPORARY_SUFFIX).split(".")
        if not _RANDOM_NAME.fullmatch(fields[-1]):
            continue
        if len(fields) == 2 and fields[0].isdigit():
            if _alive(int(fields[0])):
                continue
        elif len(fields) != 1:
            continue  # another destination's (`.w.npz.<pid>.<random>.tmp` beside `w`)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def atomic_write(path: str | os.PathLike, write: Callable[[str], object]) -> None:
    """Call `write(tmp)` then fsync and rename onto `path`, so a reader never sees a half-written file; the file
    gets the umask's permissions. A full disk raises DiskFull (the temporary file removed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temporary_prefix(path), suffix=TEMPORARY_SUFFIX)
    except OSError as error:  # name the file asked for, not the temporary one
        raise type(error)(error.errno, error.strerror, str(path)) from None
    os.close(fd)
    try:
        write(tmp)
        follow_umask(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        full = isinstance(error, Exception) and is_disk_full(error, tmp)
        Path(tmp).unlink(missing_ok=True)
        if full and not isinstance(error, DiskFull):
            raise DiskFull(path) from error
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
    """Write tensors as safetensors, atomically (safetensors refuses aliases: see `unaliased`)."""
    tensors = unaliased(state_dict)

    def write(tmp: str) -> None:
        save_file(tensors, tmp, metadata=metadata)
        _sort_metadata(tmp)

    atomic_write(path, write)


def unaliased(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors, contiguous, each on a storage of its own: a tensor sharing one with an earlier tensor (tied
    weights, views of one buffer) is copied, the others are not (a ViT-B's 340 MB is not copied to be written)."""
    storages: set[int] = set()
    tensors = {}
    for key, value in state_dict.items():
        tensor = value.detach().contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages:
            tensor = tensor.clone()
        elif storage:  # an empty tensor has no storage to share
            storages.add(storage)
        tensors[key] = tensor
    return tensors


def _sort_metadata(path: str) -> None:
    """Rewrite a safetensors header with its metadata in sorted order, in place: safetensors writes it in its
    hash map's order, which differs between identical runs. Same length, so no tensor moves."""
    with open(path, "r+b") as file:
        length = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(length))
        if "__metadata__" not in header:
            return
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
        if len(text) <= length:  # always, as the same JSON; else safetensors' order is kept
            file.seek(8)
            file.write(text.ljust(length))


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
    """Write `model.config` (and `model.class_names`, when known) as config.json and the weights as
    model.safetensors into `directory`."""
    directory = Path(directory)
    config: Any = model.config
    save_state_dict(
        model.state_dict(), directory / WEIGHTS_NAME, metadata={"format": "pt", "library": "vitkit"}
    )
    fields = config.to_dict()
    names = getattr(model, "class_names", None)
    if names is not None:
        fields[CLASS_NAMES_KEY] = list(names)
    atomic_write_text(directory / CONFIG_NAME, json.dumps(fields, indent=2) + "\n")
    return directory


def pop_class_names(fields: dict[str, Any], source: str | os.PathLike) -> list[str] | None:
    """Remove and check config.json's class names: a list of `num_classes` distinct strings, or absent."""
    names = fields.pop(CLASS_NAMES_KEY, None)
    if names is None:
        return None
    count = fields.get("num_classes")
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise ValueError(f"{source}: {CLASS_NAMES_KEY} must be a list of strings")
    if len(set(names)) != len(names) or (count is not None and len(names) != count):
        raise ValueError(
            f"{source}: {CLASS_NAMES_KEY} must hold num_classes={count} distinct names, got {len(names)} "
            f"({len(set(names))} distinct)"
        )
    return names


class SavePretrainedMixin:
    """Gives models `model.save_pretrained(directory)`; read back with `vitkit.from_pretrained(directory)`.

    `class_names` names the head's outputs in index order (a training run sets it from its data); it travels in
    config.json so that predictions, evaluations and exports speak the data's class names.
    """

    class_names: list[str] | None = None

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
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: invalid JSON ({error})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object of config fields, got a {type(config).__name__}")
    return config
