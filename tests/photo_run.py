"""A tiny run on a small ImageFolder with named classes, held-out validation images and its own test split:
what the run-aware commands (eval, fewshot, inspect) and the Python API are tested on (a plugin of the root
conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from image_collections import write_folder
from tiny import TINY_RECIPE
from vitkit import cli

VAL_SPLIT = 10


@pytest.fixture(scope="session")
def photo_run(tmp_path_factory) -> Path:
    """A 3-step run on 60 train / 20 test synthetic PNGs in 10 named class folders, 10 images held out."""
    root = tmp_path_factory.mktemp("commands")
    folder = write_folder(root / "photos")
    threads = torch.get_num_threads()
    args = [
        "--steps",
        "3",
        *TINY_RECIPE,
        "optim.warmup_steps=1",
        "train.batch_size=8",
        f"data.val_split={VAL_SPLIT}",
    ]
    assert cli.main(["train", "--out", str(root / "run"), f"data.source=folder:{folder}", *args]) == 0
    torch.set_num_threads(threads)
    return root / "run"
