"""Weights fetched over HTTP(S) into the cache: a progress bar, atomic, resumable, verified.

A file reaches its cache path in three steps: the bytes are appended to `<file>.part` (an interrupted transfer is
taken up again with an HTTP Range request, in the same call while bytes keep arriving, or by the next call), its
size and sha256 are recorded in `<file>.meta.json`, and the .part file is renamed into place. A cached file is
checked against that record each time it is used (hashing is far faster than downloading); one
that fails the check is fetched again. Offline (VITKIT_OFFLINE=1 or HF_HUB_OFFLINE=1) a verified cached file is
used without any network access, and a missing one is a one-line error naming the URL and the cache path.
Two processes fetching the same file take turns (a lock on the .part file): the second finds it done.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import BinaryIO

from tqdm import tqdm

from vitkit.cache import cache_dir, read_record, write_record

OFFLINE_ENVS = ("VITKIT_OFFLINE", "HF_HUB_OFFLINE")
TIMEOUT_ENV = "VITKIT_DOWNLOAD_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0  # seconds without a byte before a transfer is given up
MAX_ATTEMPTS = 5  # Range requests in one call, each taken only after the previous one brought bytes
CHUNK = 1 << 20
_HASH_CHUNK = 1 << 22


class Interrupted(Exception):
    """A transfer that stopped before its end (the bytes so far are kept in the .part file)."""


def offline() -> bool:
    """True when VITKIT_OFFLINE or HF_HUB_OFFLINE is set to anything but '', '0', 'false' or 'no'."""
    return any(os.environ.get(name, "").lower() not in ("", "0", "false", "no") for name in OFFLINE_ENVS)


def download_timeout() -> float:
    """$VITKIT_DOWNLOAD_TIMEOUT seconds, else 30."""
    text = os.environ.get(TIMEOUT_ENV, "")
    try:
        return float(text) if text else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ValueError(f"{TIMEOUT_ENV}={text!r}: expected a number of seconds") from None


def cache_path(url: str) -> Path:
    """Where `url` is kept: <cache>/weights/<host>/<path>, a query string folded into the file name."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url}: expected an http:// or https:// URL")
    segments = [s for s in urllib.parse.unquote(parts.path).split("/") if s not in ("", ".", "..")]
    if not segments:
        raise ValueError(f"{url}: the URL names no file")
    if parts.query:
        stem, dot, suffix = segments[-1].rpartition(".")
        tag = hashlib.sha256(parts.query.encode()).hexdigest()[:8]
        segments[-1] = f"{stem}-{tag}.{suffix}" if dot else f"{suffix}-{tag}"
    host = parts.netloc.replace(":", "_")
    return cache_dir("weights", host, *segments)


def meta_path(target: Path) -> Path:
    return target.with_name(target.name + ".meta.json")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def is_verified(target: Path) -> bool:
    """The cached file exists and matches its recorded size and sha256 (a file without a record, e.g. copied
    in by hand, is trusted and recorded now). A mismatch is reported on stderr and the file removed."""
    if not target.is_file():
        return False
    record = read_record(meta_path(target))
    if record is None:
        write_record(meta_path(target), {"size": target.stat().st_size, "sha256": sha256_of(target)})
        return True
    size = target.stat().st_size
    if size == record.get("size") and sha256_of(target) == record.get("sha256"):
        return True
    print(
        f"vitkit: {target}: does not match its recorded size and sha256 ({meta_path(target).name}); "
        "fetching it again",
        file=sys.stderr,
    )
    target.unlink()
    return False


def fetch(url: str, target: str | os.PathLike | None = None, *, progress: bool = True) -> Path:
    """The local path of `url`'s file, downloaded into the cache (or `target`) unless a verified copy is there."""
    target = Path(target) if target is not None else cache_path(url)
    if is_verified(target):
        return target
    if offline():
        raise FileNotFoundError(
            f"{url}: not in the cache ({target}) and downloads are off "
            f"({' / '.join(OFFLINE_ENVS)}); fetch it online first (vitkit weights get)"
        )
    timeout = download_timeout()
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    with open(part, "ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # another process fetching the same file finishes first
        if is_verified(target):
            if handle.tell() == 0:
                part.unlink(missing_ok=True)
            return target
        try:
            _transfer_with_resume(url, handle, timeout, progress, part)
        except BaseException:
            if handle.tell() == 0:  # nothing to resume from
                part.unlink(missing_ok=True)
            raise
        handle.flush()
        os.fsync(handle.fileno())
        record = {"url": url, "size": handle.tell(), "sha256": sha256_of(part)}
        if not write_record(meta_path(target), record):
            raise PermissionError(f"{meta_path(target)}: cannot write the download's record")
        os.replace(part, target)
    return target


def _transfer_with_resume(url: str, handle: BinaryIO, timeout: float, progress: bool, part: Path) -> None:
    """Append the rest of `url` to `handle`, resuming as long as each attempt brings bytes."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        before = handle.seek(0, os.SEEK_END)
        try:
            _transfer(url, handle, timeout, progress)
            return
        except Interrupted as stop:
            brought = handle.tell() - before
            if brought == 0 or attempt == MAX_ATTEMPTS:
                raise ConnectionError(
                    f"{url}: transfer stopped after {handle.tell()} bytes ({stop}); run again to resume "
                    f"from {part}"
                ) from None
            print(f"vitkit: {url}: {stop}; resuming at byte {handle.tell()}", file=sys.stderr)


def _transfer(url: str, handle: BinaryIO, timeout: float, progress: bool) -> None:
    """One HTTP request for the bytes `handle` lacks; Interrupted when it ends early or times out."""
    start = handle.tell()
    headers = {"User-Agent": "vitkit", "Accept-Encoding": "identity"}
    if start:
        headers["Range"] = f"bytes={start}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and start:  # nothing after the .part's end: it is stale or complete; start over
            handle.seek(0)
            handle.truncate(0)
            return _transfer(url, handle, timeout, progress)
        if error.code in (404, 410):
            raise FileNotFoundError(f"{url}: HTTP {error.code} {error.reason} (no such file there)") from None
        raise ConnectionError(f"{url}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise ConnectionError(f"{url}: no answer within {timeout:g} s ({TIMEOUT_ENV})") from None
        raise ConnectionError(f"{url}: cannot connect ({reason})") from None
    with response:
        if start and response.status != 206:  # the server sends the whole file: start over
            handle.seek(0)
            handle.truncate(0)
            start = 0
        length = response.headers.get("Content-Length")
        total = start + int(length) if length is not None else None
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        with tqdm(
            total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024, desc=name,
            disable=not progress, file=sys.stderr,
        ) as bar:  # fmt: skip
            try:
                while chunk := response.read(CHUNK):
                    handle.write(chunk)
                    bar.update(len(chunk))
            except TimeoutError:
                raise Interrupted(f"no byte for {timeout:g} s") from None
            except (http.client.HTTPException, OSError) as error:
                raise Interrupted(f"connection lost: {type(error).__name__}") from None
    if total is not None and handle.tell() < total:
        raise Interrupted(f"the connection closed at byte {handle.tell()} of {total}")
