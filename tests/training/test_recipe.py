"""Run configs: TOML recipes, section.field=value overrides, validation and the saved round trip."""

from pathlib import Path

import pytest

from vitkit.recipe.resolve import apply_overrides, from_dict, load_config, parse_value
from vitkit.recipe.run_config import RunConfig, finetune_defaults

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("*.toml"))


def test_values_parse_with_toml_rules_and_fall_back_to_strings():
    assert parse_value("1e-3") == 1e-3
    assert parse_value("true") is True
    assert parse_value("[2, 2]") == [2, 2]
    assert parse_value('"x"') == "x"
    assert parse_value("ViT-B/16") == "ViT-B/16"
    assert parse_value("/data/set") == "/data/set"


def test_overrides_set_and_coerce_fields():
    config = apply_overrides(
        RunConfig(),
        ["optim.lr=1", "train.steps=5", "model.dropout=0.1", "optim.betas=[0.9, 0.95]", "data.flip=false"],
    )
    assert config.optim.lr == 1.0 and isinstance(config.optim.lr, float)
    assert config.train.steps == 5
    assert config.model.overrides["dropout"] == 0.1
    assert config.optim.betas == (0.9, 0.95)
    assert config.data.flip is False


@pytest.mark.parametrize(
    "override, names",
    [
        ("optim.lrr=1", ["optim.lr", "optim.weight_decay"]),
        ("model.hidden=64", ["model.hidden_size", "model.name"]),
        ("trian.steps=3", ["model", "train"]),
    ],
)
def test_unknown_keys_name_the_valid_ones(override, names):
    with pytest.raises(ValueError, match="unknown config key") as error:
        apply_overrides(RunConfig(), [override])
    assert all(name in str(error.value) for name in names)


def test_wrong_types_and_malformed_overrides_are_errors():
    with pytest.raises(ValueError, match="train.steps must be of type int"):
        apply_overrides(RunConfig(), ["train.steps=1.5"])
    with pytest.raises(ValueError, match="section.field=value"):
        apply_overrides(RunConfig(), ["optim.lr"])
    with pytest.raises(ValueError, match="optim.schedule must be one of"):
        apply_overrides(RunConfig(), ["optim.schedule=step"]).validate()
    with pytest.raises(ValueError, match="unknown ResNetConfig field"):  # a ViT field does not fit a ResNet
        apply_overrides(RunConfig(), ["model.patch_size=4", "model.name=R50x1"]).validate()


def test_a_model_section_replaces_the_default_architecture():
    config = from_dict({"model": {"layers": [1, 1, 1, 1], "name": "R50x1", "in_chans": 1}})
    assert config.model.name == "R50x1"
    assert config.model.overrides == {"layers": [1, 1, 1, 1], "in_chans": 1}
    config.validate()


def test_finetune_recipe_is_the_papers():
    config = finetune_defaults()
    assert (config.optim.name, config.optim.momentum, config.optim.weight_decay) == ("sgd", 0.9, 0.0)
    assert (config.optim.schedule, config.optim.grad_clip, config.train.batch_size) == ("cosine", 1.0, 512)
    assert config.model.name is None and config.model.weights is None  # `finetune --weights W` gives them
    with pytest.raises(ValueError, match="exactly one of model.name"):
        apply_overrides(finetune_defaults(), ["model.weights=runs/x", "model.name=ViT-B/16"]).validate()
    apply_overrides(config, ["model.weights=runs/x", "model.img_size=56"]).validate()


def test_saved_toml_reads_back_equal(tmp_path):
    config = apply_overrides(RunConfig(), ["optim.lr=3e-4", "model.img_size=[28, 28]", "data.data_dir=/d"])
    path = tmp_path / "config.toml"
    path.write_text(config.to_toml())
    assert load_config(path).to_dict() == config.to_dict()


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_recipes_are_valid(path):
    config = load_config(path, finetune_defaults() if "finetune" in path.stem else None)
    if config.model.name is None and config.model.weights is None:
        config.model.weights = "runs/placeholder"
    config.validate()


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such config file"):
        load_config(tmp_path / "none.toml")
    (tmp_path / "bad.toml").write_text("[train\nsteps = 3")
    with pytest.raises(ValueError, match="invalid TOML"):
        load_config(tmp_path / "bad.toml")


def test_the_mpp_recipe_pretrains_the_vit_recipes_architecture():
    configs = Path(__file__).parents[2] / "configs"
    mpp, vit = (
        load_config(configs / "fashion_mnist_mpp.toml"),
        load_config(configs / "fashion_mnist_vit.toml"),
    )
    assert mpp.model == vit.model and mpp.train.objective == "mpp" and mpp.train.fewshot_every == 1000


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train.objective=bert"], "train.objective must be one of ['classification', 'mpp'], got 'bert'"),
        (["train.mpp_target=edges"], "train.mpp_target must be one of ['mean_color', 'downsized', 'pixels']"),
        (
            ["train.objective=mpp", "train.mpp_corrupt_rate=1.5"],
            "train.mpp_corrupt_rate must be in (0, 1], got 1.5",
        ),
        (["train.objective=mpp", "train.mpp_bits=0"], "train.mpp_bits must be positive, got 0"),
        (["train.objective=mpp", "train.eval_every=100"], "train.eval_every measures a classifier"),
        (["train.objective=mpp", "train.strategy=fsdp"], "train.objective='mpp' is not supported with"),
        (["train.fewshot_every=10", "train.strategy=fsdp"], "train.fewshot_every is not supported with"),
        (["train.fewshot_every=-1"], "train.fewshot_every must be >= 0"),
        (["data.train_subset=-5"], "data.train_subset must be >= 0"),
    ],
)
def test_objective_fewshot_and_subset_settings_are_checked(overrides, message):
    with pytest.raises(ValueError) as error:
        apply_overrides(RunConfig(), overrides).validate()
    assert message in str(error.value)


def test_mpp_needs_a_vision_transformer():
    config = from_dict(
        {"model": {"name": "R50x1", "layers": [1, 1], "in_chans": 1}, "train": {"objective": "mpp"}}
    )
    with pytest.raises(
        ValueError, match="train.objective='mpp' needs a Vision Transformer, but model.name 'R50x1'"
    ):
        config.validate()


def test_the_micro_batch_caps_each_ranks_share_of_the_batch():
    train = RunConfig().train
    train.batch_size, train.micro_batch_size = 512, 128
    assert [train.micro_batch(world) for world in (1, 2, 8)] == [128, 128, 64]
    train.batch_size = 8  # a share at or under the cap is one pass (finetune's cap of 128 with a small batch)
    assert train.micro_batch(1) == 8 and train.micro_batch(2) == 4
    train.micro_batch_size = 0
    assert train.micro_batch(4) == 2


def test_evaluation_batches_default_to_the_training_batch():
    train = RunConfig().train
    train.batch_size = 32  # a 224-px run: evaluating 500 images at once would need more memory than training
    assert train.eval_batch() == 32
    train.eval_batch_size = 500
    assert train.eval_batch() == 500
