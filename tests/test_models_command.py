"""`vitkit models`: each count names the input it is for, and a recipe's model is counted at the recipe's shape."""

from __future__ import annotations

import pytest

import vitkit
from vitkit.cli import main
from vitkit.flops import count_parameters


def rows(output: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in output.splitlines()[2:]}


def test_counts_name_their_input_and_classes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "ViT-Mini/4", "--img-size", "28", "--in-chans", "1", "--num-classes", "10"]) == 0
    output = capsys.readouterr().out
    assert "10-class" in output.splitlines()[0]
    row = rows(output)["ViT-Mini/4"]
    expected = vitkit.create_model("ViT-Mini/4", img_size=28, in_chans=1, num_classes=10)
    assert row[2] == "1x28x28"
    assert int(row[3].replace(",", "")) == count_parameters(expected)


def test_a_recipe_is_counted_at_its_shape(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text('[model]\nname = "ViT-Mini/4"\nimg_size = 32\nin_chans = 1\nclassifier = "gap"\n')
    assert main(["models", "--config", str(recipe), "--num-classes", "7"]) == 0
    row = rows(capsys.readouterr().out)["ViT-Mini/4"]
    expected = vitkit.create_model("ViT-Mini/4", img_size=32, in_chans=1, classifier="gap", num_classes=7)
    assert (row[2], int(row[3].replace(",", ""))) == ("1x32x32", count_parameters(expected))


def test_a_recipe_without_a_model_name_is_refused(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text('[model]\nweights = "runs/x"\n')
    assert main(["models", "--config", str(recipe)]) == 2
    assert "names no registry model" in capsys.readouterr().err
