"""Where a URL's weights file is cached, and whether the cached file is intact.

Cache paths follow the URL as RFC 3986 normalises it (case of scheme and host, default port, percent-encoding of
unreserved characters, `.` and `..` segments): URLs that name the same resource share a file, and others (`a/b`
and `a%2Fb`) do not; http and https of one host are taken for one server. Credentials in a URL (`user:pass@host`)
are never written into a path, a record or a message. Beside a file `F`: `F.meta.json` (its size and sha256),
`F.part` (the bytes of a transfer not yet complete) and `F.part.json` (the version those bytes belong to).
"""

from __future__ import annotations

import hashlib
import re
import string
import sys
import urllib.parse
from pathlib import Path

from vitkit.cache import cache_dir, read_record, write_record
from vitkit.weights.integrity import check_weights_file

_HASH_CHUNK = 1 << 22
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _normalise_escapes(text: str) -> str:
    """RFC 3986 6.2.2: characters a URI may not hold literally are percent-encoded, escapes of unreserved
    characters decoded and the others upper-cased (`%2f` is `%2F`, `%7E` is `~`, and `%2F` stays: a slash
    inside a segment is not a separator)."""
    text = urllib.parse.quote(_LONE_PERCENT.sub("%25", text), safe="%:/?#[]@!$&'()*+,;=" + "-._~")

    def decode(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    return _ESCAPE.sub(decode, text)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 5.2.4 for an absolute path: `/a/./b` is `/a/b`, `/a/b/../c` is `/a/c`."""
    segments = path.split("/")[1:]
    kept: list[str] = []
    for segment in segments:
        if segment == "..":
            kept = kept[:-1]
        elif segment != ".":
            kept.append(segment)
    if segments and segments[-1] in (".", ".."):
        kept.append("")  # `/a/b/..` names the directory `/a/`
    return "/" + "/".join(kept)


def canonical_url(url: str) -> str:
    """`url` as RFC 3986 normalises it, without credentials or fragment: the identity of its cache file."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"{without_credentials(url)}: expected an http:// or https:// URL")
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{without_credentials(url)}: the port is not a number") from None
    host = parts.hostname.lower()
    host = (f"[{host}]" if ":" in host else host) + (
        f":{port}" if port not in (None, _DEFAULT_PORTS[scheme]) else ""
    )
    path = _remove_dot_segments(_normalise_escapes(parts.path or "/"))
    query = f"?{_normalise_escapes(parts.query)}" if parts.query else ""
    return f"{scheme}://{host}{path}{query}"


def without_credentials(url: str) -> str:
    """`url` as given, less any `user:pass@`: the form every message and record shows."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def cache_path(url: str) -> Path:
    """Where `url` is kept: <cache>/weights/<host>/<path>, each segment as its normalised URL text (`%2F` and
    other escapes of reserved characters kept, so no two resources share a file), a query folded into the name."""
    parts = urllib.parse.urlsplit(canonical_url(url))
    segments = [s or "%" for s in parts.path.split("/")[1:]]  # `%` alone is no normalised text: an empty one
    if segments[-1] == "%":
        raise ValueError(f"{without_credentials(url)}: the URL names no file")
    if parts.query:
        stem, dot, suffix = segments[-1].rpartition(".")
        tag = hashlib.sha256(parts.query.encode()).hexdigest()[:8]
        segments[-1] = f"{stem}-{tag}.{suffix}" if dot else f"{suffix}-{tag}"
    return cache_dir("weights", parts.netloc.replace(":", "_"), *segments)


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
    in by hand, is trusted and recorded now), and was parsed as a weights file when it was recorded (else it is
    parsed now, once). A mismatch is reported on stderr and the file removed."""
    if not target.is_file():
        return False
    record = read_record(meta_path(target))
    if record is None:
        write_record(meta_path(target), {"size": target.stat().st_size, "sha256": sha256_of(target)})
        return True
    size = target.stat().st_size
    if size != record.get("size") or sha256_of(target) != record.get("sha256"):
        why = f"does not match its recorded size and sha256 ({meta_path(target).name})"
    elif record.get("parsed") is not True:  # recorded by a vitkit that cached short files and error pages
        try:
            check_weights_file(target)
        except ValueError as error:
            why = f"is {error}"
        else:
            write_record(meta_path(target), {**record, "parsed": True})
            return True
    else:
        return True
    print(f"vitkit: {target}: {why}; fetching it again", file=sys.stderr)
    target.unlink()
    return False


def part_path(target: Path) -> Path:
    return target.with_name(target.name + ".part")


def resume_path(target: Path) -> Path:
    """The version (validator) and size of the file whose first bytes the .part holds."""
    return target.with_name(target.name + ".part.json")
