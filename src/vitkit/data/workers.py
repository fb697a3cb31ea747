"""Batches made in DataLoader worker processes, for the sources read per sample or streamed.

Item k of the loader is a whole batch (a rank's share of step start + k in training, chunk k in evaluation), so
workers only decide who computes a batch, never what it holds, and the DataLoader hands batches back in order.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import torch
from torch.utils.data import DataLoader, Dataset

from vitkit import shutdown
from vitkit.allocator import return_freed_memory

from .batch import Batch
from .source import ReadOptions


def start_worker(_: int) -> None:
    """A worker decodes images of every size: it returns freed memory to the OS, whatever the trainer it was
    forked from keeps (vitkit.allocator).

    It ends at once and without a word on Ctrl-C and SIGTERM, their default action (a KeyboardInterrupt met as it
    exits would print a traceback): sent to the whole process group (a terminal, Slurm, systemd, `kill -TERM
    -PGID`), the signal reaches the main process too, which stops the run in order and expects its workers' end
    (vitkit.shutdown).
    """
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)
    return_freed_memory()


def loader(dataset: Dataset, options: ReadOptions, pin_memory: bool) -> DataLoader:
    """A DataLoader over `dataset` (one item per batch) with the options' workers and prefetch depth."""
    return DataLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=options.workers,
        prefetch_factor=options.prefetch if options.workers else None,
        pin_memory=pin_memory,
        persistent_workers=False,
        worker_init_fn=start_worker,
        # Each iterator draws its workers' base seed from this generator: from torch's global one, starting an
        # iterator (at a resume, for an evaluation) would move the stream the training step seeds for dropout.
        # The workers draw nothing that matters (augmentation is keyed per sample), so a fixed seed is right.
        generator=torch.Generator(),
    )


def start_stream(batches: DataLoader) -> Iterator[Batch]:
    """The loader's iterator, its worker processes started with Ctrl-C held off until they all run (an iterator
    interrupted half-built prints a traceback as it is collected, and a fork hook swallows the interruption)."""
    with shutdown.deferred():
        return iter(batches)


def next_batch(stream: Iterator[Batch]) -> Batch:
    """The next batch; an error raised in a DataLoader worker, which torch hands over with the worker's whole
    traceback in its message, is raised again as one line: its last line, and which worker."""
    try:
        return next(stream)
    except StopIteration:
        raise
    except Exception as error:
        text = str(error)
        if "Original Traceback" not in text:
            raise
        lines = text.strip().splitlines()
        where = lines[0].removeprefix("Caught ").rstrip(".")
        # The worker's exception is the text after the traceback's last indented (File ...) line.
        last = max(i for i, line in enumerate(lines) if line.startswith(" "))
        line = f"{' '.join(' '.join(lines[last + 1 :]).split())} ({where})"
        try:
            short = type(error)(line)
        except Exception:  # an exception type that takes other arguments
            short = RuntimeError(line)
        raise short from error


class LoaderSteps:
    """Training batches from a DataLoader over `steps_from(start)`, a dataset whose item k is the batch of step
    start + k; a step other than the next restarts the loader there. Batches arrive in pinned memory on CUDA."""

    def __init__(
        self,
        steps_from: Callable[[int], Dataset],
        per_epoch: int,
        options: ReadOptions,
        device: torch.device,
    ) -> None:
        self.steps_from, self.per_epoch, self.options, self.device = steps_from, per_epoch, options, device
        self._stream: Iterator[Batch] | None = None
        self._next_step = -1

    def __call__(self, step: int) -> Batch:
        if self._stream is None or step != self._next_step:
            self.close()
            self._stream = start_stream(
                loader(self.steps_from(step), self.options, self.device.type == "cuda")
            )
        try:
            batch = next_batch(self._stream)
        except BaseException:
            self.close()
            raise
        self._next_step = step + 1
        return batch

    def close(self) -> None:
        """Stop the worker processes now (also when reading a batch failed)."""
        stream, self._stream = self._stream, None
        stop_workers(stream)


def stop_workers(stream: Iterator[Batch] | None) -> None:
    """Shut a DataLoader iterator's worker processes down now. An error leaving a step keeps the iterator
    referenced from its traceback, so dropping it alone would leave the workers running until the process
    exits (and then waiting for them)."""
    shutdown = getattr(stream, "_shutdown_workers", None)  # torch's DataLoader iterator (with workers)
    if shutdown is not None:
        shutdown()


def loader_batches(items: Dataset, count: int, options: ReadOptions, device: torch.device) -> Iterator[Batch]:
    """The `count` batches of `items` (a dataset of one batch an item), read as `options` say, in order."""
    stream = start_stream(loader(items, options, device.type == "cuda"))
    try:
        for _ in range(count):
            yield next_batch(stream)
    finally:
        stop_workers(stream)
