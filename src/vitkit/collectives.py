"""Collective operations that are the identity in one process: rank and world size, sums, broadcasts, barriers.

Without a process group (one process, no torchrun) `world()` is (0, 1) and every function returns its input, so
evaluation, checkpoints and the training loop are written once for N processes. vitkit.training.distributed starts
and joins the group; this module only uses it.
"""

from __future__ import annotations

import pickle
from typing import Any

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


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_gather_object(obj: Any) -> list[Any]:
    """Every rank's picklable `obj`, in rank order (`[obj]` in one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank `src`'s picklable `obj` on every rank (identity for one process).

    Sent as a uint8 tensor on the group's device (works with gloo and nccl alike).
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return obj
    nccl = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    payload = pickle.dumps(obj) if dist.get_rank() == src else b""
    size = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    dist.broadcast(size, src)
    data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    if dist.get_rank() == src:
        data.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(data, src)
    return obj if dist.get_rank() == src else pickle.loads(data.cpu().numpy().tobytes())
