"""Shards in object storage or behind HTTP: s3://, gs://, https:// and any other URL fsspec knows.

fsspec is the one interface timm, webdataset, datasets and pandas read remote files through; its s3fs and gcsfs
back-ends take credentials and endpoints where each store's own tools look for them: for S3 the environment
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_ENDPOINT_URL for an on-premises store) and the
~/.aws profile files, for GCS the application default credentials. vitkit passes none of its own, so none is ever
in a config file, a run directory or a message; a URL that carries a password is refused for the same reason.

A shard is fetched whole, front to back in byte ranges, into an unnamed local temporary file, which the tar reader
then reads as it reads a local shard (ReadAhead fetches the next shard of a stream meanwhile, so the network is not
on a step's path). Every shard is known by the size and ETag it had when its split was indexed: a shard whose size
or ETag differs when it is fetched, or whose bytes come back fewer, is an error, never a shard read short. A
transient fault (a reset connection, a 5xx answer, a read that stalls for `Patience.stall` seconds) is retried
from the byte it stopped at, with exponential backoff, for at most `Patience.total` seconds; then one line names
the shard and its URL.
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

CHUNK_BYTES = 16 << 20  # one ranged read
_PROTOCOL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]+)://")  # fsspec's form; one letter would be a drive
_VERSION_KEYS = ("ETag", "etag", "generation", "md5Hash", "mtime")  # what identifies an object's content


@dataclass(frozen=True)
class Patience:
    """How long a fetch waits: `stall` seconds for any one read, `total` seconds of retries for a shard."""

    total: float = 120.0
    stall: float = 30.0
    first_backoff: float = 0.5
    max_backoff: float = 8.0


PATIENCE = Patience()


@dataclass(frozen=True)
class RemoteShard:
    """A shard at a URL, with the size and ETag (or the store's like tag; '' if it has none) it was indexed at."""

    url: str
    size: int
    etag: str

    @property
    def name(self) -> str:
        return posixpath.basename(self.url.rstrip("/"))

    @property
    def stem(self) -> str:
        return self.name.rpartition(".")[0] or self.name

    def __str__(self) -> str:
        return self.url


def is_url(location: str) -> bool:
    """Whether `location` is a URL (PROTOCOL://...) other than a local file's."""
    match = _PROTOCOL.match(location)
    return match is not None and match[1].lower() not in ("file", "local")


def join(url: str, *names: str) -> str:
    return "/".join([url.rstrip("/"), *names])


def filesystem(url: str, patience: Patience | None = None) -> tuple[Any, str]:
    """(fsspec filesystem, path within it) of `url`, its reads bounded by `patience.stall`; credentials are the
    store's own (environment, profiles), and a password in the URL is refused (it would be written to config.toml)."""
    parts = urlsplit(url)
    if parts.password is not None:
        safe = parts._replace(netloc=parts.hostname or "").geturl()
        raise ValueError(
            f"{safe}: a URL with a password is refused (data.source is written to config.toml); give credentials "
            "in the environment or the store's profile files"
        )
    protocol = url.partition("://")[0].lower()
    try:
        import fsspec  # optional: the remote extra

        return fsspec.core.url_to_fs(url, **_timeouts(protocol, (patience or PATIENCE).stall))
    except ImportError as err:
        raise ValueError(
            f"{url}: reading {protocol}:// needs `pip install vitkit[remote]` (fsspec, s3fs; gcsfs for gs://): "
            f"{one_line(err)}"
        ) from None


def _timeouts(protocol: str, stall: float) -> dict[str, Any]:
    """The back-end's options that make a connection or a read that stalls an error after `stall` seconds."""
    if protocol in ("http", "https"):
        import aiohttp  # fsspec's HTTP back-end is aiohttp

        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(sock_connect=stall, sock_read=stall)}}
    if protocol in ("s3", "s3a"):
        return {"config_kwargs": {"connect_timeout": stall, "read_timeout": stall}}
    return {}


def describe(fs: Any, path: str, info: dict[str, Any]) -> RemoteShard:
    """The RemoteShard of a listing's or HEAD's `info` about `path`."""
    version = next((str(info[key]) for key in _VERSION_KEYS if info.get(key)), "")
    return RemoteShard(fs.unstrip_protocol(path), int(info.get("size") or 0), version)


@contextlib.contextmanager
def naming(url: str) -> Iterator[None]:
    """A back-end's error while listing or asking about `url` (no connection, no permission) as one line naming
    it; FileNotFoundError passes as it is."""
    try:
        yield
    except (FileNotFoundError, ValueError):
        raise
    except Exception as err:  # noqa: BLE001  # aiohttp, botocore, google-auth: their own classes
        raise ValueError(f"{url}: {one_line(err) or type(err).__name__}") from None


def stat(url: str) -> RemoteShard:
    """The shard at `url` as it is now; FileNotFoundError naming the URL when there is none."""
    fs, path = filesystem(url)
    try:
        with naming(url):
            return current(fs, path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{url}: no such file") from None


def read_bytes(url: str) -> bytes | None:
    """A small file's bytes (dataset.json), None when there is none."""
    fs, path = filesystem(url)
    try:
        with naming(url):
            return fs.cat_file(path)
    except (FileNotFoundError, IsADirectoryError):
        return None


def tars_in(url: str) -> list[RemoteShard]:
    """The .tar files directly in the directory `url`, by name; none when it lists nothing."""
    fs, path = filesystem(url)
    fs.invalidate_cache(path)  # a listing made before may be out of date
    try:
        with naming(url):
            entries = fs.ls(path, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        (
            describe(fs, e["name"], e)
            for e in entries
            if e.get("type") == "file" and e["name"].endswith(".tar")
        ),
        key=lambda shard: shard.url,
    )


def existing(urls: Iterable[str]) -> list[RemoteShard]:
    """The files among `urls` (wildcards expanded by the store's listing), in order, without repeats. A
    directory listed once serves all its names; a store that lists nothing (plain HTTP) is asked per name."""
    found: dict[str, RemoteShard] = {}
    listed: dict[str, dict[str, RemoteShard]] = {}
    for url in urls:
        fs, path = filesystem(url)
        if any(c in path for c in "*?["):
            fs.invalidate_cache()
            with naming(url):
                matches = fs.glob(path, detail=True)
            for name in sorted(matches):
                if matches[name].get("type") == "file":
                    shard = describe(fs, name, matches[name])
                    found.setdefault(shard.url, shard)
            continue
        parent = url.rsplit("/", 1)[0]
        if parent not in listed:
            try:
                listed[parent] = {shard.url: shard for shard in tars_in(parent) if shard.size}
            except ValueError:  # a server that lists nothing: each name is asked about
                listed[parent] = {}
        known = listed[parent].get(url)
        if known is None:
            try:
                known = stat(url)
            except FileNotFoundError:
                continue
        found.setdefault(known.url, known)
    return list(found.values())


def fetch(
    shard: RemoteShard, patience: Patience | None = None, stop: threading.Event | None = None
) -> IO[bytes]:
    """The shard's bytes in a local temporary file (deleted when closed), at offset 0; a ValueError naming the
    shard and URL when it changed since it was indexed or could not be fetched within `patience.total`."""
    file = tempfile.TemporaryFile()
    try:
        _fetch_into(file, shard, patience or PATIENCE, stop)
    except BaseException:
        file.close()
        raise
    file.seek(0)
    return file


def _fetch_into(
    file: IO[bytes], shard: RemoteShard, patience: Patience, stop: threading.Event | None
) -> None:
    fs, path = filesystem(shard.url, patience)
    start = time.monotonic()
    offset, attempts, backoff, checked = 0, 0, patience.first_backoff, False
    while True:
        if stop is not None and stop.is_set():
            raise ValueError(f"{shard.url}: fetch stopped")
        try:
            if not checked:  # the shard as indexed, before a byte of it is used
                check_unchanged(shard, current(fs, path))
                checked = True
            while offset < shard.size:
                if stop is not None and stop.is_set():
                    raise ValueError(f"{shard.url}: fetch stopped")
                end = min(offset + CHUNK_BYTES, shard.size)
                data = fs.cat_file(path, start=offset, end=end)
                if len(data) != end - offset:
                    raise OSError(f"asked for bytes {offset}-{end - 1}, got {len(data)} bytes")
                file.write(data)
                offset = end
            check_unchanged(shard, current(fs, path))  # not replaced while it was read
            return
        except (ValueError, FileNotFoundError, PermissionError) as err:
            raise ValueError(one_line(err)) from None
        except Exception as err:  # noqa: BLE001  # a back-end's transient error: aiohttp, botocore, asyncio
            attempts += 1
            waited = time.monotonic() - start
            if waited + backoff > patience.total:
                raise ValueError(
                    f"shard {shard.name} ({shard.url}): not fetched after {attempts} tries in {waited:.1f} s, "
                    f"{offset} of {shard.size} bytes read ({one_line(err) or _silent(err, patience)})"
                ) from None
            time.sleep(backoff)
            backoff = min(backoff * 2, patience.max_backoff)


def _silent(err: BaseException, patience: Patience) -> str:
    """What an error without a message (a timeout) means."""
    if isinstance(err, TimeoutError):
        return f"no answer within {patience.stall:g} s"
    return type(err).__name__


def current(fs: Any, path: str) -> RemoteShard:
    """The shard at `path` as the store describes it now (not as a listing cached it)."""
    fs.invalidate_cache(path)
    info = fs.info(path)
    if info.get("type") == "directory":
        raise FileNotFoundError(f"{fs.unstrip_protocol(path)}: a directory, not a shard")
    return describe(fs, path, info)


def check_unchanged(indexed: RemoteShard, now: RemoteShard) -> None:
    """A ValueError when the shard's size or ETag is not what they were when its split was indexed."""
    if (now.size, now.etag) != (indexed.size, indexed.etag):
        raise ValueError(
            f"{indexed.url}: changed since its split was indexed (size {indexed.size} -> {now.size}, ETag "
            f"{indexed.etag or 'none'} -> {now.etag or 'none'}); a run reads its shards as they were when it "
            "started, so train on a copy that does not change"
        )


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


class ReadAhead:
    """The fetched files of `shards` in order, the next one fetched in a thread while the current one is read;
    each file is closed (and deleted) once the next is asked for, or when the iteration is closed."""

    def __init__(self, shards: list[RemoteShard], patience: Patience | None = None) -> None:
        self.shards, self.patience = shards, patience

    def __iter__(self) -> Iterator[IO[bytes]]:
        stop = threading.Event()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vitkit-shard-fetch")
        pending: Future[IO[bytes]] | None = None
        current: IO[bytes] | None = None
        try:
            for k in range(len(self.shards)):
                if pending is None:
                    pending = pool.submit(fetch, self.shards[k], self.patience, stop)
                ready = pending.result()
                pending = (
                    pool.submit(fetch, self.shards[k + 1], self.patience, stop)
                    if k + 1 < len(self.shards)
                    else None
                )
                if current is not None:
                    current.close()
                current = ready
                yield current
        finally:
            stop.set()
            if current is not None:
                current.close()
            if pending is not None:
                pending.add_done_callback(_close_result)
            pool.shutdown(wait=False)


def _close_result(future: Future[IO[bytes]]) -> None:
    if future.exception() is None:
        future.result().close()


class RecentShard:
    """The last shard fetched for reading by position (evaluation), kept for the next range of the same shard."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.file: IO[bytes] | None = None

    def open(self, shard: RemoteShard) -> IO[bytes]:
        if self.url != shard.url or self.file is None:
            if self.file is not None:
                self.file.close()
            self.file, self.url = None, None  # a failed fetch leaves nothing half-kept
            self.file, self.url = fetch(shard), shard.url
        self.file.seek(0)
        return self.file

    def __getstate__(self) -> dict[str, Any]:
        return {"url": None, "file": None}  # a worker process fetches its own
