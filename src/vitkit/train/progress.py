"""Progress of a run: a tqdm bar (loss, lr, images/s, ETA) on a terminal, plain log lines otherwise (CI), and the
run's log around it (RunLog)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from vitkit.collectives import world
from vitkit.train.recipe import TrainSection
from vitkit.train.report import MetricsLog, format_metrics
from vitkit.train.step import PendingLosses
from vitkit.train.timing import StepSplit


class Progress:
    """Shows training progress; `enabled=False` (ranks other than 0) keeps it silent."""

    def __init__(self, total: int, initial: int, log_every: int, enabled: bool = True) -> None:
        self.total, self.log_every, self.enabled = total, log_every, enabled
        on_terminal = enabled and sys.stderr.isatty()
        self.bar = (
            tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True) if on_terminal else None
        )
        self.start_time, self.start_step = time.perf_counter(), initial

    def update(
        self, step: int, loss: float, lr: float, images_per_second: float, data_wait: float = 0.0
    ) -> None:
        """Record completed `step` (1-based count); `data_wait` is the share of the timed steps so far spent on
        their input (waiting for the batch, mixing it)."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            postfix = {
                "loss": f"{loss:.4f}",
                "lr": f"{lr:.2e}",
                "img/s": f"{images_per_second:.0f}",
                "data wait": f"{data_wait:.0%}",
            }
            self.bar.set_postfix(postfix, refresh=False)
        elif step % self.log_every == 0 or step == self.total:
            elapsed = time.perf_counter() - self.start_time
            eta = elapsed / max(step - self.start_step, 1) * (self.total - step)
            self.write(
                f"step {step}/{self.total}  loss {loss:.4f}  lr {lr:.2e}  {images_per_second:.3g} img/s  "
                f"data wait {data_wait:.1%}  eta {_duration(eta)}"
            )

    def write(self, message: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.write(message)
        else:
            print(f"{message}\n", end="", flush=True)  # one write: an interruption never splits the line

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


class RunLog:
    """What a run tells as it goes, on rank 0: the progress bar (loss, learning rate, images/s, data wait; unless
    not `shown`), metrics.jsonl and TensorBoard (vitkit.train.report.MetricsLog), and each skipped image once. It
    holds the losses a CUDA step leaves unread (PendingLosses) until a log step or a checkpoint reads them."""

    def __init__(
        self,
        run_dir: Path,
        train: TrainSection,
        start_step: int,
        resumed: bool,
        device: torch.device,
        skipped: list[str],
        shown: bool = True,
    ) -> None:
        self.train, self.rank = train, world()[0]
        self.metrics = (
            MetricsLog(run_dir, resume_step=start_step if resumed else None) if self.rank == 0 else None
        )
        self.progress = Progress(train.steps, start_step, train.log_every, enabled=shown and self.rank == 0)
        self.losses, self.split = PendingLosses(device), StepSplit(device)
        self.reported = set(skipped)  # each image once; report.json counts how often it was met
        self.window_start, self.window_images, self.images_per_second = time.perf_counter(), 0, 0.0

    def is_log_step(self, done: int) -> bool:
        return done % self.train.log_every == 0 or done == self.train.steps

    def step(self, done: int, loss: torch.Tensor, lr: float, skipped: list[str]) -> None:
        """Step `done` (1-based) trained: its loss is logged when read (at once on CPU; on CUDA, one host sync at
        log steps and before checkpoints), a non-finite one raising NonFiniteLoss."""
        self.losses.append(done, loss, lr)
        for line in skipped:
            if line not in self.reported:
                self.reported.add(line)
                self.write(f"step {done}: skipped unreadable image {line}")
        self.window_images += self.train.batch_size
        if self.is_log_step(done):
            now = time.perf_counter()
            self.images_per_second = self.window_images / (now - self.window_start)
            self.window_start, self.window_images = now, 0
        if self.is_log_step(done) or done % self.train.checkpoint_every == 0 or not self.losses.deferred:
            for logged, value, rate in self.losses.read():
                self.log({"step": logged, "train_loss": value, "lr": rate})
                self.progress.update(logged, value, rate, self.images_per_second, self.split.share("data"))

    def evaluations(self, done: int, evaluations: dict[str, float], wall_seconds: float) -> None:
        if evaluations:
            self.log({"step": done, "wall_seconds": wall_seconds, **evaluations})
            self.write(f"step {done}: {format_metrics(evaluations)}")

    def log(self, record: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.log(record)

    def write(self, line: str) -> None:
        self.progress.write(line)

    def flush(self) -> None:
        """Every record so far durable, before a checkpoint claims its step."""
        if self.metrics is not None:
            self.metrics.flush()

    def close(self) -> None:
        self.progress.close()
        if self.metrics is not None:
            self.metrics.close()
