"""Real training processes reading an ImageFolder with two DataLoader worker processes: Ctrl-C (SIGINT) and
SIGTERM at random points, sent to the main process or to the whole process group (as a terminal, Slurm, systemd
and `kill -TERM -PGID` send them), stop them within seconds, exit 130 with one line and leave no process behind,
and a resume started at once after SIGKILL (as torchrun
restarts a worker) takes the lock and runs. The default suite signals one point and allows the interpreter's
teardown up to HANG_SECONDS (no hang); the slow tests, RANDOM_POINTS points of each signal and target, want the exit itself within
EXIT_SECONDS, which needs a machine not shared with other heavy work."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile_files import grey_folder
from tiny import TINY_RECIPE
from vitkit.recipe.run_config import RECIPE_NAME
from vitkit.training.checkpoint import CHECKPOINT_DIR
from vitkit.training.rundir import RunDirLock

EXIT_SECONDS = 10
HANG_SECONDS = 60  # the interpreter's own teardown after the run stopped, on a machine shared with other work
START_SECONDS = 60  # a process start-up (imports, data, model) on a loaded machine
LEFTOVER_SECONDS = 10  # for the last worker process to be gone once the main process exited
INTERRUPTED = "vitkit train: interrupted"
RANDOM_POINTS = 6  # per signal and target, 24 runs in all: CI time
IMMEDIATE_RESUMES = 6


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return grey_folder(tmp_path_factory.mktemp("signals") / "images", classes=("a", "b", "c"), per_class=8)


def start(out: Path, folder: Path, steps: int, *extra: str, checkpoint_every: int = 2) -> subprocess.Popen:
    """`vitkit train` in its own process (and session, as a terminal job), data read by 2 worker processes."""
    recipe = [*TINY_RECIPE, "optim.warmup_steps=1", "train.batch_size=12", "train.log_every=1", "train.eval_every=7",
              f"data.source=folder:{folder}", "data.workers=2"]  # fmt: skip
    command = [sys.executable, "-m", "vitkit.cli", "train", "--out", str(out), "--steps", str(steps),
               "--checkpoint-every", str(checkpoint_every), *recipe, *extra]  # fmt: skip
    log = open(out.parent / f"{out.name}.log", "ab")  # noqa: SIM115  (closed with the process)
    # Unbuffered, as on a terminal: the log's lines in the order they were written, the last one last.
    env = os.environ | {"VITKIT_EMBEDDED": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True, env=env)


def wait_for(condition, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while not condition():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{what}: not reached (exit code {process.poll()})")
        time.sleep(0.05)


def interrupt_at(
    point: float, sig: int, out: Path, folder: Path, group: bool
) -> tuple[float, float, int | None, str]:
    """Start a run, send `sig` `point` seconds after its run directory appears, to the process or its whole
    `group`; (seconds from the signal to the run's "interrupted" line, to the process's exit; exit code; what went
    wrong in the end: its last line when that is not the "interrupted" line, a traceback, a process left behind).
    The process group (the workers too) is killed however the test ends."""
    process = start(out, folder, 100_000, checkpoint_every=10)
    log = out.parent / f"{out.name}.log"
    try:
        wait_for((out / RECIPE_NAME).exists, process, "the run's start")
        time.sleep(point)
        sent = time.monotonic()
        os.killpg(process.pid, sig) if group else process.send_signal(sig)
        stopped = None
        while process.poll() is None and time.monotonic() - sent < HANG_SECONDS:
            if stopped is None and INTERRUPTED in log.read_text(errors="replace"):
                stopped = time.monotonic() - sent
            time.sleep(0.02)
        exited = time.monotonic() - sent
        return (
            exited if stopped is None else stopped,
            exited,
            process.poll(),
            wrong_ending(log, process, group),
        )
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def wrong_ending(log: Path, process: subprocess.Popen, group: bool) -> str:
    """What is wrong with how an interrupted run ended ("" if nothing): its last line is not INTERRUPTED, the log
    holds a traceback (checked when the group was signalled: signalled alone, the main process stops workers that
    may be handing it a tensor, and multiprocessing's fd-sharing thread in a worker can print a BrokenPipeError),
    or a process of its group (a DataLoader worker) is still running LEFTOVER_SECONDS later."""
    text = log.read_text(errors="replace")
    if text.splitlines()[-1:] != [INTERRUPTED]:
        return f"ended with {text.splitlines()[-3:]}"
    if group and "Traceback" in text:
        return f"a traceback: {text[text.index('Traceback') :][:1500]}"
    deadline = time.monotonic() + LEFTOVER_SECONDS
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return ""
        time.sleep(0.05)
    return "a process of its group left running"


def check_points(
    points: list[tuple[float, int]], tmp_path: Path, folder: Path, exit_seconds: float, group: bool = False
) -> None:
    """Every run stops (closes what it opened and says "interrupted") within EXIT_SECONDS of the signal and
    exits, code 130 and that one line last, within `exit_seconds`, leaving no process behind; its lock is free
    afterwards."""
    results = [
        interrupt_at(point, sig, tmp_path / f"run{i}", folder, group) for i, (point, sig) in enumerate(points)
    ]
    print(f"{len(points)} signals: stopped after at most {max(r[0] for r in results):.2f} s, exited after at most "
          f"{max(r[1] for r in results):.2f} s; exit codes {sorted({r[2] for r in results})}")  # fmt: skip
    late = [(p, s, r) for (p, s), r in zip(points, results, strict=True)
            if r[0] > EXIT_SECONDS or r[1] > exit_seconds or r[2] != 130 or r[3]]  # fmt: skip
    assert not late, f"{len(late)} of {len(points)} late, with another exit code or ending: {late}"
    for i in range(len(points)):
        RunDirLock(tmp_path / f"run{i}").acquire().release()  # every lock free once the process is gone


def random_points(count: int, seed: int) -> list[tuple[float, int]]:
    rng = random.Random(seed)
    return [(rng.uniform(0, 4), (signal.SIGINT, signal.SIGTERM)[i % 2]) for i in range(count)]


def test_ctrl_c_ends_a_run_with_workers_within_seconds(tmp_path: Path, folder: Path) -> None:
    """Half a second into the run (its workers reading); SIGTERM and other points: the slow test. The exit itself
    within HANG_SECONDS: on a loaded machine Python's teardown alone can take 10 s."""
    check_points([(0.5, signal.SIGINT)], tmp_path, folder, exit_seconds=HANG_SECONDS)


def test_sigterm_to_the_process_group_ends_a_run_as_interrupted(tmp_path: Path, folder: Path) -> None:
    """The workers receive it too: they end quietly and the main process stops the run, code 130, one line."""
    check_points([(0.5, signal.SIGTERM)], tmp_path, folder, exit_seconds=HANG_SECONDS, group=True)


def test_a_second_ctrl_c_on_the_way_out_ends_it_without_a_traceback(tmp_path: Path, folder: Path) -> None:
    """Ctrl-C pressed twice: the second, sent the moment "interrupted" is printed, lands in the interpreter's
    teardown, where a KeyboardInterrupt would print a traceback; the process ends at once, as interrupted."""
    out = tmp_path / "run"
    process = start(out, folder, 100_000, checkpoint_every=10)
    log = out.parent / f"{out.name}.log"
    try:
        wait_for((out / RECIPE_NAME).exists, process, "the run's start")
        time.sleep(0.5)
        process.send_signal(signal.SIGINT)
        wait_for(lambda: INTERRUPTED in log.read_text(errors="replace"), process, "the interrupted line")
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)
        code = process.wait(timeout=HANG_SECONDS)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    text = log.read_text(errors="replace")
    # 130 from vitkit, or death by SIGINT once the interpreter has put the default action back: a shell shows 130
    assert code in (130, -signal.SIGINT), text[-1500:]
    assert "Traceback" not in text and text.splitlines()[-1] == INTERRUPTED, text[-1500:]


@pytest.mark.slow
@pytest.mark.parametrize("group", [False, True], ids=["process", "group"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_random_points_each_end_within_seconds(sig: int, group: bool, tmp_path: Path, folder: Path) -> None:
    points = [(point, sig) for point, _ in random_points(RANDOM_POINTS, seed=sig)]
    check_points(points, tmp_path, folder, EXIT_SECONDS, group)


def kill_and_resume(out: Path, folder: Path, kills: int, seed: int) -> None:
    """Start a run; `kills` times: SIGKILL it at a random point after its first checkpoint and start the resume
    at once (orphaned workers may still be running). Every resume must start; the last runs to the end."""
    rng = random.Random(seed)
    steps = 6 * (kills + 1)
    log = out.parent / f"{out.name}.log"
    process = start(out, folder, steps)
    for kill in range(kills):
        wait_for(
            lambda: any((out / CHECKPOINT_DIR).glob("step_*")), process, f"a checkpoint before kill {kill}"
        )
        time.sleep(rng.uniform(0, 0.5))
        process.kill()
        process.wait()
        process = start(out, folder, steps, "--resume")
        resumed = kill + 1
        wait_for(lambda: log.read_text(errors="replace").count("resuming at step") == resumed, process,  # noqa: B023
                 f"resume {resumed}")  # fmt: skip
    assert process.wait(timeout=10 * START_SECONDS) == 0
    text = log.read_text(errors="replace")
    assert "in use by" not in text and text.count("resuming at step") == kills
    assert (out / "report.json").is_file()


@pytest.mark.slow
def test_immediate_resumes_after_sigkill_all_start(tmp_path: Path, folder: Path) -> None:
    kill_and_resume(tmp_path / "run", folder, kills=IMMEDIATE_RESUMES, seed=1)
