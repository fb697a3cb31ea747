"""The Python API: vitkit.train / vitkit.finetune / vitkit.evaluate do what the commands do, from a notebook."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

import vitkit
from photo_run import VAL_SPLIT
from tiny_run import TINY
from vitkit.storage import load_state_dict
from vitkit.training.overrides import load_config, parse_override
from vitkit.training.recipe import RECIPE_NAME


def sections(overrides: list[str]) -> dict[str, dict]:
    """`section.field=value` strings as the API's keyword sections."""
    grouped: dict[str, dict] = defaultdict(dict)
    for item in overrides:
        key, value = parse_override(item)
        section, _, name = key.partition(".")
        grouped[section][name] = value
    return dict(grouped)


def test_train_in_python_is_the_command_line_run(photo_run, tmp_path):
    """The CLI run of the photo_run fixture, repeated through vitkit.train: the same recipe and weights."""
    recipe = load_config(photo_run / RECIPE_NAME)
    given = sections([*TINY, "optim.warmup_steps=1", "train.batch_size=8", f"data.val_split={VAL_SPLIT}"])
    given["data"]["source"] = recipe.data.source
    given["train"]["steps"] = 3
    report = vitkit.train(out=tmp_path / "run", quiet=True, **given)
    assert load_config(tmp_path / "run" / RECIPE_NAME).to_dict() == recipe.to_dict()
    ours, theirs = (
        load_state_dict(Path(run) / "final" / "model.safetensors") for run in (tmp_path / "run", photo_run)
    )
    assert all(ours[key].equal(theirs[key]) for key in theirs)
    assert report["val_top1"] == json.loads((photo_run / "report.json").read_text())["val_top1"]
    start = json.loads((tmp_path / "run" / "run.json").read_text())["starts"][0]
    assert start["command"][0].startswith("vitkit.train(out=") and start["torch"] and start["vitkit"]


def test_a_mistyped_section_or_field_names_the_nearest():
    with pytest.raises(ValueError, match="did you mean 'optim'"):
        vitkit.train(optm={"lr": 1e-3})
    with pytest.raises(ValueError, match="did you mean 'optim.lr'"):
        vitkit.train(optim={"lrr": 1e-3})


def test_evaluate_in_python_reports_a_run_on_its_own_data(photo_run):
    report = vitkit.evaluate(photo_run, precision="fp32")
    assert report["split"] == "val" and report["images"] == VAL_SPLIT and len(report["per_class"]) == 10
    assert report["report"] == str(photo_run / "eval_val.json")


@pytest.mark.slow
def test_finetune_in_python_then_evaluate(photo_run, tmp_path):
    source = load_config(photo_run / RECIPE_NAME).data.source
    report = vitkit.finetune(
        photo_run, out=tmp_path / "ft", quiet=True, data={"source": source}, train={"steps": 2, "batch_size": 8,
        "precision": "fp32", "device": "cpu", "micro_batch_size": 0}, optim={"warmup_steps": 0},
    )  # fmt: skip
    assert report["steps"] == 2 and "test_top1" in report
    evaluated = vitkit.evaluate(tmp_path / "ft", precision="fp32")
    assert evaluated["split"] == "test" and evaluated["top1"] == pytest.approx(report["test_top1"])
    assert (tmp_path / "ft" / "eval_test.json").is_file()
