"""`vitkit data pack` and `vitkit data info` as a user runs them."""

from __future__ import annotations

import pytest

from image_collections import SIZES, write_folder
from vitkit import cli


def info(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    code = cli.main(["data", "info", *args])
    return code, capsys.readouterr().out


def test_info_describes_an_in_memory_dataset(capsys, monkeypatch):
    monkeypatch.setenv("VITKIT_EMBEDDED", "1")  # the subset shipped with vitkit
    code, out = info(capsys, "fashion_mnist")
    assert code == 0
    assert "images: 4000, classes: 10" in out and "images: 1000, classes: 10" in out
    assert "sizes (all): 28x28 (4000); 1 distinct" in out


def split_summary(printed: str) -> list[str]:
    """The lines of `vitkit data info` that say what a split holds: counts, classes, sizes."""
    return [line for line in printed.splitlines() if line.startswith(("  images", "  sizes"))]


def test_pack_then_info_gives_the_same_images_in_every_format(tmp_path, capsys):
    root = write_folder(tmp_path / "folder")
    _, folder_out = info(capsys, f"folder:{root}", "--check")
    for fmt in ("wds", "hf"):
        out_dir = tmp_path / fmt
        args = [
            "data",
            "pack",
            f"folder:{root}",
            "--out",
            str(out_dir),
            "--format",
            fmt,
            "--shard-images",
            "25",
        ]
        assert cli.main(args) == 0
        printed = capsys.readouterr().out
        assert f"train: {SIZES['train']} images" in printed and f"data.source={fmt}:{out_dir}" in printed
        code, out = info(capsys, f"{fmt}:{out_dir}", "--check")
        assert code == 0 and "unreadable: 0" in out
        # what each split holds (counts, classes, sizes) is the folder's
        assert split_summary(out) == split_summary(folder_out)


def test_info_check_lists_unreadable_files_and_fails(tmp_path, capsys):
    root = write_folder(tmp_path / "folder")
    broken = sorted((root / "train").rglob("*.png"))[3]
    broken.write_bytes(b"not a png")
    code, out = info(capsys, f"folder:{root}")  # sampling headers only: the broken file may not be read
    assert code == 0
    code, out = info(capsys, f"folder:{root}", "--check")
    assert code == 1 and "unreadable: 1" in out and str(broken) in out
