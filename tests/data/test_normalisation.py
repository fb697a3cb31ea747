"""The weights' own normalisation (a config's `mean_std`) in every preprocessing: the evaluation transform, the
training augmentation, the pipeline's evaluation batches, the service and the export metadata; the paper's models
keep exactly the pixels they always had."""

from __future__ import annotations

import numpy as np
import torch

from tiny import build_tiny_vit
from vitkit.data import ImageDataset, TrainTransform, eval_batches, eval_transform
from vitkit.export.metadata import serving_metadata
from vitkit.models.registry import IMAGENET_MEAN, IMAGENET_STD
from vitkit.service.served_model import pytorch_model

IMAGENET = (IMAGENET_MEAN, IMAGENET_STD)


def pixels(n: int = 4, size: int = 16) -> torch.Tensor:
    return torch.randint(
        0, 256, (n, 3, size, size), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )


def reference(images: torch.Tensor, mean_std) -> np.ndarray:
    """(pixels / 255 - mean) / std in float64, per channel."""
    mean, std = (np.asarray(v, np.float64).reshape(1, -1, 1, 1) for v in mean_std)
    return (images.numpy().astype(np.float64) / 255 - mean) / std


def test_the_papers_models_get_bitwise_the_pixels_they_always_had():
    images = pixels()
    today = (
        images.float() / 127.5 - 1.0
    )  # eval_transform at the images' own size, before normalisation existed
    paper = build_tiny_vit().config.mean_std
    assert paper == ((0.5,) * 3, (0.5,) * 3)
    for mean_std in (None, paper):
        assert torch.equal(eval_transform(images, 16, 3, mean_std), today)
        train = TrainTransform(16, crop="none", flip=False, mean_std=mean_std)
        assert torch.equal(train.augment(images, torch.arange(4), 0), today)


def test_other_weights_get_their_mean_and_std_everywhere():
    images = pixels()
    expected = reference(images, IMAGENET)
    x = eval_transform(images, 16, 3, IMAGENET)
    np.testing.assert_allclose(x.numpy(), expected, atol=2e-6, rtol=0)
    train = TrainTransform(16, crop="none", flip=False, mean_std=IMAGENET)
    assert torch.equal(train.augment(images, torch.arange(4), 0), x)
    source = ImageDataset(images, torch.zeros(4, dtype=torch.int64), ["a"], "four images")
    (batch,) = eval_batches(source, [torch.arange(4)], (16, 16), 3, torch.device("cpu"), IMAGENET)
    assert torch.equal(batch.images, x)  # the fast path's features see predict's pixels


def test_the_service_and_the_export_metadata_normalise_as_the_weights_do():
    model = build_tiny_vit(image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD)
    images = pixels(1)
    served = pytorch_model(model, "tiny", torch.device("cpu"), "fp32")
    assert torch.equal(served.preprocess(images[0]), eval_transform(images, 16, 3, IMAGENET)[0])
    metadata = serving_metadata(model)
    assert metadata["mean"] == list(IMAGENET_MEAN) and metadata["std"] == list(IMAGENET_STD)
    assert "per channel" in metadata["normalisation"]
    low, high = metadata["value_range"]
    x = reference(images, (metadata["mean"], metadata["std"]))
    assert low <= x.min() and x.max() <= high and low < -2 and high > 2.5  # ImageNet's range, not [-1, 1]
    paper = serving_metadata(build_tiny_vit())
    assert paper["value_range"] == [-1.0, 1.0] and paper["mean"] == [0.5] * 3
    assert paper["normalisation"].endswith("pixels / 127.5 - 1")
