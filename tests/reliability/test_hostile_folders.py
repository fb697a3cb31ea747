"""Hostile ImageFolders made here: a FIFO named like an image, a symbolic link to /dev/zero, a 1 GB non-image, a
class folder whose name is not UTF-8, broken and looping symbolic links. Each is skipped with a line, refused in
one line, or trained through to report.json; nothing blocks, nothing is read whole."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hostile_files import grey_folder, sparse_file
from tiny import TINY_RECIPE
from vitkit import cli
from vitkit.data.decode import ImageDecodeError, decode_image, find_images, read_file
from vitkit.data.folder import FolderSource


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """Classes "a" and b"\\xff" (4 good images each per split), and among the training images of "a": a FIFO, a
    link to /dev/zero and a 1 GB sparse file, all named .png; one broken test image."""
    root = grey_folder(tmp_path / "images", classes=("a", b"\xff"))
    os.mkfifo(root / "train" / "a" / "fifo.png")
    os.symlink("/dev/zero", root / "train" / "a" / "zero.png")
    sparse_file(root / "train" / "a" / "huge.png")
    (root / "test" / "a" / "broken.png").write_bytes(b"not a png")
    return root


def test_a_hostile_folder_trains_to_its_report(hostile: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    source = f"data.source=folder:{hostile}"
    # 9 training images (8 good, the 1 GB one) in batches of 9: every step meets the 1 GB one
    recipe = [*TINY_RECIPE, "optim.warmup_steps=1", "train.batch_size=9", source, "data.on_corrupt=skip"]
    assert cli.main(["train", "--out", str(out), "--steps", "2", *recipe]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for name, kind in (("fifo.png", "a FIFO"), ("zero.png", "a character device")):
        assert f"skipping {hostile / 'train' / 'a' / name}: {kind}, not a regular file" in err
    report = json.loads((out / "report.json").read_text())
    skipped = {
        Path(e["image"].split(": ")[0]).name: (e["image"], e["times"]) for e in report["skipped_images"]
    }
    assert "1,073,741,824 bytes is above the limit" in skipped["huge.png"][0] and skipped["huge.png"][1] == 2
    assert "not an image" in skipped["broken.png"][0]
    assert report["test_images"] == 8  # 9 test files, the broken one not evaluated
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["class_names"] == ["a", "\\xff"]
    assert (out / "confusion.png").stat().st_size > 0


def test_data_info_and_pack_skip_a_fifo(hostile: Path, tmp_path: Path, capsys) -> None:
    assert cli.main(["data", "info", str(hostile)]) == 0
    out = capsys.readouterr()
    assert "a FIFO, not a regular file" in out.err and "images: 9, classes: 2" in out.out
    assert (
        cli.main(["data", "pack", str(hostile), "--out", str(tmp_path / "packed")]) == 2
    )  # stops at huge.png
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("vitkit data: error: ") and "huge.png: 1,073,741,824 bytes" in err[-1], err
    (hostile / "train" / "a" / "huge.png").unlink()
    assert cli.main(["data", "pack", str(hostile), "--out", str(tmp_path / "packed2")]) == 0


def test_special_files_are_refused_without_blocking_or_reading(tmp_path: Path, monkeypatch) -> None:
    fifo = tmp_path / "fifo.png"
    os.mkfifo(fifo)
    os.symlink("/dev/zero", tmp_path / "zero.png")
    start = time.perf_counter()
    with pytest.raises(ImageDecodeError, match="fifo.png: a FIFO, not a regular file"):
        decode_image(fifo)  # what predict and inspect read
    with pytest.raises(ImageDecodeError, match="zero.png: a character device, not a regular file"):
        read_file(tmp_path / "zero.png")
    with pytest.raises(ImageDecodeError, match="huge.png: 1,073,741,824 bytes is above the limit"):
        read_file(sparse_file(tmp_path / "huge.png"))
    assert time.perf_counter() - start < 1
    files, skipped = find_images([tmp_path])  # what predict DIR and inspect --images DIR read
    assert files == [tmp_path / "huge.png"]  # refused when read, from its size
    assert skipped == [{"path": str(fifo), "reason": "a FIFO, not a regular file"},
                       {"path": str(tmp_path / "zero.png"), "reason": "a character device, not a regular file"}]  # fmt: skip
    image = next((grey_folder(tmp_path / "g") / "train" / "a").iterdir())
    monkeypatch.setenv("VITKIT_MAX_IMAGE_BYTES", "64")  # the limit is configurable
    with pytest.raises(ImageDecodeError, match=r"above the limit of 64 .*VITKIT_MAX_IMAGE_BYTES"):
        decode_image(image)
    monkeypatch.setenv("VITKIT_MAX_IMAGE_BYTES", str(image.stat().st_size))
    assert decode_image(image).shape == (3, 28, 28)


@pytest.mark.parametrize("loop", ["file", "directory"])
def test_a_symbolic_link_loop_is_one_line_and_exit_2(loop: str, tmp_path: Path, capsys) -> None:
    root = grey_folder(tmp_path / "images")
    if loop == "file":
        os.symlink("loop.png", root / "train" / "a" / "loop.png")
    else:
        os.symlink(".", root / "train" / "a" / "again")
    assert cli.main(["data", "info", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(root / "train" / "a") in err and "symbolic link loop" in err, err


def test_a_broken_link_is_skipped_with_a_line(tmp_path: Path, capsys) -> None:
    root = grey_folder(tmp_path / "images")
    os.symlink("nowhere.png", root / "train" / "a" / "gone.png")
    assert len(FolderSource(root, "train")) == 8
    assert f"skipping {root / 'train' / 'a' / 'gone.png'}: a broken symbolic link" in capsys.readouterr().err
