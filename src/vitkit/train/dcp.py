"""Checkpoints under any strategy, resumable on any number of processes.

Two formats share the `checkpoints/step_N/` directories of vitkit.train.checkpoint (and its atomic rename,
`state.json` manifest and pruning):

- replicated (one process, or DDP): rank 0 writes the full model, EMA and optimizer state in the existing format
  (model.safetensors, ema.safetensors, optimizer.pt); every rank holds the same state, so any number of
  processes can read it.
- sharded (FSDP): every rank writes its shards with torch.distributed.checkpoint (`.metadata` + `*.distcp`) into
  the same temporary directory, rank 0 adds config.json and state.json, and renames it once all ranks are done.
  torch.distributed.checkpoint reshards on load, so the run continues on any number of processes.

`load_checkpoint` reads either format into a plain, DDP or FSDP model.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitkit.collectives import barrier, broadcast_object, world
from vitkit.models.registry import Trainable
from vitkit.storage import CONFIG_NAME, WEIGHTS_NAME, atomic_write_text, load_state_dict
from vitkit.train import checkpoint as ckpt

METADATA_NAME = ".metadata"  # written by torch.distributed.checkpoint


def is_sharded(path: str | os.PathLike) -> bool:
    """Whether checkpoint `path` was written with torch.distributed.checkpoint."""
    return (Path(path) / METADATA_NAME).is_file()


def save_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    model: Trainable,
    optimizer: torch.optim.Optimizer,
    ema: nn.Module | None,
    state: dict[str, Any],
    keep: int,
    strategy: str,
) -> Path | None:
    """Write checkpoint `step` (collective: every rank calls it); returns its path on rank 0."""
    rank = world()[0]
    if strategy != "fsdp":
        path = ckpt.save_checkpoint(run_dir, step, model, optimizer, ema, state, keep) if rank == 0 else None
        barrier()
        return path
    if ema is not None:
        raise ValueError("train.ema_decay is not supported with train.strategy='fsdp'")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    root = Path(run_dir) / ckpt.CHECKPOINT_DIR
    final = root / f"step_{step:08d}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
    # Rank 0 owns the temporary directory: removed again, and a full disk named, if writing it fails there.
    with ckpt.temporary_directory(root, final) if rank == 0 else contextlib.nullcontext() as made:
        tmp = broadcast_object(made)
        model_state, optim_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=tmp)
        barrier()  # every shard is on disk
        if rank == 0:
            for path in tmp.iterdir():
                ckpt._fsync(path)
            atomic_write_text(tmp / CONFIG_NAME, json.dumps(model.config.to_dict(), indent=2) + "\n")
            ckpt.write_state(tmp, step, state)
            ckpt._fsync(tmp)
    if rank == 0:
        ckpt.publish(tmp, final, keep)
    barrier()
    return final if rank == 0 else None


def load_checkpoint(
    path: str | os.PathLike, model: Trainable, optimizer: torch.optim.Optimizer, ema: nn.Module | None
) -> dict[str, Any]:
    """Restore model, optimizer and EMA in place from either format; returns state.json.

    `model` is the plain module (not the DDP wrapper), possibly sharded in place by FSDP.
    """
    from torch.distributed.fsdp import FSDPModule

    path = Path(path)
    sharded_model = isinstance(model, FSDPModule)
    if sharded_model and ema is not None:
        raise ValueError("train.ema_decay is not supported with train.strategy='fsdp'")
    if not is_sharded(path) and not sharded_model:
        return ckpt.load_checkpoint(path, model, optimizer, ema)
    if ema is not None:
        raise ValueError(
            f"{path}: a sharded (FSDP) checkpoint has no EMA weights, but train.ema_decay is set"
        )
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    if is_sharded(path):  # any strategy: torch.distributed.checkpoint reshards to this model's layout
        import torch.distributed.checkpoint as dcp

        model_state, optim_state = get_state_dict(model, optimizer)
        loaded: dict[str, Any] = {"model": model_state, "optim": optim_state}
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
            dcp.load(loaded, checkpoint_id=path, no_dist=not torch.distributed.is_initialized())
        set_model_state_dict(model, loaded["model"])
        set_optimizer_state_dict(model, optimizer, loaded["optim"])
    else:  # a replicated checkpoint into an FSDP model: every rank reads the full state, keeps its shards
        full = StateDictOptions(full_state_dict=True)
        device = _device(model)
        state: dict[str, Any] = load_state_dict(path / WEIGHTS_NAME)
        set_model_state_dict(model, state, options=full)
        saved = torch.load(path / ckpt.OPTIMIZER_NAME, map_location=device, weights_only=True)
        set_optimizer_state_dict(model, optimizer, _by_name(saved, model, optimizer), options=full)
    return ckpt.read_state(path)


def _by_name(saved: dict[str, Any], model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """An optimizer.state_dict() keyed by parameter index, re-keyed by parameter name (what FSDP loads)."""
    names = {id(p): n for n, p in model.named_parameters()}
    index_to_name: dict[int, str] = {}
    groups = []
    for saved_group, group in zip(saved["param_groups"], optimizer.param_groups, strict=True):
        group_names = [names[id(p)] for p in group["params"]]
        index_to_name.update(zip(saved_group["params"], group_names, strict=True))
        groups.append({**saved_group, "params": group_names})
    state = {index_to_name[i]: value for i, value in saved["state"].items()}
    return {"state": state, "param_groups": groups}


def _device(model: nn.Module) -> torch.device:
    param = next(model.parameters())
    return param.device
