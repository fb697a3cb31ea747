"""Resume after a real SIGKILL ends bitwise identical to an uninterrupted run; partial checkpoints are never read."""

import os
import signal
import subprocess
import sys
import time

import pytest

from vitkit import cli
from vitkit.storage import load_state_dict
from vitkit.train import checkpoint as ckpt
from vitkit.train.rundir import remove_leftovers

# Dropout, drop-path, EMA and gradient accumulation on: every piece of state a resume must restore.
STATEFUL = ["model.dropout=0.1", "model.drop_path=0.1", "train.ema_decay=0.99", "train.micro_batch_size=16"]
STEPS = 40


def train_args(out, tiny, *extra):
    args = ["train", "--out", str(out), "--steps", str(STEPS), "--checkpoint-every", "5", *tiny]
    return [*args, "model.patch_size=4", *STATEFUL, *extra]


def vitkit_train(out, tiny, *extra):
    env = {**os.environ, "VITKIT_EMBEDDED": "1"}
    command = [sys.executable, "-m", "vitkit.cli", *train_args(out, tiny, *extra)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def assert_bitwise_equal(a, b):
    """Same names, dtypes and bytes (safetensors files themselves differ: their metadata order is not fixed)."""
    a, b = load_state_dict(a), load_state_dict(b)
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].numpy().tobytes() == b[name].numpy().tobytes(), name


@pytest.mark.slow
def test_resume_after_sigkill_is_bitwise_identical(tmp_path, tiny):
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    assert cli.main(train_args(reference, tiny)) == 0  # in this process: one interpreter start-up fewer

    process = vitkit_train(killed, tiny)
    deadline = time.monotonic() + 120
    while ckpt.latest_checkpoint(killed) is None and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (killed / "final").exists(), "the run finished before the kill; make it longer"

    resumed = vitkit_train(killed, tiny, "--resume")
    assert resumed.wait() == 0, resumed.stderr.read()
    for name in (
        "final/model.safetensors",
        f"checkpoints/step_{STEPS:08d}/model.safetensors",
        f"checkpoints/step_{STEPS:08d}/ema.safetensors",
    ):
        assert_bitwise_equal(killed / name, reference / name)
    losses = [line for line in (killed / "metrics.jsonl").read_text().splitlines() if "train_loss" in line]
    assert losses == [
        line for line in (reference / "metrics.jsonl").read_text().splitlines() if "train_loss" in line
    ]


def test_partial_checkpoints_are_ignored_and_cleaned(tmp_path):
    root = tmp_path / ckpt.CHECKPOINT_DIR
    (root / "step_00000010").mkdir(parents=True)
    (root / "step_00000010" / ckpt.STATE_NAME).write_text('{"step": 10}')
    (root / "step_00000020").mkdir()  # renamed by hand or damaged: no manifest, never picked up
    (root / ".tmp-step_00000030-abc").mkdir()  # a writer killed mid-checkpoint
    assert ckpt.latest_checkpoint(tmp_path) == root / "step_00000010"
    remove_leftovers(tmp_path)
    assert not (root / ".tmp-step_00000030-abc").exists()
