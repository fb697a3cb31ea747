"""The training loop, one for pre-training and fine-tuning (§3.2, Appendix B.1), classification or masked patch
prediction (§4.6, B.1.2).

Every source of randomness is a function of (seed, step, rank): the batch (global_batch_indices), its
augmentation (keyed per sample), and dropout / drop-path (torch's generator reseeded each step). The learning
rate is a function of the step. A checkpoint therefore only needs weights, optimizer, EMA and the step, and a
resumed run ends bitwise identical to an uninterrupted one on the same machine and world size.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from vitkit import shutdown
from vitkit.allocator import keep_freed_memory, return_freed_memory
from vitkit.collectives import all_gather_object, all_reduce_mean, broadcast_object, world
from vitkit.data import (
    Batch,
    ReadOptions,
    Source,
    TrainBatches,
    TrainTransform,
    balanced_subset,
    hold_out,
    open_source,
    steps_per_epoch,
)
from vitkit.device import resolve_device
from vitkit.evaluate import evaluate
from vitkit.evaluate.fewshot import FewShotEvaluator
from vitkit.evaluate.labels import class_mismatch
from vitkit.flops import count_parameters
from vitkit.models.config import config_from_dict
from vitkit.models.mpp import MaskedPatchPrediction
from vitkit.models.registry import Model, Trainable, build_model, create_model
from vitkit.models.vit import VisionTransformer
from vitkit.precision import Precision, autocast, choose_precision, model_signature
from vitkit.storage import (
    CONFIG_NAME,
    FINAL_DIR,
    DiskFull,
    atomic_write_text,
    is_disk_full,
    pop_class_names,
    read_config,
    save_pretrained,
)
from vitkit.train import checkpoint as ckpt
from vitkit.train import dcp, report
from vitkit.train.averaging import ema_model
from vitkit.train.distributed import (
    data_parallel,
    full_model,
    gradient_sync,
    local_device,
    process_group,
    resolve_strategy,
    restarted_by_torchrun,
    shard_model,
)
from vitkit.train.graph import GraphedUpdate
from vitkit.train.objectives import (
    Forward,
    LossFunction,
    classification_loss,
    masked_patch_loss,
    masked_patch_test_loss,
)
from vitkit.train.optim import build_optimizer, learning_rate, set_learning_rate
from vitkit.train.progress import Progress
from vitkit.train.provenance import record_start, start_record
from vitkit.train.recipe import RECIPE_NAME, RunConfig, TrainSection
from vitkit.train.rundir import LOCK_NAME, RunDirLock, remove_leftovers
from vitkit.weights import load_weights


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf: the run stops before the update, keeping the last good checkpoint."""


def train(
    config: RunConfig, run_dir: str | os.PathLike, *, resume: bool = False, command: list[str] | None = None
) -> dict[str, Any]:
    """Train `config` into `run_dir` (continuing its latest checkpoint with `resume`); returns report.json.

    `command` is what started the run (the command line), recorded in run.json and report.json
    (vitkit.train.provenance); by default this process's own.

    Under torchrun every process calls it: they join the process group for the run (vitkit.train.distributed),
    rank 0 writes the run directory and returns report.json, the others return {}. Workers restarted by
    `torchrun --max-restarts` continue from the latest checkpoint.
    """
    with shutdown.interruptible(), process_group(resolve_device(config.train.device)):
        resume = resume or (restarted_by_torchrun() and (Path(run_dir) / RECIPE_NAME).is_file())
        lock = RunDirLock(run_dir)  # taken by rank 0 in _train, released however the run ends
        try:
            return _train(config, run_dir, lock, resume=resume, command=command)
        except Exception as error:
            if not is_disk_full(error, run_dir):
                raise
            path = error.path if isinstance(error, DiskFull) else getattr(error, "filename", None) or run_dir
            raise DiskFull(path, f"; {last_good_checkpoint(run_dir)}") from error
        finally:
            lock.release()


def last_good_checkpoint(run_dir: str | os.PathLike) -> str:
    last = ckpt.latest_checkpoint(run_dir)
    return f"last good checkpoint: step {ckpt.checkpoint_step(last)}" if last else "no checkpoint written yet"


def _train(
    config: RunConfig,
    run_dir: str | os.PathLike,
    lock: RunDirLock,
    *,
    resume: bool = False,
    command: list[str] | None = None,
) -> dict[str, Any]:
    config.validate()
    run_dir = Path(run_dir)
    rank, world_size = world()
    t = config.train
    device = local_device(resolve_device(t.device))
    if t.threads:
        torch.set_num_threads(t.threads)
    micro = t.micro_batch(world_size)
    if t.batch_size % world_size or (t.batch_size // world_size) % micro:
        raise ValueError(
            f"train.batch_size {t.batch_size} must split evenly over {world_size} rank(s) and then into "
            f"micro-batches of train.micro_batch_size {t.micro_batch_size}"
        )
    checkpoint = broadcast_object(open_run_dir(run_dir, lock, resume) if rank == 0 else None)

    data = config.data
    reading = ReadOptions(on_corrupt=data.on_corrupt, workers=data.workers, prefetch=data.prefetch)
    labelled = open_source(data.source, "train", data.data_dir, reading)
    test_set = open_source(data.source, "test", data.data_dir, reading)
    validation = None  # data.val_split: held out of all below, measured instead of the test set meanwhile
    if data.val_split:
        labelled, validation = hold_out(labelled, data.val_split, data.val_seed)
    train_set = (
        balanced_subset(labelled, data.train_subset, data.subset_seed) if data.train_subset else labelled
    )
    train_set = train_set.to_device(device)
    per_epoch = steps_per_epoch(len(train_set), t.batch_size)
    # The images each split skipped as unreadable, as its batches name them (this rank's; all ranks' at the end).
    train_skipped: list[str] = []
    test_skipped: list[str] = []
    val_skipped: list[str] = []
    periodic_set, periodic_prefix, periodic_skipped = (
        (validation, "val_", val_skipped) if validation is not None else (test_set, "test_", test_skipped)
    )

    torch.manual_seed(t.seed)  # the initialisation of a fresh model
    model = build_run_model(config, list(train_set.classes), checkpoint).to(device)
    strategy = resolve_strategy(t.strategy, world_size)
    if strategy == "fsdp":
        shard_model(model, device)  # in place, before the optimizer sees the parameters
    precision = run_precision(config, model, train_set, micro, device, checkpoint)
    autocast_dtype = precision.autocast_dtype
    train_step = build_train_step(config, train_set, model, device, autocast_dtype, strategy)
    optimizer, ema = train_step.optimizer, train_step.ema
    # evaluation and final/ use the average (§4.1): a copy of the model
    eval_model = model if ema is None else cast(Trainable, ema.module)
    # Few-shot k-shot images come from the whole training split (less data.val_split), also with
    # data.train_subset: it measures the representation, it does not train. Rank 0 measures alone (FSDP, which
    # would need every rank, is refused).
    fewshot = None
    if t.fewshot_every and rank == 0:
        fewshot = FewShotEvaluator(
            labelled, test_set, num_test=t.fewshot_num_test, autocast_dtype=autocast_dtype
        )
    state: dict[str, Any] = {"step": 0, "wall_seconds": 0.0, "train_seconds": 0.0}
    if checkpoint is not None:
        state = dcp.load_checkpoint(checkpoint, model, optimizer, ema)
        if rank == 0:  # the images every rank skipped before; checkpoints gather them from all ranks
            train_skipped += state.get("skipped_images", [])
        check_streams(state, train_set.streams(world_size))
    start_step = state["step"]
    if rank == 0 and not resume:
        # Only now: a recipe, dataset or model that fails leaves nothing.
        create_run_dir(run_dir, config, lock)
    start = start_record(device, command)
    if rank == 0:
        record_start(run_dir, start)

    metrics = (
        report.MetricsLog(run_dir, resume_step=start_step if checkpoint else None) if rank == 0 else None
    )
    progress = Progress(t.steps, start_step, t.log_every, enabled=rank == 0)
    progress.write(
        f"{'resuming at step ' + str(start_step) if checkpoint else 'training'}: {describe(model)}; data: "
        f"{train_set.description} ({len(train_set)} train / {len(test_set)} test, {per_epoch} steps per epoch); "
        f"device {device}; precision {precision}; run directory {run_dir}"
    )
    clock = time.perf_counter() - state["wall_seconds"]
    train_seconds = state["train_seconds"]
    window_start, window_images = time.perf_counter(), 0
    images_per_second = 0.0
    losses = PendingLosses(device)
    split = StepSplit(device)
    reported = set(train_skipped)
    model.train()
    try:
        for step in range(start_step, t.steps):
            shutdown.raise_if_stopped()  # a Ctrl-C whose KeyboardInterrupt Python ignored (in a fork hook)
            done = step + 1
            log_step = done % t.log_every == 0 or done == t.steps
            step_start = time.perf_counter()
            try:
                loss, lr, skipped = train_step(step, split if log_step else None)
                losses.append(done, loss, lr)
                # On CUDA the losses are read (one host sync) at log steps and before every checkpoint only.
                logged = (
                    losses.read() if log_step or done % t.checkpoint_every == 0 or not losses.deferred else []
                )
            except NonFiniteLoss as error:
                raise NonFiniteLoss(f"{error} ({last_good_checkpoint(run_dir)})") from None
            train_skipped += skipped
            for line in skipped:
                if line not in reported:  # each image once; report.json counts how often it was met
                    reported.add(line)
                    progress.write(f"step {done}: skipped unreadable image {line}")
            train_seconds += time.perf_counter() - step_start
            window_images += t.batch_size
            if log_step:
                images_per_second = window_images / (time.perf_counter() - window_start)
                window_start, window_images = time.perf_counter(), 0
            for logged_step, loss_value, lr in logged:
                if metrics is not None:
                    metrics.log({"step": logged_step, "train_loss": loss_value, "lr": lr})
                progress.update(logged_step, loss_value, lr, images_per_second, split.share("data"))
            evaluations: dict[str, float] = {}
            if t.eval_every and done % t.eval_every == 0 and done < t.steps:
                result = evaluate(
                    eval_model, periodic_set, batch_size=t.eval_batch(), autocast_dtype=autocast_dtype
                )
                evaluations.update(result.as_dict(periodic_prefix))
                periodic_skipped += result.skipped
            if fewshot is not None and done % t.fewshot_every == 0 and done < t.steps:
                evaluations.update(fewshot(bare_model(eval_model)))
            if evaluations:
                if metrics is not None:
                    metrics.log({"step": done, "wall_seconds": time.perf_counter() - clock, **evaluations})
                progress.write(f"step {done}: {report.format_metrics(evaluations)}")
            if done % t.checkpoint_every == 0 or done == t.steps:
                if metrics is not None:
                    metrics.flush()
                state = {
                    "wall_seconds": time.perf_counter() - clock,
                    "train_seconds": train_seconds,
                    "precision": precision.name,
                    "precision_reason": precision.reason,
                    "skipped_images": all_ranks(train_skipped),
                    "data_streams": train_set.streams(world_size),
                }
                dcp.save_checkpoint(run_dir, done, model, optimizer, ema, state, t.keep_checkpoints, strategy)
        train_step.batches.close()  # the training workers stop before evaluation starts its own
        if device.type == "cpu" and t.keep_freed_memory:
            return_freed_memory()  # the heap kept for training steps goes back before evaluation forks workers
        evaluations, confusion, skipped = final_evaluation(eval_model, test_set, t, autocast_dtype)
        test_skipped += skipped
        if validation is not None and t.objective == "classification":
            measured = evaluate(
                eval_model, validation, batch_size=t.eval_batch(), autocast_dtype=autocast_dtype
            )
            evaluations.update(measured.as_dict("val_"))
            val_skipped += measured.skipped
        if fewshot is not None:
            evaluations.update(fewshot(bare_model(eval_model)))
        wall = time.perf_counter() - clock
        final_model = full_model(eval_model, strategy)  # FSDP: gathered on rank 0 (every rank takes part)
        gathered = [all_ranks(lines) for lines in (train_skipped, test_skipped, val_skipped)]
        if metrics is None:
            return {}
        metrics.log({"step": t.steps, "wall_seconds": wall, **evaluations})
    finally:  # bounded: the data workers stop first, then what is written is closed (vitkit.shutdown)
        shutdown.bounded("the data loader workers", train_step.batches.close)
        progress.close()
        if metrics is not None:
            metrics.close()
    summary = {
        **evaluations,
        "steps": t.steps,
        "world_size": world_size,
        "wall_seconds": wall,
        **precision.record(),
        "step_seconds": split.per_step(),
        "data_wait_share": split.share("data"),
        "skipped_images": report.count_skipped([line for lines in gathered for line in lines]),
        "test_images": len(test_set) - len(set(gathered[1])),  # those evaluated: a skipped image is not
        "start": start,
    }
    if validation is not None:
        summary |= {"val_data": validation.description, "val_images": len(validation)}
    assert final_model is not None  # rank 0, the one that reaches here
    return finish(
        run_dir, config, bare_model(final_model), summary, confusion, train_set, test_set, train_seconds
    )


class TrainStep:
    """One step of the loop, a function of the step number alone: seed dropout and drop-path, set the learning
    rate, take this rank's share of the global batch, forward and backward it (in micro-batches), average the loss
    over ranks, clip, update, average the weights. The engine and `vitkit bench train` both run it."""

    def __init__(
        self,
        config: RunConfig,
        train_set: Source,
        model: Trainable,
        forward: Forward,
        optimizer: torch.optim.Optimizer,
        ema: AveragedModel | None,
        transform: TrainTransform,
        device: torch.device,
        autocast_dtype: torch.dtype | None,
        graphed: bool = False,
    ) -> None:
        self.config, self.model, self.forward = config, model, forward
        self.optimizer, self.ema, self.transform = optimizer, ema, transform
        self.device, self.autocast_dtype = device, autocast_dtype
        t = config.train
        if device.type == "cpu" and t.keep_freed_memory:
            keep_freed_memory()  # the step's freed activations and gradients stay in the process for the next
        self.rank, self.world_size = world()
        self.micro = t.micro_batch(self.world_size)
        self.batches = TrainBatches(train_set, transform, t.batch_size, t.seed, t.steps, device, self.rank,
                                    self.world_size)  # fmt: skip
        self.loss_function = objective_loss(t)
        self.graphed = GraphedUpdate(self.update, model, optimizer) if graphed else None

    def __call__(self, step: int, split: StepSplit | None = None) -> tuple[torch.Tensor, float, list[str]]:
        """Train step `step` (0-based); returns (mean loss over the global batch, a 0-d tensor; learning rate;
        the images this rank's batch skipped as unreadable).

        On CPU the loss is checked before the update (reading it costs nothing there); on CUDA, where reading it
        would stall the GPU every step, the engine checks it when it reads it (PendingLosses). `split` times the
        parts of the step (synchronising the GPU between them).
        """
        t, optim = self.config.train, self.config.optim
        split = split or NO_SPLIT
        split.start()
        torch.manual_seed(step_seed(t.seed, step, self.rank))  # dropout and drop-path, resumable
        lr = learning_rate(step, t.steps, optim)
        batch = self.batches(step)
        x, y = mixed(self.transform, batch, self.batches.epoch(step), self.micro)
        split.lap("data")
        if self.graphed is not None:
            loss = self.graphed(x, y, lr)
            split.lap("forward_backward")  # the whole update, one replay
        else:
            set_learning_rate(self.optimizer, lr)
            loss = self.update(x, y, split, step)
            self.optimizer.zero_grad(set_to_none=True)
            split.lap("optimizer")
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        return loss, lr, batch.skipped

    def update(
        self, x: torch.Tensor, y: torch.Tensor, split: StepSplit | None = None, step: int = -1
    ) -> torch.Tensor:
        """Forward and backward this rank's (mixed) images in micro-batches, average the loss over ranks, clip
        and step the optimizer; returns the mean loss. What GraphedUpdate captures (on CUDA, without `split`)."""
        loss = forward_backward(
            self.forward, self.loss_function, x, y, self.micro, self.device, self.autocast_dtype, split
        )
        loss = all_reduce_mean(loss)
        if self.device.type != "cuda":
            check_finite(loss.item(), step + 1, "stopped before the update")
        if self.config.optim.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.grad_clip, foreach=True)
        self.optimizer.step()
        return loss


def check_finite(loss: float, step: int, action: str) -> None:
    if not math.isfinite(loss):
        raise NonFiniteLoss(f"loss is {loss} at step {step}; {action}")


class PendingLosses:
    """The losses of the steps since they were last read. On CPU every step is read at once; on CUDA they are
    read together (one host sync) when the engine logs or checkpoints, and a non-finite one stops the run there,
    before the checkpoint, so none is ever saved from a diverged model."""

    def __init__(self, device: torch.device) -> None:
        self.deferred = device.type == "cuda"
        self.pending: list[tuple[int, torch.Tensor, float]] = []

    def append(self, step: int, loss: torch.Tensor, lr: float) -> None:
        self.pending.append((step, loss, lr))

    def read(self) -> list[tuple[int, float, float]]:
        """(step, loss, lr) of every pending step, in order."""
        if not self.pending:
            return []
        values = torch.stack([loss for _, loss, _ in self.pending]).tolist()
        read = [(step, value, lr) for (step, _, lr), value in zip(self.pending, values, strict=True)]
        self.pending = []
        for step, value, _ in read if self.deferred else ():  # on CPU each step checked its loss itself
            check_finite(value, step, f"stopped at step {read[-1][0]}, where the loss was read")
        return read


class StepSplit:
    """Seconds spent per part of a training step (data, forward_backward, optimizer), summed over the steps it
    times. The engine times the log steps only: on CUDA each part ends with a synchronisation."""

    def __init__(self, device: torch.device | None) -> None:
        self.device = device
        self.seconds: dict[str, float] = {"data": 0.0, "forward_backward": 0.0, "optimizer": 0.0}
        self.steps = 0
        self.last = 0.0

    def start(self) -> None:
        self._sync()
        self.steps += 1
        self.last = time.perf_counter()

    def lap(self, part: str) -> None:
        """Add the time since the previous lap (or start) to `part`."""
        self._sync()
        now = time.perf_counter()
        self.seconds[part] += now - self.last
        self.last = now

    def share(self, part: str) -> float:
        """`part`'s share of the timed steps' time: for "data", how much of training waits for its input."""
        total = sum(self.seconds.values())
        return self.seconds[part] / total if total else 0.0

    def per_step(self) -> dict[str, float]:
        """Mean seconds per timed step of each part (empty when no step was timed)."""
        return {part: seconds / self.steps for part, seconds in self.seconds.items()} if self.steps else {}

    def _sync(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class _NoSplit(StepSplit):
    def start(self) -> None:
        pass

    def lap(self, part: str) -> None:
        pass


NO_SPLIT = _NoSplit(None)


def run_precision(
    config: RunConfig,
    model: Trainable,
    train_set: Source,
    micro: int,
    device: torch.device,
    checkpoint: Path | None,
) -> Precision:
    """train.precision for this run (vitkit.precision): the one the run started with when resuming
    `checkpoint`, else the policy's choice, where `auto` on a CPU with native bf16 units times a forward and
    backward pass of a micro-batch in both precisions. Rank 0 decides for every rank."""
    saved = ckpt.read_state(checkpoint) if checkpoint is not None else {}
    if "precision" in saved:
        return Precision(
            saved["precision"], f"{saved['precision_reason']} (kept from the run's start)", device
        )
    t = config.train
    loss_function = objective_loss(t)
    shape = (micro, *model.config.input_size)
    inputs: list[torch.Tensor] = []  # made on the first call: most decisions never measure

    def measured_pass(dtype: torch.dtype | None) -> None:
        # Pixels do not change the time: a ramp in [-1, 1] instead of the first batch, so measuring reads no
        # data (an unreadable image is met, and skipped or reported, by the step that reads it).
        if not inputs:
            x = torch.linspace(-1, 1, math.prod(shape), device=device).view(shape)
            inputs.extend([x, torch.arange(micro, device=device) % max(len(train_set.classes), 1)])
        with autocast(device, dtype):
            loss = loss_function(model, *inputs)
        loss.backward()
        model.zero_grad(set_to_none=True)

    key = ("train", model_signature(model), shape, t.objective, str(device))
    what = f"a forward and backward pass at batch {micro}"
    chosen = choose_precision(t.precision, device, measure=measured_pass, key=key, what=what)
    name, reason = broadcast_object((chosen.name, chosen.reason))
    return Precision(name, reason, device)


def build_train_step(
    config: RunConfig,
    train_set: Source,
    model: Trainable,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
    strategy: str,
) -> TrainStep:
    """The step `train` runs around `model` (already on `device`, sharded under FSDP): its optimizer, weight
    average, DDP wrapper, torch.compile and augmentation, all from the recipe. `vitkit bench train` times it."""
    t = config.train
    optimizer = build_optimizer(model, config.optim, device)
    ema = ema_model(model, t.ema_decay) if t.ema_decay else None
    forward: Forward = data_parallel(model, strategy, device)
    forward = torch.compile(forward) if t.compile else forward
    transform = train_transform(config, model, len(train_set.classes))
    graphed = use_cuda_graph(t, device, strategy)
    return TrainStep(
        config, train_set, model, forward, optimizer, ema, transform, device, autocast_dtype, graphed
    )


def use_cuda_graph(train: TrainSection, device: torch.device, strategy: str) -> bool:
    """train.cuda_graph for this run: 'auto' captures an uncompiled classification step in one process on CUDA;
    'on' refuses what it cannot capture (another device, several processes, masked patch prediction, compile)."""
    if train.cuda_graph == "off":
        return False
    why_not = (
        f"the run is on {device.type}, not CUDA"
        if device.type != "cuda"
        else f"the run has several processes ({strategy})"
        if strategy != "none"
        else "train.objective='mpp' draws its corruption with data-dependent shapes"
        if train.objective != "classification"
        else "train.compile: inductor times its kernel choices with synchronisations, which a capture forbids"
        if train.compile
        else ""
    )
    if why_not and train.cuda_graph == "on":
        raise ValueError(f"train.cuda_graph='on' cannot capture this run: {why_not}; use 'auto' or 'off'")
    return not why_not


def train_transform(config: RunConfig, model: Trainable, num_classes: int) -> TrainTransform:
    """The batched training augmentation of `config.data` for `model`'s input size and channels."""
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
    )


def final_evaluation(
    model: Trainable, test_set: Source, train: TrainSection, autocast_dtype: torch.dtype | None
) -> tuple[dict[str, float], torch.Tensor | None, list[str]]:
    """Test metrics and confusion matrix of a classifier; for MPP, which trains none, the objective itself on the
    test set (corrupted reproducibly) and no confusion matrix; and the test images this rank skipped."""
    if isinstance(model, MaskedPatchPrediction):
        loss, skipped = masked_patch_test_loss(model, test_set, train.eval_batch(), autocast_dtype)
        return {"mpp_loss_test": loss}, None, skipped
    result = evaluate(model, test_set, batch_size=train.eval_batch(), autocast_dtype=autocast_dtype)
    return result.as_dict(), result.confusion, result.skipped


def objective_loss(train: TrainSection) -> LossFunction:
    """The micro-batch loss of train.objective, `(forward, images, labels) -> loss`, chosen once per run."""
    if train.objective == "mpp":
        return masked_patch_loss
    return lambda forward, x, y: classification_loss(forward(x), y, train.loss, train.label_smoothing)


def mixed(
    transform: TrainTransform, batch: Batch, epoch: int, micro: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's images and labels with MixUp / CutMix (if on) drawn per micro-batch of `micro` images."""
    if transform.mix is None:
        return batch.images, batch.labels
    parts = [
        transform.mix_batch(images, labels, indices, epoch)
        for images, labels, indices in zip(
            batch.images.split(micro), batch.labels.split(micro), batch.indices.split(micro), strict=True
        )
    ]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


def forward_backward(
    forward: Forward,
    loss_function: LossFunction,
    x: torch.Tensor,
    y: torch.Tensor,
    micro: int,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
    split: StepSplit | None = None,
) -> torch.Tensor:
    """Forward and backward this rank's share of a step in micro-batches of `micro` images; returns the mean
    loss (a tensor).

    Each micro-batch loss is weighted by its share of the batch, so the summed gradients equal those of one
    full batch: the paper's batch sizes on small hardware.
    """
    split = split or NO_SPLIT
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    loss = torch.zeros((), device=device)
    chunks = list(zip(x.split(micro), y.split(micro), strict=True))
    for i, (images, labels) in enumerate(chunks):
        with gradient_sync(forward, enabled=i == len(chunks) - 1):  # DDP/FSDP: reduce once per step
            # a CUDA graph records the casts of the weights, which autocast's cache would keep from the capture
            with autocast(device, autocast_dtype, cache=not capturing):
                part = loss_function(forward, images, labels) * (len(images) / len(x))
            part.backward()
        loss += part.detach()
        split.lap("forward_backward")
    return loss


def finish(
    run_dir: Path,
    config: RunConfig,
    model: nn.Module,
    summary: dict[str, Any],
    confusion: torch.Tensor | None,
    train_set: Source,
    test_set: Source,
    train_seconds: float,
) -> dict[str, Any]:
    """Write final/ (what vitkit.load_weights(run_dir) loads), the figures and report.json; returns the report.

    `summary` holds the final evaluations, steps, world_size and wall_seconds. A classification run reports
    test_top1/top5/loss and draws the confusion matrix; an MPP run (no classifier) reports mpp_loss_test and has
    neither test_top1 nor a confusion matrix. Few-shot runs add fewshot_{k}shot (and _std).
    """
    save_pretrained(model, run_dir / FINAL_DIR)
    report.write_curves(run_dir)
    if confusion is not None:
        report.plot_confusion(
            confusion, test_set.classes, run_dir / report.CONFUSION_NAME, test_set.description
        )
    t = config.train
    summary = {
        **summary,
        "objective": t.objective,
        "images_per_second": t.steps * t.batch_size / max(train_seconds, 1e-9),
        **report.loss_summary(report.read_metrics(run_dir)),
        "epochs": t.steps * t.batch_size / len(train_set),
        "parameters": count_parameters(model),
        "ema": bool(t.ema_decay),
        "train_data": train_set.description,
        "test_data": test_set.description,
        "run_dir": str(run_dir),
    }
    report.write_report(run_dir, summary)
    return summary


def open_run_dir(run_dir: Path, lock: RunDirLock, resume: bool) -> Path | None:
    """The checkpoint to resume (locking the run and removing a killed writer's leftovers first); for a new run,
    a refusal to overwrite an existing one. Nothing is written for a new run yet."""
    if resume:
        lock.acquire()
        remove_leftovers(run_dir)
        return ckpt.latest_checkpoint(run_dir)
    _refuse_existing(run_dir)
    return None


def create_run_dir(run_dir: Path, config: RunConfig, lock: RunDirLock) -> None:
    """Create and lock the directory of a new run and save its recipe."""
    lock.acquire()
    _refuse_existing(run_dir)  # again under the lock: another process may have started the same --out
    atomic_write_text(run_dir / RECIPE_NAME, config.to_toml())


def _refuse_existing(run_dir: Path) -> None:
    """A new run writes only into a missing or empty directory (its lock file aside): never over a run, and
    never into a directory of the user's, whose files it could overwrite or delete."""
    if (run_dir / RECIPE_NAME).exists():
        raise ValueError(
            f"{run_dir} already holds a run; pass --resume to continue it or choose another --out"
        )
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--out {run_dir}: is a file, not a directory; choose another --out")
    found = sorted(p.name for p in run_dir.iterdir() if p.name != LOCK_NAME) if run_dir.is_dir() else []
    if found:
        shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        raise ValueError(
            f"--out {run_dir}: not empty and not a vitkit run (holds {shown}); a new run needs a missing or "
            f"empty directory, so nothing of yours is overwritten: choose another --out"
        )


def build_run_model(config: RunConfig, class_names: list[str], checkpoint: Path | None) -> Trainable:
    """The checkpoint's architecture when resuming; else the named model, or the given weights to fine-tune.

    A classifier carries the data's `class_names` into every checkpoint and final/; a resume whose data names
    other classes, or the same ones in another order, is refused rather than trained on permuted labels.
    Masked patch prediction wraps a ViT without a classifier head (MaskedPatchPrediction); its checkpoints
    store the ViT config, so a resume rebuilds the ViT and wraps it again.
    """
    m, t = config.model, config.train
    mpp = t.objective == "mpp"
    num_classes = len(class_names)
    classes = 0 if mpp else num_classes
    if checkpoint is not None:
        fields = read_config(checkpoint)
        saved = pop_class_names(fields, checkpoint / CONFIG_NAME)
        if saved is not None and not mpp and saved != class_names:
            raise ValueError(f"--resume: {class_mismatch(saved, class_names)}")
        model = build_model(config_from_dict(fields))
    elif m.weights is not None:
        model = load_weights(m.weights, **{"num_classes": classes, "reset_head": True, **m.overrides})  # §3.2
    else:
        assert m.name is not None  # the recipe sets exactly one of name and weights
        model = create_model(m.name, **{"num_classes": classes, **m.overrides})
    if model.config.num_classes != classes:
        needs = (
            "train.objective='mpp' trains no classifier" if mpp else f"the dataset has {num_classes} classes"
        )
        raise ValueError(f"model.num_classes is {model.config.num_classes} but {needs}")
    if not mpp:
        model.class_names = class_names
        return model
    if not isinstance(model, VisionTransformer):
        raise ValueError(
            f"train.objective='mpp' needs a Vision Transformer; {m.weights} is a {type(model).__name__}"
        )
    return MaskedPatchPrediction(model, t.mpp_target, t.mpp_corrupt_rate, t.mpp_bits)


def all_ranks(lines: list[str]) -> list[str]:
    """Every rank's list (of skipped images), concatenated in rank order: collective, every rank calls it."""
    return [line for rank_lines in all_gather_object(lines) for line in rank_lines]


def check_streams(state: dict[str, Any], streams: int | None) -> None:
    """A shard-stream run resumes exactly only with the ranks x workers it ran with (vitkit.data.shards)."""
    saved = state.get("data_streams")
    if saved != streams and saved is not None:
        raise ValueError(
            f"--resume: the run read its shards as {saved} streams (ranks x data.workers) and would now read "
            f"{streams}; resume with the same processes and data.workers, so the batches continue exactly"
        )


def step_seed(seed: int, step: int, rank: int) -> int:
    """A 63-bit seed for torch's generator at (seed, step, rank)."""
    digest = hashlib.blake2b(f"{seed}/{step}/{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def bare_model(model: Trainable) -> Model:
    """What final/ holds and few-shot measures: the ViT inside an MPP wrapper, else the model itself."""
    return model.vit if isinstance(model, MaskedPatchPrediction) else model


def describe(model: Trainable) -> str:
    cfg = model.config
    size = "x".join(str(s) for s in cfg.input_size[1:])
    params = count_parameters(model) / 1e6
    mpp = isinstance(model, MaskedPatchPrediction)
    task = f"masked patch prediction of {model.target}" if mpp else f"{cfg.num_classes} classes"
    return f"{type(bare_model(model)).__name__} {params:.2f}M parameters at {size}, {task}"
