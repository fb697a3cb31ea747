"""Masked patch prediction through the engine: it learns, leaves a bare ViT to fine-tune, resumes exactly."""

import contextlib
import io
import json
import math
import shutil

import pytest
import torch
from test_resume import STATEFUL, assert_bitwise_equal

import vitkit
from vitkit import cli
from vitkit.data import balanced_subset, load_dataset
from vitkit.models import ResNetConfig, build_model, config_from_dict
from vitkit.models.vit import VisionTransformer
from vitkit.recipe.resolve import apply_overrides
from vitkit.recipe.run_config import RunConfig, finetune_defaults
from vitkit.storage import load_state_dict, read_config
from vitkit.training import build, trainer
from vitkit.training.objectives import objective_for
from vitkit.training.optim import parameter_groups
from vitkit.training.report import read_metrics

STEPS = 60
MPP = ["train.objective=mpp", "train.fewshot_every=20", "train.fewshot_num_test=300", "model.patch_size=4"]


@pytest.fixture(scope="module")
def mpp_run(tmp_path_factory, tiny_recipe):
    """One MPP engine run with dropout, drop-path, EMA and micro-batches, shared by the tests that read it."""
    out = tmp_path_factory.mktemp("mpp") / "run"
    overrides = [*tiny_recipe, *STATEFUL, *MPP, f"train.steps={STEPS}", "train.checkpoint_every=20"]
    threads = torch.get_num_threads()
    with (
        pytest.MonkeyPatch.context() as patch
    ):  # module scope: the autouse fixtures (tests/tiny.py) do not apply yet
        patch.setenv("VITKIT_EMBEDDED", "1")
        trainer.run_training(apply_overrides(RunConfig(), overrides), out)
    torch.set_num_threads(threads)
    return out


@pytest.mark.slow
def test_an_mpp_run_learns_and_reports_the_objective_and_few_shot_accuracy(mpp_run):
    out = mpp_run
    report = json.loads((out / "report.json").read_text())
    for key in (
        "steps",
        "world_size",
        "images_per_second",
        "wall_seconds",
        "train_loss_first",
        "train_loss_last",
    ):
        assert key in report, key
    assert report["objective"] == "mpp" and report["steps"] == STEPS and "test_top1" not in report
    assert report["train_loss_last"] < report["train_loss_first"] - 0.2  # from ln 8 = 2.08 (8 grey levels)
    assert math.isfinite(report["test_mpp_loss"]) and "fewshot_10shot" in report
    fewshot = [r for r in read_metrics(out) if "fewshot_10shot" in r]
    assert [r["step"] for r in fewshot] == [20, 40, 60] and all("wall_seconds" in r for r in fewshot)
    assert (out / "curves.png").is_file() and not (out / "confusion.png").exists()


@pytest.mark.slow
def test_final_is_the_bare_vit_of_the_averaged_wrapper_and_checkpoints_hold_the_wrapper(mpp_run):
    out = mpp_run
    vit = vitkit.load_weights(out)
    assert isinstance(vit, VisionTransformer) and vit.config.num_classes == 0
    last = out / "checkpoints" / f"step_{STEPS:08d}"
    averaged = load_state_dict(last / "ema.safetensors")
    prefix = "module.vit."
    expected = {k.removeprefix(prefix): v for k, v in averaged.items() if k.startswith(prefix)}
    assert vit.state_dict().keys() == expected.keys()
    assert all(torch.equal(vit.state_dict()[k], v) for k, v in expected.items())
    assert {"mask_token", "head.weight"} <= load_state_dict(last / "model.safetensors").keys()
    assert config_from_dict(read_config(last)) == vit.config  # the ViT's config: resume re-wraps it


@pytest.mark.slow
def test_finetuning_an_mpp_run_starts_from_its_vit_with_a_zero_head(mpp_run, tmp_path):
    out = mpp_run
    config = apply_overrides(finetune_defaults(), [f"model.weights={out}"]).validate()
    model = build.build_run_model(config, objective_for(config.train), [str(i) for i in range(10)], None)
    assert isinstance(model, VisionTransformer) and model.config.num_classes == 10
    assert not model.head.weight.any() and not model.head.bias.any()
    assert torch.equal(model.blocks[0].attn.qkv.weight, vitkit.load_weights(out).blocks[0].attn.qkv.weight)
    tuned = tmp_path / "tuned"
    args = ["finetune", "--weights", str(out), "--out", str(tuned), "--steps", "2", "train.batch_size=32"]
    args += ["train.micro_batch_size=16", "train.threads=1", "optim.warmup_steps=1"]
    assert cli.main([*args, "train.fewshot_every=1", "train.fewshot_num_test=200"]) == 0
    report = json.loads((tuned / "report.json").read_text())
    assert report["objective"] == "classification" and "test_top1" in report and "fewshot_1shot" in report
    assert [r["step"] for r in read_metrics(tuned) if "fewshot_1shot" in r] == [1, 2]


@pytest.mark.slow
def test_weight_decay_exempts_the_mask_token_and_the_vits_exemptions(mpp_run):
    out = mpp_run
    config = apply_overrides(finetune_defaults(), [f"model.weights={out}", "train.objective=mpp"]).validate()
    model = build.build_run_model(config, objective_for(config.train), [str(i) for i in range(10)], None)
    names = {id(p): n for n, p in model.named_parameters()}
    exempt = {names[id(p)] for p in parameter_groups(model, 0.05)[1]["params"]}
    assert {"mask_token", "head.bias", "vit.pos_embed.weight", "vit.norm.weight"} <= exempt
    assert not {"head.weight", "vit.blocks.0.attn.qkv.weight"} & exempt


@pytest.mark.slow
def test_an_mpp_resume_ends_bitwise_identical(mpp_run, tmp_path):
    reference = mpp_run
    resumed = tmp_path / "resumed"
    shutil.copytree(reference, resumed)
    shutil.rmtree(resumed / "final")
    shutil.rmtree(resumed / "checkpoints" / f"step_{STEPS:08d}")  # as if stopped after step 40
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert cli.main(["train", "--out", str(resumed), "--resume"]) == 0
    assert "MPP test loss" in printed.getvalue() and "few-shot 1-shot" in printed.getvalue()
    for name in (
        "final/model.safetensors",
        f"checkpoints/step_{STEPS:08d}/model.safetensors",
        f"checkpoints/step_{STEPS:08d}/ema.safetensors",
    ):
        assert_bitwise_equal(resumed / name, reference / name)
    losses = [(r["step"], r["train_loss"]) for r in read_metrics(resumed) if "train_loss" in r]
    assert losses == [(r["step"], r["train_loss"]) for r in read_metrics(reference) if "train_loss" in r]
    report, expected = (json.loads((d / "report.json").read_text()) for d in (resumed, reference))
    assert report["test_mpp_loss"] == expected["test_mpp_loss"]


@pytest.mark.slow
def test_train_subset_is_class_balanced_reproducible_and_sets_the_epoch(tmp_path, tiny_recipe):
    dataset = load_dataset("fashion_mnist", "train")
    subset = balanced_subset(dataset, 25, seed=3)
    assert len(subset) == 25 and torch.bincount(subset.labels).tolist() == [3] * 5 + [2] * 5
    assert torch.equal(subset.images, balanced_subset(dataset, 25, seed=3).images)
    assert not torch.equal(subset.images, balanced_subset(dataset, 25, seed=4).images)
    for size, error in ((9, "is fewer images than the 10 classes"), (len(dataset) + 1, "must be at most")):
        with pytest.raises(ValueError, match=f"data.train_subset {size} {error}"):
            balanced_subset(dataset, size)
    out = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        assert (
            cli.main(["train", "--out", str(out), "--steps", "4", *tiny_recipe, "data.train_subset=64"]) == 0
        )
    report = json.loads((out / "report.json").read_text())
    assert report["epochs"] == 2.0 and "class-balanced subset of 64 images" in report["train_data"]


def test_a_bad_objective_is_one_line_and_exit_code_2(tmp_path, capsys, tiny_recipe):
    """The other objective settings are checked in tests/test_config.py."""
    assert cli.main(["train", "--out", str(tmp_path / "run"), *tiny_recipe, "train.objective=bert"]) == 2
    expected = "vitkit train: error: train.objective must be one of ['classification', 'mpp'], got 'bert'"
    assert capsys.readouterr().err.strip() == expected


def test_mpp_refuses_resnet_weights(tmp_path):
    build_model(ResNetConfig(layers=(1,), in_chans=1, num_classes=0)).save_pretrained(tmp_path / "resnet")
    overrides = [f"model.weights={tmp_path / 'resnet'}", "train.objective=mpp"]
    config = apply_overrides(finetune_defaults(), overrides).validate()
    with pytest.raises(
        ValueError, match="train.objective='mpp' needs a Vision Transformer; .* is a ResNetV2"
    ):
        build.build_run_model(config, objective_for(config.train), [str(i) for i in range(10)], None)
