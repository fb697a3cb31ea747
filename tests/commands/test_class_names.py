"""fewshot and inspect name classes: fewshot measures a run on its own data and lists the classes, inspect titles
the rollout images with the class the model predicts for each."""

from __future__ import annotations

import json

from vitkit import cli
from vitkit.data.builtin import SYNTHETIC_CLASSES
from vitkit.recipe.resolve import load_config
from vitkit.recipe.run_config import RECIPE_NAME


def test_fewshot_measures_a_run_on_its_own_data_and_names_its_classes(photo_run, tmp_path, capsys):
    out = tmp_path / "fewshot.json"
    argv = ["fewshot", "--weights", str(photo_run), "--shots", "1,2", "--seeds", "1", "--out", str(out)]
    assert cli.main([*argv, "--precision", "fp32"]) == 0
    report = json.loads(out.read_text())
    folder = load_config(photo_run / RECIPE_NAME).data.source.removeprefix("folder:")
    assert folder in report["train_source"] and report["classes"] == sorted(SYNTHETIC_CLASSES)
    assert f"classes (10): {', '.join(sorted(SYNTHETIC_CLASSES))}" in capsys.readouterr().out


def test_inspect_titles_each_rollout_image_with_the_predicted_class(photo_run, tmp_path):
    folder = load_config(photo_run / RECIPE_NAME).data.source.removeprefix("folder:")
    argv = [
        "inspect",
        "--weights",
        str(photo_run),
        "--images",
        f"{folder}/test",
        "--out",
        str(tmp_path / "i"),
    ]
    assert cli.main([*argv, "--max-images", "4", "--rollout-images", "2", "--precision", "fp32"]) == 0
    summary = json.loads((tmp_path / "i" / "inspect.json").read_text())
    predicted = summary["predicted_classes"]
    assert len(predicted) == 2 and set(predicted.values()) <= set(SYNTHETIC_CLASSES)
