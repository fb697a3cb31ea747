"""`vitkit bench data`'s candidates read the same images and its ratios are computed per round. Functional only --
nothing here asserts a speed."""

import pytest
import torch
from PIL import Image

from vitkit.bench import input_pipeline
from vitkit.bench.timing import Result


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two classes of 6 images each, of mixed sizes and modes (RGB and grey)."""
    root = tmp_path_factory.mktemp("images")
    for label in range(2):
        (root / "train" / f"c{label}").mkdir(parents=True)
        for i in range(6):
            mode = "RGB" if i % 2 else "L"
            Image.new(mode, (40 + 4 * i, 36), color=30 * i if mode == "L" else (30 * i, 20, 200)).save(
                root / "train" / f"c{label}" / f"{i}.png"
            )
    return root


@pytest.mark.parametrize("make", [input_pipeline.vitkit_loader, input_pipeline.torchvision_loader])
def test_both_pipelines_give_batches_of_the_size_in_minus_one_to_one(folder, make):
    first = next(iter(make(folder, 24, 4, 0)()))
    images = first.images if hasattr(first, "images") else first[0]
    assert images.shape == (4, 3, 24, 24) and images.dtype == torch.float32
    assert images.min() >= -1.0 and images.max() <= 1.0


@pytest.mark.slow  # times ViT-Ti/16 training steps against both pipelines, two rounds
def test_rows_compare_vitkit_to_torchvision_and_training_per_round(folder):
    rows = input_pipeline.data_vs_training(
        folder, [0], ["ViT-Ti/16"], img_size=32, batch_size=4, train_batch_size=2, rounds=2, batches=1
    )
    by_name = {(r["candidate"], r.get("against")): r for r in rows}
    timed = [r for r in rows if "images/s" in r]
    assert len(timed) == 3 and all(r["images/s"] > 0 for r in timed)
    versus = by_name[("vitkit pipeline, 0 workers", "torchvision pipeline, 0 workers")]
    assert versus["ratio"] > 0 and len(versus["per round"].split()) == 2
    share = next(r for r in rows if r["candidate"].startswith("data share"))
    assert 0 < share["ratio"] < 1


def test_the_data_share_is_pipeline_time_over_pipeline_plus_training_time():
    results = {"pipe": Result("pipe", [1.0, 2.0], images=10), "train": Result("train", [3.0, 2.0], images=1)}
    # per image: pipeline 0.1 and 0.2 s, training 3 and 2 s
    assert input_pipeline.data_share(results, "pipe", "train") == pytest.approx([0.1 / 3.1, 0.2 / 2.2])
