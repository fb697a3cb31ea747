"""`vitkit eval --weights RUN` knows its run: the run's own data and split, results labelled by class name and
written into the run directory (or --out), never into the working directory."""

from __future__ import annotations

import json

import pytest

from photo_run import VAL_SPLIT
from vitkit import cli
from vitkit.data.builtin import SYNTHETIC_CLASSES

CLASSES = sorted(SYNTHETIC_CLASSES)  # the folders' names, in ImageFolder's sorted order


def test_a_run_is_evaluated_on_its_own_validation_images(photo_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["eval", "--weights", str(photo_run), "--precision", "fp32"]) == 0
    printed = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # the working directory untouched
    assert f"validation split of {VAL_SPLIT} images" in printed and f"(val, {VAL_SPLIT} images)" in printed
    # which images it scores and why, and how to score the others
    assert f"scoring {VAL_SPLIT} images: the {VAL_SPLIT} training images the run held out" in printed
    assert "--split test scores the 20 images of its test split" in printed
    for name in CLASSES:
        assert f"  {name} " in printed  # the per-class table names every class
    report = json.loads((photo_run / "eval_val.json").read_text())
    assert report["split"] == "val" and report["images"] == VAL_SPLIT
    assert list(report["per_class"]) == CLASSES
    assert sum(row["images"] for row in report["per_class"].values()) == VAL_SPLIT
    assert (photo_run / "eval_val_confusion.png").stat().st_size > 0
    engine = json.loads((photo_run / "report.json").read_text())
    assert report["top1"] == pytest.approx(engine["val_top1"])  # what the run measured on the same images


def test_a_split_and_an_out_directory_can_be_named(photo_run, tmp_path, capsys):
    out = tmp_path / "elsewhere"
    argv = ["eval", "--weights", str(photo_run), "--split", "test", "--out", str(out), "--precision", "fp32"]
    assert cli.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["eval_test.json", "eval_test_confusion.png"]
    printed = capsys.readouterr().out
    assert "(test, 20 images)" in printed and "scoring 20 images: the run's test split, as asked" in printed


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--data", "fashion_mnist"], "the model was trained on 10 classes and the data has 10"),
        (["--data", "synthetic", "--split", "val"], "split 'val' is the run's held-out training images"),
    ],
)
def test_other_data_must_have_the_runs_classes(photo_run, capsys, argv, message):
    assert cli.main(["eval", "--weights", str(photo_run), *argv]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1


def test_weights_that_are_not_a_run_need_data(photo_run, capsys):
    assert cli.main(["eval", "--weights", str(photo_run / "final")]) == 2
    assert "is not a run directory (no config.toml): name the data with --data" in capsys.readouterr().err
