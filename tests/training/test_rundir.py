"""One writer per run directory (two real processes), leftovers of a killed writer, nothing written for a rejected
recipe, and a resume mismatch that names only what differs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest

from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.recipe.run_config import RECIPE_NAME
from vitkit.training.checkpoint import CHECKPOINT_DIR
from vitkit.training.rundir import RunDirBusy, RunDirLock


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A complete 2-step tiny run, copied by the tests that change it."""
    out = tmp_path_factory.mktemp("runs") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VITKIT_EMBEDDED", "1")
        assert (
            cli.main(["train", "--out", str(out), "--steps", "2", *TINY_RECIPE, "optim.warmup_steps=1"]) == 0
        )
    return out


def hold_lock_in_child(run_dir: Path) -> int:
    """Fork a real second process that takes the run's lock and sleeps; returns its pid once it holds it."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: lock, report, wait to be killed
        try:
            RunDirLock(run_dir).acquire()
            os.write(write_end, b"1")
            signal.pause()
        finally:
            os._exit(0)
    os.close(write_end)
    assert os.read(read_end, 1) == b"1"
    os.close(read_end)
    return pid


def test_a_second_writer_is_refused_with_the_holders_pid_and_host(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    live_tmp = run / CHECKPOINT_DIR / ".tmp-step_00000004-live"  # what the live writer is filling
    live_tmp.mkdir()
    holder = hold_lock_in_child(run)
    try:
        assert cli.main(["train", "--out", str(run), "--resume"]) == 1
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and f"process {holder} on host {socket.gethostname()}" in error
        assert live_tmp.is_dir(), "start-up removed a live run's temporary checkpoint"
        with pytest.raises(RunDirBusy, match=f"process {holder}"):
            RunDirLock(run).acquire()
    finally:
        os.kill(holder, signal.SIGKILL)
        os.waitpid(holder, 0)
    lock = RunDirLock(run).acquire()  # the lock died with its process
    lock.release()


def test_resume_removes_a_killed_writers_leftovers(finished_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    leftovers = [
        run / "final" / ".model.safetensors.k1ll3d.tmp",  # 0 bytes: killed during the final/ write
        run / ".report.json.k1ll3d.tmp",
        run / CHECKPOINT_DIR / ".tmp-step_00000002-k1ll3d",
    ]
    leftovers[0].touch()
    leftovers[1].touch()
    leftovers[2].mkdir()
    assert cli.main(["train", "--out", str(run), "--resume"]) == 0
    assert not [path for path in leftovers if path.exists()]
    assert (run / "final" / "model.safetensors").stat().st_size > 0


def test_the_resume_mismatch_names_only_the_differing_fields(
    finished_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sorted(p.name for p in finished_run.iterdir())
    assert cli.main(["train", "--out", str(finished_run), "--resume", "optim.lr=0.1", "train.seed=0"]) == 2
    error = capsys.readouterr().err
    assert "optim.lr is 0.002 in the run, 0.1 given now" in error
    assert error.count(" in the run, ") == 1  # not the recipe's other fields (model.*, train.batch_size, ...)
    assert sorted(p.name for p in finished_run.iterdir()) == before


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.depth=0", "depth must be an integer >= 1, got 0"),
        ("model.hidden_size=-3", "hidden_size must be an integer >= 1, got -3"),
        ("model.hidden_size=wide", "hidden_size must be an integer >= 1, got 'wide'"),
        ("model.dropout=1.5", "dropout must be a number in [0, 1), got 1.5"),
        ("optim.lr=0", "optim.lr must be in (0, inf), got 0.0"),
        ("optim.lr=nan", "optim.lr must be in (0, inf), got nan"),
        ("optim.betas=[0.9, 1.0]", "optim.betas[1] must be in [0, 1), got 1.0"),
        ("train.log_every=0", "train.log_every must be >= 1, got 0"),
        ("train.eval_batch_size=-1", "train.eval_batch_size must be >= 0, got -1"),
        ("train.label_smoothing=1", "train.label_smoothing must be in [0, 1), got 1.0"),
        ("data.crop=zoom", "data.crop must be one of"),
        ("data.dataset=/no/such/folder", "/no/such/folder: no such ImageFolder directory"),
        ("data.source=wds:/no/such/shards", "/no/such/shards: no such directory"),
        ("data.source=hf:/no/such/dataset", "/no/such/dataset: no such directory"),
        ("data.source=folder:/", "ImageFolder train needs the directories /train"),
    ],
)
def test_a_rejected_recipe_leaves_no_run_directory(
    override: str,
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tiny_recipe: tuple[str, ...],
) -> None:
    out = tmp_path / "run"
    assert cli.main(["train", "--out", str(out), "--steps", "5", *tiny_recipe, override]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error, error
    assert not out.exists()


def test_a_model_that_fails_to_build_leaves_no_run_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_recipe: tuple[str, ...]
) -> None:
    """Checked once the data is known (the dataset's class count), still before anything is written."""
    out = tmp_path / "run"
    assert cli.main(["train", "--out", str(out), "--steps", "5", *tiny_recipe, "model.num_classes=3"]) == 2
    assert "model.num_classes is 3 but the dataset has 10 classes" in capsys.readouterr().err
    assert not out.exists()
    assert not (tmp_path / RECIPE_NAME).exists()


def test_resuming_a_read_only_run_is_one_line(finished_run: Path, tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    directories = [run, *(p for p in run.rglob("*") if p.is_dir())]
    for directory in directories:
        directory.chmod(0o555)
    try:
        if os.access(run, os.W_OK):
            pytest.skip("file modes do not stop this process (root)")
        assert cli.main(["train", "--out", str(run), "--resume"]) == 1
    finally:
        for directory in directories:
            directory.chmod(0o755)
    error = capsys.readouterr().err
    lines = [line for line in error.splitlines() if line.startswith("vitkit train")]
    assert lines == [lines[-1]] and "permission denied" in lines[0] and str(run) in lines[0], error


@pytest.mark.parametrize("resume", [False, True])
def test_out_onto_a_users_directory_deletes_nothing(
    resume: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_recipe: tuple[str, ...]
) -> None:
    """A directory holding anything but a vitkit run is refused before a file is written or removed."""
    out = tmp_path / "mine"
    (out / "tensorboard" / "x").mkdir(parents=True)
    (out / "tensorboard" / "x" / "precious.txt").write_text("k")
    (out / "metrics.jsonl").write_text("my own\n")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    args = ["train", "--out", str(out), "--steps", "5", *tiny_recipe] + (["--resume"] if resume else [])
    assert cli.main(args) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and str(out) in error, error
    assert ("not a run directory" if resume else "not empty and not a vitkit run") in error
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_out_onto_an_empty_directory_trains(tmp_path: Path, tiny_recipe: tuple[str, ...]) -> None:
    out = tmp_path / "empty"
    out.mkdir()
    assert cli.main(["train", "--out", str(out), "--steps", "2", *tiny_recipe, "optim.warmup_steps=1"]) == 0
    assert (out / RECIPE_NAME).is_file()


def test_class_names_travel_with_the_weights(finished_run: Path) -> None:
    import vitkit

    model = vitkit.load_weights(finished_run)
    assert model.class_names is not None and model.class_names[:2] == ["T-shirt/top", "Trouser"]
    assert vitkit.load_weights(finished_run, num_classes=3).class_names is None  # a new head, no names yet


def test_resume_refuses_data_whose_classes_differ(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A renamed class would otherwise permute every label without a word."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    for checkpoint in (run / CHECKPOINT_DIR).iterdir():
        config = checkpoint / "config.json"
        fields = json.loads(config.read_text())
        fields["class_names"][0], fields["class_names"][1] = (
            fields["class_names"][1],
            fields["class_names"][0],
        )
        config.write_text(json.dumps(fields))
    assert cli.main(["train", "--out", str(run), "--resume"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "another order, which would permute every label" in error, error
