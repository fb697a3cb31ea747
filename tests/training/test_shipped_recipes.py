"""Recipes by name: an installed vitkit reads its shipped recipes (vitkit.configs) from any directory, a path
still reads that file, and an unknown name is one line that lists the shipped ones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import vitkit
from tiny import build_tiny_official_vit
from vitkit.configs import RECIPES_DIR, shipped_recipes
from vitkit.recipe.resolve import load_config, recipe_file

ROOT = Path(__file__).parents[2]


def test_the_checkouts_configs_are_the_shipped_recipes():
    assert (ROOT / "configs").resolve() == RECIPES_DIR.resolve()
    assert "photos_finetune" in shipped_recipes() and "fashion_mnist_vit" in shipped_recipes()


def test_a_name_reads_the_shipped_recipe_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in shipped_recipes():
        assert recipe_file(name) == recipe_file(f"{name}.toml") == RECIPES_DIR / f"{name}.toml"
    assert (
        load_config("photos_finetune").to_dict()
        == load_config(RECIPES_DIR / "photos_finetune.toml").to_dict()
    )


def test_a_path_is_read_as_that_file_even_where_a_name_matches(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("photos_finetune.toml").write_text("[train]\nsteps = 7\n")
    assert load_config("photos_finetune.toml").train.steps == 7  # the file here, not the shipped one
    assert load_config("photos_finetune").train.steps != 7  # the bare name is still the shipped recipe


def test_a_bare_name_is_the_shipped_recipe_even_beside_a_file_of_that_name(tmp_path, monkeypatch):
    """Only a path given as such (`.toml`, or a `/`) reads a file that shares a shipped recipe's name."""
    monkeypatch.chdir(tmp_path)
    Path("photos_linear").write_text("[train]\nsteps = 7\n")
    assert recipe_file("photos_linear") == RECIPES_DIR / "photos_linear.toml"
    assert load_config("photos_linear").train.steps != 7
    assert load_config("./photos_linear").train.steps == 7  # a `/`: that file
    Path("mine").write_text("[train]\nsteps = 5\n")
    assert load_config("mine").train.steps == 5  # no shipped recipe of that name: the file


def test_an_unknown_name_lists_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        FileNotFoundError, match="photos_finetnue: no such config file or shipped recipe"
    ) as error:
        load_config("photos_finetnue")
    assert all(name in str(error.value) for name in shipped_recipes())
    with pytest.raises(FileNotFoundError, match="no such config file"):
        load_config("sub/photos_finetune.toml")  # a path elsewhere is not a name


@pytest.mark.slow
def test_finetune_by_name_from_an_empty_directory(tmp_path):
    """The installed command, started in a directory that holds nothing but the weights."""
    weights = tmp_path / "ViT-B_16.npz"
    vitkit.export_npz(build_tiny_official_vit(num_classes=10), weights)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "vitkit.cli",
            "finetune",
            "--weights",
            weights.name,
            "--config",
            "photos_finetune",
        ]
        + ["--print-config", "data.source=synthetic"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(vitkit.__file__).parents[1])},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert 'crop = "resize_crop"' in run.stdout and "img_size = 384" in run.stdout  # photos_finetune's fields
