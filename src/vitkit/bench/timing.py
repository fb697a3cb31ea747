"""Side-by-side timing: A/B alternation in one process, medians over rounds, paired ratios, a GEMM ceiling.

On a shared CPU absolute speed drifts between processes and within one, so every number that is
compared is measured in the same process, in the same rounds, with the order of the candidates rotated each round.
A ratio is the median over rounds of the per-round ratio (paired), which cancels slow drift in machine load.

Clocks: 'wall' (time.perf_counter, the default) is what a user waits for. 'cpu' (time.process_time: CPU seconds of
this process) leaves out the time the process sat descheduled behind other jobs; with one torch thread it is the
compute time itself and far less noisy on a shared machine. With more threads it also counts OpenMP spin-waiting,
so use it with `--threads 1`.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch


@dataclass
class Result:
    """Seconds per call of one candidate, one sample per round; `work` is images (or FLOPs) per call."""

    name: str
    samples: list[float] = field(default_factory=list)
    images: int = 0
    flops: float = 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def images_per_s(self) -> float:
        return self.images / self.median

    @property
    def gflops_per_s(self) -> float:
        return self.flops / self.median / 1e9

    @property
    def spread(self) -> float:
        """(max - min) / median of the samples: how noisy this candidate was."""
        return (max(self.samples) - min(self.samples)) / self.median


CLOCK_NAMES = ("wall", "cpu")  # a literal: `vitkit bench --help` reads it from the source, without torch
CLOCKS = dict(zip(CLOCK_NAMES, (time.perf_counter, time.process_time), strict=True))


def time_call(fn: Callable[[], object], iters: int = 1, clock: str = "wall") -> float:
    """Median seconds of `iters` calls of `fn` on `clock` (garbage collection kept out of the timed region)."""
    now = CLOCKS[clock]
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        times = []
        for _ in range(iters):
            start = now()
            fn()
            times.append(now() - start)
    finally:
        if gc_enabled:
            gc.enable()
    return statistics.median(times)


def alternate(
    candidates: Mapping[str, Callable[[], object]],
    rounds: int = 5,
    warmup: int = 1,
    iters: int = 1,
    on_round: Callable[[int, dict[str, float]], None] | None = None,
    clock: str = "wall",
) -> dict[str, Result]:
    """Time every candidate once per round, the order rotated each round (A B C, B C A, ...), after `warmup`
    untimed calls each. Returns one `Result` per candidate with a sample per round."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {list(CLOCKS)}, got {clock!r}")
    names = list(candidates)
    for name in names:
        for _ in range(warmup):
            candidates[name]()
    results = {name: Result(name) for name in names}
    for r in range(rounds):
        shift = r % len(names)
        timed = {}
        for name in names[shift:] + names[:shift]:
            timed[name] = time_call(candidates[name], iters, clock)
            results[name].samples.append(timed[name])
        if on_round is not None:
            on_round(r, timed)
    return results


def per_round_ratios(results: dict[str, Result], name: str, reference: str) -> list[float]:
    """Speed of `name` relative to `reference` (> 1: faster) in each round: t_reference / t_name, per image when
    the candidates process different numbers of images per call."""
    a, b = results[name], results[reference]
    return [
        (tb / max(b.images, 1)) / (ta / max(a.images, 1)) for ta, tb in zip(a.samples, b.samples, strict=True)
    ]


def paired_ratio(results: dict[str, Result], name: str, reference: str) -> float:
    """The median over rounds of the per-round speed ratio of `name` to `reference` (drift cancels)."""
    return statistics.median(per_round_ratios(results, name, reference))


def ratio_range(results: dict[str, Result], name: str, reference: str) -> tuple[float, float]:
    """(min, max) of the per-round ratios: how far one round can be from the median ratio."""
    ratios = per_round_ratios(results, name, reference)
    return min(ratios), max(ratios)


def mfu(results: dict[str, Result], name: str, ceiling: str = "gemm") -> float:
    """Median over rounds of (GFLOP/s of `name`) / (GFLOP/s of the `ceiling` GEMM in the same round)."""
    model, gemm = results[name], results[ceiling]
    return statistics.median(
        (model.flops / tm) / (gemm.flops / tg) for tm, tg in zip(model.samples, gemm.samples, strict=True)
    )


def round_logger(
    log: Callable[[str], None] | None, rounds: int, digits: int = 3
) -> Callable[[int, dict[str, float]], None] | None:
    """An `on_round` for `alternate` that logs each round's seconds per candidate (None without a log)."""
    if log is None:
        return None
    return lambda r, timed: log(
        f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:.{digits}f}s" for k, v in timed.items())
    )


def gemm_candidate(
    n: int = 2048, calls: int = 3, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu"
) -> tuple[Callable[[], object], float]:
    """A timed GEMM (torch.mm n x n x n in `dtype`, `calls` times per sample) and its FLOPs per sample: the
    practical compute ceiling of the machine at the current thread count, measured in the same rounds as the
    models (bf16: the ceiling of bf16 autocast, whose products run in bf16)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)

    def run() -> None:
        for _ in range(calls):
            torch.mm(a, b, out=out)
        if out.device.type == "cuda":
            torch.cuda.synchronize(out.device)

    return run, 2.0 * n**3 * calls
