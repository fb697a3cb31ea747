"""What a timm user reaches for: --model/--lr/--batch-size/--epochs, "did you mean", and --print-config (every
field with its value, default and help, read from the dataclasses)."""

from __future__ import annotations

import dataclasses
import math
import tomllib

import pytest

from command_lines import resolve
from vitkit import cli
from vitkit.recipe.resolve import apply_overrides, from_dict
from vitkit.recipe.run_config import SECTIONS, RunConfig


def test_flags_are_shorthands_for_the_dotted_keys():
    config = resolve(["train", "--model", "ViT-S/16", "--lr", "3e-4", "--batch-size", "16"])
    assert (config.model.name, config.optim.lr, config.train.batch_size) == ("ViT-S/16", 3e-4, 16)


def test_epochs_count_passes_over_the_training_images(capsys):
    config = resolve(["train", "--epochs", "2.5", "--batch-size", "64", "data.val_split=100"])
    # the embedded Fashion-MNIST subset: 4,000 training images, 100 held out for validation
    assert config.train.steps == math.ceil(2.5 * 3900 / 64)
    assert f"2.5 epochs: {config.train.steps} steps of 64 images" in capsys.readouterr().out
    assert 0 <= config.optim.warmup_steps < config.train.steps
    with pytest.raises(ValueError, match="give the run length once"):
        resolve(["train", "--epochs", "1", "--steps", "10"])


@pytest.mark.parametrize(
    "override, nearest",
    [("optim.lrr=1", "optim.lr"), ("model.hidden=3", "model.hidden_size"), ("trian.steps=3", "train")],
)
def test_an_unknown_key_suggests_the_nearest(override, nearest):
    with pytest.raises(ValueError, match=f"did you mean '{nearest}'"):
        apply_overrides(RunConfig(), [override])


def test_an_unknown_toml_section_suggests_the_nearest():
    with pytest.raises(ValueError, match="did you mean 'optim'"):
        from_dict({"optimizer": 1})


def test_every_field_has_one_line_of_help():
    for section in SECTIONS:
        for f in dataclasses.fields(getattr(RunConfig(), section)):
            text = f.metadata.get("help", "")
            assert text and "\n" not in text, f"{section}.{f.name}"


def test_print_config_is_the_resolved_recipe_with_help_and_trains_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--print-config", "--model", "ViT-S/16", "optim.lr=1e-4", "model.depth=2"]) == 0
    printed = capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # no run directory
    resolved = resolve(["train", "--model", "ViT-S/16", "optim.lr=1e-4", "model.depth=2"])
    assert from_dict(tomllib.loads(printed)).to_dict() == resolved.to_dict()  # it is a recipe, as resolved
    assert (
        "lr = 0.0001" in printed
        and "# peak learning rate, reached after the warmup (default 0.002)" in printed
    )
    assert "depth = 2" in printed and "ViT-S/16 has 12" in printed
    for section in SECTIONS:
        for f in dataclasses.fields(getattr(resolved, section)):
            if f.name != "overrides":
                assert f"{f.metadata['help']} (default " in printed, f"{section}.{f.name}"
