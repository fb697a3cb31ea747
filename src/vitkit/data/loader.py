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
def _epoch_permutation(num_samples: int, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's order; cached because every step of an epoch slices the same one."""
    hashes = sample_keys(torch.arange(num_samples, dtype=torch.int64), seed, epoch, _ORDER_DOMAIN)
    return torch.sort(hashes, stable=True).indices


def global_batch_indices(num_samples: int, global_batch_size: int, seed: int, step: int) -> torch.Tensor:
    """Sample indices (int64 [global_batch_size]) of training step `step`, any resume point."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    per_epoch = steps_per_epoch(num_samples, global_batch_size)
    epoch, position = divmod(step, per_epoch)
    start = position * global_batch_size
    return _epoch_permutation(num_samples, seed, epoch)[start : start + global_batch_size].clone()


def shard(indices: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """This rank's contiguous equal slice of the global batch (ranks concatenated = global)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if len(indices) % world_size:
        raise ValueError(f"global batch of {len(indices)} is not divisible by world_size {world_size}")
    size = len(indices) // world_size
    return indices[rank * size : (rank + 1) * size]
