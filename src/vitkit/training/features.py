"""Frozen pre-logits features of a split's images, computed once and kept on disk: what a closed-form head
(vitkit.training.linear_head) is fitted on, so a second fit (another l2, a few more photos) costs seconds.

A store holds the features of one model under one preprocessing: its key is a digest of the model's weights
(the head's left out, so any class count shares it), its input size and channels, and the precision they were
computed in. Inside, each image is keyed by its identity: a file's absolute path, size and modification time
(folder sources), else the split's description and the image's index (built-in and Hugging Face datasets, whose
images do not change). Only the images not in the store go through the model. The store is one safetensors file
under $VITKIT_CACHE/features (vitkit.cache), written atomically; one that cannot be read is computed again.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
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
PROGRESS_MIN = 8  # a progress bar for more images than this


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
        "precision": precision.name,
        "device": precision.device.type,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]
    return cache_dir(STORE_DIR, f"{digest}.safetensors")


def image_keys(source: Source) -> list[str]:
    """Each image's identity: path, size and modification time of a file, else description and index."""
    if isinstance(source, FolderSource):
        keys = []
        for index in range(len(source)):
            path = os.path.abspath(source.path(index))
            try:
                stat = os.stat(path)
                keys.append(f"{os.fsdecode(path)}|{stat.st_size}|{stat.st_mtime_ns}")
            except OSError:  # unreadable: never cached, read (and skipped or reported) as any other
                keys.append(f"{os.fsdecode(path)}|missing|{time.time_ns()}")
        return keys
    return [f"{source.description}|{index}" for index in range(len(source))]


class FeatureStore:
    """The features kept for one model and preprocessing: {image key: float32 vector (or token sequence)}."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, int] = {}
        self.features = torch.zeros(0, 0)
        self.pending: list[torch.Tensor] = []
        self.changed = False
        try:
            with safe_open(str(path), framework="pt") as file:
                keys = json.loads(file.metadata()[KEYS_METADATA])
                self.features = file.get_tensor("features")
            if len(keys) != len(self.features):
                raise ValueError(f"{path}: {len(keys)} keys for {len(self.features)} rows")
            self.rows = {key: row for row, key in enumerate(keys)}
        except (OSError, SafetensorError, ValueError, KeyError, TypeError):
            self.rows, self.features = {}, torch.zeros(0, 0)  # absent or unreadable: computed again

    def __contains__(self, key: str) -> bool:
        return key in self.rows

    def get(self, keys: list[str]) -> torch.Tensor:
        self._settle()
        return self.features[[self.rows[key] for key in keys]]

    def add(self, keys: list[str], features: torch.Tensor) -> None:
        """Rows for `keys`, joined to the store once, when read or saved (not a copy of it a batch)."""
        start = len(self.rows)
        self.pending.append(features.float())
        self.rows.update({key: start + i for i, key in enumerate(keys)})
        self.changed = True

    def _settle(self) -> None:
        if self.pending:
            row = self.pending[0].shape[1:]  # a vector, or a token sequence [T, D]
            self.features = torch.cat([self.features.reshape(-1, *row), *self.pending])
            self.pending = []

    def save(self) -> None:
        """Write the store atomically when it grew; a cache that cannot be written only costs the work again."""
        if not self.changed:
            return
        self._settle()
        keys = sorted(self.rows, key=self.rows.__getitem__)
        kept = min(len(keys), len(self.features))  # an interruption between a batch's rows and its keys
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            save_state_dict(
                {"features": self.features[:kept].contiguous()},
                self.path,
                {KEYS_METADATA: json.dumps(keys[:kept])},
            )
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
        batches = eval_batches(source, chunks, to_pair(config.img_size), config.in_chans, precision.device)
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
