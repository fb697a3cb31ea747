"""Weights fetched over HTTP(S) into the cache: a progress bar, atomic, resumable, verified.

A file reaches its cache path in four steps: the bytes are appended to `<file>.part`, the whole file is checked
(its length against the server's when known, its format parsed by vitkit.weights.integrity, and for a published
name its architecture), its size and sha256 are recorded in `<file>.meta.json`, and the .part file is renamed
into place. A cached file is checked against that record each time it is used (hashing is far faster than
downloading); one that fails the check is fetched again.

An interrupted transfer is taken up again with an HTTP Range request, in the same call while bytes keep arriving,
or by the next call, only when the server named its version (a strong ETag, else Last-Modified, kept in
`<file>.part.json`): the request carries it as If-Range, and a reply for another version or another range than
the one asked starts the file over from byte 0. A transfer gives up when no byte comes for
$VITKIT_DOWNLOAD_TIMEOUT seconds (30), when fewer than MIN_BYTES_PER_S arrive on average over such a window, or
when the whole call passes $VITKIT_DOWNLOAD_DEADLINE seconds (6 hours); what it received is kept to resume when
it can be resumed, and the error says which. A full disk removes the .part file and says so.

Where a URL's file is cached, and how a cached file is checked: vitkit.weights.cached_files.

Offline (VITKIT_OFFLINE=1 or HF_HUB_OFFLINE=1) a verified cached file is used without any network access, and a
missing one is a one-line error naming the URL and the cache path. Two processes fetching the same file take
turns (a lock on the .part file): the second finds it done.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import http.client
import math
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from tqdm import tqdm

from vitkit.cache import read_record, write_record
from vitkit.storage import DiskFull
from vitkit.weights.cached_files import (
    cache_path,
    is_verified,
    meta_path,
    part_path,
    resume_path,
    sha256_of,
    without_credentials,
)
from vitkit.weights.integrity import check_weights_file

OFFLINE_ENVS = ("VITKIT_OFFLINE", "HF_HUB_OFFLINE")
TIMEOUT_ENV = "VITKIT_DOWNLOAD_TIMEOUT"
DEADLINE_ENV = "VITKIT_DOWNLOAD_DEADLINE"
DEFAULT_TIMEOUT_S = 30.0  # seconds without a byte before a transfer is given up; the throughput window
DEFAULT_DEADLINE_S = 6 * 3600.0  # a whole call, resumes included (a 3 GB file at 150 kB/s)
MIN_BYTES_PER_S = 1024  # averaged over each window of the timeout: below it a server is as good as stalled
MAX_ATTEMPTS = 5  # Range requests in one call, each taken only after the previous one brought bytes
CHUNK = 1 << 20


class Interrupted(Exception):
    """A transfer that stopped before its end (the bytes so far are kept in the .part file). `final`: retrying
    in the same call would not help (a throttled server, the deadline)."""

    def __init__(self, reason: str, received: int, final: bool = False) -> None:
        super().__init__(reason)
        self.received, self.final = received, final


class _NothingAfter(Exception):
    """HTTP 416: the file has no bytes after those the .part holds."""


@dataclass(frozen=True)
class Limits:
    """How long a fetch may wait: `timeout` for any byte (and the window of the minimum throughput), `deadline`
    the monotonic time by which the whole call must end."""

    timeout: float
    deadline: float

    @classmethod
    def from_env(cls) -> Limits:
        timeout = seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)
        return cls(timeout, time.monotonic() + seconds_from_env(DEADLINE_ENV, DEFAULT_DEADLINE_S))

    def left(self) -> float:
        return self.deadline - time.monotonic()


def offline() -> bool:
    """True when VITKIT_OFFLINE or HF_HUB_OFFLINE is set to anything but '', '0', 'false' or 'no'."""
    return any(os.environ.get(name, "").lower() not in ("", "0", "false", "no") for name in OFFLINE_ENVS)


def seconds_from_env(name: str, default: float) -> float:
    """$name as a positive, finite number of seconds, else `default` when unset; anything else is a ValueError
    naming the variable."""
    text = os.environ.get(name, "")
    try:
        value = float(text) if text.strip() else default
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}={text!r}: expected a positive number of seconds")
    return value


def download_timeout() -> float:
    """$VITKIT_DOWNLOAD_TIMEOUT seconds, else 30."""
    return seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)


def fetch(
    url: str,
    target: str | os.PathLike | None = None,
    *,
    progress: bool = True,
    verify: Callable[[Path], object] = check_weights_file,
) -> Path:
    """The local path of `url`'s file, downloaded into the cache (or `target`) unless a verified copy is there.

    `verify(path)` runs on the whole downloaded file before it enters the cache: a ValueError it raises refuses
    the file (removed, nothing recorded)."""
    shown = without_credentials(url)
    target = Path(target) if target is not None else cache_path(url)
    if is_verified(target):
        return target
    if offline():
        raise FileNotFoundError(
            f"{shown}: not in the cache ({target}) and downloads are off "
            f"({' / '.join(OFFLINE_ENVS)}); fetch it online first (vitkit weights get)"
        )
    limits = Limits.from_env()
    target.parent.mkdir(parents=True, exist_ok=True)
    part = part_path(target)
    with open(part, "ab") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # another process fetching the same file finishes first
        if is_verified(target):
            if handle.tell() == 0:
                _discard(target)
            return target
        try:
            _transfer_with_resume(url, handle, limits, progress, target)
            handle.flush()
            os.fsync(handle.fileno())
        except BaseException as error:
            full = isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT)
            if full or handle.tell() == 0 or read_record(resume_path(target)) is None:  # nothing to resume
                _discard(target)
            if full:
                raise DiskFull(target, f" (downloading {shown}; the partial file is removed)") from None
            raise
        try:
            verify(part)
        except Exception as error:  # whatever the check raised, the file is not kept
            _discard(target)
            if isinstance(error, ValueError):
                raise ValueError(f"{shown}: not cached: the file received is {error}") from None
            raise
        record = {"url": shown, "size": handle.tell(), "sha256": sha256_of(part), "parsed": True}
        if not write_record(meta_path(target), record):
            raise PermissionError(f"{meta_path(target)}: cannot write the download's record")
        os.replace(part, target)
        resume_path(target).unlink(missing_ok=True)
    return target


def _discard(target: Path) -> None:
    """Remove the .part file and its version record."""
    part_path(target).unlink(missing_ok=True)
    resume_path(target).unlink(missing_ok=True)


def _transfer_with_resume(url: str, handle: BinaryIO, limits: Limits, progress: bool, target: Path) -> None:
    """Append the rest of `url` to `handle`, resuming as long as each attempt brings bytes. A .part file whose
    version is unknown cannot be shown to be the start of the file the server has now: it starts over."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            _transfer(url, handle, limits, progress, target)
            return
        except Interrupted as stop:
            if stop.received == 0 or stop.final or attempt == MAX_ATTEMPTS:
                kept = handle.tell()
                resumable = kept and read_record(resume_path(target)) is not None
                then = (
                    f"{kept} bytes kept in {part_path(target)}: run again to resume"
                    if resumable
                    else "nothing kept: run again to start over"
                )
                raise ConnectionError(
                    f"{without_credentials(url)}: transfer stopped ({stop}); {then}"
                ) from None
            then = (
                f"resuming at byte {handle.tell()}" if read_record(resume_path(target)) else "starting over"
            )
            print(f"vitkit: {without_credentials(url)}: {stop}; {then}", file=sys.stderr)


def _restart(handle: BinaryIO, target: Path) -> None:
    handle.seek(0)
    handle.truncate(0)
    resume_path(target).unlink(missing_ok=True)


def _request(url: str, headers: dict[str, str]) -> urllib.request.Request:
    """A GET of `url` with its credentials, if any, moved into an Authorization header that a redirect to
    another address does not carry."""
    parts = urllib.parse.urlsplit(url)
    request = urllib.request.Request(without_credentials(url), headers=headers)
    if parts.username is not None:
        pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        request.add_unredirected_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    return request


def _open(url: str, headers: dict[str, str], limits: Limits) -> http.client.HTTPResponse:
    shown = without_credentials(url)
    try:
        return urllib.request.urlopen(
            _request(url, headers), timeout=min(limits.timeout, max(limits.left(), 0.01))
        )
    except urllib.error.HTTPError as error:
        if error.code == 416 and "Range" in headers:
            raise _NothingAfter() from None
        if error.code in (404, 410):
            raise FileNotFoundError(
                f"{shown}: HTTP {error.code} {error.reason} (no such file there)"
            ) from None
        raise ConnectionError(f"{shown}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise ConnectionError(f"{shown}: no answer within {limits.timeout:g} s ({TIMEOUT_ENV})") from None
        raise ConnectionError(f"{shown}: cannot connect ({reason})") from None


def _validator(response: http.client.HTTPResponse) -> str | None:
    """What names this version of the file in an If-Range: a strong ETag, else Last-Modified (a weak ETag
    cannot be used there)."""
    etag = response.headers.get("ETag")
    if etag and not etag.startswith("W/"):
        return etag
    return response.headers.get("Last-Modified")


def _content_range(response: http.client.HTTPResponse) -> tuple[int, int | None] | None:
    """(first byte, total length or None) of a 206 reply's Content-Range, None when it has none or a bad one."""
    match = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", response.headers.get("Content-Range") or "")
    if match is None:
        return None
    return int(match.group(1)), None if match.group(3) == "*" else int(match.group(3))


def _same_file(response: http.client.HTTPResponse, start: int, resume: dict[str, Any]) -> bool:
    """Whether a reply to a Range request continues the .part: a 206 for the bytes asked, of the same version
    and total length."""
    found = _content_range(response) if response.status == 206 else None
    if found is None or found[0] != start:
        return False
    validator = _validator(response)
    return (validator is None or validator == resume["validator"]) and found[1] == resume.get("size")


def _transfer(url: str, handle: BinaryIO, limits: Limits, progress: bool, target: Path) -> None:
    """One HTTP request for the bytes `handle` lacks; Interrupted when it ends early, stalls or crawls."""
    shown = without_credentials(url)
    start = handle.seek(0, os.SEEK_END)
    resume = read_record(resume_path(target)) if start else None
    if start and (resume is None or not resume.get("validator")):  # no proof that it is the same file
        _restart(handle, target)
        start, resume = 0, None
    headers = {"User-Agent": "vitkit", "Accept-Encoding": "identity"}
    if resume is not None:
        headers.update(Range=f"bytes={start}-", **{"If-Range": str(resume["validator"])})
    try:
        response = _open(url, headers, limits)
    except _NothingAfter:  # the .part reaches or passes the end of the file: stale or complete; start over
        _restart(handle, target)
        return _transfer(url, handle, limits, progress, target)
    with response:
        if response.headers.get_content_type() == "text/html":
            raise ConnectionError(
                f"{shown}: the server answered with an HTML page (HTTP {response.status}), not a file"
            )
        if resume is not None and not _same_file(response, start, resume):
            if response.status == 206:  # another version or another range: ask for the whole file
                print(
                    f"vitkit: {shown}: the reply does not continue the partial file; starting over",
                    file=sys.stderr,
                )
                response.close()
                _restart(handle, target)
                return _transfer(url, handle, limits, progress, target)
            _restart(handle, target)  # a 200: the server sends the whole (current) file
            start = 0
        length = response.headers.get("Content-Length")
        total = start + int(length) if length is not None and length.isdigit() else None
        if start == 0:  # a new transfer: remember its version, so that a resume can name it
            validator = _validator(response)
            if validator is not None:
                write_record(resume_path(target), {"url": shown, "validator": validator, "size": total})
        _receive(response, handle, limits, progress, total, start, shown)
    if total is not None and handle.tell() < total:
        raise Interrupted(f"the connection closed at byte {handle.tell()} of {total}", handle.tell() - start)


def _receive(
    response: http.client.HTTPResponse,
    handle: BinaryIO,
    limits: Limits,
    progress: bool,
    total: int | None,
    start: int,
    shown: str,
) -> None:
    """Append the reply's body to `handle` as it arrives (whatever a read brings, so that the progress bar and
    the limits see every byte), until its end or a limit."""
    name = urllib.parse.unquote(urllib.parse.urlsplit(shown).path.rsplit("/", 1)[-1])
    window_start, window_bytes = time.monotonic(), 0
    with tqdm(
        total=total, initial=start, unit="B", unit_scale=True, unit_divisor=1024, desc=name,
        disable=not progress, file=sys.stderr,
    ) as bar:  # fmt: skip
        while True:
            received = handle.tell() - start
            if limits.left() <= 0:
                deadline = seconds_from_env(DEADLINE_ENV, DEFAULT_DEADLINE_S)
                raise Interrupted(f"not done within {deadline:g} s ({DEADLINE_ENV})", received, final=True)
            try:
                chunk = response.read1(CHUNK)
            except TimeoutError:
                raise Interrupted(f"no byte for {limits.timeout:g} s ({TIMEOUT_ENV})", received) from None
            except (http.client.HTTPException, OSError) as error:
                raise Interrupted(f"connection lost: {type(error).__name__}", received) from None
            if not chunk:
                return
            handle.write(chunk)  # a full disk raises here, not as a lost connection
            bar.update(len(chunk))
            window_bytes += len(chunk)
            elapsed = time.monotonic() - window_start
            if elapsed >= limits.timeout:
                if window_bytes < MIN_BYTES_PER_S * elapsed:
                    raise Interrupted(
                        f"{window_bytes / elapsed:.0f} bytes/s over {elapsed:.0f} s, under the minimum of "
                        f"{MIN_BYTES_PER_S} ({TIMEOUT_ENV} sets the window)",
                        received + len(chunk),
                        final=True,
                    )
                window_start, window_bytes = time.monotonic(), 0
