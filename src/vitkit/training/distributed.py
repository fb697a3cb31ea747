"""Rank and world-size plumbing, and PyTorch's own distributed engine under torchrun (docs/DISTRIBUTED.md).

Everything is written for N processes and is the identity for one: without torchrun (WORLD_SIZE unset or 1) the
process group is never initialised, `world()` is (0, 1) and the reductions leave tensors untouched.

Under `torchrun --nproc_per_node N` the engine joins the group torchrun describes in its environment (backend
nccl on CUDA, gloo on CPU, one GPU per process: cuda:LOCAL_RANK), then trains with
`train.strategy`:

- "ddp": DistributedDataParallel; weights and optimizer state are replicated, gradients averaged.
- "fsdp": FSDP2 (`torch.distributed.fsdp.fully_shard`), each transformer block then the root: parameters,
  gradients and optimizer state are sharded over the ranks.
- "auto": "ddp" (use "fsdp" for models whose weights and optimizer state do not fit one device).

One process always trains the plain model ("none"), whatever the strategy says.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch import nn

from vitkit.collectives import world
from vitkit.models.registry import Trainable, build_model
from vitkit.recipe.run_config import STRATEGIES  # ("auto", "ddp", "fsdp")
from vitkit.training.objectives import Forward
from vitkit.training.provenance import STARTED_BY


def launched_world_size() -> int:
    """The number of processes torchrun (or any launcher setting WORLD_SIZE) started; 1 without one."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def launch_processes(processes: int, threads: int, argv: list[str], started_by: list[str]) -> int:
    """`vitkit <argv>` in `processes` local processes, as `torchrun --standalone --nproc_per_node N` runs it
    (train.processes), through torch's elastic launcher; each process uses `threads` intra-op threads (1 for 0)
    and records `started_by` (the command or call that started them) as its run's command (STARTED_BY).
    Returns 0, or the first failed process's exit code (its own error message is already on stderr)."""
    import uuid

    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=processes,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,  # torchrun --standalone
    )
    try:
        # inherited by the workers; OMP_NUM_THREADS as torchrun sets it
        with environment(OMP_NUM_THREADS=str(threads or 1), **{STARTED_BY: json.dumps(started_by)}):
            elastic_launch(config, sys.executable)("-m", "vitkit.cli", *argv)
    except ChildFailedError as error:
        failure = error.get_first_failure()[1]
        return failure.exitcode if failure.exitcode > 0 else 1
    return 0


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """Environment variables set for the duration (for the child processes started meanwhile)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def restarted_by_torchrun() -> bool:
    """True in workers that torchrun restarted after a failure (--max-restarts): they continue the run."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0


def backend_for(device: torch.device) -> str:
    """nccl for CUDA devices, gloo otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


def local_device(device: torch.device) -> torch.device:
    """This process's device: cuda:LOCAL_RANK for CUDA under torchrun (one GPU per process), else `device`."""
    if device.type == "cuda" and device.index is None and launched_world_size() > 1:
        check_gpus_per_process(device, int(os.environ.get("LOCAL_WORLD_SIZE", launched_world_size())))
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def check_gpus_per_process(device: torch.device, processes: int) -> None:
    """Each of `processes` local CUDA processes needs a GPU of its own: fewer is a one-line error (not CUDA's
    'invalid device ordinal' from deep inside torch)."""
    if device.type == "cuda" and device.index is None and processes > torch.cuda.device_count():
        raise ValueError(
            f"{processes} processes on CUDA need one GPU each, but {torch.cuda.device_count()} visible; start at "
            "most that many processes per machine (train.processes, torchrun --nproc_per_node) or use train.device=cpu"
        )


@contextlib.contextmanager
def process_group(device: torch.device) -> Iterator[None]:
    """Join torchrun's process group for the duration (if WORLD_SIZE > 1 and none is initialised yet).

    The group is destroyed on the way out, also when training raised; a group initialised by the caller is
    left to the caller.
    """
    if launched_world_size() <= 1 or not dist.is_available() or dist.is_initialized():
        yield
        return
    device = local_device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # torchrun's store outlives a restart (--max-restarts): without a fresh key prefix per attempt, restarted
    # workers can read the dead workers' addresses and fail to connect.
    from torch.distributed.rendezvous import rendezvous

    store, rank, world_size = next(rendezvous("env://"))
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    dist.init_process_group(
        backend=backend_for(device),
        store=dist.PrefixStore(f"vitkit/attempt_{attempt}/", store),
        rank=rank,
        world_size=world_size,
        device_id=device if device.type == "cuda" else None,
    )
    try:
        yield
    finally:
        # The run's models and optimizer are garbage by now, but FSDP's hold reference cycles: collect them first,
        # so the gloo group is destroyed here and not during interpreter shutdown, where its worker threads
        # abort the process ("terminate called without an active exception", ~1 FSDP run in 5 without this).
        gc.collect()
        dist.destroy_process_group()


def resolve_strategy(strategy: str, world_size: int) -> str:
    """The strategy this run uses: 'none' for one process, 'ddp' for 'auto', else as configured."""
    if strategy not in STRATEGIES:
        raise ValueError(f"train.strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
    if world_size == 1:
        return "none"
    return "ddp" if strategy == "auto" else strategy


def shard_model(model: nn.Module, device: torch.device) -> nn.Module:
    """FSDP2 in place: each block of `model.blocks` (ViT) or each stage (ResNet) is a unit, then the root.

    The mesh is on the run's device type: FSDP's default mesh is on the machine's accelerator, which would move a
    `train.device=cpu` run's shards to the GPU on a machine that has one.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world()[1],))
    units = list(getattr(model, "blocks", []))
    if not units:
        units = [m for name, m in model.named_children() if name.startswith(("stage", "layer"))]
    for unit in units:
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def data_parallel(model: nn.Module, strategy: str, device: torch.device) -> nn.Module:
    """What the training step calls: DDP around the model for 'ddp'; the (already sharded) model otherwise."""
    if strategy != "ddp":
        return model
    from torch.nn.parallel import DistributedDataParallel

    # Gradients as views into DDP's all-reduce buckets: no copy into the buckets and back each step.
    return DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
    )


@contextlib.contextmanager
def gradient_sync(forward: Forward, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce (DDP) or reduce-scatter (FSDP) of all but the last micro-batch of a step."""
    from torch.distributed.fsdp import FSDPModule
    from torch.nn.parallel import DistributedDataParallel

    module = getattr(forward, "_orig_mod", forward)  # through torch.compile
    if enabled:
        yield
    elif isinstance(module, DistributedDataParallel):
        with module.no_sync():
            yield
    elif isinstance(module, FSDPModule):
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)
    else:
        yield


def gathered_model(model: Trainable, strategy: str) -> Trainable | None:
    """A plain, unsharded copy of an FSDP model on rank 0's CPU (None on the other ranks); `model` otherwise.

    Collective under FSDP: every rank must call it.
    """
    if strategy != "fsdp":
        return model
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    if world()[0] != 0:
        return None
    plain = build_model(model.config)
    plain.load_state_dict(state)
    return plain
