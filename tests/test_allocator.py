"""glibc keeps freed tensor memory after `keep_freed_memory` -- which the engine's training step calls on CPU -- so a
loop's large blocks stop faulting pages in."""

import os
import platform
import subprocess
import sys

import pytest

LOOP = """
import resource, sys, torch
from vitkit.allocator import keep_freed_memory, return_freed_memory
if sys.argv[1] in ("keep", "returned"):
    assert keep_freed_memory()
if sys.argv[1] == "returned":
    assert return_freed_memory()
if sys.argv[1].startswith("engine"):  # the engine's TrainStep, built as vitkit train and vitkit bench train build it
    from vitkit.bench.training import Workload, engine_step
    workload = Workload.load(batch_size=32)
    workload.config.train.keep_freed_memory = sys.argv[1] == "engine"  # "engine-off": the recipe switch off
    engine_step(workload, False)
def step():
    torch.ones(12 << 20).sum()  # 48 MiB: above glibc's largest dynamic mmap threshold
step()
step()  # the heap has grown to hold it (blocks left free by start-up may still shift it for a step or two)
faults = []
for _ in range(10):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sorted(faults)[5])  # the median step
"""


def page_faults_per_step(mode: str) -> float:
    """Page faults of the median step of ten."""
    env = {
        **os.environ,
        "VITKIT_EMBEDDED": "1",
    }  # the engine's training set: the subset shipped in the package
    out = subprocess.run(
        [sys.executable, "-c", LOOP, mode], capture_output=True, text=True, check=True, env=env
    )
    return float(out.stdout)


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc")
def test_freed_blocks_are_reused_instead_of_faulted_in_again():
    pages = (48 << 20) // 4096
    assert page_faults_per_step("default") > pages / 2  # each step maps and faults in a fresh block
    assert page_faults_per_step("keep") < pages / 100
    assert page_faults_per_step("returned") > pages / 2  # unmapped again once handed back


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc")
def test_the_engines_training_step_keeps_freed_memory_unless_the_recipe_says_not_to():
    pages = (48 << 20) // 4096
    assert page_faults_per_step("engine") < pages / 100
    assert page_faults_per_step("engine-off") > pages / 2


WORKER = """
import re, torch
from pathlib import Path
from torch.utils.data import Dataset
from vitkit.allocator import keep_freed_memory
from vitkit.data.source import ReadOptions
from vitkit.data.workers import loader
class WorkerRss(Dataset):
    def __len__(self):
        return 1
    def __getitem__(self, _):
        return int(re.search(r"VmRSS:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) // 1024
def worker_mib():
    return next(iter(loader(WorkerRss(), ReadOptions(workers=1, prefetch=1), pin_memory=False)))
assert keep_freed_memory()
before = worker_mib()
blocks = [torch.ones(1 << 20) for _ in range(100)]  # 4 MiB each, kept on the heap once freed
del blocks
print(before, worker_mib())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc")
def test_data_workers_forked_from_a_trainer_do_not_keep_its_free_heap():
    """A worker forked after the trainer freed 400 MiB holds about what one forked before it holds: a worker that
    kept that heap would hold it too."""
    out = subprocess.run(
        [sys.executable, "-c", WORKER], capture_output=True, text=True, check=True, timeout=120
    )
    before, after = map(int, out.stdout.split())
    assert after - before < 50
