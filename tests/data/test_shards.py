"""WebDataset shard streams: no sample twice in an epoch over ranks x workers, shuffles keyed to (seed, epoch),
an exact resume with the same ranks and workers, per-sample augmentation equal to the in-memory one, and a
shard that ends early as one line."""

from __future__ import annotations

import io
import json
import shutil
import tarfile

import pytest
import torch

from image_collections import in_memory, take_steps, write_folder, write_small_shards
from vitkit.data import (
    FolderSource,
    ReadOptions,
    ShardSource,
    TrainBatches,
    TrainTransform,
    balanced_subset,
    eval_batches,
    hold_out,
    open_source,
)
from vitkit.data.pack import pack, shuffled_order

CPU = torch.device("cpu")
TRANSFORM = TrainTransform(24, crop="inception", seed=2, in_chans=3)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    return write_small_shards(root)


def stream(source, steps, **options):
    return take_steps(source, TRANSFORM, seed=2, stop=steps, **options)


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_no_sample_twice_in_an_epoch_over_ranks_and_workers(shards, world_size, workers):
    source = ShardSource(shards, "train", ReadOptions(workers=workers))
    per_epoch = TrainBatches(source, TRANSFORM, 12, 2, 1, CPU, 0, world_size).per_epoch
    seen: dict[int, list[int]] = {0: [], 1: []}
    for rank in range(world_size):
        for batch in stream(source, 2 * per_epoch, rank=rank, world_size=world_size):
            assert batch.images.shape == (12 // world_size, 3, 24, 24)
            seen[batch.step // per_epoch] += batch.indices.tolist()
    for indices in seen.values():
        assert len(indices) == len(set(indices)) == per_epoch * 12 and set(indices) <= set(range(60))
    assert seen[0] != seen[1]  # the shard order and buffer are reshuffled every epoch


def test_resume_with_the_same_ranks_and_workers_is_exact(shards):
    source = ShardSource(shards, "train", ReadOptions(workers=2))
    reference = stream(source, 9)  # two epochs and more (4 steps each)
    start = 5  # epoch 1, its second step: the first worker of the resumed loader serves the second stream
    for a, b in zip(reference[start:], stream(source, 9, start=start), strict=True):
        assert a.step == b.step and torch.equal(a.indices, b.indices) and torch.equal(a.images, b.images)


def test_each_sample_is_augmented_as_in_memory(shards):
    memory = in_memory(FolderSource(shards.parent / "folder", "train"), channels=3)
    source = ShardSource(shards, "train", ReadOptions(workers=1))
    per_epoch = TrainBatches(source, TRANSFORM, 12, 2, 1, CPU).per_epoch
    for batch in stream(source, per_epoch + 2):
        epoch = batch.step // per_epoch
        assert torch.equal(batch.labels, memory.labels[batch.indices])
        assert torch.equal(
            batch.images, TRANSFORM.augment(memory.images[batch.indices], batch.indices, epoch)
        )


def test_evaluation_reads_every_test_image_once_in_order(shards):
    source = open_source(f"wds:{shards}", "test", options=ReadOptions(workers=2))
    chunks = list(torch.arange(len(source)).split(7)) + [torch.arange(0)]
    batches = list(eval_batches(source, chunks, (24, 24), 3, CPU))
    assert torch.cat([b.indices for b in batches]).tolist() == list(range(20))


def test_a_shard_that_ends_early_is_one_line(shards, tmp_path):
    broken = tmp_path / "wds"
    shutil.copytree(shards, broken)
    first = broken / "train-000000.tar"
    with tarfile.open(first) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()[:4]]  # 2 of its 5 samples
    with tarfile.open(first, "w") as tar:
        for member, data in members:
            tar.addfile(member, io.BytesIO(data))
    with pytest.raises(
        ValueError, match=r"train-000000.tar: shard ends after 2 of the 5 images dataset.json lists"
    ):
        stream(ShardSource(broken, "train"), 5)


def test_missing_index_or_shards_and_too_few_shards_are_one_line(shards, tmp_path):
    with pytest.raises(FileNotFoundError, match="no WebDataset shards: expected dataset.json"):
        ShardSource(tmp_path, "train")
    partial = tmp_path / "partial"
    shutil.copytree(shards, partial)
    (partial / "train-000003.tar").unlink()
    with pytest.raises(FileNotFoundError, match="train-000003.tar: missing shard"):
        ShardSource(partial, "train")
    info = json.loads((shards / "dataset.json").read_text())
    assert len(info["splits"]["train"]["shards"]) == 12
    with pytest.raises(ValueError, match="12 shard.* cannot feed 14 streams"):
        stream(ShardSource(shards, "train", ReadOptions(workers=7)), 1, world_size=2)


def test_shards_are_written_in_a_seeded_shuffle_of_the_source(tmp_path):
    folder = write_folder(tmp_path / "folder")
    sources = {split: FolderSource(folder, split) for split in ("train", "test")}
    pack(sources, tmp_path / "wds", "wds", shard_images=16, seed=3)
    shards = ShardSource(tmp_path / "wds", "train")
    samples = [sample for shard in range(len(shards.paths)) for sample in shards.samples(shard)]
    keys = [int(name.rsplit("/", 1)[-1]) for _, name, _, _ in samples]  # the sample's index in the folder
    assert keys == shuffled_order(len(sources["train"]), 3) and keys != sorted(keys)
    assert [label for *_, label in samples] == sources["train"].labels[keys].tolist()
    assert [data for _, _, data, _ in samples] == [sources["train"].encoded(key) for key in keys]


def test_a_label_that_is_not_a_number_is_that_samples_error_or_skip(shards, tmp_path):
    broken = tmp_path / "wds"
    shutil.copytree(shards, broken)
    first = broken / "train-000000.tar"
    with tarfile.open(first) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    bad = next(m for m, _ in members if m.name.endswith(".cls"))
    with tarfile.open(first, "w") as tar:
        for member, data in members:
            text = b"cat" if member is bad else data
            member.size = len(text)
            tar.addfile(member, io.BytesIO(text))
    sample = bad.name.removesuffix(".cls")
    with pytest.raises(ValueError, match=rf"{sample}: label None missing or out of range"):
        stream(ShardSource(broken, "train"), 5)
    skipping = ShardSource(broken, "train", ReadOptions(on_corrupt="skip"))
    batches = stream(skipping, 5)
    assert sum(len(b.indices) for b in batches) == 5 * 12 - 1  # only that sample left out


@pytest.mark.parametrize(
    "options, message",
    [
        ({"workers": -1}, "data.workers must be >= 0 and data.prefetch >= 1, got -1 and 2"),
        ({"prefetch": 0}, "data.workers must be >= 0 and data.prefetch >= 1, got 0 and 0"),
        ({"on_corrupt": "ignore"}, "on_corrupt must be one of"),
    ],
)
def test_reading_options_out_of_range_are_one_line(options, message):
    with pytest.raises(ValueError, match=message):
        ReadOptions(**options)  # what every source read per sample or streamed is given


def test_subsets_and_validation_splits_of_a_stream_are_one_line(shards):
    source = ShardSource(shards, "train")
    for draw, setting in ((balanced_subset, "data.train_subset"), (hold_out, "data.val_split")):
        with pytest.raises(ValueError, match=f"{setting} needs an indexable data.source .* is a stream"):
            draw(source, 20)
