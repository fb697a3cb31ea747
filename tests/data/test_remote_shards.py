"""`wds:` shards in an S3 bucket (moto's S3 server on 127.0.0.1, found through the standard AWS_* variables): the
batches are those of the same shards on local disk, bitwise, in every layout; the index pass is made once per
URL, size and ETag; a shard that changes under a run is an error, not a shard read short."""

from __future__ import annotations

import shutil

import fsspec
import pytest
import torch
from object_store import BUCKET, s3_server, upload

from image_collections import take_steps, write_small_shards
from vitkit import cli
from vitkit.data import ReadOptions, ShardSource, TrainTransform, eval_batches, open_source, shard_index
from vitkit.data.remote import RemoteShard

TRANSFORM = TrainTransform(24, crop="inception", seed=2, in_chans=3)
pytestmark = pytest.mark.slow  # a server process, shards over HTTP


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    return write_small_shards(root)


@pytest.fixture(scope="module")
def bucket(local):
    """The local shards in a bucket, as vitkit packs them and as a directory per split (no dataset.json)."""
    with s3_server():
        upload(local, f"s3://{BUCKET}/packed")
        plain = local.parent / "plain"
        for split in ("train", "test"):
            (plain / split).mkdir(parents=True)
            for path in local.glob(f"{split}-*.tar"):
                shutil.copy(path, plain / split / path.name)
        upload(plain, f"s3://{BUCKET}/plain")
        yield f"s3://{BUCKET}"


def assert_same_batches(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert not x.error and not y.error, (x.error, y.error)
        assert torch.equal(x.indices, y.indices) and torch.equal(x.images, y.images)


def test_batches_from_a_bucket_equal_those_from_local_disk(local, bucket):
    options = ReadOptions(workers=2)
    remote = open_source(f"wds:{bucket}/packed", "train", options=options)
    assert all(isinstance(p, RemoteShard) for p in remote.paths) and remote.counts.tolist() == [5] * 12
    here = ShardSource(local, "train", options)
    assert_same_batches(
        take_steps(remote, TRANSFORM, seed=2, stop=9), take_steps(here, TRANSFORM, seed=2, stop=9)
    )
    # a resume: the same batches from step 5 on
    assert_same_batches(
        take_steps(remote, TRANSFORM, seed=2, start=5, stop=9),
        take_steps(here, TRANSFORM, seed=2, start=5, stop=9),
    )
    test = open_source(f"wds:{bucket}/packed", "test", options=options)
    chunks = list(torch.arange(len(test)).split(7))
    read = list(eval_batches(test, chunks, (24, 24), 3, torch.device("cpu")))
    expected = list(eval_batches(ShardSource(local, "test"), chunks, (24, 24), 3, torch.device("cpu")))
    assert [b.indices.tolist() for b in read] == [b.indices.tolist() for b in expected]
    assert all(torch.equal(a.images, b.images) for a, b in zip(read, expected, strict=True))


def test_directory_per_split_and_brace_patterns(local, bucket):
    by_directory = ShardSource(f"{bucket}/plain", "train")
    assert [p.name for p in by_directory.paths] == sorted(p.name for p in local.glob("train-*.tar"))
    assert by_directory.counts.tolist() == [5] * 12
    assert by_directory.classes == ShardSource(local.parent / "plain", "train").classes
    test = ShardSource(f"{bucket}/plain", "test")
    assert test.split == "test" and len(test) == 20
    braces = ShardSource(f"{bucket}/plain/{{split}}/{{split}}-{{000000..000002}}.tar", "train")
    assert [p.name for p in braces.paths] == [f"train-{i:06d}.tar" for i in range(3)]
    assert len(ShardSource(f"{bucket}/plain/{{split}}/{{split}}-{{000000..000002}}.tar", "test")) == 15
    wildcard = ShardSource(f"{bucket}/plain/train/train-00000*.tar", "train")
    assert len(wildcard.paths) == 10
    assert_same_batches(
        take_steps(by_directory, TRANSFORM, stop=4),
        take_steps(ShardSource(local, "train"), TRANSFORM, stop=4),
    )


def test_the_index_pass_is_made_once_per_url_size_and_etag(local, bucket, monkeypatch):
    upload(local.parent / "plain" / "train", f"{bucket}/counted/train")
    scanned = []
    real = shard_index.scan_shard
    monkeypatch.setattr(shard_index, "scan_shard", lambda path: scanned.append(path.name) or real(path))
    assert len(ShardSource(f"{bucket}/counted", "train")) == 60 and len(scanned) == 12
    assert len(ShardSource(f"{bucket}/counted", "train")) == 60 and len(scanned) == 12  # from the cache
    changed = local.parent / "changed"
    changed.mkdir()
    shutil.copy(local / "train-000001.tar", changed / "train-000000.tar")  # other bytes, same size
    upload(changed, f"{bucket}/counted/train")
    assert len(ShardSource(f"{bucket}/counted", "train")) == 60 and len(scanned) == 24  # the ETag changed


def test_a_shard_changed_under_a_run_is_an_error(local, bucket, tmp_path):
    upload(local, f"{bucket}/changing")
    source = ShardSource(f"{bucket}/changing", "train")
    truncated = tmp_path / "short"
    truncated.mkdir()
    (truncated / "train-000003.tar").write_bytes((local / "train-000003.tar").read_bytes()[:2048])
    upload(truncated, f"{bucket}/changing")
    with pytest.raises(
        ValueError, match=r"train-000003.tar: changed since its split was indexed \(size 20480 -> 2048"
    ):
        list(source.samples(3))
    fsspec.filesystem("s3").rm(f"{BUCKET}/changing/train-000005.tar")
    with pytest.raises(
        FileNotFoundError, match=r"changing/train-000005.tar: missing shard \(1 of 12 missing\)"
    ):
        ShardSource(f"{bucket}/changing", "train")


def test_data_pack_writes_its_shards_to_a_bucket(local, bucket, capsys):
    folder = local.parent / "folder"
    out = f"{bucket}/by-pack"
    args = ["data", "pack", f"folder:{folder}", "--out", out, "--shard-images", "5", "--keep-order"]
    assert cli.main(args) == 0
    assert f"train on it with data.source=wds:{out}" in capsys.readouterr().out
    fs = fsspec.filesystem("s3")
    written = sorted(fs.ls(f"{BUCKET}/by-pack"))
    assert written == sorted(f"{BUCKET}/by-pack/{p.name}" for p in local.iterdir())  # no marker left
    for path in local.iterdir():
        assert fs.cat_file(f"{BUCKET}/by-pack/{path.name}") == path.read_bytes(), path.name
    assert cli.main(args) == 2  # not empty
    assert "by-pack: not empty; pack writes into a new or empty location" in capsys.readouterr().err
    assert cli.main([*args[:4], f"{bucket}/as-hf", "--format", "hf"]) == 2
    assert "a URL takes --format wds" in capsys.readouterr().err


def test_a_pattern_naming_a_missing_shard_in_a_bucket_is_exit_2_naming_it(bucket, capsys):
    for pattern, first, missing in (
        (f"{bucket}/packed/train-{{000000..000013}}.tar", "train-000012.tar", "2 of the 14"),
        (f"{bucket}/packed/{{split}}-{{000000..000011}}.tar", "test-000004.tar", "8 of the 12"),
        (f"{bucket}/packed/nothing-*.tar", "nothing-*.tar", None),
    ):
        assert cli.main(["data", "info", f"wds:{pattern}"]) == 2
        error = capsys.readouterr().err
        what = f"missing shard ({missing} names " if missing else "matches no file"
        assert error.count("\n") == 1 and f"{bucket}/packed/{first}: {what}" in error, error


def test_a_shard_deleted_during_a_run_no_longer_exists(local, bucket):
    upload(local, f"{bucket}/deleted")
    source = ShardSource(f"{bucket}/deleted", "train")
    fsspec.filesystem("s3").rm(f"{BUCKET}/deleted/train-000002.tar")
    with pytest.raises(ValueError) as error:
        list(source.samples(2))
    url = f"{bucket}/deleted/train-000002.tar"
    assert str(error.value).startswith(
        f"shard train-000002.tar ({url}): no longer exists (it did when its split"
    )
