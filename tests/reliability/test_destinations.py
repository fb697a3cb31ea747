"""Where `convert`, `predict --output` and `vitkit.evaluate(out=...)` write: regular files only, nothing of the
user's replaced without --overwrite, an unwritable destination refused before the work, and no temporary files
left by a stopped or killed convert."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitkit
from test_cli_errors import unwritable_dir
from tiny import build_tiny_vit
from vitkit import cli
from vitkit.commands import convert

JAX_LIKE = dict(activation="gelu_tanh", layer_norm_eps=1e-6)  # written as .npz without a warning


@pytest.fixture
def weights(tmp_path: Path) -> Path:
    model = build_tiny_vit(**JAX_LIKE)
    model.class_names = ["cat", "dog", "fox"]
    return model.save_pretrained(tmp_path / "weights")


@pytest.fixture
def no_work(monkeypatch):
    """Loading the weights fails the test: a refusal must come before any work."""

    def refuse(*args, **kwargs):
        raise AssertionError("the weights were loaded before the destination was checked")

    monkeypatch.setattr(convert, "load_weights", refuse)
    monkeypatch.setattr("vitkit.commands.predict.load_weights", refuse)


def image_folder(root: Path, classes: list[str]) -> Path:
    for split in ("train", "test"):
        for index, name in enumerate(classes):
            (root / split / name).mkdir(parents=True)
            pixels = np.full((16, 16, 3), 40 * index, np.uint8)
            Image.fromarray(pixels).save(root / split / name / "a.png")
    return root


def error_of(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(argv)
    return code, capsys.readouterr().err


def test_a_device_fifo_or_link_is_refused_and_left_as_it_is(weights, tmp_path, capsys, no_work):
    fifo = tmp_path / "pipe.npz"
    os.mkfifo(fifo)
    mine = tmp_path / "mine.csv"
    mine.write_text("my data\n")
    link = tmp_path / "link.npz"
    link.symlink_to(mine)
    cases = [
        (
            ["convert", str(weights), "/dev/null", "--to", "npz"],
            "/dev/null: is a character device, not a regular",
        ),
        (["convert", str(weights), str(fifo), "--to", "npz"], f"{fifo}: is a FIFO, not a regular file"),
        (["convert", str(weights), str(link), "--to", "npz", "--overwrite"], f"{link}: is a symbolic link"),
        (["predict", "x.png", "--weights", str(weights), "--output", str(link.with_suffix(".csv"))], None),
    ]
    link.with_suffix(".csv").symlink_to(mine)
    for argv, expected in cases:
        code, err = error_of(argv, capsys)
        expected = expected or f"{link.with_suffix('.csv')}: is a symbolic link"
        assert code == 2 and err.count("\n") == 1 and expected in err, (argv, err)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert link.is_symlink() and mine.read_text() == "my data\n"


def test_an_existing_file_is_replaced_only_with_overwrite(weights, tmp_path, capsys):
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(image)
    for argv in (
        ["convert", str(weights), str(tmp_path / "w.npz"), "--to", "npz"],
        ["predict", str(image), "--weights", str(weights), "--output", str(tmp_path / "p.jsonl")],
    ):
        destination = Path(argv[argv.index("--output") + 1] if "--output" in argv else argv[2])
        destination.write_bytes(b"the user's\n")
        code, err = error_of(argv, capsys)
        assert code == 2 and err.strip().endswith(f"{destination}: exists; pass --overwrite to replace it"), (
            err
        )
        assert destination.read_bytes() == b"the user's\n"
        assert cli.main([*argv, "--overwrite"]) == 0 and destination.read_bytes() != b"the user's\n"


@pytest.mark.parametrize("target", ["vitkit", pytest.param("hf", marks=pytest.mark.slow)])
def test_a_users_directory_is_written_into_only_with_overwrite(weights, tmp_path, capsys, target):
    if target == "hf":
        pytest.importorskip("transformers")
    users = tmp_path / "mine"
    users.mkdir()
    (users / "config.json").write_text("{}")
    (users / "notes.txt").write_text("keep me")
    code, err = error_of(["convert", str(weights), str(users), "--to", target], capsys)
    assert code == 2 and f"{users}: not empty (holds config.json, notes.txt); pass --overwrite" in err, err
    assert (users / "config.json").read_text() == "{}"
    assert cli.main(["convert", str(weights), str(users), "--to", target, "--overwrite"]) == 0
    assert (users / "notes.txt").read_text() == "keep me"
    assert vitkit.load_weights(users).class_names == ["cat", "dog", "fox"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["convert", str(weights), str(empty), "--to", target]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging left


def test_an_unwritable_destination_fails_before_the_work_naming_it(weights, tmp_path, capsys, no_work):
    locked = unwritable_dir(tmp_path)
    for argv, named in (
        (["convert", str(weights), str(locked / "a.onnx"), "--to", "onnx"], locked / "a.onnx"),
        (["convert", str(weights), str(locked / "d"), "--to", "vitkit"], locked / "d"),
        (
            ["predict", "x.png", "--weights", str(weights), "--output", str(locked / "p.csv")],
            locked / "p.csv",
        ),
    ):
        code, err = error_of(argv, capsys)
        assert code in (1, 2) and err.count("\n") == 1 and f"{named}:" in err and ".tmp" not in err, err
    code, err = error_of(["convert", str(weights), str(tmp_path), "--to", "npz"], capsys)
    assert code == 2 and f"{tmp_path}: is a directory; --to npz writes a file" in err


@pytest.fixture
def earlier_report(weights, tmp_path) -> tuple[str, Path]:
    """A data set, and an `out` directory holding a report of the user's where evaluate writes eval_test.json."""
    data = f"folder:{image_folder(tmp_path / 'data', ['cat', 'dog', 'fox'])}"
    out = tmp_path / "out"
    out.mkdir()
    (out / "eval_test.json").write_text("an earlier report of mine")
    return data, out


def test_evaluate_out_refuses_to_replace_its_files(weights, earlier_report, monkeypatch):
    data, out = earlier_report
    monkeypatch.setattr(
        "vitkit.evaluation.run_directory.load_weights", lambda *a, **k: pytest.fail("loaded first")
    )
    with pytest.raises(ValueError, match=r"eval_test.json: exists; pass --overwrite to replace it"):
        vitkit.evaluate(weights, data, out=out)
    assert (out / "eval_test.json").read_text() == "an earlier report of mine"
    assert sorted(p.name for p in out.iterdir()) == ["eval_test.json"]


@pytest.mark.slow
def test_evaluate_out_replaces_its_files_with_overwrite(weights, earlier_report):
    data, out = earlier_report
    report = vitkit.evaluate(weights, data, out=out, overwrite=True, precision="fp32")
    assert report["images"] == 3 and "top1" in (out / "eval_test.json").read_text()


def test_convert_accuracy_on_refuses_data_with_other_class_names(weights, tmp_path, capsys, monkeypatch):
    def export(*args, **kwargs):
        raise AssertionError("exported before the class names were compared")

    monkeypatch.setattr(convert, "export_onnx", export)
    data = image_folder(tmp_path / "digits", ["one", "three", "two"])
    dst = tmp_path / "m.onnx"
    code, err = error_of(
        ["convert", str(weights), str(dst), "--to", "onnx", "--accuracy-on", f"folder:{data}"], capsys
    )
    assert code == 2 and err.count("\n") == 1 and str(weights) in err and "cat" in err, err
    assert not dst.exists()


def test_sigterm_during_convert_leaves_no_staging(weights, tmp_path, capsys, monkeypatch):
    def killed_midway(model, directory):
        (Path(directory) / "model.safetensors").write_bytes(b"half")
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not stop the convert")

    monkeypatch.setattr(convert, "save_pretrained", killed_midway)
    code, err = error_of(["convert", str(weights), str(tmp_path / "out"), "--to", "vitkit"], capsys)
    assert code != 0 and "interrupted" in err
    assert [p.name for p in tmp_path.iterdir()] == ["weights"]  # no .out.<pid>.*.tmp, no out


def test_leftovers_of_a_killed_convert_are_removed_by_the_next(weights, tmp_path, monkeypatch):
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(gone.stdout)
    leftovers = [
        tmp_path / f".m.onnx.{dead}.abcd1234.tmp",  # a killed export's staging directory
        tmp_path / ".m.onnx.k2j3h4g5.tmp",  # one named before the pid was part of the name
        tmp_path / f".w.npz.{dead}.zz99yy88.tmp",  # a killed atomic write
    ]
    kept = [
        tmp_path / f".m.onnx.{os.getpid()}.abcd1234.tmp",  # a live writer's
        tmp_path / f".m.onnx.data.{dead}.abcd1234.tmp",  # another destination's
    ]
    for path in leftovers[:2] + kept:
        path.mkdir()
        (path / "m.onnx").write_bytes(b"x" * 1000)
    leftovers[2].write_bytes(b"half")
    assert cli.main(["convert", str(weights), str(tmp_path / "w.npz"), "--to", "npz"]) == 0
    assert not leftovers[2].exists() and all(p.exists() for p in leftovers[:2] + kept)
    monkeypatch.setattr(convert, "load_weights", lambda *a, **k: (_ for _ in ()).throw(ValueError("stop")))
    assert (
        cli.main(["convert", str(weights), str(tmp_path / "m.onnx"), "--to", "onnx"]) == 2
    )  # cleaned at the check
    assert not any(p.exists() for p in leftovers[:2]) and all(p.exists() for p in kept)


@pytest.mark.slow
def test_sigterm_to_a_real_convert_mid_export_leaves_nothing(weights, tmp_path):
    """`kill -TERM` while the ONNX export is staged: the process ends and its staging directory goes with it."""
    pytest.importorskip("onnxscript")
    command = [
        sys.executable,
        "-m",
        "vitkit.cli",
        "convert",
        str(weights),
        str(tmp_path / "m.onnx"),
        "--to",
        "onnx",
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        staging = f".m.onnx.{process.pid}."
        for _ in range(1200):  # the export begins after the imports and the load
            if any(p.name.startswith(staging) for p in tmp_path.iterdir()) or process.poll() is not None:
                break
            time.sleep(0.05)
        assert process.poll() is None, "the export ended before it could be stopped"
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode != 0 and "interrupted" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights"]
