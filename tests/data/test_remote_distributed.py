"""One run over two torchrun agents (c10d rendezvous on 127.0.0.1, one CPU process each, as two machines would run
it) reading the same bucket (moto's S3 server): its losses are those of the two-process run on the same shards on
local disk; one agent killed with SIGKILL, and both started again with --resume, the run ends as the uninterrupted
one does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from object_store import BUCKET, free_port, s3_server, upload

from distributed.conftest import SPLIT_INVARIANT_RECIPE, TORCHRUN, environment, run_torchrun
from distributed.test_torchrun import _worker_pid
from image_collections import write_small_shards
from vitkit.training import checkpoint as ckpt

pytestmark = pytest.mark.slow  # torchrun process groups and a server process

STEPS = 60
WAIT = 300  # seconds for any one launch on a loaded machine


def train_args(out: Path, source: str, *extra: str) -> list[str]:
    return ["train", "--out", str(out), "--steps", str(STEPS), "--checkpoint-every", "10", *SPLIT_INVARIANT_RECIPE,
            "train.batch_size=12", "data.crop=inception", f"data.source={source}", "data.workers=1", *extra]  # fmt: skip


def losses(run: Path) -> dict[int, float]:
    records = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return {r["step"]: r["train_loss"] for r in records if "train_loss" in r}


def agent(args: list[str], cwd: Path, port: int, run_id: str) -> subprocess.Popen:
    """One torchrun agent of a 2-node job, one process on this node, meeting the other at 127.0.0.1:`port`."""
    command = [str(TORCHRUN), "--nnodes=2", "--nproc_per_node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}", "-m", "vitkit.cli", *args]  # fmt: skip
    return subprocess.Popen(command, cwd=cwd, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)  # fmt: skip


def two_agents(args: list[str], cwd: Path, run_id: str) -> tuple[subprocess.Popen, subprocess.Popen]:
    port = free_port()
    first = agent(args, cwd, port, run_id)  # it hosts the rendezvous store
    time.sleep(2)
    return first, agent(args, cwd, port, run_id)


def finish(process: subprocess.Popen, wait: float = WAIT) -> tuple[int, str]:
    """The agent's exit code and output; after `wait` seconds it is stopped with its processes (SIGKILL)."""
    try:
        output, _ = process.communicate(timeout=wait)
    except subprocess.TimeoutExpired:
        # torchrun starts each training process in a session of its own: stopped one by one, then the agent's group
        for worker in filter(None, (_worker_pid(process.pid, rank) for rank in (0, 1))):
            os.kill(worker, signal.SIGKILL)
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
    return process.returncode, output


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the training process through /proc")
def test_two_agents_reading_a_bucket_train_as_the_local_run_and_resume_after_a_kill(tmp_path):
    if not TORCHRUN.is_file():
        pytest.skip("torchrun is not available")
    shards = write_small_shards(tmp_path)
    local = tmp_path / "local"
    run_torchrun(train_args(local, f"wds:{shards}"), cwd=tmp_path)  # 2 processes, one agent
    assert sorted(losses(local)) == list(range(1, STEPS + 1))
    with s3_server():
        bucket = upload(shards, f"s3://{BUCKET}/shards")
        run = tmp_path / "remote"
        first, second = two_agents(train_args(run, f"wds:{bucket}"), tmp_path, "remote-run")
        deadline = time.monotonic() + WAIT
        while ckpt.latest_checkpoint(run) is None and second.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ckpt.latest_checkpoint(run) is not None, finish(second)[1]
        assert not (run / "final").exists(), "the run ended before the kill; make it longer"
        # The node goes: its training process (torchrun starts it in a session of its own) and its agent.
        worker = next(filter(None, (_worker_pid(second.pid, rank) for rank in (0, 1))), None)
        assert worker is not None, "no training process under the second agent"
        os.kill(worker, signal.SIGKILL)
        os.killpg(second.pid, signal.SIGKILL)
        second.wait()
        # The other node's process stops when it loses its peer, or waits in a collective: then it is stopped.
        code, output = finish(first, wait=60)
        assert code != 0 and not (run / "final").exists(), output

        first, second = two_agents(
            [*train_args(run, f"wds:{bucket}"), "--resume"], tmp_path, "remote-resumed"
        )
        outputs = []
        for process in (first, second):
            code, output = finish(process)
            assert code == 0, output
            outputs.append(output)
    assert "resuming at step" in "".join(outputs)
    assert losses(run) == losses(local)
    assert json.loads((run / "report.json").read_text())["world_size"] == 2
