"""Every `vitkit` command of "Your own photos" (docs/start/own-photos.md) runs as pasted, in page order, in a
workspace outside the checkout (tests/docs/conftest.py: a small ViT-B/16-layout ViT_B_16.npz, photos/): the fast
path's run is read by predict, eval and convert, and its second fit reads the cached features."""

from __future__ import annotations

import json

import pytest

from docs.documents import ROOT, command_lines
from vitkit.cli import main

PAGE = ROOT / "docs" / "start" / "own-photos.md"


@pytest.mark.slow  # a minute: a few training steps of ViT-S/16 at 224 px
def test_every_command_of_the_page_runs_as_pasted(doc_workspace, capsys):
    commands = command_lines(PAGE)
    assert commands and commands[0].argv[:4] == ("finetune", "--weights", "ViT-B_16.npz", "--config")
    for command in commands:
        assert main(list(command.argv)) == 0, f"{command.where}: `vitkit {' '.join(command.argv)}` fails"
    first = json.loads((doc_workspace / "runs" / "linear" / "report.json").read_text())
    again = json.loads((doc_workspace / "runs" / "linear-again" / "report.json").read_text())
    assert first["features_computed"] == first["train_images"] + first["test_images"]
    assert again["features_computed"] == 0
    assert (doc_workspace / "model.onnx").is_file()
