"""Shards in object storage or behind HTTP: s3://, gs://, https:// and any other URL fsspec knows.

fsspec is the one interface timm, webdataset, datasets and pandas read remote files through; its s3fs and gcsfs
back-ends take credentials and endpoints where each store's own tools look for them: for S3 the environment
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_ENDPOINT_URL for an on-premises store) and the
~/.aws profile files, for GCS the application default credentials. vitkit passes none of its own, so none is ever
in a config file, a run directory or a message; a URL that carries a password is refused for the same reason.

A shard is fetched whole, front to back in byte ranges, into an unnamed local temporary file, which the tar reader
then reads as it reads a local shard (`read_ahead` fetches the next shard of a stream meanwhile, so the network is
not on a step's path). Every shard is known by the size and ETag it had when its split was indexed: a shard whose
size or ETag differs when it is fetched, or whose bytes come back fewer, is an error, never a shard read short. A
transient fault (a reset connection, a 5xx answer, a body cut short, a read that stalls for `Patience.stall`
seconds) is retried from the byte reached (over HTTP every byte that arrived is kept: the retry asks for `Range:
bytes=<reached>-`; from other stores whole CHUNK_BYTES ranges), with exponential backoff, until `Patience.total`
seconds pass without a byte arriving; then one line names the shard, its URL and how much arrived over how many
tries. Every other error names the URL and what went wrong: the HTTP status and its meaning (403: access denied,
404: no such file; a shard gone during a run: "no longer exists").
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

CHUNK_BYTES = 16 << 20  # one ranged read from a store other than HTTP
PIECE_BYTES = 1 << 20  # one read of an HTTP body as it streams in: what a cut body can lose at most
_STREAMED = ("http", "https")  # read as one streamed GET from the byte reached
_MEANING = {
    401: "not authorized: the server wants credentials (give them in the environment or profile files)",
    403: "access denied: check the credentials and the permissions of the bucket or server",
    404: "no such file",
    410: "no such file",
}
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
    store's own (environment, profiles), and a URL carrying them is refused (it would be written to config.toml),
    so no URL in a message carries any."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        safe = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))  # the port kept
        raise ValueError(
            f"{safe}: a URL that carries credentials is refused (data.source is written to config.toml); "
            "give credentials in the environment or the store's profile files"
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
    """A back-end's error while listing or asking about `url` as one line naming it and what went wrong
    (remote_error): a FileNotFoundError when there is no such file, a ValueError else."""
    try:
        yield
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001  # aiohttp, botocore, google-auth: their own classes
        raise remote_error(url, err) from None


def http_status(err: BaseException) -> int | None:
    """The HTTP status behind a back-end's error (aiohttp's, botocore's, through fsspec's and s3fs's own), if any."""
    seen: BaseException | None = err
    while seen is not None:
        status = getattr(seen, "status", None)  # aiohttp.ClientResponseError
        if isinstance(status, int):
            return status
        response = getattr(seen, "response", None)  # botocore.exceptions.ClientError
        if isinstance(response, dict):
            code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(code, int):
                return code
        seen = seen.__cause__ or seen.__context__
    return None


def what_went_wrong(err: BaseException) -> str:
    """An error in words: its HTTP status, reason and meaning where it has one, else its own line."""
    status = http_status(err)
    if status is None:
        return one_line(err) or type(err).__name__
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "answer"
    meaning = _MEANING.get(status)
    return f"HTTP {status} {phrase}" + (f" ({meaning})" if meaning else "")


def is_missing(err: BaseException) -> bool:
    """Whether `err` says there is no such file (404, 410, or the back-end's FileNotFoundError without a status)."""
    status = http_status(err)
    return status in (404, 410) or (status is None and isinstance(err, FileNotFoundError))


def remote_error(url: str, err: BaseException) -> OSError | ValueError:
    """`err` as one line naming `url`: FileNotFoundError when the file is not there, ValueError else."""
    if is_missing(err):
        return FileNotFoundError(f"{url}: no such file")
    return ValueError(f"{url}: {what_went_wrong(err)}")


def stat(url: str) -> RemoteShard:
    """The shard at `url` as it is now; FileNotFoundError naming the URL when there is none, ValueError naming it
    and what went wrong (403 ...) when it cannot be asked about."""
    fs, path = filesystem(url)
    with naming(url):
        return current(fs, path)


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


def existing(urls: Iterable[str]) -> tuple[list[RemoteShard], list[str]]:
    """(the files among `urls`, wildcards expanded by the store's listing, in order and without repeats; the
    names among `urls` that name no file and the wildcards that match none). A directory listed once serves all
    its names; a store that lists nothing (plain HTTP) is asked per name; a name that cannot be asked about (403)
    is a ValueError naming it and the reason, never taken for a missing one."""
    found: dict[str, RemoteShard] = {}
    absent: list[str] = []
    listed: dict[str, dict[str, RemoteShard]] = {}
    for url in urls:
        fs, path = filesystem(url)
        if any(c in path for c in "*?["):
            fs.invalidate_cache()
            with naming(url):
                matches = fs.glob(path, detail=True)
            files = [name for name in sorted(matches) if matches[name].get("type") == "file"]
            if not files:
                absent.append(url)
            for name in files:
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
                absent.append(url)
                continue
        found.setdefault(known.url, known)
    return list(found.values()), absent


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
    read_from = _stream_from if shard.url.partition("://")[0].lower() in _STREAMED else _ranges_from
    start = progress = time.monotonic()
    attempts, backoff, checked = 0, patience.first_backoff, False
    while True:
        _check_stop(shard, stop)
        reached = file.tell()
        try:
            if not checked:  # the shard as indexed, before a byte of it is used
                check_unchanged(shard, current(fs, path))
                checked = True
            read_from(fs, path, shard, file, stop)
            check_unchanged(shard, current(fs, path))  # not replaced while it was read
            return
        except ValueError as err:
            raise ValueError(one_line(err)) from None
        except Exception as err:  # noqa: BLE001  # a back-end's error: aiohttp, botocore, asyncio
            if is_missing(err):
                raise ValueError(
                    f"shard {shard.name} ({shard.url}): no longer exists (it did when its split was indexed; "
                    "deleted or moved while the run read it)"
                ) from None
            status = http_status(err)
            if status is not None and 400 <= status < 500 and status not in (408, 429):
                raise ValueError(f"shard {shard.name} ({shard.url}): {what_went_wrong(err)}") from None
            attempts += 1
            now = time.monotonic()
            if file.tell() > reached:  # bytes arrived: the patience starts again
                progress, backoff = now, patience.first_backoff
            if now - progress + backoff > patience.total:
                raise ValueError(
                    f"shard {shard.name} ({shard.url}): not fetched after {attempts} tries in {now - start:.1f} s, "
                    f"{file.tell()} of {shard.size} bytes read, none in the last {now - progress:.1f} s "
                    f"({_last_error(err, patience)})"
                ) from None
            time.sleep(backoff)
            backoff = min(backoff * 2, patience.max_backoff)


def _check_stop(shard: RemoteShard, stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise ValueError(f"{shard.url}: fetch stopped")


def _stream_from(
    fs: Any, path: str, shard: RemoteShard, file: IO[bytes], stop: threading.Event | None
) -> None:
    """The rest of the shard from the byte `file` reached, as one GET (`Range: bytes=<reached>-`) on fsspec's
    HTTP session, each piece written as it arrives, in the session's event loop (a body cut short raises at the
    next read: read from another thread, the bytes that came with the cut would be lost); a server that ignores
    the range starts over."""
    from fsspec.asyn import sync

    sync(fs.loop, _stream_rest, fs, path, shard, file, stop)


async def _stream_rest(
    fs: Any, path: str, shard: RemoteShard, file: IO[bytes], stop: threading.Event | None
) -> None:
    reached = file.tell()
    session = await fs.set_session()
    headers = {**fs.kwargs.get("headers", {}), "Range": f"bytes={reached}-"}
    async with session.get(fs.encode_url(path), **{**fs.kwargs, "headers": headers}) as response:
        if response.status in (404, 410):
            raise FileNotFoundError(shard.url)
        response.raise_for_status()
        answered = response.headers.get("Content-Range", "")
        if response.status != 206 and reached:  # the whole file again: from its first byte
            file.seek(0)
            file.truncate()
        elif response.status == 206 and not answered.startswith(f"bytes {reached}-"):
            raise ValueError(f"{shard.url}: asked for the bytes from {reached}, answered {answered!r}")
        while file.tell() < shard.size:
            _check_stop(shard, stop)
            piece = await response.content.read(min(PIECE_BYTES, shard.size - file.tell()))
            if not piece:
                raise OSError(f"the body ended after {file.tell()} of {shard.size} bytes")
            file.write(piece)


def _ranges_from(
    fs: Any, path: str, shard: RemoteShard, file: IO[bytes], stop: threading.Event | None
) -> None:
    """The rest of the shard from the byte `file` reached, in ranged reads of CHUNK_BYTES."""
    while file.tell() < shard.size:
        _check_stop(shard, stop)
        offset = file.tell()
        end = min(offset + CHUNK_BYTES, shard.size)
        data = fs.cat_file(path, start=offset, end=end)
        if len(data) != end - offset:
            raise OSError(f"asked for bytes {offset}-{end - 1}, got {len(data)} bytes")
        file.write(data)


def _last_error(err: BaseException, patience: Patience) -> str:
    """What the last transient error was; for one without a message (a timeout), what it means."""
    if http_status(err) is not None or one_line(err):
        return what_went_wrong(err)
    if isinstance(err, TimeoutError):
        return f"no answer within {patience.stall:g} s"
    return type(err).__name__


def current(fs: Any, path: str) -> RemoteShard:
    """The shard at `path` as the store describes it now (not as a listing cached it)."""
    fs.invalidate_cache(path)
    info = fs.info(path)
    if info.get("type") == "directory":
        raise ValueError(f"{fs.unstrip_protocol(path)}: a directory, not a shard")
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
