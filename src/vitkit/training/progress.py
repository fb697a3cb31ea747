"""Progress of a run: a tqdm bar (loss, lr, images/s, ETA) on a terminal, plain log lines otherwise (CI), and the
run's log around it (RunLog).

A run is never silent for long: the lines come every `train.log_every` steps, after the first step, and at least
every `LOG_SECONDS` when steps are slow; a step (or an evaluation, a checkpoint) that takes longer than that is
told by a line every `LOG_SECONDS` from a watcher thread (on a terminal, the bar's clock is refreshed instead).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from vitkit.collectives import world
from vitkit.recipe.run_config import TrainSection
from vitkit.training.report import MetricsLog, format_metrics

LOG_SECONDS = 10.0  # the longest a run goes without a line (or, on a terminal, a refreshed bar)
PLAN_AFTER = (1, 3)  # the steps after which the run says how long it will take


class Progress:
    """Shows training progress; `enabled=False` (ranks other than 0) keeps it silent. `close()` stops its
    watcher thread."""

    def __init__(self, total: int, initial: int, log_every: int, enabled: bool = True) -> None:
        self.total, self.log_every, self.enabled = total, log_every, enabled
        on_terminal = enabled and sys.stderr.isatty()
        self.bar = (
            tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True) if on_terminal else None
        )
        self.start_time, self.start_step = time.perf_counter(), initial
        self.done, self.step_end, self.last_line = initial, self.start_time, self.start_time
        self.phase, self.phase_start = "", self.start_time  # what runs between steps (an evaluation), if any
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.watcher = threading.Thread(target=self._watch, name="vitkit-progress", daemon=True)
        if enabled:
            self.watcher.start()

    def _watch(self) -> None:
        """Between lines: a step, evaluation or checkpoint that runs past LOG_SECONDS is told, every LOG_SECONDS."""
        while not self.stopped.wait(min(1.0, LOG_SECONDS / 4)):
            now = time.perf_counter()
            if now - self.last_line < LOG_SECONDS:
                continue
            if self.bar is not None:
                self.bar.refresh()  # its clock moves on
                self.last_line = now
            elif self.phase:
                self.write(f"{self.phase}: {now - self.phase_start:.0f} s so far")
            else:
                self.write(f"still working: {now - self.step_end:.0f} s since step {self.done}/{self.total}")

    def writes_line(self, step: int) -> bool:
        """Whether completed `step` gets a line: every log_every steps, the last, the first of this process, and
        any after LOG_SECONDS without one."""
        return (
            step % self.log_every == 0
            or step in (self.total, self.start_step + 1)
            or time.perf_counter() - self.last_line >= LOG_SECONDS
        )

    def update(
        self, step: int, loss: float, lr: float, images_per_second: float, data_wait: float = 0.0
    ) -> None:
        """Record completed `step` (1-based count); `data_wait` is the share of the timed steps so far spent on
        their input (waiting for the batch, mixing it)."""
        if not self.enabled:
            return
        self.done, self.step_end, self.phase = step, time.perf_counter(), ""
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            postfix = {
                "loss": f"{loss:.4f}",
                "lr": f"{lr:.2e}",
                "img/s": f"{images_per_second:.0f}",
                "data wait": f"{data_wait:.0%}",
            }
            self.bar.set_postfix(postfix, refresh=False)
        elif self.writes_line(step):
            elapsed = time.perf_counter() - self.start_time
            eta = elapsed / max(step - self.start_step, 1) * (self.total - step)
            self.write(
                f"step {step}/{self.total}  loss {loss:.4f}  lr {lr:.2e}  {images_per_second:.3g} img/s  "
                f"data wait {data_wait:.1%}  eta {_duration(eta)}"
            )

    def begin(self, phase: str) -> None:
        """A phase between steps (an evaluation): said now, and named by the lines that tell it still runs; the
        next step ends it."""
        self.write(phase)
        self.phase, self.phase_start = phase, time.perf_counter()

    def write(self, message: str) -> None:
        if not self.enabled:
            return
        with self.lock:  # the watcher thread writes too
            if self.bar is not None:
                self.bar.write(message)
            else:
                print(f"{message}\n", end="", flush=True)  # one write: an interruption never splits the line
            self.last_line = time.perf_counter()

    def close(self) -> None:
        self.stopped.set()
        if self.watcher.is_alive():
            self.watcher.join()
        if self.bar is not None:
            self.bar.close()


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


class RunLog:
    """What a run tells as it goes, on rank 0: the progress bar (loss, learning rate, images/s, data wait; unless
    not `shown`), metrics.jsonl and TensorBoard (vitkit.training.report.MetricsLog), and each skipped image once."""

    def __init__(
        self,
        run_dir: Path,
        train: TrainSection,
        start_step: int,
        resumed: bool,
        skipped: list[str],
        shown: bool = True,
    ) -> None:
        self.train, self.rank = train, world()[0]
        self.metrics = (
            MetricsLog(run_dir, resume_step=start_step if resumed else None) if self.rank == 0 else None
        )
        self.progress = Progress(train.steps, start_step, train.log_every, enabled=shown and self.rank == 0)
        self.reported = set(skipped)  # each image once; report.json counts how often it was met
        self.window_start, self.window_images, self.images_per_second = time.perf_counter(), 0, 0.0
        self.start_step, self.planned = start_step, time.perf_counter()

    def is_log_step(self, done: int) -> bool:
        return done % self.train.log_every == 0 or done == self.train.steps

    def step(
        self, done: int, losses: list[tuple[int, float, float]], skipped: list[str], data_wait: float
    ) -> None:
        """Step `done` (1-based) trained: `losses` are the (step, loss, lr) read since the last call (on CUDA
        they are read at log steps and checkpoints only), `skipped` the images it left out, `data_wait` the share
        of the timed steps' time spent on their input."""
        for line in skipped:
            if line not in self.reported:
                self.reported.add(line)
                self.write(f"step {done}: skipped unreadable image {line}")
        self.window_images += self.train.batch_size
        now = time.perf_counter()
        self.images_per_second = self.window_images / max(now - self.window_start, 1e-9)
        self.plan(done)
        if self.is_log_step(done):
            self.window_start, self.window_images = now, 0
        for logged, value, rate in losses:
            self.log({"step": logged, "train_loss": value, "lr": rate})
            self.progress.update(logged, value, rate, self.images_per_second, data_wait)

    def plan(self, done: int) -> None:
        """How long the run will take, said after its first step and again from the two after it (the first
        also pays for allocation and warm-up): a long run's length is known within a few steps of its start."""
        ran = done - self.start_step
        if ran not in PLAN_AFTER or done >= self.train.steps:
            return
        now = time.perf_counter()
        per_step = (now - self.planned) / (ran - (PLAN_AFTER[0] if ran > PLAN_AFTER[0] else 0))
        each = "" if ran == PLAN_AFTER[0] else " each"
        measured = f"step {done}" if ran == PLAN_AFTER[0] else f"steps {done - 1}-{done}"
        self.write(
            f"plan: {self.train.steps} steps of {self.train.batch_size} images; {measured} took {per_step:.2f} s"
            f"{each}: about {_duration(per_step * (self.train.steps - done))} to go"
        )
        self.planned = now

    def evaluations(self, done: int, evaluations: dict[str, float], wall_seconds: float) -> None:
        if evaluations:
            self.log({"step": done, "wall_seconds": wall_seconds, **evaluations})
            self.write(f"step {done}: {format_metrics(evaluations)}")

    def log(self, record: dict[str, Any]) -> None:
        if self.metrics is not None:
            self.metrics.log(record)

    def write(self, line: str) -> None:
        self.progress.write(line)

    def phase(self, what: str) -> None:
        """Say what runs now between steps (vitkit.training.progress.Progress.begin)."""
        self.progress.begin(what)

    def flush(self) -> None:
        """Every record so far durable, before a checkpoint claims its step."""
        if self.metrics is not None:
            self.metrics.flush()

    def close(self) -> None:
        self.progress.close()
        if self.metrics is not None:
            self.metrics.close()
