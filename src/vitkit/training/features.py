"""Frozen pre-logits features of a split's images, computed once and kept on disk: what a closed-form head
(vitkit.training.linear_head) is fitted on, so a second fit (another l2, a few more photos) costs seconds.

A store holds the features of one model under one preprocessing: its key is a digest of the model's weights
(the head's left out, so any class count shares it), its input size, channels, normalisation and pooling, and
the precision they were computed in. Inside, each image is keyed by its content: the sha256 of a file's bytes
(folder sources; a file rewritten in place is new whatever its size and modification time, a file copied or
moved is not), else the split's description and the image's index (built-in and Hugging Face datasets, whose
images do not change). Only the images not in the store go through the model. The store is one safetensors file
under $VITKIT_CACHE/features (vitkit.cache), written atomically with a sha256 of its keys and features that every
read checks: a file that does not match (a flipped bit) or cannot be read is never used, one line says so, and
its features are computed again. Fits writing the same store at once take turns under a lock on `<store>.lock`,
each merging what the other wrote, so neither's features are lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from tqdm import tqdm

from vitkit.cache import cache_dir
from vitkit.data import Source, eval_batches
from vitkit.data.folder import FolderSource
from vitkit.evaluation.loop import eval_mode
from vitkit.models.registry import Model
from vitkit.precision import Precision
from vitkit.sizes import to_pair
from vitkit.storage import save_state_dict

STORE_DIR = "features"
KEYS_METADATA = "keys"  # the images' keys, a JSON list in the file's metadata, in row order
CHECKSUM_METADATA = "sha256"  # of the keys' JSON and the features' bytes, checked on every read
PROGRESS_MIN = 8  # a progress bar for more images than this
HASH_THREADS = 4  # files read and hashed at once: hashlib and file reads release the GIL


def weights_digest(model: Model) -> str:
    """sha256 of every tensor's name, dtype, shape and bytes but the head's: the features' model, whatever its
    class count."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if name.startswith("head."):
            continue
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy())
    return digest.hexdigest()


def store_path(model: Model, precision: Precision, **what: int) -> Path:
    """Where the features of `model` (its weights, input size and channels) in `precision` are kept; `what`
    names other features than the pre-logits vectors (tokens_entering=L: the sequences entering block L)."""
    config = model.config
    key = {
        **what,
        "weights": weights_digest(model),
        "img_size": list(to_pair(config.img_size)),
        "in_chans": config.in_chans,
        "mean_std": config.mean_std,  # the pixels' normalisation
        "pooling": getattr(config, "classifier", None),  # 'token_gap' reads the same weights as 'token'
        "precision": precision.name,
        "device": precision.device.type,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir(STORE_DIR, f"{digest}.safetensors")


def image_keys(source: Source) -> list[str]:
    """Each image's identity: the sha256 of a file's bytes, else description and index."""
    if isinstance(source, FolderSource):
        with ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="vitkit-hash") as pool:
            return list(pool.map(content_key, [source.path(index) for index in range(len(source))]))
    return [f"{source.description}|{index}" for index in range(len(source))]


def content_key(path: str | os.PathLike) -> str:
    """`sha256:<hex>` of the file's bytes; a file that cannot be read gets a key no store holds (it is then read,
    and skipped or reported, as any other)."""
    try:
        with open(path, "rb") as file:
            return f"sha256:{hashlib.file_digest(file, 'sha256').hexdigest()}"
    except OSError:
        return f"{os.fsdecode(os.path.abspath(path))}|unreadable|{time.time_ns()}"


def checksum(keys_json: str, features: torch.Tensor) -> str:
    """sha256 of a store's keys (their JSON text) and features (their bytes)."""
    digest = hashlib.sha256(keys_json.encode())
    digest.update(features.contiguous().reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


def read_store(path: Path, say: bool = True) -> tuple[list[str], torch.Tensor] | None:
    """(keys, features) of the store file at `path`, its checksum verified; None when there is none, or (with one
    line on stderr when `say`) when it cannot be read or does not match its checksum."""
    if not path.exists():
        return None
    try:
        with safe_open(str(path), framework="pt") as file:
            metadata = file.metadata() or {}
            text = metadata[KEYS_METADATA]
            features = file.get_tensor("features")
        keys = json.loads(text)
        if not isinstance(keys, list) or len(keys) != len(features):
            raise ValueError("its keys do not match its rows")
        if CHECKSUM_METADATA not in metadata:
            raise ValueError("it has no checksum")
        if metadata[CHECKSUM_METADATA] != checksum(text, features):
            raise ValueError("it does not match its checksum (a damaged or altered file)")
    except (OSError, SafetensorError, ValueError, KeyError, TypeError) as error:
        if say:
            reason = " ".join(str(error).split()) or type(error).__name__
            print(
                f"features cache {path}: not used, {reason}; its features are computed again", file=sys.stderr
            )
        return None
    return keys, features


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `<path>.lock`: one process at a time reads, merges and writes the store."""
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing


def file_state(path: Path) -> tuple[int, int, int] | None:
    """What changes when the store file is replaced: (inode, size, mtime); None when there is none."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


class FeatureStore:
    """The features kept for one model and preprocessing: {image key: float32 vector (or token sequence)}."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, int] = {}
        self.features = torch.zeros(0, 0)
        self.pending: list[torch.Tensor] = []
        self.count = 0  # rows in `features` and `pending`
        self.changed = False
        self.seen = file_state(path)  # the file as read: another fit's write changes it
        stored = read_store(path)
        if stored is not None:
            self.features = stored[1]
            self._index(stored[0])

    def _index(self, keys: list[str]) -> None:
        """Rows for `keys`, the rows from `self.count` on; a key already held keeps its first row."""
        for i, key in enumerate(keys):
            self.rows.setdefault(key, self.count + i)
        self.count += len(keys)

    def __contains__(self, key: str) -> bool:
        return key in self.rows

    def get(self, keys: list[str]) -> torch.Tensor:
        self._settle()
        return self.features[[self.rows[key] for key in keys]]

    def add(self, keys: list[str], features: torch.Tensor) -> None:
        """Rows for `keys`, joined to the store once, when read or saved (not a copy of it a batch)."""
        self.pending.append(features.float())
        self._index(keys)
        self.changed = True

    def _settle(self) -> None:
        if self.pending:
            row = self.pending[0].shape[1:]  # a vector, or a token sequence [T, D]
            self.features = torch.cat([self.features.reshape(-1, *row), *self.pending])
            self.pending = []

    def _merge_written(self) -> None:
        """The rows another fit wrote to the file since this store read it, added."""
        if file_state(self.path) == self.seen:
            return
        stored = read_store(self.path, say=False)  # a damaged file was said when read, or is replaced now
        if stored is None:
            return
        keys, features = stored
        new = [row for row, key in enumerate(keys) if key not in self.rows]
        if new and features.shape[1:] == self.features.shape[1:]:
            self.add([keys[row] for row in new], features[new])
            self._settle()

    def save(self) -> None:
        """Write the store atomically, with what another fit wrote meanwhile, when it grew; a cache that cannot be
        written only costs the work again."""
        if not self.changed:
            return
        self._settle()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with locked(self.path):
                self._merge_written()
                rows = len(self.features)
                order = [key for key in sorted(self.rows, key=self.rows.__getitem__) if self.rows[key] < rows]
                # a key added twice (one photo twice), or rows whose keys an interruption kept from being
                # indexed: each key's first row only
                if len(order) != rows:
                    self.features = self.features[[self.rows[key] for key in order]]
                    self.rows, self.count = {key: row for row, key in enumerate(order)}, len(order)
                keys = json.dumps(order)
                metadata = {KEYS_METADATA: keys, CHECKSUM_METADATA: checksum(keys, self.features)}
                save_state_dict({"features": self.features.contiguous()}, self.path, metadata)
                self.seen = file_state(self.path)
        except OSError as error:
            print(f"features not cached ({self.path}: {error.strerror or error})", file=sys.stderr)
        self.changed = False


def pre_logits(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The vectors a head reads: what a closed-form head is fitted on."""
    return model(images, pre_logits=True)


@torch.no_grad()
def split_features(
    model: Model,
    source: Source,
    store: FeatureStore,
    precision: Precision,
    batch_size: int,
    what: str,
    compute: Callable[[torch.nn.Module, torch.Tensor], torch.Tensor] = pre_logits,
    shown: bool = True,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(features float32 [n, ...], their labels [n], the unreadable images left out) of `source`'s images: those
    in `store` read from it, the others computed by `compute(model, images)` (the pre-logits vectors) in eval
    mode under `precision`, with the evaluation's preprocessing, and added to the store; `shown`: a line and a
    progress bar on stderr say so."""
    keys = image_keys(source)
    missing = [index for index, key in enumerate(keys) if key not in store]
    if shown:
        print(
            f"{what}: {len(keys)} images, {len(keys) - len(missing)} features cached, {len(missing)} to compute "
            f"({precision.name})",
            flush=True,
        )
    skipped: list[str] = []
    if missing:
        config = model.config
        chunks = list(torch.tensor(missing, dtype=torch.int64).split(batch_size))
        batches = eval_batches(
            source, chunks, to_pair(config.img_size), config.in_chans, precision.device, config.mean_std
        )
        progress = tqdm(
            total=len(missing),
            unit="image",
            file=sys.stderr,
            disable=not shown or len(missing) <= PROGRESS_MIN,
        )
        with progress, eval_mode(model), precision.inference(model) as forward:
            for batch in batches:
                computed = compute(forward, batch.images).float().cpu()
                store.add([keys[int(i)] for i in batch.indices], computed)
                skipped += batch.skipped
                progress.update(len(batch.indices) + len(batch.skipped))
    read = [index for index, key in enumerate(keys) if key in store]
    features = store.get([keys[index] for index in read]).numpy() if read else np.zeros((0, 0), np.float32)
    return features, source.labels[read].numpy(), skipped
