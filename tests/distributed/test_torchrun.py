"""vitkit train under torchrun with 2 CPU processes: same losses as one process, resumable across world sizes.

Every run is 30 steps of a ~20k-parameter ViT; the single-process reference runs in this interpreter.
"""

import contextlib
import io
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

import vitkit
from command_lines import api_sections
from image_collections import write_folder
from vitkit import cli
from vitkit.training import checkpoint as ckpt
from vitkit.training import checkpoint_formats

from .conftest import STEPS, run_torchrun, torchrun, truncate

pytestmark = pytest.mark.slow  # each test starts torchrun process groups

CHECKPOINTS = ["--steps", str(STEPS), "--checkpoint-every", "10"]


def losses(run: Path) -> dict[int, float]:
    records = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return {r["step"]: r["train_loss"] for r in records if "train_loss" in r}


def assert_same_training(a: Path, b: Path, steps=range(1, STEPS + 1)) -> None:
    la, lb = losses(a), losses(b)
    for step in steps:
        assert lb[step] == pytest.approx(la[step], rel=1e-3), (step, la[step], lb[step])


def train_here(args: list[str]) -> str:
    """`vitkit train` in this process (one interpreter start-up fewer than a subprocess)."""
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as printed:
        patch.setenv("VITKIT_EMBEDDED", "1")  # also in module-scoped fixtures, which autouse fixtures miss
        assert cli.main(["train", *args]) == 0
    torch.set_num_threads(threads)
    return printed.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_recipe):
    """The same recipe trained by 1 process, by 2 with DDP and by 2 with FSDP."""
    root = tmp_path_factory.mktemp("runs")
    single, ddp, fsdp = root / "single", root / "ddp", root / "fsdp"
    # The reference names strategy fsdp too (one process trains the plain model), so its copy resumes under FSDP.
    train_here(["--out", str(single), *CHECKPOINTS, *tiny_recipe, "train.strategy=fsdp"])
    run_torchrun(["train", "--out", str(ddp), *CHECKPOINTS, *tiny_recipe, "train.strategy=ddp"], cwd=root)
    run_torchrun(["train", "--out", str(fsdp), *CHECKPOINTS, *tiny_recipe, "train.strategy=fsdp"], cwd=root)
    return single, ddp, fsdp


def test_ddp_on_two_processes_trains_like_one_process(runs):
    single, ddp, _ = runs
    assert_same_training(single, ddp)
    report = json.loads((ddp / "report.json").read_text())
    assert report["world_size"] == 2 and report["steps"] == STEPS
    assert json.loads((single / "report.json").read_text())["world_size"] == 1
    assert report["test_top1"] == pytest.approx(
        json.loads((single / "report.json").read_text())["test_top1"], abs=0.01
    )
    assert sorted(p.name for p in ddp.parent.iterdir()) == ["ddp", "fsdp", "single"]  # one run directory each


def test_fsdp_on_two_processes_trains_like_ddp(runs):
    single, ddp, fsdp = runs
    assert_same_training(ddp, fsdp)
    report = json.loads((fsdp / "report.json").read_text())
    assert report["world_size"] == 2
    assert report["parameters"] == json.loads((ddp / "report.json").read_text())["parameters"]
    assert checkpoint_formats.is_sharded(ckpt.latest_checkpoint(fsdp))  # torch.distributed.checkpoint shards
    assert sorted(p.name for p in (fsdp / "final").iterdir()) == ["config.json", "model.safetensors"]
    from vitkit import load_weights

    assert load_weights(fsdp).config.num_classes == 10  # final/ is a plain, full model


def test_train_processes_starts_the_ranks_itself(runs, tmp_path, tiny_recipe, monkeypatch):
    """train.processes=2 without a launcher: vitkit starts torch's launcher itself; the run is the torchrun run."""
    _, ddp, _ = runs
    run = tmp_path / "self_launched"
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert (
        cli.main(
            [
                "train",
                "--out",
                str(run),
                *CHECKPOINTS,
                *tiny_recipe,
                "train.strategy=ddp",
                "train.processes=2",
            ]
        )
        == 0
    )
    assert json.loads((run / "report.json").read_text())["world_size"] == 2
    assert losses(run) == pytest.approx(losses(ddp), rel=1e-6)
    assert "processes = 2" in (run / "config.toml").read_text()


def test_train_processes_from_python_start_the_ranks_too(runs, tmp_path, tiny_recipe, monkeypatch, capfd):
    """vitkit.train(train={"processes": 2}) starts the ranks as the command line does: the torchrun run again,
    quiet as asked, with the call in run.json."""
    _, ddp, _ = runs
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    settings = [f"train.steps={STEPS}", "train.checkpoint_every=10", *tiny_recipe, "train.strategy=ddp"]
    report = vitkit.train(out=tmp_path / "run", quiet=True, **api_sections([*settings, "train.processes=2"]))
    assert report["world_size"] == 2
    assert losses(tmp_path / "run") == pytest.approx(losses(ddp), rel=1e-6)
    assert capfd.readouterr().out == ""
    command = json.loads((tmp_path / "run" / "run.json").read_text())["starts"][0]["command"]
    assert command[0].startswith("vitkit.train(out=") and "quiet=True" in command[0]


def test_train_processes_reports_a_failed_rank_in_one_line(tmp_path, tiny_recipe, monkeypatch, capfd):
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    args = ["train", "--out", str(tmp_path / "run"), "--steps", "5", *tiny_recipe, "train.processes=2"]
    assert cli.main([*args, "data.dataset=cifar10", f"data.data_dir={tmp_path}"]) == 2
    err = capfd.readouterr().err
    assert "vitkit train: error: CIFAR-10 train" in err and "Traceback" not in err


def test_a_checkpoint_of_two_fsdp_processes_resumes_in_one(runs, tmp_path):
    _, _, fsdp = runs
    resumed = truncate(fsdp, tmp_path / "resumed", step=20)
    printed = train_here(["--out", str(resumed), "--resume"])
    assert "test top-1" in printed
    assert_same_training(fsdp, resumed, steps=range(21, STEPS + 1))
    assert json.loads((resumed / "report.json").read_text())["world_size"] == 1


def test_a_checkpoint_of_one_process_resumes_in_two_fsdp_processes(runs, tmp_path):
    single, _, _ = runs
    resumed = truncate(single, tmp_path / "resumed", step=20)
    output = run_torchrun(["train", "--out", str(resumed), "--resume"], cwd=tmp_path)
    assert "resuming at step 20" in output and output.count("test top-1") == 1  # rank 0 alone prints
    assert_same_training(single, resumed, steps=range(21, STEPS + 1))
    assert json.loads((resumed / "report.json").read_text())["world_size"] == 2
    assert checkpoint_formats.is_sharded(ckpt.latest_checkpoint(resumed))


def test_images_skipped_on_every_rank_are_all_reported(tmp_path, tiny_recipe):
    root = write_folder(tmp_path / "images")  # 60 training images
    corrupt = sorted((root / "train").rglob("*.png"))[::4]
    for path in corrupt:
        path.write_bytes(b"not a png")
    run = tmp_path / "run"
    # 3 steps of 20 images are one epoch: each image is read once, by one of the two ranks.
    args = ["--steps", "3", *tiny_recipe, "optim.warmup_steps=1", f"data.source=folder:{root}", "train.batch_size=20",
            "data.on_corrupt=skip"]  # fmt: skip
    run_torchrun(["train", "--out", str(run), *args], cwd=tmp_path)
    report = json.loads((run / "report.json").read_text())
    assert sorted(e["image"].split(": ")[0] for e in report["skipped_images"]) == sorted(map(str, corrupt))


def _worker_pid(torchrun_pid: int, rank: int) -> int | None:
    """The pid of torchrun's worker with RANK=`rank`, from /proc (Linux)."""
    for task in Path(f"/proc/{torchrun_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(OSError):
                env = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
                if f"RANK={rank}".encode() in env:
                    return int(child)
    return None


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the worker through /proc")
def test_a_killed_rank_recovers_under_max_restarts(tmp_path, tiny_recipe):
    run = tmp_path / "run"
    steps = 150
    args = ["train", "--out", str(run), "--steps", str(steps), "--checkpoint-every", "10", *tiny_recipe]
    process = torchrun(args, tmp_path, launcher=("--max-restarts=1",))
    # On a loaded machine starting torchrun and its two workers can take minutes. A kill before the first
    # checkpoint tests nothing: the restarted workers find no run to continue and start afresh.
    wait = 600
    deadline = time.monotonic() + wait
    while process.poll() is None and time.monotonic() < deadline and ckpt.latest_checkpoint(run) is None:
        time.sleep(0.005)
    if ckpt.latest_checkpoint(run) is None:
        process.kill()
        pytest.fail(f"no checkpoint within {wait} s, so no kill to recover from:\n{process.communicate()[0]}")
    pid = _worker_pid(process.pid, rank=1)
    assert pid is not None and not (run / "final").exists(), "the run ended before the kill; make it longer"
    os.kill(pid, signal.SIGKILL)
    try:
        output, _ = process.communicate(timeout=wait)  # a restart starts two workers again
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"torchrun did not finish after the kill:\n{output}")
    assert process.returncode == 0, output
    assert "resuming at step" in output, output
    report = json.loads((run / "report.json").read_text())
    assert report["steps"] == steps and report["world_size"] == 2
    assert sorted(losses(run)) == list(range(1, steps + 1))
