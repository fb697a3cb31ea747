"""Training from `wds:s3://...` (moto's S3 server on 127.0.0.1) equals training from the same shards on local disk,
bitwise, also when the run is killed with SIGKILL and resumed; the secret key it was given appears nowhere in the
run directory or the output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from object_store import BUCKET, SECRET, s3_server, upload

from image_collections import write_small_shards
from tiny import TINY_RECIPE
from training.test_resume import assert_bitwise_equal
from vitkit import cli
from vitkit.training import checkpoint as ckpt

pytestmark = pytest.mark.slow  # a server process and several training runs

STEPS = 24


def train_args(out, source, *extra):
    return ["train", "--out", str(out), "--steps", str(STEPS), "--checkpoint-every", "4", *TINY_RECIPE,
            "train.batch_size=12", "data.crop=inception", f"data.source={source}", "data.workers=2", *extra]  # fmt: skip


def loss_lines(run):
    return [line for line in (run / "metrics.jsonl").read_text().splitlines() if "train_loss" in line]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    root = tmp_path_factory.mktemp("wds")
    return write_small_shards(root)


@pytest.fixture(scope="module")
def local_run(shards):
    out = shards.parent / "local"
    assert cli.main(train_args(out, f"wds:{shards}")) == 0
    assert len(loss_lines(out)) == STEPS
    return out


@pytest.fixture(scope="module")
def bucket(shards):
    with s3_server():
        yield upload(shards, f"s3://{BUCKET}/shards")


def vitkit_train(*args):
    command = [sys.executable, "-m", "vitkit.cli", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def assert_no_secret(run, *outputs):
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert all(SECRET not in output for output in outputs)


def test_training_from_a_bucket_equals_training_from_local_disk(local_run, bucket, tmp_path):
    out = tmp_path / "remote"
    process = vitkit_train(*train_args(out, f"wds:{bucket}"))
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    assert loss_lines(out) == loss_lines(local_run)
    assert_bitwise_equal(out / "final/model.safetensors", local_run / "final/model.safetensors")
    report = json.loads((out / "report.json").read_text())
    assert report["test_images"] == 20 and f"WebDataset shards {bucket}" in report["train_data"]
    assert_no_secret(out, stdout, stderr)


def test_a_run_from_a_bucket_killed_and_resumed_equals_the_local_run(local_run, bucket, tmp_path):
    killed = tmp_path / "killed"
    process = vitkit_train(*train_args(killed, f"wds:{bucket}"))
    deadline = time.monotonic() + 240
    while ckpt.latest_checkpoint(killed) is None and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(process.pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL, stderr
    assert not (killed / "final").exists(), "the run finished before the kill; make it longer"

    resumed = vitkit_train(*train_args(killed, f"wds:{bucket}"), "--resume")
    stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr
    assert "resuming at step" in stdout + stderr
    assert loss_lines(killed) == loss_lines(local_run)
    assert_bitwise_equal(killed / "final/model.safetensors", local_run / "final/model.safetensors")
    assert_no_secret(killed, stdout, stderr)
