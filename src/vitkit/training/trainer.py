"""The trainer, one for pre-training and fine-tuning (§3.2, Appendix B.1), classification or masked patch
prediction (§4.6, B.1.2): built once, in order (the run directory and the checkpoint it continues, the data, the
objective and model, its precision and placement, optimizer and weight average, the step, the checkpoint manager,
the evaluators), then `fit()`, the loop."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, cast

import torch

from vitkit import shutdown
from vitkit.allocator import return_freed_memory
from vitkit.collectives import all_gather_object, broadcast_object, world
from vitkit.device import resolve_device
from vitkit.evaluation.evaluators import Evaluator, SubmoduleEvaluator, measures_after_step
from vitkit.evaluation.fewshot import FewShotEvaluator
from vitkit.flops import count_parameters
from vitkit.models.registry import Trainable
from vitkit.recipe.run_config import RECIPE_NAME, RunConfig
from vitkit.storage import DiskFull, is_disk_full
from vitkit.training import report
from vitkit.training.build import (
    build_run_model,
    build_train_step,
    open_data,
    optimizer_and_average,
    run_precision,
)
from vitkit.training.checkpoint import CheckpointClock, CheckpointManager, last_good_checkpoint
from vitkit.training.distributed import (
    gathered_model,
    local_device,
    process_group,
    resolve_strategy,
    restarted_by_torchrun,
    shard_model,
)
from vitkit.training.last_blocks import fit_last_blocks
from vitkit.training.linear_head import fit_linear
from vitkit.training.objectives import objective_for
from vitkit.training.progress import RunLog
from vitkit.training.provenance import record_start, start_record
from vitkit.training.rundir import RunDirLock, create_run_dir, open_run_dir
from vitkit.training.step import NonFiniteLoss, PendingLosses


def run_training(
    config: RunConfig,
    run_dir: str | os.PathLike,
    *,
    resume: bool = False,
    command: list[str] | None = None,
    quiet: bool = False,
) -> dict[str, Any]:
    """Train `config` into `run_dir` (continuing its latest checkpoint with `resume`); returns report.json.
    `quiet` prints no training log (metrics.jsonl and report.json hold it all the same).

    `command` is what started the run (the command line), recorded in run.json and report.json
    (vitkit.training.provenance); by default this process's own.

    Under torchrun every process calls it: they join the process group for the run (vitkit.training.distributed),
    rank 0 writes the run directory and returns report.json, the others return {}. Workers restarted by
    `torchrun --max-restarts` continue from the latest checkpoint.
    """
    frozen = {"linear": fit_linear, "last_blocks": fit_last_blocks}.get(config.train.fit)
    if frozen is not None:  # on cached features (a linear fit has no steps to resume)
        with shutdown.interruptible():
            return frozen(config, Path(run_dir), command, quiet, resume)
    with shutdown.interruptible(), process_group(resolve_device(config.train.device)):
        resume = resume or (restarted_by_torchrun() and (Path(run_dir) / RECIPE_NAME).is_file())
        lock = RunDirLock(run_dir)  # taken by rank 0 when the run directory opens, released however it ends
        try:
            return Trainer(config, Path(run_dir), lock, resume=resume, command=command, quiet=quiet).fit()
        except Exception as error:
            if not is_disk_full(error, run_dir):
                raise
            path = error.path if isinstance(error, DiskFull) else getattr(error, "filename", None) or run_dir
            raise DiskFull(path, f"; {last_good_checkpoint(run_dir)}") from error
        finally:
            lock.release()


class Trainer:
    """A run, built from its recipe: every process builds one, rank 0 writes the run directory.

    The parts are built once, in the order torchtitan's `Trainer.__init__` builds its own: the recipe (checked,
    and the checkpoint it continues), the data, the objective and the model, its precision, its placement over the
    ranks, the optimizer and weight average, the training step, the checkpoint manager (restoring the saved
    state), then the evaluators; each part is handed the ones before it."""

    def __init__(
        self,
        config: RunConfig,
        run_dir: Path,
        lock: RunDirLock,
        *,
        resume: bool,
        command: list[str] | None,
        quiet: bool = False,
    ) -> None:
        config.validate()
        self.config, self.run_dir, self.quiet, train = config, run_dir, quiet, config.train
        self.rank, self.world_size = world()
        # The batch splits evenly over the ranks and micro-batches, or a ValueError.
        train.micro_batch(self.world_size)
        self.device = local_device(resolve_device(train.device))
        if train.threads:
            torch.set_num_threads(train.threads)
        # The checkpoint to continue: found and read once, by rank 0, for every rank.
        self.saved = broadcast_object(open_run_dir(run_dir, lock, resume) if self.rank == 0 else None)

        self.data = open_data(config.data, self.device)
        self.objective = objective_for(train)
        torch.manual_seed(train.seed)  # the initialisation of a fresh model
        model = build_run_model(config, self.objective, list(self.data.train.classes), self.saved)
        model = model.to(self.device)
        self.precision = run_precision(
            config, self.objective, model, self.data.train, self.device, self.saved, quiet
        )
        self.strategy = resolve_strategy(train.strategy, self.world_size)
        if self.strategy == "fsdp":
            shard_model(model, self.device)  # in place, before the optimizer sees the parameters
        self.model = model
        self.optimizer, self.ema = optimizer_and_average(config, model, self.device)
        self.train_step = build_train_step(config, self.objective, self.data.train, model, self.optimizer,
                                           self.ema, self.precision, self.strategy)  # fmt: skip
        # The losses a CUDA step leaves unread until a log step or a checkpoint reads (and checks) them.
        self.losses = PendingLosses(self.device)

        self.checkpoints = CheckpointManager(run_dir, self.strategy, train.keep_checkpoints)
        self.state: dict[str, Any] = {"step": 0, "wall_seconds": 0.0, "train_seconds": 0.0}
        self.train_skipped: list[str] = []  # as the batches name them (this rank's)
        if self.saved is not None:
            self.checkpoints.restore(self.saved, model, self.optimizer, self.ema)
            self.state = self.saved.state
            if self.rank == 0:  # the images every rank skipped before; checkpoints gather them from all ranks
                self.train_skipped += self.state.get("skipped_images", [])
            check_streams(self.state, self.data.train.streams(self.world_size))

        # Evaluation and final/ use the weight average (§4.1): a copy of the model.
        self.eval_model = model if self.ema is None else cast(Trainable, self.ema.module)
        self.test_evaluator, self.evaluators = self.objective.evaluators(
            self.data.test, self.data.validation, train.eval_every, train.eval_batch(), self.precision
        )
        # Few-shot: rank 0 alone (FSDP, which needs every rank, is refused), k-shot images from the whole training
        # split (less data.val_split), also with data.train_subset: it measures the representation, not training.
        self.fewshot: list[Evaluator] = []
        if train.fewshot_every and self.rank == 0:
            fewshot = FewShotEvaluator(self.data.labelled, self.data.test, num_test=train.fewshot_num_test,
                                       precision=self.precision, every=train.fewshot_every)  # fmt: skip
            self.fewshot.append(SubmoduleEvaluator(fewshot, self.objective.final_model))

        if self.rank == 0 and not resume:  # only now: a recipe, dataset or model that fails leaves nothing
            create_run_dir(run_dir, config, lock)
        self.start = start_record(self.device, command)
        if self.rank == 0:
            record_start(run_dir, self.start)

    def fit(self) -> dict[str, Any]:
        """Train from the step the run is at to train.steps, evaluating and checkpointing on the way; then the
        final evaluation, final/ and report.json (rank 0; the other ranks return {})."""
        train, start_step = self.config.train, self.state["step"]
        log = RunLog(self.run_dir, train, start_step, self.saved is not None, self.train_skipped,
                     shown=not self.quiet)  # fmt: skip
        log.write(self.describe(start_step))
        clock = time.perf_counter() - self.state["wall_seconds"]
        train_seconds = self.state["train_seconds"]
        timer = self.train_step.timer
        self.model.train()
        try:
            train_seconds = self.train_loop(log, clock, train_seconds)
            self.train_step.close()  # the training workers stop before evaluation starts its own
            if self.device.type == "cpu" and train.keep_freed_memory:
                return_freed_memory()  # the heap kept for training steps goes back before evaluation forks workers
            log.phase(f"evaluating {self.evaluated(self.all_evaluators())}")
            evaluations = self.measure(self.all_evaluators())
            wall = time.perf_counter() - clock
            gathered = gathered_model(self.eval_model, self.strategy)  # FSDP: gathered on rank 0 (every rank)
            train_skipped = all_ranks(self.train_skipped)
            evaluated_skipped = [all_ranks(e.skipped) for e in [self.test_evaluator, *self.evaluators]]
            if self.rank != 0:
                return {}
            log.log({"step": train.steps, "wall_seconds": wall, **evaluations})
        finally:  # bounded: the data workers stop first, then what is written is closed (vitkit.shutdown)
            shutdown.bounded("the data loader workers", self.train_step.close)
            log.close()
        skipped = train_skipped + [line for lines in evaluated_skipped for line in lines]
        summary = {
            **evaluations,
            "steps": train.steps,
            "world_size": self.world_size,
            "wall_seconds": wall,
            **self.precision.record(),
            "step_seconds": timer.per_step(),
            "data_wait_share": timer.share("data"),
            "skipped_images": report.count_skipped(skipped),
            "test_images": len(self.data.test)
            - len(set(evaluated_skipped[0])),  # a skipped one is not evaluated
            "start": self.start,
        }
        if self.data.validation is not None:
            summary |= {"val_data": self.data.validation.description, "val_images": len(self.data.validation)}
        assert gathered is not None  # rank 0, the one that reaches here
        if not self.quiet:
            print(f"saving final/, figures and report.json into {self.run_dir}", flush=True)
        return report.finish(self.run_dir, self.config, self.objective.final_model(gathered), summary,
                             self.test_evaluator.confusion, self.data.train, self.data.test, train_seconds)  # fmt: skip

    def train_loop(self, log: RunLog, clock: float, train_seconds: float) -> float:
        """The steps from the run's step to train.steps, with the evaluations and checkpoints (by steps and by
        time) due after each; returns the seconds spent in steps. A signal lets the step in progress end
        (vitkit.shutdown.finishing_step), then the run is checkpointed at that step and interrupted."""
        train, timer = self.config.train, self.train_step.timer
        by_time = CheckpointClock(train.checkpoint_minutes, self.device)
        at = written = self.state["step"]  # the step the weights are at; the last one checkpointed
        stepping = stopping = False  # within a step its weights may be half-updated: never saved
        try:
            for step in range(at, train.steps):
                shutdown.raise_if_stopped()  # a Ctrl-C whose KeyboardInterrupt Python ignored (in a fork hook)
                done, stepping = step + 1, True
                with shutdown.finishing_step():
                    try:
                        step_start = time.perf_counter()
                        loss, lr, skipped = self.train_step(step, timed=log.is_log_step(done))
                        train_seconds += time.perf_counter() - step_start
                        due, stopping = by_time.decide(shutdown.stop_requested())
                        checkpointed = (
                            due or stopping or done % train.checkpoint_every == 0 or done == train.steps
                        )
                        self.losses.append(done, loss, lr)
                        read = self.losses.read(sync_point=log.is_log_step(done) or checkpointed)
                    except NonFiniteLoss as error:
                        raise NonFiniteLoss(f"{error} ({last_good_checkpoint(self.run_dir)})") from None
                    log.step(done, read, skipped, timer.share("data"))
                    self.train_skipped += skipped
                    at, stepping = done, False
                if stopping:  # every rank stops at this step: saved together below
                    raise KeyboardInterrupt
                scheduled = [e for e in self.all_evaluators() if measures_after_step(e, done, train.steps)]
                if scheduled:
                    log.phase(f"step {done}: evaluating {self.evaluated(scheduled)}")
                log.evaluations(done, self.measure(scheduled), time.perf_counter() - clock)
                if checkpointed:
                    log.flush()
                    self.save(done, time.perf_counter() - clock, train_seconds)
                    written = done
                    by_time.written()
        except KeyboardInterrupt:
            # Saved unless a step was cut short; under several processes only a stop that every rank agreed on
            # at a step's end (a save is collective).
            kept = not stepping and at > written and (stopping or self.world_size == 1)
            if kept:
                log.step(at, self.losses.read(), [], timer.share("data"))  # CUDA: the losses not read yet
                log.flush()
                self.save(at, time.perf_counter() - clock, train_seconds)
            if self.rank == 0:
                self.tell_stopped(log, at, kept)
            raise
        return train_seconds

    def tell_stopped(self, log: RunLog, at: int, kept: bool) -> None:
        """The line of a run stopped by a signal: the step its checkpoint holds (on stderr also when quiet)."""
        total = self.config.train.steps
        line = (
            f"stopped after step {at} of {total}: checkpoint step {at} written"
            if kept
            else f"stopped during step {at + 1} of {total} (it did not end within {shutdown.FINISH_SECONDS:g} s of "
            f"the signal); {last_good_checkpoint(self.run_dir)}"
        )
        if self.quiet:
            print(line, file=sys.stderr, flush=True)
        else:
            log.write(line)

    def evaluated(self, evaluators: list[Evaluator]) -> str:
        """What `evaluators` measure, in images: "1000 test images", and the validation and few-shot ones."""
        parts = [f"{len(self.data.test)} test images"] if self.test_evaluator in evaluators else []
        if self.data.validation is not None and any(e in self.evaluators for e in evaluators):
            parts.append(f"{len(self.data.validation)} validation images")
        if any(e in self.fewshot for e in evaluators):
            parts.append("few-shot")
        return " and ".join(parts) or "the model"

    def all_evaluators(self) -> list[Evaluator]:
        """The objective's (every rank) and few-shot (rank 0), test first."""
        return [self.test_evaluator, *self.evaluators, *self.fewshot]

    def measure(self, evaluators: list[Evaluator]) -> dict[str, float]:
        """The metrics of `evaluators` on the weight average (or the model)."""
        return {name: value for e in evaluators for name, value in e(self.eval_model).items()}

    def save(self, step: int, wall_seconds: float, train_seconds: float) -> None:
        """Checkpoint every piece of run state at `step` (collective)."""
        state = {
            "wall_seconds": wall_seconds,
            "train_seconds": train_seconds,
            "precision": self.precision.name,
            "precision_reason": self.precision.reason,
            "skipped_images": all_ranks(self.train_skipped),
            "data_streams": self.data.train.streams(self.world_size),
        }
        self.checkpoints.save(step, self.model, self.optimizer, self.ema, state)

    def describe(self, start_step: int) -> str:
        """The run's opening line: model, task, data, device, precision, run directory."""
        model, cfg, data = self.model, self.model.config, self.data
        size = "x".join(str(s) for s in cfg.input_size[1:])
        name = type(self.objective.final_model(model)).__name__
        what = (
            f"{name} {count_parameters(model) / 1e6:.2f}M parameters at {size}, {self.objective.task(model)}"
        )
        return (
            f"{f'resuming at step {start_step}' if self.saved else 'training'}: {what}; data: "
            f"{data.train.description} ({len(data.train)} train / {len(data.test)} test, "
            f"{data.epoch_plan(self.config.train)}); device {self.device}; precision "
            f"{self.precision}; run directory {self.run_dir}"
        )


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
