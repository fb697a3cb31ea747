"""Run a command (e.g. `vitkit train`) and report the peak resident memory of it and of every process it starts
(DataLoader workers), its start-up time to the first training step, and optionally SIGKILL it at a given step.

Memory is read from /proc (Linux), no psutil: every `--every` seconds the process tree is walked and each
process's VmHWM (its own peak RSS, kept by the kernel) and VmRSS are read, and Pss from smaps_rollup. The report
gives each process's peak RSS, their sum (an upper bound: forked workers share copy-on-write pages with the main
process, which RSS counts in both) and the largest simultaneous sums of RSS and of PSS (shared pages split
between the sharers: the memory the run really holds). The engine's line `training: ...` (or `resuming at step
N: ...`) marks the start of its loop, and the first line `step N/...` it prints (with `train.log_every=1`, and
stdout not a terminal) the end of the first step; with `--kill-at-step K` the whole
process group gets SIGKILL as soon as step K is printed: a crash with no chance to clean up.

    python benchmarks/process_tree_memory.py --json mem.json [--kill-at-step 25] -- \\
        python -m vitkit.cli train --out RUN data.source=folder:/work/big/collection train.log_every=1 ...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

STEP_LINE = re.compile(r"^step (\d+)/(\d+)\b")
LOOP_LINE = re.compile(r"^(training|resuming at step \d+): ")  # the engine's last line before its first step
KIB = 1024


@dataclass
class ProcessPeak:
    """What one process of the tree held at most."""

    pid: int
    command: str
    peak_rss: int = 0  # bytes, VmHWM: the kernel's own high-water mark of this process


@dataclass
class TreeMemory:
    """Peaks over the life of a process tree, filled by `sample`."""

    processes: dict[int, ProcessPeak] = field(default_factory=dict)
    peak_rss_sum: int = 0  # largest sum of VmRSS over the tree at one sampling instant
    peak_pss_sum: int = 0  # same for Pss
    samples: int = 0


def children(pid: int) -> list[int]:
    """Direct children of `pid` from /proc/PID/task/*/children (every thread may have started some)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def tree(root: int) -> list[int]:
    """`root` and all its descendants that are alive now."""
    pids, queue = [], [root]
    while queue:
        pid = queue.pop()
        pids.append(pid)
        queue += children(pid)
    return pids


def status_kib(pid: int, fields: tuple[str, ...]) -> dict[str, int]:
    """Fields of /proc/PID/status (or smaps_rollup) in bytes; empty when the process is gone."""
    values: dict[str, int] = {}
    for name in ("status", "smaps_rollup"):
        try:
            text = Path(f"/proc/{pid}/{name}").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, rest = line.partition(":")
            if key in fields and rest.strip().endswith("kB"):
                values[key] = int(rest.split()[0]) * KIB
    return values


def command_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def sample(root: int, memory: TreeMemory) -> None:
    """One look at the tree: update each process's peak and the simultaneous sums."""
    rss_sum = pss_sum = 0
    for pid in tree(root):
        values = status_kib(pid, ("VmHWM", "VmRSS", "Pss"))
        if not values:
            continue
        peak = memory.processes.setdefault(pid, ProcessPeak(pid, command_of(pid)))
        peak.peak_rss = max(peak.peak_rss, values.get("VmHWM", 0))
        rss_sum += values.get("VmRSS", 0)
        pss_sum += values.get("Pss", 0)
    memory.peak_rss_sum = max(memory.peak_rss_sum, rss_sum)
    memory.peak_pss_sum = max(memory.peak_pss_sum, pss_sum)
    memory.samples += 1


def role(peak: ProcessPeak, root: int) -> str:
    if peak.pid == root:
        return "main"
    if "resource_tracker" in peak.command or "semaphore_tracker" in peak.command:
        return "resource tracker"
    return "child"


def main() -> int:
    """Run the command, sample its tree until it ends, print and save the report; returns its exit status."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--every", type=float, default=0.2, help="seconds between samples")
    parser.add_argument(
        "--kill-at-step", type=int, default=None, help="SIGKILL the run when it prints this step"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    start = time.perf_counter()
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        bufsize=1,
    )
    memory = TreeMemory()
    first_step: list[float] = []
    loop_start: list[float] = []
    killed: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            sample(child.pid, memory)
            done.wait(args.every)

    sampler = threading.Thread(target=watch, daemon=True)
    sampler.start()
    assert child.stdout is not None
    for line in child.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        if LOOP_LINE.match(line) and not loop_start:
            loop_start.append(time.perf_counter() - start)
        match = STEP_LINE.match(line)
        if match and not first_step:
            first_step.append(time.perf_counter() - start)
        if (
            match
            and args.kill_at_step is not None
            and int(match.group(1)) >= args.kill_at_step
            and not killed
        ):
            sample(child.pid, memory)
            os.killpg(child.pid, signal.SIGKILL)
            killed.append(int(match.group(1)))
    status = child.wait()
    done.set()
    sampler.join()
    peaks = sorted(memory.processes.values(), key=lambda p: p.pid)
    report = {
        "command": command,
        "exit_status": status,
        "seconds": round(time.perf_counter() - start, 1),
        "seconds_to_loop_start": round(loop_start[0], 1) if loop_start else None,
        "seconds_to_first_step_done": round(first_step[0], 1) if first_step else None,
        "killed_after_step": killed[0] if killed else None,
        "processes": [
            {"pid": p.pid, "role": role(p, child.pid), "peak_rss_bytes": p.peak_rss, "command": p.command}
            for p in peaks
        ],
        "sum_of_peak_rss_bytes": sum(p.peak_rss for p in peaks),
        "peak_simultaneous_rss_bytes": memory.peak_rss_sum,
        "peak_simultaneous_pss_bytes": memory.peak_pss_sum,
        "samples": memory.samples,
    }
    print(f"\n--- process tree memory ({memory.samples} samples every {args.every} s) ---")
    for p in report["processes"]:
        print(
            f"{p['pid']:>8}  {p['role']:<16} peak RSS {p['peak_rss_bytes'] / 2**20:8.0f} MiB  {p['command'][:70]}"
        )
    print(
        f"sum of peak RSS {report['sum_of_peak_rss_bytes'] / 2**30:.2f} GiB; largest simultaneous RSS "
        f"{memory.peak_rss_sum / 2**30:.2f} GiB, PSS {memory.peak_pss_sum / 2**30:.2f} GiB"
    )
    print(
        f"loop started after {report['seconds_to_loop_start']} s, first step done after "
        f"{report['seconds_to_first_step_done']} s; exit status {status}"
        + (f" (SIGKILL after step {killed[0]})" if killed else "")
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
