"""Batches for training and evaluation from any source: in-memory tensors sliced on the spot, lazy sources decoded
and preprocessed in DataLoader worker processes.

Training: item k of a rank's DataLoader is its whole share of step start + k, so which samples a step holds
(global_batch_indices, then shard) and how each is augmented (keyed by seed, epoch and index) do not depend on
the number of workers; workers only decide who computes a step, and the DataLoader hands steps back in order.
A resumed run restarts the loader at its step and reads exactly what the uninterrupted run read.

The per-sample augmentation (TrainTransform.augment) runs in the workers on each step's images, of any sizes;
MixUp / CutMix (TrainTransform.mix_batch) run on the assembled micro-batch in the engine. An in-memory source
takes the same functions on whole batches, which give the same pixels (tests/data/test_pipeline.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from vitkit import shutdown
from vitkit.allocator import return_freed_memory

from .batch import Batch
from .decode import ImageDecodeError
from .lazy import LazySource
from .loader import epoch_shard, global_batch_indices, shard, steps_per_epoch
from .shards import ShardChunks, ShardSource, ShardSteps
from .sources import ImageDataset
from .transforms import TrainTransform, eval_transform, resize_centre_crop

Source = ImageDataset | LazySource | ShardSource
EPOCH_MEMORY_SHARE = 0.25  # of a GPU's free memory, for a whole augmented epoch of an in-memory source
EPOCH_CHUNK = 8192  # samples augmented at once when augmenting a whole epoch (bounds the transient memory)
GATHER_SIDE = 256  # few-shot images of mixed sizes: shorter side to this, centre square kept
# (n uint8 [C, H, W] images of any sizes, their indices [n]) -> float32 [n, C, h, w]
Preprocess = Callable[[list[torch.Tensor], torch.Tensor], torch.Tensor]


def read_batch(
    source: LazySource, indices: torch.Tensor, preprocess: Preprocess, shape: tuple[int, ...]
) -> Batch:
    """Decode the samples `indices` one by one, then preprocess those read in one call; `shape` (C, h, w) is an
    output image's shape."""
    images, kept, skipped = [], [], []
    # Decoded as the model sees them: grey files stay exact for 1 channel.
    channels = 1 if shape[0] == 1 else 3
    for position, index in enumerate(indices.tolist()):
        try:
            images.append(source.read(index, channels))
        except ImageDecodeError as err:
            skipped.append(str(err))
            continue
        except MemoryError:  # an image within the limits that this machine still cannot hold
            skipped.append(f"{source.name(index)}: out of memory decoding it (expected a smaller image)")
            continue
        kept.append(position)
    chosen = torch.tensor(kept, dtype=torch.int64)
    processed = preprocess(images, indices[chosen]) if images else torch.empty(0, *shape)
    return Batch(processed, source.labels[indices][chosen], indices[chosen], skipped=skipped)


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


def check_skipped(source: LazySource | ShardSource, batch: Batch) -> None:
    """Raise a source's failure; apply `on_corrupt` to the images a batch could not read: stop on the first, or
    record them."""
    if batch.error:
        raise ValueError(batch.error)
    if not batch.skipped:
        return
    if source.on_corrupt == "stop":
        raise ValueError(
            f"{batch.skipped[0]}; set data.on_corrupt='skip' to skip unreadable images and list them in report.json"
        )
    source.skipped += batch.skipped


def start_worker(_: int) -> None:
    """A worker decodes images of every size: it returns freed memory to the OS, whatever the trainer it was
    forked from keeps (vitkit.allocator)."""
    return_freed_memory()


def loader(source: LazySource | ShardSource, dataset: Dataset, pin_memory: bool) -> DataLoader:
    """A DataLoader over `dataset` (one item per batch) with the source's workers and prefetch depth."""
    workers = source.workers
    return DataLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=workers,
        prefetch_factor=source.prefetch if workers else None,
        pin_memory=pin_memory,
        persistent_workers=False,
        worker_init_fn=start_worker,
    )


class RankSteps(Dataset):
    """Item k: this rank's share of training step start + k, decoded and augmented (in a worker)."""

    def __init__(
        self,
        source: LazySource,
        transform: TrainTransform,
        batch_size: int,
        seed: int,
        rank: int,
        world_size: int,
        start: int,
        stop: int,
    ) -> None:
        self.source, self.transform = source, transform
        self.batch_size, self.seed, self.rank, self.world_size = batch_size, seed, rank, world_size
        self.start, self.stop = start, stop
        self.per_epoch = steps_per_epoch(len(source), batch_size)
        self.shape = (transform.in_chans or 3, *transform.img_size)

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, k: int) -> Batch:
        step = self.start + k
        epoch = step // self.per_epoch
        indices = shard(global_batch_indices(len(self.source), self.batch_size, self.seed, step), self.rank,
                        self.world_size)  # fmt: skip
        batch = read_batch(self.source, indices, lambda x, i: self.transform.augment(x, i, epoch), self.shape)
        batch.step = step
        return batch


class TrainBatches:
    """This rank's share of each training step, called with consecutive steps (any step restarts the stream).

    In-memory sources: sliced and augmented on `device` (the fast path); on a GPU, where a step of a small
    model costs less than launching the augmentation's kernels, a whole epoch of this rank's samples is augmented
    at once when it fits (EPOCH_MEMORY_SHARE of the free memory) and each step takes its slice: the same pixels,
    since the augmentation is per sample. Lazy sources: a DataLoader over RankSteps keeps `workers x prefetch`
    steps in flight; shard streams: a DataLoader over ShardSteps. Batches arrive in pinned memory on CUDA.
    """

    def __init__(
        self,
        source: Source,
        transform: TrainTransform,
        batch_size: int,
        seed: int,
        steps: int,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        self.source, self.transform, self.batch_size, self.seed = source, transform, batch_size, seed
        self.steps, self.device, self.rank, self.world_size = steps, device, rank, world_size
        self.shape = (transform.in_chans or 3, *transform.img_size)
        if isinstance(source, ShardSource):
            self.per_epoch = self._shard_steps(source, 0).per_epoch
        else:
            self.per_epoch = steps_per_epoch(len(source), batch_size)
        self._stream: Iterator[Batch] | None = None
        self._next_step = -1
        self.whole_epochs = fits_whole_epochs(source, self.shape)
        self._epoch: tuple[int, Batch] | None = None  # (epoch, this rank's augmented samples, in step order)

    def epoch(self, step: int) -> int:
        return step // self.per_epoch

    def _shard_steps(self, source: ShardSource, start: int) -> ShardSteps:
        rank_batch = self.batch_size // self.world_size
        return ShardSteps(source, self.transform, rank_batch, self.seed, self.rank, self.world_size, start,
                          self.steps, self.shape)  # fmt: skip

    def __call__(self, step: int) -> Batch:
        """The batch of `step` (labels and indices on the device too)."""
        if isinstance(self.source, ImageDataset) and self.whole_epochs:
            epoch, position = divmod(step, self.per_epoch)
            if self._epoch is None or self._epoch[0] != epoch:
                self._epoch = None  # one epoch in memory at a time
                self._epoch = epoch, self._augment_epoch(self.source, epoch)
            share = self.batch_size // self.world_size
            window = slice(position * share, (position + 1) * share)
            whole = self._epoch[1]
            return Batch(whole.images[window], whole.labels[window], whole.indices[window], step)
        if isinstance(self.source, ImageDataset):
            order = global_batch_indices(
                len(self.source), self.batch_size, self.seed, step, self.source.images.device
            )
            indices = shard(order, self.rank, self.world_size)
            images = self.transform.augment(
                self.source.images[indices].to(self.device), indices, self.epoch(step)
            )
            return Batch(images, self.source.labels[indices].to(self.device), indices, step)
        if self._stream is None or step != self._next_step:
            self.close()
            if isinstance(self.source, ShardSource):
                steps: Dataset = self._shard_steps(self.source, step)
            else:
                steps = RankSteps(self.source, self.transform, self.batch_size, self.seed, self.rank,
                                  self.world_size, step, self.steps)  # fmt: skip
            self._stream = start_stream(loader(self.source, steps, pin_memory=self.device.type == "cuda"))
        batch = next_batch(self._stream)
        self._next_step = step + 1
        check_skipped(self.source, batch)
        if batch.step != step:
            raise RuntimeError(f"the data stream gave step {batch.step + 1} for step {step + 1}")
        if not len(batch.indices):
            raise ValueError(
                f"no image of step {step + 1}'s batch on rank {self.rank} could be read ({batch.skipped[0]})"
            )
        batch.images = batch.images.to(self.device, non_blocking=True)
        batch.labels = batch.labels.to(self.device, non_blocking=True)
        return batch

    def _augment_epoch(self, source: ImageDataset, epoch: int) -> Batch:
        """This rank's share of every step of `epoch`, in step order, augmented EPOCH_CHUNK samples at a time."""
        indices = epoch_shard(len(source), self.batch_size, self.seed, epoch, self.rank, self.world_size,
                              source.images.device)  # fmt: skip
        images = torch.cat(
            [
                self.transform.augment(source.images[chunk], chunk, epoch)
                for chunk in indices.split(EPOCH_CHUNK)
            ]
        )
        return Batch(images, source.labels[indices], indices)

    def close(self) -> None:
        """Stop the worker processes now and free an augmented epoch. The loader's iterator is shut down
        explicitly: an exception leaving a step (Ctrl-C) keeps it referenced from its traceback, so dropping it
        alone would leave the workers running until the process exits."""
        stream, self._stream = self._stream, None
        shutdown = getattr(stream, "_shutdown_workers", None)  # torch's DataLoader iterator; None in memory
        if shutdown is not None:
            shutdown()
        self._epoch = None


def fits_whole_epochs(source: Source, shape: tuple[int, ...]) -> bool:
    """Whether training steps slice a whole augmented epoch (TrainBatches): in-memory images on a GPU, the epoch
    of float32 images of `shape` fitting in EPOCH_MEMORY_SHARE of its free memory."""
    if not isinstance(source, ImageDataset) or source.images.device.type != "cuda":
        return False
    epoch_bytes = len(source) * math.prod(shape) * 4
    return epoch_bytes <= torch.cuda.mem_get_info(source.images.device)[0] * EPOCH_MEMORY_SHARE


class EvalChunks(Dataset):
    """Item k: the samples `chunks[k]` resized (centre crop) to the model's input, in [-1, 1]."""

    def __init__(
        self, source: LazySource, chunks: list[torch.Tensor], img_size: tuple[int, int], in_chans: int
    ):
        self.source, self.chunks, self.img_size, self.in_chans = source, chunks, img_size, in_chans

    def __len__(self) -> int:
        return len(self.chunks)

    def __getitem__(self, k: int) -> Batch:
        return read_batch(self.source, self.chunks[k], self._preprocess, (self.in_chans, *self.img_size))

    def _preprocess(self, images: list[torch.Tensor], _: torch.Tensor) -> torch.Tensor:
        return torch.cat([eval_transform(image[None], self.img_size, self.in_chans) for image in images])


def eval_batches(
    source: Source, chunks: list[torch.Tensor], img_size: tuple[int, int], in_chans: int, device: torch.device
) -> Iterator[Batch]:
    """The samples of each chunk preprocessed for evaluation, on `device`, in chunk order."""
    if isinstance(source, ImageDataset):
        for chunk in chunks:
            images = eval_transform(source.images[chunk].to(device), img_size, in_chans)
            yield Batch(images, source.labels[chunk].to(device), chunk)
        return
    if isinstance(source, ShardSource):  # contiguous index ranges, read from the shards that hold them
        preprocess = lambda x: eval_transform(x, img_size, in_chans)  # noqa: E731
        items: Dataset = ShardChunks(source, chunks, preprocess, (in_chans, *img_size))
    else:
        items = EvalChunks(source, chunks, img_size, in_chans)
    stream = start_stream(loader(source, items, device.type == "cuda"))
    for _ in range(len(chunks)):  # one batch a chunk
        batch = next_batch(stream)
        check_skipped(source, batch)
        yield Batch(batch.images.to(device), batch.labels.to(device), batch.indices, skipped=batch.skipped)


def gather_images(
    source: Source, indices: np.ndarray | torch.Tensor, side: int = GATHER_SIDE
) -> torch.Tensor:
    """The images `indices` as one uint8 tensor [n, C, H, W] (few-shot's small subsets, held in memory).

    In-memory sources are indexed. Images read per sample keep their size when all share one; otherwise each is
    resized (shorter side) to `side` and centre-cropped to a square, rounded back to uint8. Unreadable images
    are one-line errors: a few-shot subset is drawn by label and cannot skip one.
    """
    indices = torch.as_tensor(np.asarray(indices), dtype=torch.int64)
    if isinstance(source, ShardSource):
        raise ValueError(f"few-shot evaluation needs an indexable source (in memory, folder:, hf:); {source.source} "
                         "is a stream")  # fmt: skip
    if not isinstance(source, LazySource):
        return torch.as_tensor(source.images)[indices]
    images = [source.read(int(index)) for index in indices]
    if len({image.shape for image in images}) > 1:
        images = [resize_centre_crop(image[None].float(), (side, side)).round().clamp(0, 255).to(torch.uint8)[0]
                  for image in images]  # fmt: skip
    return torch.stack(images) if images else torch.empty(0, 3, side, side, dtype=torch.uint8)
