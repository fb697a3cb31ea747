"""One training step, a function of the step number alone (§3.2, Appendix B.1).

Every source of randomness is a function of (seed, step, rank): the batch (vitkit.data's global batch order), its
augmentation (keyed per sample), and dropout / drop-path (torch's generator reseeded each step once its batch is
read, so that no reading, however it starts or restarts, comes between the seed and the model). The learning
rate is a function of the step. A checkpoint therefore only needs weights, optimizer, EMA and the step, and a
resumed run ends bitwise identical to an uninterrupted one on the same machine and world size.
"""

from __future__ import annotations

import hashlib
import math
import time

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel

from vitkit.collectives import all_reduce_mean, world
from vitkit.data import Batch, TrainBatches, TrainTransform
from vitkit.precision import Precision
from vitkit.recipe.run_config import OptimSection, TrainSection
from vitkit.training.distributed import gradient_sync
from vitkit.training.graph import GraphedUpdate
from vitkit.training.objectives import Forward, LossFunction
from vitkit.training.optim import learning_rate, set_learning_rate


class NonFiniteLoss(RuntimeError):
    """The loss became NaN or inf: the run stops before the update, keeping the last good checkpoint."""


class StepTimer:
    """Seconds spent per part of a training step (data, forward_backward, optimizer), summed over the steps it
    times (the progress bar's data share and report.json's step_seconds). The engine times the log steps only:
    on CUDA each part ends with a synchronisation."""

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


class _Untimed(StepTimer):
    def start(self) -> None:
        pass

    def lap(self, part: str) -> None:
        pass


UNTIMED = _Untimed(None)  # the steps that are not timed


class TrainStep:
    """Seed dropout and drop-path, set the learning rate, take this rank's share of the global batch, forward and
    backward it (in micro-batches), average the loss over ranks, clip, update, average the weights.
    `vitkit train` and `vitkit bench train` both run it; vitkit.training.build makes it from a recipe.
    `timer` holds the time of the steps it was asked to time; `close()` stops the batches' worker processes."""

    def __init__(
        self,
        train: TrainSection,
        optim: OptimSection,
        model: nn.Module,
        forward: Forward,
        loss_function: LossFunction,
        optimizer: torch.optim.Optimizer,
        ema: AveragedModel | None,
        batches: TrainBatches,
        transform: TrainTransform,
        precision: Precision,
        graphed: bool = False,
    ) -> None:
        self.train, self.optim = train, optim
        self.model, self.forward, self.loss_function = model, forward, loss_function
        self.optimizer, self.ema = optimizer, ema
        self.batches, self.transform, self.precision = batches, transform, precision
        self.rank, world_size = world()
        self.micro = train.micro_batch(world_size)
        self.graphed = GraphedUpdate(self.update, model, optimizer) if graphed else None
        self.timer = StepTimer(precision.device)

    def __call__(self, step: int, timed: bool = False) -> tuple[torch.Tensor, float, list[str]]:
        """Train step `step` (0-based); returns (mean loss over the global batch, a 0-d tensor; learning rate;
        the images this rank's batch left out as unreadable).

        On CPU the loss is checked before the update (reading it costs nothing there); on CUDA, where reading it
        would stall the GPU every step, the loop checks it when it reads it (PendingLosses). `timed` adds the
        parts of the step to `timer` (synchronising the GPU between them).
        """
        timer = self.timer if timed else UNTIMED
        timer.start()
        lr = learning_rate(step, self.train.steps, self.optim)
        batch = self.batches(step)
        x, y = mixed(self.transform, batch, self.batches.epoch(step), self.micro)
        timer.lap("data")
        # Dropout and drop-path draw from torch's generator, seeded here, after the data is read: whatever the
        # reading drew (a DataLoader iterator started at a resume), the model's draws are (seed, step, rank)'s.
        torch.manual_seed(step_seed(self.train.seed, step, self.rank))
        if self.graphed is not None:
            loss = self.graphed(x, y, lr)
            timer.lap("forward_backward")  # the whole update, one replay
        else:
            set_learning_rate(self.optimizer, lr)
            loss = self.update(x, y, timer, step)
            self.optimizer.zero_grad(set_to_none=True)
            timer.lap("optimizer")
        if self.ema is not None:
            self.ema.update_parameters(self.model)
        return loss, lr, batch.skipped

    def close(self) -> None:
        """Stop the batches' worker processes (before evaluation starts its own, and however the run ends)."""
        self.batches.close()

    def update(
        self, x: torch.Tensor, y: torch.Tensor, timer: StepTimer = UNTIMED, step: int = -1
    ) -> torch.Tensor:
        """Forward and backward this rank's (mixed) images in micro-batches, average the loss over ranks, clip
        and step the optimizer; returns the mean loss. What GraphedUpdate captures (on CUDA, untimed)."""
        loss = forward_backward(self.forward, self.loss_function, x, y, self.micro, self.precision, timer)
        loss = all_reduce_mean(loss)
        if self.precision.device.type != "cuda":
            check_finite(loss.item(), step + 1, "stopped before the update")
        if self.optim.grad_clip:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.optim.grad_clip, foreach=True)
        self.optimizer.step()
        return loss


def forward_backward(
    forward: Forward,
    loss_function: LossFunction,
    x: torch.Tensor,
    y: torch.Tensor,
    micro: int,
    precision: Precision,
    timer: StepTimer = UNTIMED,
) -> torch.Tensor:
    """Forward and backward this rank's share of a step in micro-batches of `micro` images; returns the mean
    loss (a tensor).

    Each micro-batch loss is weighted by its share of the batch, so the summed gradients equal those of one
    full batch: the paper's batch sizes on small hardware.
    """
    device = precision.device
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    loss = torch.zeros((), device=device)
    chunks = list(zip(x.split(micro), y.split(micro), strict=True))
    for i, (images, labels) in enumerate(chunks):
        with gradient_sync(forward, enabled=i == len(chunks) - 1):  # DDP/FSDP: reduce once per step
            # a CUDA graph records the casts of the weights, which autocast's cache would keep from the capture
            with precision.autocast(cache=not capturing):
                part = loss_function(forward, images, labels) * (len(images) / len(x))
            part.backward()
        loss += part.detach()
        timer.lap("forward_backward")
    return loss


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


def step_seed(seed: int, step: int, rank: int) -> int:
    """A 63-bit seed for torch's generator at (seed, step, rank)."""
    digest = hashlib.blake2b(f"{seed}/{step}/{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def check_finite(loss: float, step: int, action: str) -> None:
    if not math.isfinite(loss):
        raise NonFiniteLoss(f"loss is {loss} at step {step}; {action}")


class PendingLosses:
    """The losses of the steps since they were last read. On CPU every step is read at once; on CUDA they are
    read together (one host sync) when the loop logs or checkpoints, and a non-finite one stops the run there,
    before the checkpoint, so none is ever saved from a diverged model."""

    def __init__(self, device: torch.device) -> None:
        self.deferred = device.type == "cuda"
        self.pending: list[tuple[int, torch.Tensor, float]] = []

    def append(self, step: int, loss: torch.Tensor, lr: float) -> None:
        self.pending.append((step, loss, lr))

    def read(self, sync_point: bool = True) -> list[tuple[int, float, float]]:
        """(step, loss, lr) of every pending step, in order: on CPU at every call, on CUDA at a `sync_point` only
        (the loop's log steps and checkpoints)."""
        if not self.pending or (self.deferred and not sync_point):
            return []
        values = torch.stack([loss for _, loss, _ in self.pending]).tolist()
        read = [(step, value, lr) for (step, _, lr), value in zip(self.pending, values, strict=True)]
        self.pending = []
        for step, value, _ in read if self.deferred else ():  # on CPU each step checked its loss itself
            check_finite(value, step, f"stopped at step {read[-1][0]}, where the loss was read")
        return read
