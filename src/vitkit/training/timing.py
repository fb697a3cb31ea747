"""Where a training step's time goes: data, forward and backward, optimizer (the progress bar's data share and
report.json's step_seconds)."""

from __future__ import annotations

import time

import torch


class StepSplit:
    """Seconds spent per part of a training step (data, forward_backward, optimizer), summed over the steps it
    times. The engine times the log steps only: on CUDA each part ends with a synchronisation."""

    def __init__(self, device: torch.device | None) -> None:
        self.device = device
        self.seconds: dict[str, float] = {"data": 0.0, "forward_backward": 0.0, "optimizer": 0.0}
        self.steps = 0
        self.last = 0.0

    def start(self) -> None:
        self._sync()
        self.steps += 1
        self.last = time.perf_counter()

    def lap(self, part: str) -> None:
        """Add the time since the previous lap (or start) to `part`."""
        self._sync()
        now = time.perf_counter()
        self.seconds[part] += now - self.last
        self.last = now

    def share(self, part: str) -> float:
        """`part`'s share of the timed steps' time: for "data", how much of training waits for its input."""
        total = sum(self.seconds.values())
        return self.seconds[part] / total if total else 0.0

    def per_step(self) -> dict[str, float]:
        """Mean seconds per timed step of each part (empty when no step was timed)."""
        return {part: seconds / self.steps for part, seconds in self.seconds.items()} if self.steps else {}

    def _sync(self) -> None:
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class _NoSplit(StepSplit):
    def start(self) -> None:
        pass

    def lap(self, part: str) -> None:
        pass


NO_SPLIT = _NoSplit(None)
