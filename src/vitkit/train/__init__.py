"""Training and fine-tuning: one loop (engine), its optimizers, objectives, averaging, checkpoints and reports.

`train` and `NonFiniteLoss` are imported on first use, so that vitkit.evaluate can use the light helpers of
this package (distributed) without importing the engine, which itself evaluates.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NonFiniteLoss", "train"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from vitkit.train import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'vitkit.train' has no attribute {name!r}")
