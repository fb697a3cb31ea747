"""The "Your own photos" commands (docs/start/own-photos.md, which README's section abridges), as written,
resolve to the runs they describe (no training: the docs' example tests run them), so the documented journey
cannot drift from the command line."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from command_lines import resolve
from vitkit import cli
from vitkit.models.config import to_pair
from vitkit.models.registry import model_config

ROOT = Path(__file__).parents[2]


def journey() -> list[list[str]]:
    """The vitkit command lines of the page's fine-tuning block, continuation lines joined, comments dropped."""
    page = (ROOT / "docs" / "start" / "own-photos.md").read_text()
    blocks = [block.split("```", 1)[0] for block in page.split("```bash")[1:]]
    block = next(block for block in blocks if "--config photos_finetune " in block).replace("\\\n", " ")
    return [shlex.split(line, comments=True)[1:] for line in block.splitlines() if line.startswith("vitkit ")]


@pytest.fixture
def repository(tmp_path, monkeypatch) -> Path:
    """A working directory with the README's `photos` folder and `configs/`, as in the repository root."""
    for split in ("train", "val"):
        (tmp_path / "photos" / split / "cat").mkdir(parents=True)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_readme_commands_train_what_they_say(repository, capsys):
    printing = [argv for argv in journey() if "--print-config" in argv]
    commands = {argv[0]: argv for argv in journey() if argv not in printing}
    assert set(commands) == {"train", "finetune", "eval"} and len(printing) == 1
    scratch = resolve(commands["train"])
    assert scratch.model.name == "ViT-S/32" and scratch.data.source == f"folder:{repository / 'photos'}"
    finetune = resolve(commands["finetune"])
    assert finetune.model.weights == "ViT-B/16-i21k" and finetune.model.overrides["img_size"] == 384
    assert (finetune.optim.name, finetune.optim.momentum, finetune.optim.weight_decay) == ("sgd", 0.9, 0.0)
    assert finetune.train.ema_decay == 0.9999 and finetune.optim.grad_clip == 1.0
    assert to_pair(model_config("ViT-S/32", **scratch.model.overrides).img_size) == (224, 224)
    assert cli.main(printing[0]) == 0
    printed = capsys.readouterr().out
    assert 'name = "R26+ViT-S/32"' in printed and "drop_path = 0.05" in printed
    assert cli.parse(cli.build_parser(), commands["eval"]).weights == "runs/finetuned"
