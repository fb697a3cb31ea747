"""SIGKILL real `vitkit train` runs at random moments (checkpoint writes and the final write included), resume
each, and check that nothing breaks and nothing is lost.

Runs of a tiny recipe on the embedded Fashion-MNIST subset (dropout, drop-path, EMA and gradient accumulation
on: every piece of state a resume must restore) are killed until --kills SIGKILLs have landed, up to
--kills-per-run a run: in training (after a random number of the process's own checkpoints, then a random part
of the interval between two), while a random checkpoint is being written (a `.tmp-*` directory exists), or while
final/ is being written (which ends that run's kills; so does a run with no checkpoint left before its end). After each kill the run is resumed; after its
last one it runs to the end. Every checkpoint the killed and resumed processes completed, final/ and the logged
training losses must be bitwise equal to those of one uninterrupted run, and no temporary file may remain.
Prints one line per kill and a summary.

    python benchmarks/fault_injection.py --kills 25 --steps 30 --checkpoint-every 5 --seed 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from vitkit.storage import load_state_dict
from vitkit.training.checkpoint import CHECKPOINT_DIR, checkpoint_dirs, checkpoint_step

RECIPE = [
    "model.hidden_size=32", "model.depth=2", "model.num_heads=2", "model.mlp_dim=64", "model.patch_size=4",
    "model.dropout=0.1", "model.drop_path=0.1", "optim.warmup_steps=3", "train.batch_size=32",
    "train.micro_batch_size=16", "train.ema_decay=0.99", "train.log_every=5", "train.threads=1",
    "train.keep_checkpoints=1000",
]  # fmt: skip
PHASES = ("random", "checkpoint", "final")


def command(out: Path, steps: int, every: int, resume: bool) -> list[str]:
    args = ["train", "--out", str(out), "--steps", str(steps), "--checkpoint-every", str(every), *RECIPE]
    return [sys.executable, "-m", "vitkit.cli", *args, *(["--resume"] if resume else [])]


def start(out: Path, steps: int, every: int, resume: bool) -> subprocess.Popen:
    env = {**os.environ, "VITKIT_EMBEDDED": "1"}
    return subprocess.Popen(
        command(out, steps, every, resume),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def leftovers(run: Path) -> list[Path]:
    """Temporary files and directories of interrupted writes."""
    return [p for p in run.rglob("*") if p.name.startswith(".tmp-") or p.name.endswith(".tmp")]


def writing(run: Path, phase: str) -> bool:
    """Whether the run is inside the write `phase` ('checkpoint' or 'final') right now."""
    try:
        if phase == "checkpoint":
            return any(name.startswith(".tmp-") for name in os.listdir(run / CHECKPOINT_DIR))
        return (run / "final").is_dir() and not (run / "report.json").exists()
    except FileNotFoundError:
        return False


def completed(run: Path) -> list[int]:
    """Steps of the run's complete checkpoints."""
    return [checkpoint_step(p) for p in checkpoint_dirs(run)]


def checkpoint_times(process: subprocess.Popen, run: Path) -> list[float]:
    """Wait for `process`, noting when each of its checkpoints became complete (seconds from now)."""
    began, seen, times = time.monotonic(), 0, []
    while process.poll() is None:
        count = len(completed(run))
        times += [time.monotonic() - began] * (count - seen)
        seen = count
        time.sleep(0.01)
    return times


class Target:
    """Where a kill is aimed: after `wait` more checkpoints of this process are complete, then `delay` seconds
    into training ('random'), or inside the next checkpoint write ('checkpoint') or the final write ('final')."""

    def __init__(self, phase: str, ahead: int, interval_s: float, rng: random.Random) -> None:
        # With no checkpoint left before the end, the final write.
        self.phase = phase if ahead >= 1 else "final"
        self.wait = rng.randint(1, ahead) if self.phase == "random" else rng.randint(0, max(ahead - 1, 0))
        self.delay = rng.uniform(0.1, 0.9) * interval_s


def kill_at(
    process: subprocess.Popen, run: Path, target: Target, rng: random.Random, timeout_s: float
) -> str:
    """SIGKILL `process` at `target` (polling every ~0.2 ms); returns what was hit."""
    before = len(completed(run))
    deadline = time.monotonic() + timeout_s
    while process.poll() is None and time.monotonic() < deadline:
        if len(completed(run)) - before >= target.wait and (
            target.phase == "random" or writing(run, target.phase)
        ):
            time.sleep(target.delay if target.phase == "random" else rng.uniform(0.0, 0.002))
            break
        time.sleep(0.0002)
    if process.poll() is not None:
        return "finished first"
    in_checkpoint, in_final = writing(run, "checkpoint"), writing(run, "final")
    process.send_signal(signal.SIGKILL)
    process.wait()
    if in_final:
        return "final write"
    if in_checkpoint:
        return "checkpoint write"
    return "training" if (run / "config.toml").exists() else "start-up"


def bitwise_equal(a: Path, b: Path) -> bool:
    x, y = load_state_dict(a), load_state_dict(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) and x[k].dtype == y[k].dtype for k in x)


def losses(run: Path) -> list[str]:
    return [line for line in (run / "metrics.jsonl").read_text().splitlines() if "train_loss" in line]


def compare(run: Path, reference: Path) -> list[str]:
    """What differs between a killed-and-resumed run and the uninterrupted one (empty: bitwise equal)."""
    problems = []
    for directory in [*checkpoint_dirs(run), run / "final"]:
        twin = reference / directory.relative_to(run)
        for name in ("model.safetensors", "ema.safetensors"):
            if (directory / name).exists() and not bitwise_equal(directory / name, twin / name):
                problems.append(f"{directory.relative_to(run)}/{name} differs")
    if losses(run) != losses(reference):
        problems.append("metrics.jsonl training losses differ")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kills", type=int, default=25, help="SIGKILLs in all (runs are added until reached)"
    )
    parser.add_argument(
        "--kills-per-run", type=int, default=5, help="at most; a kill in the final write ends a run"
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the run directories")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="vitkit-faults-"))
    reference = root / "reference"
    began = time.monotonic()
    process = start(reference, args.steps, args.checkpoint_every, resume=False)
    times = checkpoint_times(process, reference)
    if process.returncode != 0:
        print(f"reference run failed: {process.stderr.read()}", file=sys.stderr)
        return 1
    expected_s = time.monotonic() - began
    interval_s = (times[-1] - times[0]) / max(len(times) - 1, 1)
    print(
        f"reference run: {args.steps} steps in {expected_s:.1f} s (process start-up included), "
        f"{interval_s:.2f} s between checkpoints"
    )
    kills, hits, equal, left, runs = 0, {}, 0, 0, 0
    while kills < args.kills:
        run = root / f"run{runs}"
        for k in range(args.kills_per_run):
            phase = rng.choices(PHASES, weights=(0.6, 0.25, 0.15))[0]
            resume = (run / "config.toml").exists()
            last = max(completed(run), default=0)
            ahead = len(range(last + args.checkpoint_every, args.steps, args.checkpoint_every))
            target = Target(phase, ahead, interval_s, rng)
            process = start(run, args.steps, args.checkpoint_every, resume)
            hit = kill_at(process, run, target, rng, timeout_s=10 * expected_s)
            print(
                f"run {runs} kill {k}: aimed at {target.phase:10s} hit {hit:16s} "
                f"checkpoints {last} -> {max(completed(run), default=0)}"
            )
            if hit == "finished first":
                break
            kills += 1
            hits[hit] = hits.get(hit, 0) + 1
            if hit == "final write" or kills == args.kills:  # nothing left to kill, or enough kills
                break
        process = start(run, args.steps, args.checkpoint_every, resume=(run / "config.toml").exists())
        runs += 1
        if process.wait() != 0:
            print(f"run {runs - 1}: the final resume failed: {process.stderr.read().strip()}")
            continue
        problems = compare(run, reference)
        remaining = leftovers(run)
        equal += not problems
        left += len(remaining)
        print(
            f"run {runs - 1}: {'bitwise equal' if not problems else '; '.join(problems)}; leftovers {len(remaining)}"
        )
    summary = {
        "kills": kills,
        "kills_by_moment": hits,
        "runs": runs,
        "bitwise_equal_runs": equal,
        "leftover_files": left,
        "steps": args.steps,
        "checkpoint_every": args.checkpoint_every,
        "seed": args.seed,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    print(json.dumps(summary))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if equal == runs and left == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
