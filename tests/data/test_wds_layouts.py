"""`wds:` reads shards as the `webdataset` library's ShardWriter writes them, with no dataset.json: a directory per
split, split names in the file names, brace patterns; counts and classes come from one pass, kept in the cache."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from image_collections import take_steps, write_small_shards
from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.data import ShardSource, TrainTransform, open_source, shard_index

wds = pytest.importorskip("webdataset")

TRANSFORM = TrainTransform(16, crop="inception", seed=0, in_chans=3)


def png(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (20, 24, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def write_split(pattern: str, count: int, per_shard: int = 5, first: int = 0) -> list[int]:
    """`count` samples through webdataset.ShardWriter (`pattern` has a %d for the shard number); their labels."""
    labels = [(first + i) % 3 for i in range(count)]
    with wds.ShardWriter(pattern, maxcount=per_shard, verbose=0) as sink:
        for i, label in enumerate(labels):
            sink.write({"__key__": f"sample{first + i:05d}", "png": png(first + i), "cls": label})
    return labels


def labels_read(source: ShardSource) -> list[int]:
    return [label for shard in range(len(source.paths)) for _, _, _, label in source.samples(shard)]


def test_a_directory_per_split(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "val").mkdir()
    train_labels = write_split(str(tmp_path / "train" / "shard-%04d.tar"), 12)
    val_labels = write_split(str(tmp_path / "val" / "shard-%04d.tar"), 6, first=100)
    train = open_source(f"wds:{tmp_path}", "train")
    assert isinstance(train, ShardSource) and len(train) == 12 and train.counts.tolist() == [5, 5, 2]
    assert train.classes == ["0", "1", "2"] and labels_read(train) == train_labels
    test = open_source(f"wds:{tmp_path}", "test")
    assert test.split == "val" and len(test) == 6 and labels_read(test) == val_labels
    batches = take_steps(train, TRANSFORM, stop=2, batch_size=4)
    assert [b.images.shape for b in batches] == [(4, 3, 16, 16)] * 2


def test_split_names_in_file_names_and_brace_patterns(tmp_path):
    write_split(str(tmp_path / "data-train-%04d.tar"), 10)
    write_split(str(tmp_path / "data-validation-%04d.tar"), 5, first=50)
    by_directory = ShardSource(tmp_path, "test")
    assert by_directory.split == "validation" and len(by_directory) == 5
    train = ShardSource(str(tmp_path / "data-train-{0000..0001}.tar"), "train")
    assert len(train) == 10 and [p.name for p in train.paths] == [
        "data-train-0000.tar",
        "data-train-0001.tar",
    ]
    evaluation = ShardSource(str(tmp_path / "data-train-{0000..0001}.tar"), "test")  # train -> validation
    assert evaluation.split == "validation" and [p.name for p in evaluation.paths] == [
        "data-validation-0000.tar"
    ]
    placeholder = open_source(f"wds:{tmp_path}/data-{{split}}-*.tar", "train")  # data.source as written
    assert isinstance(placeholder, ShardSource) and placeholder.paths == train.paths
    only_first = ShardSource(str(tmp_path / "data-train-{0000,0000}.tar"), "train")
    assert len(only_first) == 5
    write_split(str(tmp_path / "plain-%04d.tar"), 3)  # a pattern without a split name: the training split
    assert len(ShardSource(str(tmp_path / "plain-{0000..0000}.tar"), "train")) == 3
    with pytest.raises(FileNotFoundError, match=r"plain-\{0000..0000\}.tar: no test split \(found train\)"):
        ShardSource(str(tmp_path / "plain-{0000..0000}.tar"), "test")


def test_counts_are_found_once_and_again_when_a_shard_changes(tmp_path, monkeypatch):
    (tmp_path / "train").mkdir()
    write_split(str(tmp_path / "train" / "shard-%04d.tar"), 7)
    scanned = []
    real = shard_index.scan_shard
    monkeypatch.setattr(shard_index, "scan_shard", lambda path: scanned.append(path.name) or real(path))
    assert len(ShardSource(tmp_path, "train")) == 7 and scanned == ["shard-0000.tar", "shard-0001.tar"]
    assert len(ShardSource(tmp_path, "train")) == 7 and len(scanned) == 2  # from the cache
    write_split(str(tmp_path / "train" / "shard-%04d.tar"), 9)  # rewritten: other sizes and times
    stamp = 2_000_000_000
    for path in (tmp_path / "train").iterdir():
        os.utime(path, (stamp, stamp))
    assert len(ShardSource(tmp_path, "train")) == 9 and len(scanned) == 4


def test_shards_without_labels_or_anything_are_one_line(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no WebDataset shards: expected dataset.json"):
        ShardSource(tmp_path, "train")
    (tmp_path / "train").mkdir()
    with wds.ShardWriter(str(tmp_path / "train" / "shard-%04d.tar"), maxcount=5, verbose=0) as sink:
        sink.write({"__key__": "a", "png": png(0)})
    with pytest.raises(ValueError, match=r"no \.cls labels in the shards"):
        ShardSource(tmp_path, "train")


def test_brace_ranges_keep_their_zero_padding(tmp_path):
    for name in ("s-08.tar", "s-09.tar", "s-10.tar"):
        Path(tmp_path / name).write_bytes(b"")
    assert [p.name for p in shard_index.expand(str(tmp_path / "s-{08..10}.tar")).files] == [
        "s-08.tar",
        "s-09.tar",
        "s-10.tar",
    ]


@pytest.fixture
def partial_shards(tmp_path):
    """6 of the 12 training shards and 3 of the 4 test shards of write_small_shards, without dataset.json."""
    root = write_small_shards(tmp_path)
    for name in [f"train-{k:06d}.tar" for k in range(6, 12)] + ["test-000003.tar", "dataset.json"]:
        (root / name).unlink()
    return root


def test_a_name_a_pattern_spells_that_names_no_file_is_an_error_naming_it(partial_shards, capsys, tmp_path):
    pattern = f"{partial_shards}/{{split}}-{{000000..000009}}.tar"
    spelled = f"{partial_shards}/train-{{000000..000009}}.tar"
    message = (
        f"{partial_shards}/train-000006.tar: missing shard (4 of the 10 names {spelled} spells are missing)"
    )
    for args in (
        ["data", "info", f"wds:{pattern}"],
        ["train", "--out", str(tmp_path / "run"), "--steps", "5", *TINY_RECIPE, f"data.source=wds:{pattern}"],
    ):
        assert cli.main(args) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.rstrip().endswith(message), error
    assert not (tmp_path / "run").exists()
    with pytest.raises(FileNotFoundError, match=r"test-000003.tar: missing shard \(3 of the 6 names "):
        ShardSource(f"{partial_shards}/{{split}}-{{000000..000005}}.tar", "train")  # test: 3 of 6 missing
    with pytest.raises(FileNotFoundError, match=r"train-000007.tar: missing shard \(1 of the 2 names "):
        ShardSource(f"{partial_shards}/train-{{000000,000007}}.tar", "train")
    with pytest.raises(FileNotFoundError, match=r"/nothing-\*.tar: matches no file$"):
        ShardSource(f"{partial_shards}/nothing-*.tar", "train")
    with pytest.raises(FileNotFoundError, match=r"/train-9\*.tar: matches no file \(2 of the 2 names"):
        ShardSource(f"{partial_shards}/{{train,val}}-9*.tar", "train")
    # the names that exist, all of them: read as before; an evaluation split made by replacing `train` takes
    # what exists (test-{000000..000005}: 3 of 6)
    assert len(ShardSource(f"{partial_shards}/train-{{000000..000005}}.tar", "train")) == 30
    assert len(ShardSource(f"{partial_shards}/train-{{000000..000005}}.tar", "test")) == 15
