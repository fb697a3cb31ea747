"""Rank and world-size plumbing: everything is written for N processes, and is the identity for one.

A later change launches the engine under torchrun; until then the process group is never initialised and these
helpers return (0, 1) and leave tensors untouched.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world_size) of the initialised process group, or (0, 1)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """Sum a tensor over ranks in place (counts, confusion matrices, loss sums)."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    """Mean of a tensor over ranks (the logged training loss)."""
    return all_reduce_sum(tensor) / world()[1]
