"""Hugging Face `datasets` directories: rows read in place, the same batches as the same images in memory, labels
and splits checked."""

from __future__ import annotations

import pytest
import torch

from image_collections import in_memory, write_folder, write_packed
from vitkit.data import HFSource, ReadOptions, TrainBatches, TrainTransform, open_source

datasets = pytest.importorskip("datasets")
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return write_packed(write_folder(root / "folder"), root / "hf", "hf")


def test_rows_classes_and_order_are_the_folders(packed):
    source = open_source(f"hf:{packed}", "train", options=ReadOptions(workers=2))
    folder = open_source(str(packed.parent / "folder"), "train")
    assert isinstance(source, HFSource) and source.classes == folder.classes and len(source) == 60
    assert torch.equal(source.labels, folder.labels)
    assert torch.equal(source.read(17), folder.read(17)) and "[train] row 17" in source.name(17)
    assert len(open_source(f"hf:{packed}", "test")) == 20


def test_batches_equal_the_same_images_in_memory(packed):
    source = HFSource(packed, "train", ReadOptions(workers=1))
    memory = in_memory(source, channels=3)
    transform = TrainTransform(24, crop="inception", seed=1, in_chans=3)
    lazy_stream, memory_stream = (TrainBatches(s, transform, 12, 1, 6, CPU) for s in (source, memory))
    for step in range(6):
        a, b = lazy_stream(step), memory_stream(step)
        assert torch.equal(a.indices, b.indices) and torch.equal(a.images, b.images)
    lazy_stream.close()


def test_bad_labels_and_missing_splits_are_one_line_errors(tmp_path):
    features = datasets.Features({"image": datasets.Image(), "label": datasets.Value("int64")})
    png = datasets.Image().encode_example(torch.zeros(4, 4, 3, dtype=torch.uint8).numpy())
    rows = {"image": [png] * 3, "label": [0, 1, 5]}
    bad = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": bad.select([0, 1]), "test": bad}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match=r"\[test\] row 2: label 5 out of range for 2 classes"):
        HFSource(tmp_path / "dd", "test")
    bad.select([0, 1]).save_to_disk(str(tmp_path / "one"))
    assert len(HFSource(tmp_path / "one", "train")) == 2
    with pytest.raises(FileNotFoundError, match="holds one split"):
        HFSource(tmp_path / "one", "test")
