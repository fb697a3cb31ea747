"""Defaults that follow the data: the model a recipe trains when it names none, a named model as the registry has
it (command line and TOML alike), and the documented own-images command."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from command_lines import resolve
from vitkit.models.config import to_pair
from vitkit.models.registry import model_config
from vitkit.recipe.run_config import RunConfig

DOCS = Path(__file__).parents[2] / "docs"


def built(config: RunConfig):
    assert config.model.name is not None
    return model_config(config.model.name, **config.model.overrides)


@pytest.fixture
def photos(tmp_path) -> Path:
    """An ImageFolder with one class folder per split: enough for the data source to open."""
    for split in ("train", "val"):
        (tmp_path / "photos" / split / "cat").mkdir(parents=True)
    return tmp_path / "photos"


@pytest.mark.parametrize(
    "source, size, channels", [("fashion_mnist", 28, 1), ("digits", 28, 1), ("cifar10", 32, 3)]
)
def test_the_built_in_sets_train_the_small_vit_at_their_scale(source, size, channels):
    config = resolve(["train", f"data.source={source}"])
    architecture = built(config)
    assert config.model.name == "ViT-Mini/4" and architecture.classifier == "gap"
    assert (to_pair(architecture.img_size), architecture.in_chans) == ((size, size), channels)


@pytest.mark.parametrize("prefix", ["folder:", "hf:", "wds:", ""])
def test_a_collection_of_photos_trains_an_rgb_vit_at_224_by_default(prefix, capsys):
    config = resolve(["train", f"data.source={prefix}/data/photos"])
    architecture = built(config)
    assert to_pair(architecture.img_size) == (224, 224) and architecture.in_chans == 3
    assert "model ViT-Ti/16: 224x224 RGB" in capsys.readouterr().out  # the settled model is said


def test_a_model_named_on_the_command_line_is_the_one_a_toml_names(tmp_path, capsys):
    recipe = tmp_path / "named.toml"
    recipe.write_text('[model]\nname = "ViT-S/16"\n')
    from_flag = resolve(["train", "--model", "ViT-S/16"])
    assert resolve(["train", "model.name=ViT-S/16"]).to_dict() == from_flag.to_dict()
    assert resolve(["train", "--config", str(recipe)]).to_dict() == from_flag.to_dict()
    assert from_flag.model.overrides == {}  # none of the Fashion-MNIST model's 28 px, grey, gap
    assert "model ViT-S/16: 224x224 RGB, 16 px patches, width 384" in capsys.readouterr().out


def test_architecture_fields_without_a_name_refine_the_datas_model():
    config = resolve(["train", "data.source=folder:/data/photos", "model.depth=2", "model.img_size=64"])
    architecture = built(config)
    assert (config.model.name, architecture.depth, to_pair(architecture.img_size)) == (
        "ViT-Ti/16",
        2,
        (64, 64),
    )
    assert built(resolve(["train", "model.depth=2"])).img_size == (
        28,
        28,
    )  # the Fashion-MNIST model's, on its data


def test_the_documented_own_images_command_resolves_as_written(photos):
    commands = re.findall(r"^vitkit train data\.source=folder:.*$", (DOCS / "DATA.md").read_text(), re.M)
    assert commands, "docs/DATA.md shows no own-images train command"
    argv = shlex.split(commands[0].replace("/data/photos", str(photos)))[1:]
    config = resolve(argv)
    architecture = built(config)
    assert config.model.name == "ViT-S/16" and config.data.crop == "inception" and config.data.workers == 4
    assert to_pair(architecture.img_size) == (224, 224) and architecture.in_chans == 3
    config.validate()


def test_a_relative_folder_is_saved_as_an_absolute_path(photos, monkeypatch):
    monkeypatch.chdir(photos.parent)
    assert resolve(["train", "data.source=folder:photos"]).data.source == f"folder:{photos}"
    assert resolve(["train", "data.source=photos"]).data.source == str(photos)  # a bare directory
    assert resolve(["train", "data.source=digits"]).data.source == "digits"


def test_threads_default_to_the_cores_this_process_may_use(monkeypatch, capsys):
    from vitkit.recipe import resolve as resolver

    monkeypatch.setattr(resolver.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert RunConfig().train.threads == 0  # the recipe's default: settled when resolved
    assert resolve(["train"]).train.threads == 8
    assert resolve(["train", "train.processes=2"]).train.threads == 4  # shared by the run's processes
    assert resolve(["train", "train.threads=3"]).train.threads == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")  # under torchrun: at least one each
    assert resolve(["train"]).train.threads == 1
