"""A source vitkit does not ship, written against the Source protocol alone (no vitkit class subclassed), trains and
evaluates like the built-in ones: the same batches as the same images held in memory, its unreadable images named
in the batches that meet them, and a whole `vitkit train` run on it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import torch

from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.data import (
    Batch,
    ImageDataset,
    ImageDecodeError,
    ReadOptions,
    StepPlan,
    TrainBatches,
    TrainTransform,
    balanced_subset,
    eval_batches,
    global_batch_indices,
    load_dataset,
    per_sample_eval,
    per_sample_steps,
)
from vitkit.data.in_memory import png_bytes
from vitkit.data.source import DEFAULT_READING, EncodedImage
from vitkit.training import build

CPU = torch.device("cpu")


class ListSource:
    """Images in a Python list, read one at a time; the indices in `broken` cannot be read."""

    reader = "a Python list, read per sample"
    indexable = True
    image_size = None

    def __init__(self, images: list[torch.Tensor], labels: torch.Tensor, classes: list[str],
                 options: ReadOptions = DEFAULT_READING, broken: frozenset[int] = frozenset()) -> None:  # fmt: skip
        self.images, self.labels, self.classes, self.options, self.broken = (
            images,
            labels,
            classes,
            options,
            broken,
        )
        self.description = f"a list of {len(images)} images"

    def __len__(self) -> int:
        return len(self.images)

    def name(self, index: int) -> str:
        return f"list item {index}"

    def read(self, index: int, channels: int = 3) -> torch.Tensor:
        if index in self.broken:
            raise ImageDecodeError(f"{self.name(index)}: unreadable")
        return self.images[index]

    def select(self, indices: torch.Tensor, description: str) -> ListSource:
        chosen = ListSource([self.images[i] for i in indices.tolist()], self.labels[indices], self.classes,
                            self.options)  # fmt: skip
        chosen.description = description
        return chosen

    def to_device(self, device: torch.device) -> ListSource:
        return self

    def streams(self, world_size: int) -> None:
        return None

    def train_steps(self, plan: StepPlan):
        return per_sample_steps(self, plan)

    def eval_batches(self, chunks, img_size, in_chans, device) -> Iterator[Batch]:
        return per_sample_eval(self, chunks, img_size, in_chans, device)

    def encoded_samples(self, order=None) -> Iterator[tuple[int, str, EncodedImage, int | None]]:
        for index in range(len(self)) if order is None else order:
            yield index, self.name(index), png_bytes(self.images[index]), int(self.labels[index])


def as_list(dataset: ImageDataset, count: int, **kwargs) -> ListSource:
    """The first `count` images of an in-memory dataset as a ListSource."""
    return ListSource(list(dataset.images[:count]), dataset.labels[:count].clone(), dataset.classes, **kwargs)


@pytest.fixture(scope="module")
def memory() -> ImageDataset:
    return load_dataset("synthetic", "train").select(torch.arange(60), "the first 60 synthetic images")


@pytest.mark.parametrize("workers", [0, 2])
def test_a_user_source_gives_the_batches_of_the_same_images_in_memory(memory, workers):
    transform = TrainTransform(24, crop="inception", seed=3)
    mine = TrainBatches(as_list(memory, 60, options=ReadOptions(workers=workers)), transform, 12, 3, 7, CPU)
    reference = TrainBatches(memory, transform, 12, 3, 7, CPU)
    try:
        for step in range(7):  # 5 steps an epoch: into the second
            a, b = mine(step), reference(step)
            assert a.step == b.step == step and torch.equal(a.indices, b.indices)
            assert torch.equal(a.labels, b.labels) and torch.equal(a.images, b.images)
    finally:
        mine.close()
    chunks = list(torch.arange(60).split(25))
    for a, b in zip(eval_batches(as_list(memory, 60), chunks, (16, 16), 3, CPU),
                    eval_batches(memory, chunks, (16, 16), 3, CPU), strict=True):  # fmt: skip
        assert torch.equal(a.indices, b.indices) and torch.equal(a.images, b.images)
    subset = balanced_subset(as_list(memory, 60), 20, seed=1)
    assert isinstance(subset, ListSource) and subset.labels.bincount().tolist() == [2] * 10


def test_each_batch_names_the_images_it_skipped(memory):
    transform = TrainTransform(24, crop="none", flip=False)
    broken = int(global_batch_indices(60, 12, 0, 1)[5])  # in step 1's batch
    stopping = TrainBatches(as_list(memory, 60, broken=frozenset({broken})), transform, 12, 0, 5, CPU)
    with pytest.raises(ValueError, match=f"list item {broken}: unreadable; set data.on_corrupt='skip'"):
        [stopping(step) for step in range(5)]
    source = as_list(memory, 60, options=ReadOptions(on_corrupt="skip"), broken=frozenset({broken}))
    batches = [TrainBatches(source, transform, 12, 0, 5, CPU)(step) for step in range(5)]
    assert [batch.skipped for batch in batches] == [[], [f"list item {broken}: unreadable"], [], [], []]
    assert sorted(i for batch in batches for i in batch.indices.tolist()) == sorted(set(range(60)) - {broken})
    evaluated = list(eval_batches(source, list(torch.arange(60).split(30)), (16, 16), 3, CPU))
    assert [batch.skipped for batch in evaluated] == [[f"list item {broken}: unreadable"] * (broken < 30),
                                                      [f"list item {broken}: unreadable"] * (broken >= 30)]  # fmt: skip


@pytest.mark.slow
def test_vitkit_train_runs_on_a_user_source(tmp_path, monkeypatch, capsys):
    """Steps, evaluation and report.json on a ListSource: its description, and the images skipped in training (as
    often as met) and evaluation."""
    data = {split: load_dataset("fashion_mnist", split, subset="embedded") for split in ("train", "test")}
    broken = {
        "train": int(global_batch_indices(200, 16, 0, 0)[3]),
        "test": 7,
    }  # read at step 1; evaluated once

    def open_source(spec, split, data_dir=None, options=DEFAULT_READING):
        return as_list(data[split], 200 if split == "train" else 50, options=options,
                       broken=frozenset({broken[split]}))  # fmt: skip

    monkeypatch.setattr(build, "open_source", open_source)
    out = tmp_path / "run"
    argv = ["train", "--out", str(out), "--steps", "4", *TINY_RECIPE, "train.batch_size=16", "train.seed=0"]
    assert cli.main([*argv, "data.on_corrupt=skip"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["train_data"] == "a list of 200 images" and report["test_data"] == "a list of 50 images"
    assert report["skipped_images"] == [{"image": f"list item {broken['train']}: unreadable", "times": 1},
                                        {"image": f"list item {broken['test']}: unreadable", "times": 1}]  # fmt: skip
    assert report["test_images"] == 49
    output = capsys.readouterr()
    assert (output.out + output.err).count(f"skipped unreadable image list item {broken['train']}") == 1
