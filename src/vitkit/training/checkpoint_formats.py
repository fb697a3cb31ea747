"""The two ways a checkpoint holds its tensors (vitkit.training.checkpoint chooses, names and publishes it).

- replicated (one process, or DDP, where every rank holds the same state): rank 0 writes model.safetensors,
  ema.safetensors and optimizer.pt (torch.save'd tensors and plain values, loaded with weights_only=True); any
  number of processes, and an FSDP run (each rank keeping its shards of the full state), can read it.
- sharded (FSDP): every rank writes its shards with torch.distributed.checkpoint (`.metadata` + `*.distcp`),
  which reshards on load, into a run of any number of processes.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vitkit.storage import WEIGHTS_NAME, load_state_dict, save_state_dict

EMA_NAME = "ema.safetensors"
OPTIMIZER_NAME = "optimizer.pt"
METADATA_NAME = ".metadata"  # written by torch.distributed.checkpoint


def is_sharded(path: str | os.PathLike) -> bool:
    """Whether checkpoint `path` was written with torch.distributed.checkpoint."""
    return (Path(path) / METADATA_NAME).is_file()


def has_ema(path: str | os.PathLike) -> bool:
    return (Path(path) / EMA_NAME).is_file()


def save_replicated(
    directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer, ema: nn.Module | None
) -> None:
    save_state_dict(
        model.state_dict(), directory / WEIGHTS_NAME, metadata={"format": "pt", "library": "vitkit"}
    )
    if ema is not None:
        save_state_dict(ema.state_dict(), directory / EMA_NAME)
    torch.save(optimizer.state_dict(), directory / OPTIMIZER_NAME)


def load_replicated(
    path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, ema: nn.Module | None
) -> None:
    model.load_state_dict(load_state_dict(path / WEIGHTS_NAME))
    optimizer.load_state_dict(
        torch.load(path / OPTIMIZER_NAME, map_location=_device(model), weights_only=True)
    )
    if ema is not None:
        ema.load_state_dict(load_state_dict(path / EMA_NAME))


def save_sharded(directory: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Every rank writes its shards of model and optimizer (collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=directory)


def load_sharded(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Either format into a model sharded in place by FSDP, or a sharded checkpoint into a plain or DDP model."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    if is_sharded(path):  # torch.distributed.checkpoint reshards to this model's layout
        import torch.distributed.checkpoint as dcp

        model_state, optim_state = get_state_dict(model, optimizer)
        loaded: dict[str, Any] = {"model": model_state, "optim": optim_state}
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
            warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
            dcp.load(loaded, checkpoint_id=path, no_dist=not torch.distributed.is_initialized())
        set_model_state_dict(model, loaded["model"])
        set_optimizer_state_dict(model, optimizer, loaded["optim"])
        return
    # a replicated checkpoint into an FSDP model: every rank reads the full state, keeps its shards
    full = StateDictOptions(full_state_dict=True)
    weights: dict[str, Any] = load_state_dict(path / WEIGHTS_NAME)
    set_model_state_dict(model, weights, options=full)
    saved = torch.load(path / OPTIMIZER_NAME, map_location=_device(model), weights_only=True)
    set_optimizer_state_dict(model, optimizer, _by_name(saved, model, optimizer), options=full)


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
    return next(model.parameters()).device
