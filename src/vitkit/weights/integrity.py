"""Whether a downloaded weights file is whole, checked before it enters the cache: a transfer that ended early
without saying how long it was, or an error page served as a 200, must never be recorded as verified.

The checks read the file once in blocks, whatever its size: a zip (numpy's .npz, torch's zip pickle) by the CRC of
every member, a safetensors file by its header's offsets against the file's length, a legacy torch pickle by
reading it with `torch.load(weights_only=True)` (which runs no code).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import torch

_SAFETENSORS_HEADER_MAX = 100 << 20  # safetensors' own limit on the JSON header


def check_weights_file(path: str | os.PathLike) -> None:
    """ValueError (saying what the bytes are instead) unless `path` is a whole .npz, safetensors or torch file."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(64)
    if head.startswith(b"PK"):
        _check_zip(path)
    elif len(head) >= 9 and head[8:9] == b"{":
        _check_safetensors(path)
    elif head[:1] == b"\x80":
        _check_legacy_pickle(path)
    elif head.lstrip()[:1] == b"<":
        raise ValueError("an HTML or XML page, not a weights file")
    else:
        raise ValueError("not a weights file (expected .npz, safetensors or a torch file)")


def _check_zip(path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            broken = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise ValueError(f"a truncated or damaged zip archive ({error})") from None
    if broken is not None:
        raise ValueError(f"a damaged zip archive (member {broken!r} fails its CRC)")


def _check_safetensors(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if length > min(size - 8, _SAFETENSORS_HEADER_MAX):
            raise ValueError(f"a truncated safetensors file (a header of {length} bytes in {size})")
        try:
            header = json.loads(f.read(length))
            end = max(
                (int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0
            )
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as error:
            raise ValueError(f"a safetensors file with an unreadable header ({error})") from None
    if 8 + length + end != size:
        raise ValueError(
            f"a truncated safetensors file ({size} bytes where its header says {8 + length + end})"
        )


def _check_legacy_pickle(path: Path) -> None:
    try:
        torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # bytes that are no torch file fail anywhere in the unpickler
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"a truncated or damaged torch file ({first})") from None
