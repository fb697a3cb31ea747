"""The run's opening line says how many steps an epoch is, and how many images each epoch leaves out when they do
not fill a last batch (every step has the same batch size)."""

from __future__ import annotations

from vitkit.data import balanced_subset, load_dataset
from vitkit.recipe.run_config import TrainSection
from vitkit.training.build import RunData


def test_images_that_do_not_fill_a_batch_are_said():
    photos = balanced_subset(load_dataset("fashion_mnist", "train"), 120)
    data = RunData(photos, photos, photos, None)
    assert data.epoch_plan(TrainSection(batch_size=64)) == (
        "1 step per epoch, each leaving out 56 of the 120 images (full batches of 64 only; others each epoch)"
    )
    assert data.epoch_plan(TrainSection(batch_size=8)) == "15 steps per epoch"
