"""Every CLI failure is one line naming the path or field, exit 2 for a wrong request and 1 for a failure while
running; --debug or VITKIT_DEBUG=1 adds the traceback. Written files follow the umask."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit import cli
from vitkit.storage import atomic_write_text, save_pretrained
from vitkit.training.checkpoint import CheckpointManager
from vitkit.training.rundir import RunDirBusy, RunDirLock
from vitkit.weights.official import export_npz, read_npz

DATA = Path(__file__).parent / "data" / "official_vit"
WEIGHTS = str(DATA / "A_params.npz")


def unwritable_dir(tmp_path: Path) -> Path:
    """A directory this process cannot write into: a 0555 one, or /sys for root (whom modes do not stop)."""
    if os.geteuid() != 0:
        locked = tmp_path / "read-only"
        locked.mkdir(mode=0o555)
        return locked
    probe = Path("/sys") / "vitkit-probe"
    try:
        probe.mkdir()
    except OSError:
        return Path("/sys")
    probe.rmdir()
    pytest.skip("no directory this root process cannot write into")


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (ValueError("optim.lr must be in (0, inf), got 0.0"), 2, "optim.lr must be in (0, inf), got 0.0"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "w.npz"), 2, "w.npz: no such file"),
        (PermissionError(errno.EACCES, "Permission denied", "/out/run"), 1, "/out/run: permission denied"),
        (IsADirectoryError(errno.EISDIR, "Is a directory", "a", None, "b"), 1, "a -> b: is a directory"),
        (RunDirBusy("runs/a: in use by process 7 on host h"), 1, "runs/a: in use by process 7 on host h"),
        (ZeroDivisionError("division by zero"), 1, "ZeroDivisionError: division by zero (run with --debug"),
    ],
)
def test_exit_codes_and_messages(error: BaseException, code: int, message: str) -> None:
    got_code, got_message = cli.describe(error)
    assert (got_code, "\n" in got_message) == (code, False) and got_message.startswith(message)


def test_debug_shows_the_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["predict", str(tmp_path), "--weights", str(tmp_path / "none.npz")]
    code, error = run(argv, capsys)
    assert code == 2 and error.count("\n") == 1 and "Traceback" not in error
    code, error = run(["--debug", *argv], capsys)
    assert code == 2 and "Traceback (most recent call last)" in error
    assert (
        error.splitlines()[-1] == f"vitkit predict: error: {tmp_path / 'none.npz'}: no such file or directory"
    )
    monkeypatch.setenv("VITKIT_DEBUG", "1")
    assert "Traceback" in run(argv, capsys)[1]


def test_an_unwritable_out_is_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = unwritable_dir(tmp_path)
    image = tmp_path / "image.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(image)
    for argv in (
        ["convert", WEIGHTS, str(locked / "a.npz"), "--to", "npz"],
        ["convert", WEIGHTS, str(locked / "a"), "--to", "vitkit"],
        ["inspect", "--weights", WEIGHTS, "--images", str(image), "--out", str(locked / "out")],
    ):
        code, error = run(argv, capsys)
        assert code == 1 and error.count("\n") == 1 and str(locked) in error, (argv, error)
        assert "denied" in error or "not permitted" in error, error
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")
    train = ["train", "--out", str(locked / "run"), "--steps", "1", "model.depth=1", "optim.warmup_steps=0"]
    code, error = run(train, capsys)
    assert code == 1 and error.count("\n") == 1 and str(locked / "run") in error


def test_convert_refuses_its_own_source_and_a_directory_as_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["convert", WEIGHTS, str(tmp_path / "w"), "--to", "vitkit"]) == 0
    for again in ([], ["--overwrite"]):  # an existing file destination is replaced only when asked
        assert cli.main(["convert", WEIGHTS, str(tmp_path / "w.npz"), "--to", "npz", *again]) == 0
    copied, source = vitkit.load_weights(tmp_path / "w.npz"), vitkit.load_weights(WEIGHTS)
    assert all(torch.equal(copied.state_dict()[k], v) for k, v in source.state_dict().items())
    capsys.readouterr()
    for argv, message in (
        (
            ["convert", str(tmp_path / "w"), str(tmp_path / "w"), "--to", "vitkit"],
            "is or is inside the source",
        ),
        (
            ["convert", str(tmp_path / "w"), str(tmp_path / "w" / "x"), "--to", "hf"],
            "is or is inside the source",
        ),
        (["convert", WEIGHTS, str(tmp_path / "w"), "--to", "npz"], "is a directory; --to npz writes a file"),
        (
            ["convert", str(tmp_path / "w.npz"), str(tmp_path / "w.npz"), "--to", "npz"],
            "is or is inside the source",
        ),
    ):
        code, error = run(argv, capsys)
        assert code == 2 and error.count("\n") == 1 and message in error, error
    untouched = vitkit.load_weights(tmp_path / "w").state_dict()
    assert all(
        torch.equal(untouched[k], v) for k, v in source.state_dict().items()
    )  # the source is untouched


def test_a_json_list_as_config_json_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = tmp_path / "w"
    save_pretrained(vitkit.load_weights(WEIGHTS), weights)
    (weights / "config.json").write_text(json.dumps([1, 2]))
    code, error = run(["predict", WEIGHTS, "--weights", str(weights)], capsys)
    assert code == 2 and error.count("\n") == 1
    assert f"{weights / 'config.json'}: expected a JSON object of config fields, got a list" in error


def test_non_finite_weights_are_refused_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrays = read_npz(WEIGHTS)
    key = next(k for k in sorted(arrays) if k.endswith("kernel"))
    arrays[key] = arrays[key].copy()
    arrays[key].flat[:3] = [np.nan, np.inf, -np.inf]
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match=f"3 NaN or infinite value\\(s\\) in {key}"):
        vitkit.load_weights(bad)
    code, error = run(["predict", WEIGHTS, "--weights", str(bad)], capsys)
    assert code == 2 and error.count("\n") == 1 and str(bad) in error
    assert cli.main(["convert", str(bad), str(tmp_path / "out"), "--to", "vitkit"]) == 2
    assert not (tmp_path / "out").exists()
    assert cli.main(["convert", str(bad), str(tmp_path / "out"), "--to", "vitkit", "--allow-non-finite"]) == 0
    model = vitkit.load_weights(tmp_path / "out", allow_non_finite=True)
    assert not all(p.isfinite().all() for p in model.parameters())


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_written_files_follow_the_umask(umask: int, tmp_path: Path) -> None:
    """Everything vitkit writes (atomic files, weights, exported .npz, checkpoints, the lock) gets 0666/0777
    less the umask, as with any Unix tool."""
    old = os.umask(umask)
    try:
        model = vitkit.load_weights(WEIGHTS)
        run_dir = tmp_path / "run"
        RunDirLock(run_dir).acquire().release()
        atomic_write_text(run_dir / "report.json", "{}\n")
        save_pretrained(model, run_dir / "final")
        export_npz(model, tmp_path / "exported.npz")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        CheckpointManager(run_dir, "none", keep=1).save(1, model, optimizer, None, {})
    finally:
        os.umask(old)
    for path in [tmp_path / "exported.npz", *run_dir.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        expected = (0o777 if path.is_dir() else 0o666) & ~umask
        assert mode == expected, f"{path}: {oct(mode)}, expected {oct(expected)} under umask {oct(umask)}"


@pytest.mark.parametrize(
    "argv",
    [
        ["eval", "--weights", WEIGHTS, "--batch-size", "0"],
        ["demo", "--batch-size", "-1"],
        ["fewshot", "--weights", WEIGHTS, "--seeds", "0"],
        ["inspect", "--weights", WEIGHTS, "--out", "x", "--max-images", "two"],
    ],
)
def test_counts_below_one_are_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert (
        f"vitkit {argv[0]}: error: argument {argv[-2]}: expected a positive integer, got '{argv[-1]}'" in err
    )
