"""Batches from lazy sources: every index once per epoch over ranks x workers, the same batches whatever the number
of workers or resume step, and exactly the batches of the same images held in memory."""

from __future__ import annotations

import pytest
import torch

from image_collections import in_memory, take_steps, write_folder
from vitkit.data import FolderSource, ReadOptions, TrainBatches, TrainTransform, eval_batches, steps_per_epoch
from vitkit.evaluation.fewshot import FewShotEvaluator

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_folder(tmp_path_factory.mktemp("folder"))


def batches(source, *, crop="inception", size=28, **steps):
    return take_steps(source, TrainTransform(size, crop=crop, seed=3, in_chans=1), seed=3, **steps)


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_ranks_and_workers_cover_every_index_once_per_epoch(folder, world_size, workers):
    source = FolderSource(folder, "train", ReadOptions(workers=workers))
    per_epoch = steps_per_epoch(len(source), 12)  # 60 images: 5 steps
    seen = {epoch: [] for epoch in range(2)}
    for rank in range(world_size):
        for batch in batches(source, rank=rank, world_size=world_size, stop=2 * per_epoch):
            assert len(batch.indices) == 12 // world_size and batch.images.shape == (
                12 // world_size,
                1,
                28,
                28,
            )
            assert torch.equal(batch.labels, source.labels[batch.indices])
            seen[batch.step // per_epoch] += batch.indices.tolist()
    for indices in seen.values():
        assert sorted(indices) == list(range(len(source)))


def test_batches_do_not_depend_on_workers_or_the_resume_step(folder):
    reference = batches(FolderSource(folder, "train"), stop=7)
    for workers, start in ((2, 0), (1, 4), (2, 3)):
        resumed = batches(
            FolderSource(folder, "train", ReadOptions(workers=workers, prefetch=1)), start=start, stop=7
        )
        for a, b in zip(reference[start:], resumed, strict=True):
            assert a.step == b.step and torch.equal(a.indices, b.indices) and torch.equal(a.images, b.images)


@pytest.mark.parametrize("crop", ["inception", "resize_crop", "pad_crop", "none"])
def test_folder_batches_equal_the_same_images_in_memory(folder, crop):
    lazy = FolderSource(
        folder, "train", ReadOptions(workers=int(crop == "inception"))
    )  # workers change nothing (above)
    memory = in_memory(lazy, channels=1)  # the model of `batches` has one channel
    for a, b in zip(
        batches(lazy, crop=crop, stop=6, size=40), batches(memory, crop=crop, stop=6, size=40), strict=True
    ):
        assert torch.equal(a.indices, b.indices) and torch.equal(a.labels, b.labels)
        assert torch.equal(a.images, b.images)


def test_eval_batches_equal_the_same_images_in_memory(folder):
    lazy = FolderSource(folder, "test", ReadOptions(workers=2))
    chunks = list(torch.arange(len(lazy)).split(7)) + [torch.arange(0)]
    memory = list(eval_batches(in_memory(lazy, channels=3), chunks, (24, 24), 3, CPU))
    for a, b in zip(eval_batches(lazy, chunks, (24, 24), 3, CPU), memory, strict=True):
        assert a.images.shape == b.images.shape and torch.equal(a.images, b.images)
        assert torch.equal(a.labels, b.labels)


def test_few_shot_reads_a_folder_as_the_same_images_in_memory(folder, tiny_vit):
    train, test = FolderSource(folder, "train"), FolderSource(folder, "test")
    model = tiny_vit(img_size=32, patch_size=8)
    lazy = FewShotEvaluator(train, test, shots=(2,), seeds=1)
    memory = FewShotEvaluator(in_memory(train, channels=3), in_memory(test, channels=3), shots=(2,), seeds=1)
    assert torch.equal(lazy.train_images, memory.train_images) and torch.equal(
        lazy.test_images, memory.test_images
    )
    assert lazy(model) == memory(model)


@pytest.mark.parametrize("crop", ["inception", "pad_crop"])
def test_a_whole_augmented_epoch_gives_each_step_its_batch(folder, crop):
    """The GPU's path for in-memory data (each step slices an epoch augmented at once) equals step by step."""
    memory = in_memory(FolderSource(folder, "train"), channels=1)
    transform = TrainTransform(28, crop=crop, seed=3, in_chans=1)
    for rank, world_size in ((0, 1), (2, 3)):
        per_step, whole = (
            TrainBatches(memory, transform, 12, 3, 12, CPU, rank, world_size) for _ in range(2)
        )
        whole.step_reader.whole_epochs = True
        for step in range(12):  # 5 steps an epoch: into the third epoch
            a, b = per_step(step), whole(step)
            assert a.step == b.step == step and torch.equal(a.indices, b.indices)
            assert torch.equal(a.labels, b.labels) and torch.equal(a.images, b.images)
