"""Shards behind an HTTP server that injects faults (on 127.0.0.1): a reset, a 503, a stalled read or a short body
is retried from the byte it stopped at and nothing is lost; a fault that persists fails in one line naming the
shard and its URL within the bounded wait; a shard truncated or changed on the server is detected, never read
short; and a stream through such faults yields the batches of the same shards on local disk."""

from __future__ import annotations

import itertools
import time

import pytest
import torch
from object_store import SECRET, faulty_http, files_of

from image_collections import take_steps, write_small_shards
from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.data import ShardSource, TrainTransform, open_source, remote
from vitkit.data.read_ahead import ReadAhead
from vitkit.data.remote import Patience, fetch, stat

TRANSFORM = TrainTransform(24, crop="inception", seed=2, in_chans=3)
# Bounds the tests' waits; a healthy read on a loaded machine stays well inside `stall` (an extra GET breaks counts).
QUICK = Patience(total=1.5, stall=0.5, first_backoff=0.05, max_backoff=0.2)
NAME = "train-000000.tar"
FAULTS = ["reset", "503", "stall", "short"]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    return write_small_shards(root)


@pytest.fixture
def served(local):
    with faulty_http(stall_seconds=2 * QUICK.stall) as server:
        server.files = files_of(local)
        yield server


@pytest.mark.parametrize("fault", FAULTS)
def test_a_transient_fault_is_retried_and_nothing_is_lost(served, local, fault):
    served.faults[NAME] = iter([fault, fault])  # two GETs fail, the third is served
    shard = stat(f"{served.url}/{NAME}")
    with fetch(shard, QUICK) as file:
        assert file.read() == (local / NAME).read_bytes()
    assert served.gets.count(NAME) == 3


def test_a_half_sending_server_is_resumed_from_the_byte_reached(served, local):
    """Each cut body keeps what arrived: the retries ask `Range: bytes=<reached>-`, and the shard is whole once
    the server sends the rest."""
    served.faults[NAME] = iter(["short"] * 4)  # half of what is asked, four times; then all of it
    shard = stat(f"{served.url}/{NAME}")
    with fetch(shard, QUICK) as file:
        assert file.read() == (local / NAME).read_bytes()
    reached = [0, shard.size // 2, shard.size * 3 // 4, shard.size * 7 // 8, shard.size * 15 // 16]
    assert served.ranges == [f"bytes={r}-" for r in reached]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_that_persists_fails_in_one_line_within_the_bounded_wait(served, fault):
    served.faults[NAME] = itertools.repeat(fault)
    url = f"{served.url}/{NAME}"
    shard = stat(url)
    start = time.monotonic()
    with pytest.raises(ValueError) as error:
        fetch(shard, QUICK)
    assert time.monotonic() - start < QUICK.total + QUICK.stall + 1
    message = str(error.value)
    assert message.startswith(f"shard {NAME} ({url}): not fetched after ") and "\n" not in message
    if fault == "short":  # halves of what is asked until one byte is left, which never comes
        assert served.ranges[-1] == f"bytes={shard.size - 1}-"
        assert f"not fetched after {len(served.ranges)} tries in " in message
        assert f", {shard.size - 1} of {shard.size} bytes read, none in the last " in message
    else:
        assert f", 0 of {shard.size} bytes read" in message


def test_a_shard_truncated_or_changed_on_the_server_is_detected(served):
    url = f"{served.url}/{NAME}"
    shard = stat(url)
    original = served.files[NAME]
    served.files[NAME] = original[: len(original) // 2]
    with pytest.raises(
        ValueError, match=rf"{NAME}: changed since its split was indexed \(size {shard.size} -> "
    ):
        fetch(shard, QUICK)
    served.files[NAME] = original[:-1] + b"\x01"  # same size, other bytes: another ETag
    with pytest.raises(ValueError, match=r"changed since its split was indexed .*ETag"):
        fetch(shard, QUICK)


def test_a_stream_through_faults_reads_the_batches_of_local_disk(served, local, monkeypatch):
    monkeypatch.setattr(remote, "PATIENCE", QUICK)
    for k, fault in enumerate(FAULTS):
        served.faults[f"train-{k:06d}.tar"] = iter([fault])
    through_http = open_source(f"wds:{served.url}", "train")  # dataset.json, then a HEAD per shard
    assert [str(p) for p in through_http.paths] == [f"{served.url}/train-{k:06d}.tar" for k in range(12)]
    expected = take_steps(ShardSource(local, "train"), TRANSFORM, stop=6)
    for a, b in zip(take_steps(through_http, TRANSFORM, stop=6), expected, strict=True):
        assert not a.error, a.error
        assert torch.equal(a.indices, b.indices) and torch.equal(a.images, b.images)
    assert all(next(served.faults[f"train-{k:06d}.tar"], None) is None for k in range(4))  # every fault met


@pytest.mark.slow  # a dozen HEADs, then the bounded wait
def test_a_stream_that_cannot_fetch_a_shard_stops_in_one_line(served, monkeypatch):
    monkeypatch.setattr(remote, "PATIENCE", QUICK)
    through_http = ShardSource(f"{served.url}/train-{{000000..000011}}.tar", "train")  # a HEAD per name
    served.faults["train-000001.tar"] = itertools.repeat("503")
    with pytest.raises(ValueError, match=r"shard train-000001.tar \(http://127.0.0.1:\d+/train-000001.tar\)"):
        take_steps(through_http, TRANSFORM, stop=12)


def test_a_url_with_credentials_is_refused_without_echoing_them():
    for userinfo in (f"user:{SECRET}", SECRET):  # a token alone is a credential too
        with pytest.raises(ValueError, match="a URL that carries credentials is refused") as error:
            open_source(f"wds:https://{userinfo}@127.0.0.1:8443/x/train-{{0..1}}.tar", "train")
        assert str(error.value).startswith("https://127.0.0.1:8443/x/train-0.tar: ")  # the port kept
        assert SECRET not in str(error.value) and "user" not in str(error.value)


def test_the_next_shard_is_fetched_while_one_is_read(served, local):
    names = [f"train-{k:06d}.tar" for k in range(3)]
    files = iter(ReadAhead([stat(f"{served.url}/{name}") for name in names], QUICK))
    first = next(files)
    deadline = time.monotonic() + 10
    while names[1] not in served.gets and time.monotonic() < deadline:
        time.sleep(0.01)
    assert served.gets == names[:2]  # the next one, and not the one after it
    assert first.read() == (local / names[0]).read_bytes()
    second = next(files)
    assert first.closed and second.read() == (local / names[1]).read_bytes()
    files.close()  # the stream is done with: its files are closed (and so deleted)
    assert second.closed


def test_a_pattern_naming_a_missing_shard_over_http_is_exit_2_naming_it(served, capsys, tmp_path):
    del served.files["train-000004.tar"]
    pattern = f"{served.url}/{{split}}-{{000000..000011}}.tar"
    message = (
        f"{served.url}/train-000004.tar: missing shard (1 of the 12 names "
        f"{served.url}/train-{{000000..000011}}.tar spells are missing)"
    )
    for args in (
        ["data", "info", f"wds:{pattern}"],
        ["train", "--out", str(tmp_path / "run"), "--steps", "5", *TINY_RECIPE, f"data.source=wds:{pattern}"],
    ):
        assert cli.main(args) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.rstrip().endswith(message), error
    served.files["train-000004.tar"] = b"back"
    with pytest.raises(FileNotFoundError, match=r"/test-000004.tar: missing shard \(8 of the 12 names "):
        ShardSource(pattern, "train")  # the test split: 4 shards of the 12 the pattern spells


def test_every_remote_error_says_what_went_wrong(served):
    """403 is access denied, never a missing shard; a shard gone during a run no longer exists; each with its URL."""
    served.forbidden.add("train-000002.tar")
    with pytest.raises(
        ValueError, match=rf"^{served.url}/train-000002.tar: HTTP 403 Forbidden \(access denied"
    ):
        ShardSource(f"{served.url}/train-{{000000..000003}}.tar", "train")
    shard = stat(f"{served.url}/{NAME}")
    served.forbidden.add(NAME)
    with pytest.raises(
        ValueError, match=rf"^shard {NAME} \({shard.url}\): HTTP 403 Forbidden \(access denied"
    ):
        fetch(shard, QUICK)
    served.forbidden.discard(NAME)
    del served.files[NAME]
    with pytest.raises(ValueError, match=rf"^shard {NAME} \({shard.url}\): no longer exists \(it did when"):
        fetch(shard, QUICK)
    with pytest.raises(FileNotFoundError, match=rf"^{shard.url}: no such file$"):
        stat(shard.url)


def test_an_object_stores_403_and_404_are_told_apart():
    """s3fs turns botocore's errors into PermissionError / FileNotFoundError; the status behind them is said."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    def answered(status: int, code: str) -> BaseException:
        error = {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return translate_boto_error(ClientError(error, "HeadObject"))  # type: ignore[arg-type]

    url = "s3://bucket/shards/train-000000.tar"
    denied = remote.remote_error(url, answered(403, "AccessDenied"))
    assert isinstance(denied, ValueError) and str(denied) == (
        f"{url}: HTTP 403 Forbidden (access denied: check the credentials and the permissions of the bucket or "
        "server)"
    )
    missing = remote.remote_error(url, answered(404, "NoSuchKey"))
    assert isinstance(missing, FileNotFoundError) and str(missing) == f"{url}: no such file"
