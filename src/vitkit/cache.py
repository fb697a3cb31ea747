"""Where vitkit keeps what it can fetch or work out again: downloaded weights, shard indexes, precision choices.

The directory is $VITKIT_CACHE, else $XDG_CACHE_HOME/vitkit, else ~/.cache/vitkit. Small records are JSON files
written atomically; one that cannot be read is treated as absent (its work is simply done again), and one that
cannot be written (a read-only home) only costs the work next time.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from vitkit.storage import atomic_write_text

CACHE_ENV = "VITKIT_CACHE"


def cache_dir(*parts: str) -> Path:
    """$VITKIT_CACHE, else $XDG_CACHE_HOME/vitkit, else ~/.cache/vitkit; `parts` below it."""
    root = os.environ.get(CACHE_ENV)
    if root:
        base = Path(root).expanduser()
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "vitkit"
    return base.joinpath(*parts)


def record_path(kind: str, key: Any) -> Path:
    """The record file of `key` (anything `json.dumps` writes the same way every time) among `kind`'s records."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return cache_dir(kind, f"{digest}.json")


def read_record(path: Path) -> dict[str, Any] | None:
    """A JSON record, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(path: Path, data: dict[str, Any]) -> bool:
    """Write a JSON record atomically; False (and nothing raised) when the cache cannot be written."""
    try:
        atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except OSError:
        return False
    return True
