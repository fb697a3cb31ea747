"""Batch order: a pure function of (seed, step), the same for every world size and resume point."""

from __future__ import annotations

import pytest
import torch

from vitkit.data import global_batch_indices, shard, steps_per_epoch
from vitkit.data.batch_order import _epoch_permutation, epoch_shard


def epoch_indices(num_samples: int, batch: int, seed: int, epoch: int) -> torch.Tensor:
    """All indices of one epoch, step by step."""
    per_epoch = steps_per_epoch(num_samples, batch)
    steps = range(epoch * per_epoch, (epoch + 1) * per_epoch)
    return torch.cat([global_batch_indices(num_samples, batch, seed, s) for s in steps])


def test_every_index_at_most_once_per_epoch_drop_last():
    seen = epoch_indices(1003, 10, seed=0, epoch=0)
    assert steps_per_epoch(1003, 10) == 100 and seen.dtype == torch.int64
    assert len(seen) == 1000 and len(seen.unique()) == 1000 and int(seen.max()) < 1003
    divisible = epoch_indices(1000, 10, seed=0, epoch=3)
    assert torch.equal(divisible.sort().values, torch.arange(1000))


def test_order_is_deterministic_and_keyed_to_seed_and_epoch():
    a = epoch_indices(500, 50, seed=1, epoch=0)
    _epoch_permutation.cache_clear()  # a fresh process / resume recomputes the same order
    assert torch.equal(a, epoch_indices(500, 50, seed=1, epoch=0))
    assert not torch.equal(a, epoch_indices(500, 50, seed=1, epoch=1))
    assert not torch.equal(a, epoch_indices(500, 50, seed=2, epoch=0))


def test_order_is_pinned_across_versions_and_machines():
    # Pure integer hashing (no torch RNG), so these never change; a change breaks resumed runs.
    assert global_batch_indices(1000, 8, 0, 0).tolist() == [687, 377, 877, 721, 742, 460, 890, 7]
    assert global_batch_indices(60000, 4, 42, 15000).tolist() == [5629, 1563, 44740, 51406]


@pytest.mark.parametrize("world_size", [1, 2, 4, 8])
def test_shards_concatenate_to_the_global_batch(world_size):
    for step in (0, 7, 31):
        batch = global_batch_indices(256, 32, seed=5, step=step)
        parts = [shard(batch, rank, world_size) for rank in range(world_size)]
        assert all(len(p) == 32 // world_size for p in parts)
        assert torch.equal(torch.cat(parts), batch)


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="not divisible by world_size 3"):
        shard(torch.arange(8), 0, 3)
    with pytest.raises(ValueError, match="rank"):
        shard(torch.arange(8), 2, 2)
    with pytest.raises(ValueError, match="larger than the dataset"):
        steps_per_epoch(10, 16)
    with pytest.raises(ValueError, match="positive"):
        steps_per_epoch(10, 0)
    with pytest.raises(ValueError, match="step"):
        global_batch_indices(10, 2, 0, -1)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_an_epoch_shard_is_the_shards_of_its_steps_in_order(world_size):
    per_epoch = steps_per_epoch(100, 12)
    for rank in range(world_size):
        steps = range(2 * per_epoch, 3 * per_epoch)  # epoch 2
        expected = torch.cat([shard(global_batch_indices(100, 12, 5, s), rank, world_size) for s in steps])
        assert torch.equal(epoch_shard(100, 12, 5, 2, rank, world_size), expected)
