"""The train/finetune command line: overrides anywhere, `--steps N` on any recipe, the fine-tuning head."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import vitkit
from command_lines import resolve
from vitkit import cli
from vitkit.recipe.resolve import load_config
from vitkit.recipe.run_config import RunConfig, finetune_defaults
from vitkit.training.build import build_run_model
from vitkit.training.objectives import objective_for

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.toml"))


@pytest.mark.parametrize("command", [["train"], ["finetune", "--weights", "runs/w"]])
def test_overrides_are_accepted_before_between_and_after_options(command):
    argv = [*command, "--steps", "30", "optim.lr=1e-3", "--out", "X", "model.dropout=0.25", "--seed", "3"]
    config = resolve([*argv, "optim.lr=2e-3"])  # later overrides win, as in command-line order
    assert (config.train.steps, config.train.seed, config.optim.lr) == (30, 3, 2e-3)
    assert config.model.overrides["dropout"] == 0.25


def test_words_that_are_not_overrides_are_still_refused(capsys):
    with pytest.raises(SystemExit) as exit:
        cli.parse(cli.build_parser(), ["train", "--steps", "3", "optim.lr=1e-3", "--bogus", "typo"])
    assert exit.value.code == 2
    assert "unrecognized arguments: --bogus typo" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a command without overrides takes none
        cli.parse(cli.build_parser(), ["eval", "--weights", "w", "optim.lr=1e-3"])


@pytest.mark.parametrize("path", [None, *CONFIGS], ids=["default", *(p.stem for p in CONFIGS)])
def test_steps_fits_every_recipe_and_says_what_it_adapted(path, capsys):
    pretrained = path and ("finetune" in path.stem or load_config(path).train.fit != "gradient")
    recipe = load_config(path, finetune_defaults() if pretrained else None) if path else RunConfig()
    command = ["finetune", "--weights", "runs/w"] if pretrained else ["train"]
    config = resolve([*command, "--steps", "30", *(["--config", str(path)] if path else [])])
    assert config.train.steps == 30 and 0 <= config.optim.warmup_steps < 30
    printed = "\n".join(
        line for line in capsys.readouterr().out.splitlines() if not line.startswith("model ")
    )
    if recipe.optim.warmup_steps >= 30:
        share = recipe.optim.warmup_steps / recipe.train.steps
        assert config.optim.warmup_steps == min(round(share * 30), 29)
        assert printed == (
            f"30 steps instead of the recipe's {recipe.train.steps}: optim.warmup_steps "
            f"{recipe.optim.warmup_steps} -> {config.optim.warmup_steps}"
        )
    else:
        assert printed == ""


def test_an_explicit_warmup_is_not_adapted_but_refused():
    with pytest.raises(ValueError, match=r"optim.warmup_steps 50 must be in \[0, train.steps=30\)"):
        resolve(["train", "--steps", "30", "optim.warmup_steps=50"])
    assert resolve(["train", "train.steps=30"]).optim.warmup_steps == 2  # the override adapts like --steps


def test_a_short_trial_of_the_default_recipe_runs(tmp_path, tiny_recipe, capsys):
    model = [
        o for o in tiny_recipe if not o.startswith("optim.warmup_steps")
    ]  # the default recipe's warmup: 50
    assert cli.main(["train", "--steps", "5", "--out", str(tmp_path / "run"), *model]) == 0
    printed = capsys.readouterr().out
    assert "5 steps instead of the recipe's 700: optim.warmup_steps 50 -> 0" in printed
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["steps"] == 5
    start = json.loads((tmp_path / "run" / "run.json").read_text())["starts"]
    assert start == [report["start"]] and start[0]["vitkit"] == vitkit.__version__
    assert start[0]["command"] == ["vitkit", "train", "--steps", "5", "--out", str(tmp_path / "run"), *model]
    assert start[0]["torch"] == torch.__version__ and start[0]["device"] == "cpu" and start[0]["device_name"]


def test_fine_tuning_always_starts_from_a_zero_head(tmp_path, tiny_vit):
    source = tiny_vit(img_size=28, patch_size=7, in_chans=1, num_classes=10)
    torch.nn.init.normal_(source.head.weight)
    vitkit.save_pretrained(source, tmp_path / "w")
    config = finetune_defaults()
    config.model.weights = str(tmp_path / "w")
    config.validate()
    # the same 10 classes: §3.2 still zeroes the head
    model = build_run_model(config, objective_for(config.train), [str(i) for i in range(10)], None)
    assert model.head.weight.shape == (10, 32) and not model.head.weight.any()
    assert torch.equal(model.blocks[0].mlp.fc1.weight, source.blocks[0].mlp.fc1.weight)
