"""Hostile packed collections made here: Hugging Face splits whose labels are reordered, a subset, unknown, float,
null or strings; dataset.json files with missing or mistyped fields; shard labels that are not ASCII digits; a
1 GB member nobody uses; a pack interrupted or out of disk space. Each gives its one-line error or the correct
labels, and nothing is written for a refused command."""

from __future__ import annotations

import errno
import io
import json
import re
import resource
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hostile_files import grey_folder
from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.data import HFSource
from vitkit.data.folder import FolderSource
from vitkit.data.pack import INCOMPLETE_NAME, pack
from vitkit.data.shards import ShardSource


def one_error_line(err: str, command: str) -> str:
    """The command's one error line (progress bars aside), with no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("vitkit ")]
    assert len(lines) == 1 and lines[0].startswith(f"vitkit {command}: error: ") and "Traceback" not in err, (
        err
    )
    return lines[0]


# ------------------------------------------------------------------------------------------ Hugging Face

datasets = pytest.importorskip("datasets")
PNG = datasets.Image().encode_example(np.zeros((4, 4, 3), np.uint8))


def save_splits(path: Path, train: tuple[list, object], test: tuple[list, object]) -> Path:
    """A DatasetDict of train and test, each (labels, feature): a ClassLabel's names or a Value type."""

    def split(labels: list, feature: object):
        label = datasets.ClassLabel(names=feature) if isinstance(feature, list) else datasets.Value(feature)
        features = datasets.Features({"image": datasets.Image(), "label": label})
        return datasets.Dataset.from_dict({"image": [PNG] * len(labels), "label": labels}, features=features)

    datasets.DatasetDict({"train": split(*train), "test": split(*test)}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize(
    ("test", "classes", "labels"),
    [
        (([0, 1, 2], ["c", "a", "b"]), ["a", "b", "c"], [2, 0, 1]),  # reordered ClassLabel: mapped by name
        (([0, 1], ["b", "c"]), ["a", "b", "c"], [1, 2]),  # a subset
    ],
)
def test_a_test_split_is_mapped_to_the_training_classes_by_name(test, classes, labels, tmp_path) -> None:
    path = save_splits(tmp_path / "dd", ([0, 1, 2], ["a", "b", "c"]), test)
    source = HFSource(path, "test")
    assert source.classes == classes and source.labels.tolist() == labels


def test_string_labels_are_class_names_sorted_like_folders(tmp_path) -> None:
    path = save_splits(tmp_path / "dd", (["dog", "cat", "emu", "dog"], "string"), (["emu", "cat"], "string"))
    train, test = HFSource(path, "train"), HFSource(path, "test")
    assert train.classes == test.classes == ["cat", "dog", "emu"]
    assert train.labels.tolist() == [1, 0, 2, 1] and test.labels.tolist() == [2, 0]


@pytest.mark.parametrize(
    ("train", "test", "message"),
    [
        (
            ([0, 1], ["a", "b"]),
            ([0, 1], ["b", "zebra"]),
            r"\[test\] row 1: class 'zebra' .* not a class of the train",
        ),
        (
            ([0.7, 1.7], "float64"),
            ([0.7], "float64"),
            r"\[train\] column 'label': double labels \(row 0: 0.7\)",
        ),
        (([0, 1], "int64"), ([0, None, 1], "int64"), r"\[test\] row 1: label is null \(column 'label'\)"),
        ((["cat", "dog"], "string"), (["cat", "emu"], "string"), r"\[test\] row 1: class 'emu'"),
        (
            (["cat", "dog"], "string"),
            ([0, 1], "int64"),
            "the train split's labels are names, the test split's numbers",
        ),
    ],
)
def test_bad_labels_are_one_line(train, test, message, tmp_path, capsys) -> None:
    path = save_splits(tmp_path / "dd", train, test)
    assert cli.main(["train", "--out", str(tmp_path / "run"), *TINY_RECIPE, f"data.source=hf:{path}"]) == 2
    line = one_error_line(capsys.readouterr().err, "train")
    assert re.search(message, line), line
    assert not (tmp_path / "run").exists()


# -------------------------------------------------------------------------------------------- shards


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shards")
    images = grey_folder(root / "images")
    pack({split: FolderSource(images, split) for split in ("train", "test")}, root / "wds", "wds")
    return root / "wds"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda info: info.pop("classes"), "'classes' must be a non-empty list of class names, got None"),
        (lambda info: info.update(classes=[]), "'classes' must be a non-empty list of class names, got []"),
        (
            lambda info: info.update(classes="ab"),
            "'classes' must be a non-empty list of class names, got 'ab'",
        ),
        (lambda info: info.update(splits=[]), "'splits' must be an object of splits, got []"),
        (
            lambda info: info["splits"]["train"].pop("shards"),
            "'splits.train.shards' must be a non-empty list",
        ),
        (
            lambda info: info["splits"]["train"]["shards"][0].update(images=-8),
            "shards[0].images' must be a whole",
        ),
        (
            lambda info: info["splits"]["train"]["shards"][0].update(images="8"),
            "shards[0].images' must be a whole",
        ),
        (
            lambda info: info["splits"]["test"]["shards"][0].pop("name"),
            "'splits.test.shards[0].name' must be a",
        ),
        (
            lambda info: info["splits"]["test"]["shards"][0].update(name="../x.tar"),
            "name' must be a file name",
        ),
    ],
)
def test_a_broken_dataset_json_is_one_line_and_leaves_no_run_directory(
    change, message, shards, tmp_path, capsys
) -> None:
    copy = shutil.copytree(shards, tmp_path / "wds")
    info = json.loads((copy / "dataset.json").read_text())
    change(info)
    (copy / "dataset.json").write_text(json.dumps(info))
    assert cli.main(["train", "--out", str(tmp_path / "run"), *TINY_RECIPE, f"data.source=wds:{copy}"]) == 2
    line = one_error_line(capsys.readouterr().err, "train")
    assert f"{copy / 'dataset.json'}: not a vitkit shard index" in line and message in line, line
    assert not (tmp_path / "run").exists()


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    tar.addfile(member, io.BytesIO(data))


def sparse_member(file, name: str, size: int) -> None:
    """A tar member of `size` zero bytes that takes no disk space: its header, then a hole."""
    member = tarfile.TarInfo(name)
    member.size = size
    file.write(member.tobuf(format=tarfile.USTAR_FORMAT))
    file.seek(size + (-size % tarfile.BLOCKSIZE), 1)


def test_labels_are_ascii_digits_and_large_members_are_not_read(tmp_path, capsys) -> None:
    png = io.BytesIO()
    Image.new("L", (28, 28), 90).save(png, "png")
    path = tmp_path / "train-000000.tar"
    with open(path, "wb") as file:
        with tarfile.open(fileobj=file, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for key, label in (("0", "0"), ("1", "\u0662"), ("2", "0_1"), ("3", " 1\n")):
                add_member(tar, f"{key}.png", png.getvalue())
                add_member(tar, f"{key}.cls", label.encode())
            file.seek(0, 2)
            sparse_member(file, "3.extra", 2**30)  # nobody's: skipped by the stream, never in memory
            sparse_member(file, "4.png", 2**30)  # above the byte limit: refused from its header
            add_member(tar, "4.cls", b"0")
    shard = {"shards": [{"name": path.name, "images": 5}]}
    index = {"classes": ["a", "b"], "splits": {"train": shard, "test": shard}}
    (tmp_path / "dataset.json").write_text(json.dumps(index))
    source = ShardSource(tmp_path, "train")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    samples = list(source.samples(0))
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak) * 1024 < 200 * 2**20
    assert [label for *_, label in samples] == [0, None, None, 1, 0]
    assert str(samples[4][2]).endswith("4.png: 1,073,741,824 bytes is above the limit of 357,913,940 for an "
                                       "image file (raise it with VITKIT_MAX_IMAGE_BYTES)")  # fmt: skip
    assert cli.main(["data", "info", f"wds:{tmp_path}", "--check"]) == 1
    listed = [line.strip() for line in capsys.readouterr().out.splitlines() if "train-000000.tar:" in line]
    expected = [":/1: image or label missing", ":/2: image or label missing", ":4.png: 1,073,741,824 bytes"]
    assert len(listed) == 6 and all(want in line for line, want in zip(listed, expected * 2, strict=True)), (
        listed
    )


# ------------------------------------------------------------------------------------------------- pack


def test_an_interrupted_pack_is_named_so_and_a_full_disk_names_the_file(
    tmp_path, capsys, monkeypatch
) -> None:
    images = grey_folder(tmp_path / "images")
    out = tmp_path / "packed"

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "addfile", disk_full)
    assert cli.main(["data", "pack", str(images), "--out", str(out)]) == 1
    line = one_error_line(capsys.readouterr().err, "data")
    assert f"{out / 'train-000000.tar'}: no space left on device" in line, line
    monkeypatch.undo()
    assert (out / INCOMPLETE_NAME).exists()  # as a pack killed at any moment leaves it
    assert cli.main(["data", "pack", str(images), "--out", str(out)]) == 2
    line = one_error_line(capsys.readouterr().err, "data")
    assert "left by an interrupted `vitkit data pack`" in line and f"`rm -r {out}`" in line, line
    shutil.rmtree(out)
    assert cli.main(["data", "pack", str(images), "--out", str(out)]) == 0
    assert not (out / INCOMPLETE_NAME).exists() and (out / "dataset.json").is_file()
