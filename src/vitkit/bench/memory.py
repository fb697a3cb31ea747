"""Peak memory of one forward (or training step), and the largest batch that fits a memory budget.

Method. On CUDA: `torch.cuda.max_memory_allocated` around the call. On CPU the torch allocator keeps no
statistics and its allocations are invisible to `tracemalloc`, and the process RSS high-water mark (`ru_maxrss`)
mixes in the interpreter, the libraries, malloc's free lists and everything allocated earlier in the process. So on
CPU the call runs once under `torch.profiler` with `profile_memory=True`: every tensor allocation and free made by
torch's CPU allocator is recorded with its size and time, and the peak of the running sum is the exact high-water
mark of tensor memory *allocated during the call* (activations, workspace, gradients; not oneDNN/MKL scratch buffers
that bypass the allocator, a few MB). Tensors alive before the call -- parameters, buffers, optimizer state -- are
added from their storage sizes (`resident_bytes`). The profiler slows the call down but does not change what is
allocated; it is never used for timing.

The largest batch: peak memory is affine in the batch size (fixed + per-image), so it is measured at two batch
sizes, the line solved for the budget, and the answer checked by measuring at it when that is cheap enough.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn


def peak_allocated_bytes(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """High-water mark of tensor memory allocated while `fn()` runs, above what was allocated before it."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return peak_of_events(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )


def peak_of_events(events: Iterable[tuple[int, int]]) -> int:
    """Peak of the running sum of (time, +bytes allocated / -bytes freed) events, in time order."""
    current = peak = 0
    for _, nbytes in sorted(events):
        current += nbytes
        peak = max(peak, current)
    return peak


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (shared storages counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def resident_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> int:
    """Parameters, buffers and optimizer state (AdamW: two moments per parameter) that live across steps."""
    tensors = [*model.parameters(), *model.buffers()]
    if optimizer is not None:
        for state in optimizer.state.values():
            tensors.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    return tensor_bytes(tensors)


@dataclass
class MemoryFit:
    """peak(batch) = resident + fixed + per_image * batch, from measurements at two batch sizes."""

    resident: int
    fixed: float
    per_image: float

    def peak(self, batch: int) -> float:
        return self.resident + self.fixed + self.per_image * batch

    def largest_batch(self, budget: float) -> int:
        """Largest batch whose predicted peak stays within `budget` bytes (0 when even one image does not fit)."""
        room = budget - self.resident - self.fixed
        return max(int(room // self.per_image), 0) if self.per_image > 0 else 0


def fit_memory(measure: Callable[[int], int], resident: int, batches: tuple[int, int] = (1, 2)) -> MemoryFit:
    """Fit the affine model from `measure(batch)` (bytes above the resident memory) at two batch sizes."""
    b1, b2 = batches
    m1, m2 = measure(b1), measure(b2)
    per_image = (m2 - m1) / (b2 - b1)
    return MemoryFit(resident=resident, fixed=m1 - per_image * b1, per_image=per_image)
