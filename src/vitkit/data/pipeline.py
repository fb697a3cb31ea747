"""Batches for training and evaluation from any source (vitkit.data.source.Source): each source reads them its
own way (in memory, per sample in DataLoader workers, streamed from shards); here they are checked the same way
for every source and moved to the model's device.

Training: which samples a step holds and how each is augmented is a function of (seed, step) and the sample, so
a resumed run restarts the reading at its step and reads exactly what the uninterrupted run read. The per-sample
augmentation (TrainTransform.augment) runs where the source reads; MixUp / CutMix (TrainTransform.mix_batch) run on
the assembled micro-batch in the engine.

An image that cannot be read stops the run (data.on_corrupt='stop') or is left out and named in the `skipped`
of the batch that met it ('skip'): whoever consumes the batches collects them.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from .batch import Batch
from .source import ReadOptions, Source, StepPlan
from .transforms import MeanStd, TrainTransform, normalise, resize_centre_crop

GATHER_SIDE = 256  # few-shot images of mixed sizes: shorter side to this, centre square kept


def check_read(options: ReadOptions, batch: Batch) -> None:
    """Raise a source's failure (a shard that ends early) as one line; stop on the first image a batch could not
    read unless `options.on_corrupt` is 'skip'."""
    if batch.error:
        raise ValueError(batch.error)
    if batch.skipped and options.on_corrupt == "stop":
        raise ValueError(
            f"{batch.skipped[0]}; set data.on_corrupt='skip' to skip unreadable images and list them in report.json"
        )


class TrainBatches:
    """This rank's share of each training step, called with consecutive steps (any step restarts the reading),
    on `device`; each batch names the images it skipped."""

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
        self.source, self.device, self.rank = source, device, rank
        self.step_reader = source.train_steps(
            StepPlan(transform, batch_size, seed, steps, device, rank, world_size)
        )
        self.per_epoch = self.step_reader.per_epoch

    def epoch(self, step: int) -> int:
        return step // self.per_epoch

    def __call__(self, step: int) -> Batch:
        """The batch of `step` (labels on the device too)."""
        batch = self.step_reader(step)
        check_read(self.source.options, batch)
        if batch.step != step:
            raise RuntimeError(f"the data stream gave step {batch.step + 1} for step {step + 1}")
        if not len(batch.indices):
            raise ValueError(
                f"no image of step {step + 1}'s batch on rank {self.rank} could be read ({batch.skipped[0]})"
            )
        batch.images = batch.images.to(self.device, non_blocking=True)
        batch.labels = batch.labels.to(self.device, non_blocking=True)
        return batch

    def close(self) -> None:
        """Stop the source's worker processes now and free what it holds for the steps to come."""
        self.step_reader.close()


def eval_batches(
    source: Source,
    chunks: list[torch.Tensor],
    img_size: tuple[int, int],
    in_chans: int,
    device: torch.device,
    mean_std: MeanStd = None,
) -> Iterator[Batch]:
    """The samples of each chunk preprocessed for evaluation (normalised with the weights' `mean_std`, a model
    config's), on `device`, in chunk order; each batch names the images it skipped."""
    for batch in source.eval_batches(chunks, img_size, in_chans, device):
        check_read(source.options, batch)
        images = normalise(batch.images.to(device), mean_std)
        yield Batch(images, batch.labels.to(device), batch.indices, skipped=batch.skipped)


def gather_images(
    source: Source, indices: np.ndarray | torch.Tensor, side: int = GATHER_SIDE
) -> torch.Tensor:
    """The images `indices` as one uint8 tensor [n, C, H, W] (few-shot's small subsets, held in memory).

    Images keep their size when all share one; otherwise each is resized (shorter side) to `side` and
    centre-cropped to a square, rounded back to uint8. Unreadable images are one-line errors: a few-shot subset
    is drawn by label and cannot skip one.
    """
    if not source.indexable:
        raise ValueError(f"few-shot evaluation needs an indexable source (in memory, folder:, hf:); "
                         f"{source.description} is a stream")  # fmt: skip
    images = [source.read(int(index)) for index in torch.as_tensor(np.asarray(indices), dtype=torch.int64)]
    if len({image.shape for image in images}) > 1:
        images = [resize_centre_crop(image[None].float(), (side, side)).round().clamp(0, 255).to(torch.uint8)[0]
                  for image in images]  # fmt: skip
    return torch.stack(images) if images else torch.empty(0, 3, side, side, dtype=torch.uint8)
