"""Which samples each training step sees: a pure function of (seed, step), sharded per rank.

The permutation of an epoch is argsort of a counter-based hash of (seed, epoch, index), so the
data order is identical on every machine, torch version and device, for any world size and
from any resume step; no sampler state needs to be checkpointed.
"""

from __future__ import annotations

from functools import lru_cache

import torch

from .transforms import sample_keys

# Appended to (seed, epoch) so the order's hashes are not the augmentation's keys.
_ORDER_DOMAIN = 0x6F72646572  # "order"


def steps_per_epoch(num_samples: int, global_batch_size: int) -> int:
    """Full global batches per epoch (drop_last), so every step has the same batch size."""
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
    if num_samples < global_batch_size:
        raise ValueError(
            f"global_batch_size {global_batch_size} is larger than the dataset ({num_samples} samples)"
        )
    return num_samples // global_batch_size


@lru_cache(maxsize=2)
def _epoch_permutation(
    num_samples: int, seed: int, epoch: int, device: torch.device | None = None
) -> torch.Tensor:
    """The epoch's order (computed on the CPU, then held on `device`); cached because every step of an epoch
    slices the same one, so a GPU receives it once an epoch rather than once a step."""
    hashes = sample_keys(torch.arange(num_samples, dtype=torch.int64), seed, epoch, _ORDER_DOMAIN)
    return torch.sort(hashes, stable=True).indices.to(device)


def global_batch_indices(
    num_samples: int, global_batch_size: int, seed: int, step: int, device: torch.device | None = None
) -> torch.Tensor:
    """Sample indices (int64 [global_batch_size]) of training step `step`, any resume point, on `device`
    (the CPU by default; the device holding the images, so that indexing them never waits for a copy)."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    per_epoch = steps_per_epoch(num_samples, global_batch_size)
    epoch, position = divmod(step, per_epoch)
    start = position * global_batch_size
    return _epoch_permutation(num_samples, seed, epoch, device)[start : start + global_batch_size].clone()


def shard(indices: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's contiguous equal slice of the global batch (ranks concatenated = global)."""
    size = _share(len(indices), rank, world_size)
    return indices[rank * size : (rank + 1) * size]


def epoch_shard(
    num_samples: int,
    global_batch_size: int,
    seed: int,
    epoch: int,
    rank: int,
    world_size: int,
    device: torch.device | None = None,
) -> torch.Tensor:
    """This rank's indices of every step of `epoch` in step order: step k of the epoch is slice k of size
    global_batch_size // world_size, the same as shard(global_batch_indices(...)) of that step."""
    share = _share(global_batch_size, rank, world_size)
    per_epoch = steps_per_epoch(num_samples, global_batch_size)
    order = _epoch_permutation(num_samples, seed, epoch, device)[: per_epoch * global_batch_size]
    return order.view(per_epoch, world_size, share)[:, rank].reshape(-1)


def _share(global_batch_size: int, rank: int, world_size: int) -> int:
    """Samples per rank of a global batch, checking the rank and the split."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if global_batch_size % world_size:
        raise ValueError(f"global batch of {global_batch_size} is not divisible by world_size {world_size}")
    return global_batch_size // world_size
