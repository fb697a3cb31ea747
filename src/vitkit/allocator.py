"""Keep freed tensor memory in the process between training steps, as a caching allocator does on a GPU, and hand
it back where a process must stay small.

PyTorch's CPU tensors come from the C library's malloc. glibc serves large blocks (over 128 KiB, a threshold it
raises to at most 32 MiB as it goes) with fresh mmap pages and hands freed memory at the top of its heap back to
the OS, so every step of a training loop faults its activations and gradients in again, page by page, each page
zeroed by the kernel, and a step without those page faults is faster (`python benchmarks/page_faults.py` counts
and times both; docs/BENCHMARKS.md has the figures). The engine's `TrainStep` therefore raises both thresholds
on CPU (recipe switch `train.keep_freed_memory`, on by default), which is what setting MALLOC_MMAP_THRESHOLD_
and MALLOC_TRIM_THRESHOLD_ before start-up does (PyTorch's CPU tuning guide recommends a caching allocator,
jemalloc or tcmalloc, for the same reason). The process then keeps its peak heap, like torch.cuda's caching
allocator, instead of returning it after each step.

glibc also adapts on its own: once a process frees a block above the current threshold (an evaluation pass at
batch 500 does), the trimming mostly stops. A run that evaluates early therefore gains little (the 30-minute
recipe, evaluating every 1,000 steps: the same wall time within the machine's drift); one that never evaluates
(the default recipe) gains on every step. Tuning at the start makes the step's speed independent of that history.

A process that keeps its peak heap must not pass it on: DataLoader workers forked from the trainer inherit the
thresholds and its free heap, and would keep every image buffer they ever held (docs/DATA.md has the memory of a
run before and after). `return_freed_memory` restores glibc's fixed default thresholds and trims the heap;
the data pipeline's workers call it when they start, the engine once its training loop is over.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's <malloc.h>
M_MMAP_THRESHOLD = -3
RETAIN_BYTES = 1 << 30  # blocks up to 1 GiB come from the heap; up to 1 GiB of free heap top is kept
DEFAULT_BYTES = 128 << 10  # glibc's initial value of both thresholds


def _glibc() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    return ctypes.CDLL(ctypes.util.find_library("c"))


def _set_thresholds(libc: ctypes.CDLL, size: int) -> bool:
    return bool(libc.mallopt(M_MMAP_THRESHOLD, size)) and bool(libc.mallopt(M_TRIM_THRESHOLD, size))


def keep_freed_memory() -> bool:
    """Make glibc keep freed blocks for reuse instead of unmapping them; False (nothing done) without glibc."""
    libc = _glibc()
    return libc is not None and _set_thresholds(libc, RETAIN_BYTES)


def return_freed_memory() -> bool:
    """Make glibc unmap large freed blocks again (fixed 128 KiB thresholds) and give the free heap back to the OS
    now; False (nothing done) without glibc."""
    libc = _glibc()
    if libc is None or not _set_thresholds(libc, DEFAULT_BYTES):
        return False
    libc.malloc_trim(0)
    return True
