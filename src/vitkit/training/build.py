"""Building a run from its recipe, in the order the trainer needs the parts: the data splits, the model (fresh,
fine-tuned or resumed), its precision, optimizer and weight average, and the training step around them (data
parallelism, torch.compile, CUDA graph, batches and augmentation). Each part takes the run's objective
(vitkit.training.objectives), built once by the trainer. `vitkit bench train` builds its step the same way."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.optim.swa_utils import AveragedModel

from vitkit.allocator import keep_freed_memory
from vitkit.collectives import broadcast_object, world
from vitkit.data import (
    ReadOptions,
    Source,
    TrainBatches,
    TrainTransform,
    balanced_subset,
    hold_out,
    open_source,
    steps_per_epoch,
)
from vitkit.models.config import ViTConfig, config_from_dict
from vitkit.models.registry import Trainable, build_model, create_model
from vitkit.models.registry import model_config as registered_config
from vitkit.precision import Precision, autocast, model_signature, say_nothing, training_precision
from vitkit.recipe.run_config import DataSection, RunConfig, TrainSection
from vitkit.storage import CONFIG_NAME, pop_class_names
from vitkit.training.averaging import ema_model
from vitkit.training.checkpoint import SavedCheckpoint
from vitkit.training.distributed import data_parallel
from vitkit.training.objectives import Forward, Objective
from vitkit.training.optim import build_optimizer
from vitkit.training.step import TrainStep
from vitkit.weights import load_weights


@dataclass(frozen=True)
class RunData:
    """A run's splits: what it trains on (`train`: `labelled` or its balanced subset), the test split and the
    validation images held out of `labelled` (data.val_split), which stand in for the test split meanwhile."""

    labelled: Source
    train: Source
    test: Source
    validation: Source | None

    def steps_per_epoch(self, train: TrainSection) -> int:
        return steps_per_epoch(len(self.train), train.batch_size)

    def epoch_plan(self, train: TrainSection) -> str:
        """'N steps per epoch', and the images each epoch leaves out when they do not fill a last batch (every
        step has the same batch size; each epoch's order is new, so it leaves out others)."""
        steps = self.steps_per_epoch(train)
        plan = f"{steps} step{'s' * (steps != 1)} per epoch"
        left = len(self.train) - steps * train.batch_size
        if left:
            plan += (
                f", each leaving out {left} of the {len(self.train)} images (full batches of {train.batch_size} "
                "only; others each epoch)"
            )
        return plan


def open_data(data: DataSection, device: torch.device) -> RunData:
    """The splits of data.source, read as data.on_corrupt / workers / prefetch say."""
    reading = ReadOptions(on_corrupt=data.on_corrupt, workers=data.workers, prefetch=data.prefetch)
    labelled = open_source(data.source, "train", data.data_dir, reading)
    test = open_source(data.source, "test", data.data_dir, reading)
    validation = None
    if data.val_split:
        labelled, validation = hold_out(labelled, data.val_split, data.val_seed)
    train = balanced_subset(labelled, data.train_subset, data.subset_seed) if data.train_subset else labelled
    return RunData(labelled, train.to_device(device), test, validation)


def build_run_model(
    config: RunConfig, objective: Objective, class_names: list[str], saved: SavedCheckpoint | None
) -> Trainable:
    """The checkpoint's architecture when resuming `saved`; else the named model, or the given weights to
    fine-tune (§3.2: a new, zero-initialised head), wrapped as `objective` trains it.

    A classifier carries the data's `class_names` into every checkpoint and final/; a resume whose data names
    other classes, or the same ones in another order, is refused rather than trained on permuted labels.
    """
    model_config = config.model
    classes = objective.num_classes(class_names)
    if saved is not None:
        fields = dict(saved.config)
        objective.check_resume(pop_class_names(fields, saved.path / CONFIG_NAME), class_names)
        model = build_model(config_from_dict(fields))
    elif model_config.weights is not None:
        overrides = {"num_classes": classes, "reset_head": True, **model_config.overrides}
        model = load_weights(model_config.weights, **overrides)
    else:
        assert model_config.name is not None  # the recipe sets exactly one of name and weights
        fresh: dict[str, Any] = {"num_classes": classes}
        if isinstance(registered_config(model_config.name), ViTConfig):
            # From scratch: the paper's inputs in [-1, 1], whatever normalisation the family's weights had.
            fresh |= {"image_mean": None, "image_std": None}
        model = create_model(model_config.name, **{**fresh, **model_config.overrides})
    if model.config.num_classes != classes:
        needs = (
            f"the dataset has {classes} classes"
            if classes
            else f"train.objective={objective.name!r} trains no classifier"
        )
        raise ValueError(f"model.num_classes is {model.config.num_classes} but {needs}")
    return objective.trained(model, class_names)


def run_precision(
    config: RunConfig,
    objective: Objective,
    model: Trainable,
    train_set: Source,
    device: torch.device,
    saved: SavedCheckpoint | None,
    quiet: bool = False,
) -> Precision:
    """train.precision for this run (vitkit.precision): the one the run started with when resuming `saved`,
    else the policy's choice, where `auto` on a CPU with native bf16 units times a forward and backward pass of
    a micro-batch in both precisions (announced unless `quiet`; by rule instead for a large model or a trial of a
    few steps). Rank 0 decides for every rank."""
    if saved is not None and "precision" in saved.state:
        name, reason = saved.state["precision"], saved.state["precision_reason"]
        return Precision(name, f"{reason} (kept from the run's start)", device)
    train = config.train
    micro = train.micro_batch(world()[1])
    shape = (micro, *model.config.input_size)
    inputs: list[torch.Tensor] = []  # made on the first call: most decisions never measure

    def measured_pass(dtype: torch.dtype | None) -> None:
        # Pixels do not change the time: a ramp in [-1, 1] instead of the first batch, so measuring reads no
        # data (an unreadable image is met, and skipped or reported, by the step that reads it).
        if not inputs:
            x = torch.linspace(-1, 1, math.prod(shape), device=device).view(shape)
            inputs.extend([x, torch.arange(micro, device=device) % max(len(train_set.classes), 1)])
        with autocast(device, dtype):
            loss = objective.loss(model, *inputs)
        loss.backward()
        model.zero_grad(set_to_none=True)

    key = ("train", model_signature(model), shape, objective.name, str(device))
    what = f"a forward and backward pass at batch {micro}"
    say = say_nothing if quiet else None
    chosen = training_precision(
        train.precision, device, model, train.steps, train.batch_size, measured_pass, key, what, say
    )
    name, reason = broadcast_object((chosen.name, chosen.reason))
    return Precision(name, reason, device)


def optimizer_and_average(
    config: RunConfig, model: Trainable, device: torch.device
) -> tuple[torch.optim.Optimizer, AveragedModel | None]:
    """The optimizer of `model`'s parameters and, with train.ema_decay, the Polyak average of its weights (§4.1)."""
    optimizer = build_optimizer(model, config.optim, device)
    return optimizer, ema_model(model, config.train.ema_decay) if config.train.ema_decay else None


def build_train_step(
    config: RunConfig,
    objective: Objective,
    train_set: Source,
    model: Trainable,
    optimizer: torch.optim.Optimizer,
    ema: AveragedModel | None,
    precision: Precision,
    strategy: str,
) -> TrainStep:
    """The step that updates `model` (already on the precision's device, sharded under FSDP) with `optimizer`
    and averages it into `ema`: DDP wrapper, torch.compile, CUDA graph, batches and augmentation, from the
    recipe."""
    train, device = config.train, precision.device
    if device.type == "cpu" and train.keep_freed_memory:
        keep_freed_memory()  # the step's freed activations and gradients stay in the process for the next
    forward: Forward = data_parallel(model, strategy, device)
    forward = torch.compile(forward) if train.compile else forward
    rank, world_size = world()
    transform = train_transform(config, model, len(train_set.classes))
    batches = TrainBatches(train_set, transform, train.batch_size, train.seed, train.steps, device, rank,
                           world_size)  # fmt: skip
    graphed = use_cuda_graph(train, objective, device, strategy)
    return TrainStep(train, config.optim, model, forward, objective.loss, optimizer, ema, batches, transform,
                     precision, graphed)  # fmt: skip


def use_cuda_graph(train: TrainSection, objective: Objective, device: torch.device, strategy: str) -> bool:
    """train.cuda_graph for this run: 'auto' captures an uncompiled step in one process on CUDA where the
    objective allows; 'on' refuses what it cannot capture (another device, several processes, the objective,
    compile)."""
    if train.cuda_graph == "off":
        return False
    why_not = (
        f"the run is on {device.type}, not CUDA"
        if device.type != "cuda"
        else f"the run has several processes ({strategy})"
        if strategy != "none"
        else objective.cuda_graph_refusal
        if objective.cuda_graph_refusal
        else "train.compile: inductor times its kernel choices with synchronisations, which a capture forbids"
        if train.compile
        else ""
    )
    if why_not and train.cuda_graph == "on":
        raise ValueError(f"train.cuda_graph='on' cannot capture this run: {why_not}; use 'auto' or 'off'")
    return not why_not


def train_transform(config: RunConfig, model: Trainable, num_classes: int) -> TrainTransform:
    """The batched training augmentation of `config.data` for `model`'s input size, channels and normalisation
    (its weights' own: [-1, 1] for the paper's models and for any trained from scratch)."""
    data = config.data
    return TrainTransform(
        model.config.img_size,
        crop=data.crop,
        flip=data.flip,
        seed=config.train.seed,
        randaugment=data.randaugment,
        mixup=data.mixup,
        cutmix=data.cutmix,
        num_classes=num_classes,
        in_chans=model.config.in_chans,
        mean_std=model.config.mean_std,
    )
