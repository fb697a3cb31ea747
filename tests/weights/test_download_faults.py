"""Downloads from a server that misbehaves: each fault ends in the right file or in one line, in bounded time, and
nothing wrong is ever cached as verified (a later call fetches again)."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
import torch

from vitkit import cli, create_model, export_npz
from vitkit.weights import cached_files, download

PATH = "/models/tiny.npz"


@pytest.fixture
def versions(tmp_path) -> tuple[bytes, bytes]:
    """Two versions of one file, of the same size: the same model with other weights."""
    found = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = create_model(
            "ViT-Mini/4", img_size=28, num_classes=5, activation="gelu_tanh", layer_norm_eps=1e-6
        )
        found.append(export_npz(model, tmp_path / f"v{seed}.npz").read_bytes())
    assert len(found[0]) == len(found[1]) and found[0] != found[1]
    return found[0], found[1]


def nothing_cached(url: str) -> bool:
    target = cached_files.cache_path(url)
    files = [
        target,
        cached_files.meta_path(target),
        cached_files.part_path(target),
        cached_files.resume_path(target),
    ]
    return not any(f.exists() for f in files)


def test_a_drop_then_another_version_gives_the_new_file_whole(file_server, versions):
    old, new = versions
    file_server.files[PATH] = old
    file_server.drop_once.add(PATH)
    file_server.then_serve[PATH] = new  # the If-Range of the resume no longer matches: a 200 of the new file
    assert download.fetch(file_server.url(PATH), progress=False).read_bytes() == new


def test_a_206_of_another_version_or_range_starts_over(file_server, versions):
    """A server that ignores If-Range (its reply's ETag is the new one), and one that answers a Range request
    with other bytes than those asked: either reply is dropped and the file fetched from byte 0."""
    old, new = versions
    file_server.if_range = False
    file_server.files[PATH] = old
    file_server.drop_once.add(PATH)
    file_server.then_serve[PATH] = new
    assert download.fetch(file_server.url(PATH), progress=False).read_bytes() == new
    assert [r for _, r in file_server.requests] == [None, f"bytes={len(old) // 2}-", None]
    other = "/models/ranged.npz"
    file_server.files[other] = old
    file_server.drop_once.add(other)
    file_server.wrong_range.add(other)
    assert download.fetch(file_server.url(other), progress=False).read_bytes() == old
    assert [r for _, r in file_server.requests[3:]] == [None, f"bytes={len(old) // 2}-", None]


@pytest.mark.parametrize("fault", ["no_length", "html"])
def test_a_short_body_without_length_or_an_html_page_is_one_line_and_not_cached(
    file_server, versions, fault, capsys
):
    file_server.files[PATH] = versions[0]
    getattr(file_server, fault).add(PATH)
    url = file_server.url(PATH)
    assert cli.main(["weights", "get", "--quiet", url]) in (1, 2)
    err = capsys.readouterr().err.strip()
    expected = "not cached: the file received is a truncated" if fault == "no_length" else "an HTML page"
    assert "\n" not in err and url in err and expected in err, err
    assert nothing_cached(url)
    getattr(file_server, fault).discard(PATH)  # the server mended: the next call fetches the file
    assert download.fetch(url, progress=False).read_bytes() == versions[0]


def test_a_trickling_server_fails_in_bounded_time_and_the_part_resumes(
    file_server, versions, monkeypatch, capsys
):
    """1 byte every 10 ms passes every per-read timeout but not the minimum throughput; the bar shows the bytes."""
    data = versions[0]
    file_server.files[PATH] = data
    file_server.trickle_s = 0.01
    monkeypatch.setenv(download.TIMEOUT_ENV, "0.5")
    url = file_server.url(PATH)
    began = time.monotonic()
    assert cli.main(["weights", "get", url]) == 1
    assert time.monotonic() - began < 5
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    part = cached_files.part_path(cached_files.cache_path(url))
    assert (
        last.startswith(f"vitkit weights: error: {url}: transfer stopped (")
        and "under the minimum of" in last
    )
    assert f"bytes kept in {part}: run again to resume" in last and part.is_file()
    assert "tiny.npz:" in err  # the progress bar moved with the trickle
    kept = part.stat().st_size
    file_server.trickle_s = 0
    assert download.fetch(url, progress=False).read_bytes() == data
    assert file_server.requests[-1] == (PATH, f"bytes={kept}-")


def test_the_overall_deadline_ends_a_steady_but_endless_transfer(file_server, versions, monkeypatch):
    file_server.files[PATH] = versions[0]
    file_server.trickle_s, file_server.trickle_bytes = 0.02, 8192  # ~400 kB/s: ~3 s for the file
    monkeypatch.setenv(download.DEADLINE_ENV, "0.5")
    began = time.monotonic()
    with pytest.raises(ConnectionError, match=rf"not done within 0.5 s \({download.DEADLINE_ENV}\)"):
        download.fetch(file_server.url(PATH), progress=False)
    assert time.monotonic() - began < 3 and not cached_files.is_verified(
        cached_files.cache_path(file_server.url(PATH))
    )


@pytest.mark.parametrize("etags", [True, False], ids=["versioned", "unversioned"])
def test_after_a_stall_the_error_tells_the_truth_about_the_part(file_server, versions, monkeypatch, etags):
    data = versions[0]
    file_server.files[PATH] = data
    file_server.etags = etags
    file_server.stall_s = 3
    file_server.delay_s = 0  # the first request stalls halfway; the resume in the same call stalls at once
    file_server.stall_once.add(PATH)
    monkeypatch.setenv(download.TIMEOUT_ENV, "0.3")
    url = file_server.url(PATH)
    part = cached_files.part_path(cached_files.cache_path(url))
    monkeypatch.setattr(download, "MAX_ATTEMPTS", 1)
    with pytest.raises(ConnectionError) as error:
        download.fetch(url, progress=False)
    message = str(error.value)
    assert "no byte for 0.3 s" in message
    if etags:
        assert (
            message.endswith(f"{len(data) // 2} bytes kept in {part}: run again to resume") and part.is_file()
        )
    else:
        assert message.endswith("nothing kept: run again to start over") and not part.exists()
    assert not cached_files.cache_path(url).exists()


def test_a_stall_with_bytes_before_it_resumes_in_the_same_call(file_server, versions, monkeypatch, capsys):
    file_server.files[PATH] = versions[0]
    file_server.stall_s = 3
    file_server.stall_once.add(PATH)
    monkeypatch.setenv(download.TIMEOUT_ENV, "0.3")
    assert download.fetch(file_server.url(PATH), progress=False).read_bytes() == versions[0]
    assert f"resuming at byte {len(versions[0]) // 2}" in capsys.readouterr().err


class _FillingFile(io.FileIO):
    """A file on a disk with `room` bytes left: a write past them fails as a full disk does."""

    room = 100_000

    def write(self, data) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def test_a_full_disk_is_named_and_the_part_removed(file_server, versions, monkeypatch, capsys):
    file_server.files[PATH] = versions[0]
    monkeypatch.setattr(download, "open", lambda path, mode: _FillingFile(path, mode), raising=False)
    url = file_server.url(PATH)
    assert cli.main(["weights", "get", "--quiet", url]) == 1
    err = capsys.readouterr().err.strip()
    target = cached_files.cache_path(url)
    assert (
        err.startswith("vitkit weights: error: no space left on ")
        and f"writing {target} (downloading {url}" in err
    )
    assert "\n" not in err and nothing_cached(url)


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan"])
def test_a_bad_timeout_is_one_line_naming_the_variable(file_server, monkeypatch, capsys, value):
    monkeypatch.setenv(download.TIMEOUT_ENV, value)
    assert cli.main(["weights", "get", file_server.url(PATH)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"vitkit weights: error: {download.TIMEOUT_ENV}={value!r}: expected a positive number of seconds"
    )
    assert file_server.requests == []


def test_credentials_are_sent_but_never_written_or_shown(file_server, versions, capsys):
    file_server.files[PATH] = versions[0]
    url = file_server.url(PATH).replace("http://", "http://alice:s3cret@")
    path = download.fetch(url, progress=False)
    assert file_server.headers_seen[0]["Authorization"] == "Basic YWxpY2U6czNjcmV0"
    assert path == cached_files.cache_path(file_server.url(PATH))
    written = " ".join(
        str(p) + p.read_text(errors="replace") for p in path.parent.iterdir() if p.suffix == ".json"
    )
    assert "s3cret" not in str(path) and "alice" not in written and "s3cret" not in written
    missing = url.replace("tiny", "none")
    assert cli.main(["weights", "get", missing]) == 2
    err = capsys.readouterr().err
    assert "s3cret" not in err and "alice" not in err and "/models/none.npz: HTTP 404" in err


def test_a_mirror_with_credentials_shows_none(file_server, versions, monkeypatch, capsys):
    file_server.files["/m/imagenet21k/ViT-B_16.npz"] = versions[0]  # not a ViT-B/16: refused, naming the URL
    monkeypatch.setenv(
        "VITKIT_WEIGHTS_BASE_URL", file_server.url("/m").replace("http://", "http://alice:s3cret@")
    )
    assert cli.main(["weights", "get", "--quiet", "ViT-B/16-i21k"]) == 2
    assert cli.main(["weights", "list", "ViT-B/16-i21k"]) == 0
    err = capsys.readouterr().err
    assert file_server.url("/m/imagenet21k/ViT-B_16.npz: not cached") in err and "s3cret" not in err
    assert f"files from {file_server.url('/m')}" in err and "alice" not in err


def test_cache_paths_follow_rfc3986_equivalence():
    same = [
        "http://Example.COM:80/w/a/b.npz",
        "http://example.com/w/./a/b.npz",
        "http://example.com/w/x/../a/b.npz",
        "http://example.com/w/%61/b.npz",  # an escaped unreserved character
        "http://user:pw@example.com/w/a/b.npz#part",
        "https://example.com:443/w/a/b.npz",  # one host's http and https are taken for one server
    ]
    assert len({cached_files.cache_path(u) for u in same}) == 1
    distinct = [
        "http://example.com/w/a/b.npz",
        "http://example.com/w/a%2Fb.npz",  # a slash inside one segment
        "http://example.com/w/a%252Fb.npz",  # a percent sign, then 2F
        "http://example.com/w/a//b.npz",
        "http://example.com:8080/w/a/b.npz",
        "http://example.com/w/a/b.npz?v=2",
    ]
    assert len({cached_files.cache_path(u) for u in distinct}) == len(distinct)
    assert cached_files.cache_path("http://example.com/w/a%2fb.npz") == cached_files.cache_path(distinct[1])


def test_a_slash_and_its_escape_are_two_files(file_server, versions):
    file_server.files["/w/a/b.npz"], file_server.files["/w/a%2Fb.npz"] = versions
    assert download.fetch(file_server.url("/w/a/b.npz"), progress=False).read_bytes() == versions[0]
    assert download.fetch(file_server.url("/w/a%2Fb.npz"), progress=False).read_bytes() == versions[1]
    assert download.fetch(file_server.url("/w/./a/b.npz"), progress=False).read_bytes() == versions[0]
    assert len(file_server.requests) == 2  # the third is the first's file


def test_a_hub_id_without_network_fails_at_once(tmp_path, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    from vitkit import load_weights

    began = time.monotonic()
    with pytest.raises(FileNotFoundError, match=r"^hf-hub:timm/absent: not in the Hugging Face cache and "
                       r"http://127.0.0.1:9 cannot be reached \(Connection refused\)$"):  # fmt: skip
        load_weights("hf-hub:timm/absent")
    assert time.monotonic() - began < 3


@pytest.mark.slow
def test_a_full_tmpfs_is_named_and_left_empty(file_server, tmp_path):
    """The same on a real 1 MiB tmpfs, mounted in a user namespace where the system allows one."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("no user namespaces here to mount a small tmpfs in")
    file_server.files["/big.npz"] = os.urandom(3 << 20)
    url, mount = file_server.url("/big.npz"), tmp_path / "small"
    mount.mkdir()
    script = (
        f"mount -t tmpfs -o size=1m tmpfs {mount} && VITKIT_CACHE={mount} {sys.executable} -m vitkit.cli "
        f"weights get --quiet {url}; echo exit $?; find {mount} -type f"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=50)
    assert done.stdout.strip() == "exit 1", done.stdout  # nothing left on the disk
    assert done.stderr.strip().startswith(f"vitkit weights: error: no space left on tmpfs ({mount}) writing ")


def test_an_error_page_recorded_by_an_earlier_version_is_fetched_again(file_server, versions, capsys):
    """A record without `parsed` (written before files were parsed) gets its file parsed once on next use."""
    file_server.files[PATH] = versions[0]
    url = file_server.url(PATH)
    target = cached_files.cache_path(url)
    target.parent.mkdir(parents=True, exist_ok=True)
    page = b"<html>Service unavailable</html>"
    target.write_bytes(page)
    record = {"url": url, "size": len(page), "sha256": hashlib.sha256(page).hexdigest()}
    cached_files.meta_path(target).write_text(json.dumps(record))
    assert download.fetch(url, progress=False).read_bytes() == versions[0]
    assert (
        "tiny.npz: is an HTML or XML page, not a weights file; fetching it again" in capsys.readouterr().err
    )
    assert json.loads(cached_files.meta_path(target).read_text())["parsed"] is True
    assert cached_files.is_verified(target) and len(file_server.requests) == 1
