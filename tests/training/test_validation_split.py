"""data.val_split: a class-balanced validation split held out of training, measured instead of the test."""

import pytest
import torch

import vitkit
from vitkit.data import hold_out, load_dataset
from vitkit.evaluation import evaluate_model
from vitkit.recipe.resolve import apply_overrides
from vitkit.recipe.run_config import RunConfig
from vitkit.training import trainer
from vitkit.training.report import read_metrics


def rows(dataset):
    """Every (image, label) of a dataset as bytes, to compare datasets as sets."""
    pairs = zip(dataset.images, dataset.labels.tolist(), strict=True)
    return {bytes(image.numpy()) + bytes([label]) for image, label in pairs}


def test_the_held_out_split_is_balanced_disjoint_complete_and_keyed_by_its_seed():
    dataset = load_dataset("fashion_mnist", "train")
    rest, validation = hold_out(dataset, 25, seed=3)
    assert len(validation) == 25 and len(rest) == len(dataset) - 25
    assert torch.bincount(validation.labels).tolist() == [3] * 5 + [2] * 5
    assert rows(rest).isdisjoint(rows(validation)) and rows(rest) | rows(validation) == rows(dataset)
    assert torch.equal(validation.images, hold_out(dataset, 25, seed=3)[1].images)
    assert not torch.equal(validation.images, hold_out(dataset, 25, seed=4)[1].images)
    with pytest.raises(
        ValueError,
        match=r"data.val_split 5 is fewer images than the 10 classes of .* at least one of each \(data.val_split=10 or more\)",
    ):
        hold_out(dataset, 5)


def test_a_run_trains_without_the_split_evaluates_on_it_meanwhile_and_reports_both(tmp_path, tiny_recipe):
    out = tmp_path / "run"
    overrides = [*tiny_recipe, "train.steps=4", "train.eval_every=2", "data.val_split=200", "data.val_seed=1"]
    report = trainer.run_training(apply_overrides(RunConfig(), overrides), out)
    periodic = [r for r in read_metrics(out) if "wall_seconds" in r]
    assert "val_top1" in periodic[0] and "test_top1" not in periodic[0]  # step 2: validation only
    assert report["val_images"] == 200 and report["epochs"] == 4 * 32 / (4000 - 200)
    _, validation = hold_out(load_dataset("fashion_mnist", "train"), 200, seed=1)
    model = vitkit.load_weights(out)
    assert report["val_top1"] == evaluate_model(model, validation, batch_size=500).top1
    assert (
        report["test_top1"]
        == evaluate_model(model, load_dataset("fashion_mnist", "test"), batch_size=500).top1
    )
