"""Nothing of a stopped run is lost. Ctrl-C (SIGINT) or SIGTERM at a random step of the default recipe (shortened)
and of a photos_last_blocks fit: the step in progress ends, a checkpoint of it is written, the process exits 130
within the documented bound and prints the command that continues it; that command, run as printed, ends bitwise
equal to an uninterrupted run, so at most the steps since the signal are lost. A SIGKILL loses at most about
train.checkpoint_minutes (checkpoints by time). Each run is a process of its own, signalled from outside."""

from __future__ import annotations

import json
import os
import random
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import vitkit
from image_collections import write_folder
from vitkit import cli, shutdown
from vitkit.storage import load_state_dict
from vitkit.training.checkpoint import checkpoint_step, latest_checkpoint, read_checkpoint

START_SECONDS = 120  # a process start-up and its first steps on a loaded machine
HANG_SECONDS = 60  # the interpreter's own teardown after the run stopped, on a machine shared with other work
SIGNALS = [signal.SIGINT, signal.SIGTERM]

# The default recipe (ViT-Mini/4 on Fashion-MNIST, AdamW, cosine) shortened: fewer, smaller steps; one thread
# and float32 for bitwise comparisons; a loss line each step, to signal at a known one.
DEFAULT_STEPS = 40
DEFAULT = ["--steps", str(DEFAULT_STEPS), "train.batch_size=32", "optim.warmup_steps=5", "train.log_every=1",
           "train.threads=1", "train.precision=fp32", "train.device=cpu"]  # fmt: skip
LAST_BLOCKS_STEPS = 300  # cached tokens of a small ViT: milliseconds a step
SMALL = dict(img_size=32, patch_size=8, hidden_size=32, depth=3, num_heads=2, mlp_dim=32)


@pytest.fixture(scope="module")
def photos_and_weights(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("stopped")
    torch.manual_seed(0)
    vitkit.create_model("ViT-Ti/16", **SMALL, num_classes=7).save_pretrained(root / "vit")
    return write_folder(root / "photos"), root / "vit"


def default_command(out: Path, *extra: str) -> list[str]:
    return ["train", "--out", str(out), *DEFAULT, *extra]


def last_blocks_command(out: Path, photos: Path, weights: Path, *extra: str) -> list[str]:
    return ["finetune", "--weights", str(weights), "--config", "photos_last_blocks", f"data.source=folder:{photos}",
            "model.img_size=32", "train.precision=fp32", "train.threads=1", "train.device=cpu", "train.tuned_blocks=1",
            "--steps", str(LAST_BLOCKS_STEPS), "--batch-size", "16", "train.log_every=1", "--out", str(out),
            *extra]  # fmt: skip


def start(argv: list[str], log: Path) -> subprocess.Popen:
    """`vitkit ARGV` in a process (and session) of its own, unbuffered as on a terminal, output into `log`."""
    env = os.environ | {"PYTHONUNBUFFERED": "1", "VITKIT_EMBEDDED": "1"}
    with open(log, "ab") as file:
        return subprocess.Popen([sys.executable, "-m", "vitkit.cli", *argv], stdout=file, stderr=file,
                                start_new_session=True, env=env)  # fmt: skip


def logged_step(log: Path, total: int) -> int:
    """The last step whose line the log holds (`step N/TOTAL`), 0 before the first."""
    marks = [
        line.split()[1] for line in log.read_text(errors="replace").splitlines() if line.startswith("step ")
    ]
    steps = [int(mark.split("/")[0]) for mark in marks if mark.endswith(f"/{total}")]
    return max(steps, default=0)


def signal_at_step(argv: list[str], log: Path, step: int, total: int, sig: int) -> tuple[int, float, int]:
    """Start `vitkit ARGV`, send `sig` once its log shows step `step`: (the step logged then, seconds from the
    signal to the exit, exit code)."""
    process = start(argv, log)
    try:
        deadline = time.monotonic() + START_SECONDS
        while logged_step(log, total) < step:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.01)
        seen = logged_step(log, total)
        sent = time.monotonic()
        process.send_signal(sig)
        code = process.wait(timeout=shutdown.FINISH_SECONDS + HANG_SECONDS)
        return seen, time.monotonic() - sent, code
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def continue_as_printed(log: Path) -> None:
    """Run the command the stopped run printed after `to continue:`, as printed (`vitkit` being this vitkit)."""
    lines = [line for line in log.read_text().splitlines() if line.startswith("to continue: ")]
    assert len(lines) == 1, log.read_text()
    words = shlex.split(lines[0].removeprefix("to continue: "))
    assert words[0] == "vitkit" and "--resume" in words
    assert cli.main(words[1:]) == 0


def assert_bitwise_equal(a: Path, b: Path) -> None:
    x, y = load_state_dict(a), load_state_dict(b)
    assert x.keys() == y.keys()
    assert all(torch.equal(x[name], y[name]) for name in x), f"{a} and {b} differ"


def losses(run: Path) -> list[str]:
    return [line for line in (run / "metrics.jsonl").read_text().splitlines() if "train_loss" in line]


def check_stopped(run: Path, log: Path, seen: int, seconds: float, code: int) -> None:
    """Exit 130 within the bound, one checkpoint at or after the step logged when the signal was sent, the line
    saying so, the resume command and the interrupted line last."""
    text = log.read_text()
    assert code == cli.INTERRUPTED, text
    assert seconds < shutdown.FINISH_SECONDS + HANG_SECONDS, text
    saved = checkpoint_step(latest_checkpoint(run))
    assert saved >= seen, f"checkpoint step {saved}, but step {seen} was logged before the signal"
    assert f"stopped after step {saved} of " in text and "to continue: vitkit train --out" in text
    assert text.splitlines()[-1].endswith(": interrupted")


@pytest.fixture(scope="module")
def default_reference(tmp_path_factory, embedded_module) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    assert cli.main(default_command(out)) == 0
    return out


@pytest.fixture(scope="module")
def embedded_module():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VITKIT_EMBEDDED", "1")
        yield


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signalled_default_run_keeps_its_step_and_resumes_bitwise(sig, tmp_path, default_reference) -> None:
    step = random.Random(sig).randint(3, DEFAULT_STEPS // 2)
    run, log = tmp_path / "run", tmp_path / "run.log"
    seen, seconds, code = signal_at_step(default_command(run), log, step, DEFAULT_STEPS, sig)
    print(f"{sig.name} at step {seen}: exit {code} after {seconds:.2f} s; checkpoint step "
          f"{checkpoint_step(latest_checkpoint(run))}")  # fmt: skip
    check_stopped(run, log, seen, seconds, code)
    continue_as_printed(log)
    assert_bitwise_equal(run / "final/model.safetensors", default_reference / "final/model.safetensors")
    assert losses(run) == losses(default_reference) and len(losses(run)) == DEFAULT_STEPS


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=[s.name for s in SIGNALS])
def test_a_signalled_last_blocks_fit_keeps_its_step_and_resumes_bitwise(
    sig, tmp_path, photos_and_weights
) -> None:
    photos, weights = photos_and_weights
    reference = tmp_path / "reference"
    assert cli.main(last_blocks_command(reference, photos, weights)) == 0
    step = random.Random(sig).randint(20, LAST_BLOCKS_STEPS // 2)
    run, log = tmp_path / "run", tmp_path / "run.log"
    seen, seconds, code = signal_at_step(
        last_blocks_command(run, photos, weights), log, step, LAST_BLOCKS_STEPS, sig
    )
    print(f"{sig.name} at step {seen}: exit {code} after {seconds:.2f} s; checkpoint step "
          f"{checkpoint_step(latest_checkpoint(run))}")  # fmt: skip
    check_stopped(run, log, seen, seconds, code)
    assert f"plan: {LAST_BLOCKS_STEPS} steps of 16 sequences; " in log.read_text()  # its time estimate
    continue_as_printed(log)
    assert_bitwise_equal(run / "final/model.safetensors", reference / "final/model.safetensors")
    finished, expected = (json.loads((r / "report.json").read_text()) for r in (run, reference))
    assert finished["final_loss"] == expected["final_loss"] and finished["test_top1"] == expected["test_top1"]


@pytest.mark.slow
def test_sigkill_loses_at_most_about_checkpoint_minutes(tmp_path, default_reference) -> None:
    """With train.checkpoint_minutes=0.005 (0.3 s, less than the steps before the kill take even on a fast
    machine), the newest checkpoint at a SIGKILL is at most that, a step and a checkpoint's write old; the resume
    from it is bitwise."""
    minutes = 0.005
    run, log = tmp_path / "run", tmp_path / "run.log"
    command = default_command(run, f"train.checkpoint_minutes={minutes}")
    seen, _, code = signal_at_step(command, log, 3 * DEFAULT_STEPS // 4, DEFAULT_STEPS, signal.SIGKILL)
    killed = time.time()
    assert code == -signal.SIGKILL
    latest = latest_checkpoint(run)
    assert latest is not None, f"no checkpoint {60 * minutes:.1f} s apart in the {seen} steps before the kill"
    age = killed - (latest / "state.json").stat().st_mtime
    saved = read_checkpoint(latest).step
    print(f"SIGKILL at step {seen}: newest checkpoint step {saved}, written {age:.2f} s before")
    assert 0 < saved <= seen and age < 60 * minutes + 5.0  # 5 s: a step and a write on a loaded machine
    assert cli.main(default_command(run, f"train.checkpoint_minutes={minutes}", "--resume")) == 0
    assert_bitwise_equal(run / "final/model.safetensors", default_reference / "final/model.safetensors")
    assert losses(run) == losses(default_reference)
