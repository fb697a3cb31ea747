"""Image sizes as (height, width): one helper on the ground floor, for the models and the data alike."""

from __future__ import annotations

import numbers


def to_pair(value: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """(h, w) from an int or a pair, so square and non-square sizes share one code path."""
    if isinstance(value, numbers.Integral):
        return (int(value), int(value))
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"a size must be an integer or a pair [height, width], got {value!r}")
    h, w = value
    return tuple(int(v) if isinstance(v, numbers.Integral) else v for v in (h, w))  # type: ignore[return-value]


def check_batch_size(batch_size: object) -> None:
    """A one-line ValueError unless `batch_size` is a whole number >= 1 (not a bool, not 2.5)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"batch_size must be a whole number >= 1, got {batch_size!r}")
