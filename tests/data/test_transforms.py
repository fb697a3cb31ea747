"""Transforms: per-sample keyed randomness, the paper's crops, value range, eval preprocessing."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torchvision.transforms import RandomResizedCrop
from torchvision.transforms.v2 import functional as TF

from vitkit.data import TrainTransform, eval_transform, load_dataset
from vitkit.data.transforms import (
    NUM_STREAMS,
    inception_box,
    sample_keys,
    splitmix64,
    splitmix64_tensor,
    uniforms,
)


@pytest.fixture(scope="module")
def fashion():
    return load_dataset("fashion_mnist", "train", subset="embedded")


@pytest.fixture(scope="module")
def batch(fashion):
    indices = torch.arange(100, 132) * 7
    return fashion.images[indices], fashion.labels[indices], indices


# Published SplitMix64 outputs (Vigna's splitmix64.c: state += 0x9E3779B97F4A7C15, then the mix): the first
# four of a generator seeded 0 (they seed xoshiro), and the first five of the rand_xoshiro crate's `reference`
# test for seed 1477776061723855037. `splitmix64(x)` is the first output of a generator seeded x, so output k of
# seed s is splitmix64(s + k * 0x9E3779B97F4A7C15 mod 2^64).
WEYL = 0x9E3779B97F4A7C15
PUBLISHED = {
    0: [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F, 0xF88BB8A8724C81EC],
    1477776061723855037: [
        1985237415132408290,
        2979275885539914483,
        13511426838097143398,
        8488337342461049707,
        15141737807933549159,
    ],
}


@pytest.mark.parametrize("seed", PUBLISHED)
def test_splitmix64_gives_the_published_outputs(seed):
    states = [(seed + k * WEYL) % 2**64 for k in range(len(PUBLISHED[seed]))]
    assert [splitmix64(s) for s in states] == PUBLISHED[seed]
    signed = [s - 2**64 if s >= 2**63 else s for s in states]  # int64 tensors hold the same 64 bits
    got = splitmix64_tensor(torch.tensor(signed, dtype=torch.int64)).tolist()
    assert [g % 2**64 for g in got] == PUBLISHED[seed]


def test_tensor_hash_equals_reference_splitmix64_at_the_int64_edges():
    values = [0, 1, 2, 12345, 2**31, 2**62 + 17, 2**63 - 1, -1, -(2**63)]
    got = splitmix64_tensor(torch.tensor(values, dtype=torch.int64)).tolist()
    assert [g % 2**64 for g in got] == [splitmix64(v % 2**64) for v in values]


def test_uniforms_are_in_unit_interval_and_spread():
    u = uniforms(torch.arange(4096, dtype=torch.int64), 3)
    assert u.shape == (4096, 3) and u.dtype == torch.float32
    assert float(u.min()) >= 0 and float(u.max()) < 1
    assert u.mean().item() == pytest.approx(0.5, abs=0.02)
    assert abs(torch.corrcoef(u.T)[0, 1].item()) < 0.05


@pytest.mark.parametrize("crop", ["inception", "resize_crop", "pad_crop", "none"])
def test_sample_augmentation_is_independent_of_batch_composition(batch, crop):
    images, labels, indices = batch
    transform = TrainTransform(28, crop=crop, seed=3)
    full, _ = transform(images, labels, indices, epoch=2)
    order = torch.randperm(len(indices), generator=torch.Generator().manual_seed(0))
    permuted, permuted_labels = transform(images[order], labels[order], indices[order], epoch=2)
    assert torch.allclose(permuted, full[order], atol=1e-6) and torch.equal(permuted_labels, labels[order])
    sub, _ = transform(images[5:8], labels[5:8], indices[5:8], epoch=2)
    assert torch.allclose(sub, full[5:8], atol=1e-6)
    other_epoch, _ = transform(images, labels, indices, epoch=3)
    other_seed, _ = TrainTransform(28, crop=crop, seed=4)(images, labels, indices, epoch=2)
    for other in (other_epoch, other_seed):
        changed = (other - full).abs().flatten(1).amax(1) > 1e-3
        assert changed.float().mean() > 0.3  # flip alone changes ~half; crops change nearly all


@pytest.mark.parametrize("crop", ["inception", "resize_crop", "pad_crop", "none"])
@pytest.mark.parametrize("img_size, in_chans", [(28, None), (32, 3), ((24, 16), 1)])
def test_output_shape_dtype_and_range(batch, crop, img_size, in_chans):
    images, labels, indices = batch
    x, y = TrainTransform(img_size, crop=crop, in_chans=in_chans)(images, labels, indices, 0)
    h, w = (img_size, img_size) if isinstance(img_size, int) else img_size
    assert x.shape == (32, in_chans or 1, h, w) and x.dtype == torch.float32
    assert float(x.min()) >= -1 and float(x.max()) <= 1 and float(x.min()) < -0.99
    assert torch.equal(y, labels)


def test_full_box_inception_crop_is_a_plain_bilinear_resize(batch):
    # scale=(1, 1), ratio=(1, 1) on a square image always picks the whole image: torchvision's resize.
    images, labels, indices = batch
    transform = TrainTransform(40, crop="inception", scale=(1.0, 1.0), ratio=(1.0, 1.0), flip=False)
    x, _ = transform(images, labels, indices, 0)
    resized = TF.resize(images, [40, 40], interpolation=TF.InterpolationMode.BILINEAR, antialias=True)
    assert torch.equal(x, resized.float() / 127.5 - 1)


def test_inception_crop_is_torchvisions_resized_crop_of_its_box():
    images = torch.randint(0, 256, (3, 3, 90, 70), dtype=torch.uint8)  # larger than 64 px: scale (0.08, 1)
    indices = torch.tensor([4, 9, 1])
    transform = TrainTransform(32, crop="inception", flip=False, seed=5)
    x = transform.augment(images, indices, 2)
    u = uniforms(sample_keys(indices, 5, 2), NUM_STREAMS)
    for image, row, crop in zip(images, u.tolist(), x, strict=True):
        top, left, h, w = inception_box(row, 90, 70, (0.08, 1.0), (3 / 4, 4 / 3))
        expected = TF.resized_crop(image, top, left, h, w, [32, 32], antialias=True)
        assert torch.equal(crop, expected.float() / 127.5 - 1)
    assert len({inception_box(row, 90, 70, (0.08, 1.0), (3 / 4, 4 / 3)) for row in u.tolist()}) == 3


def test_images_of_several_sizes_are_augmented_as_each_alone():
    transform = TrainTransform(24, crop="inception", seed=1)
    images = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8) for h, w in ((40, 30), (24, 24), (70, 90))]
    indices = torch.tensor([7, 3, 11])
    together = transform.augment(images, indices, 0)
    alone = torch.cat(
        [transform.augment(image[None], indices[i : i + 1], 0) for i, image in enumerate(images)]
    )
    assert together.shape == (3, 3, 24, 24) and torch.equal(together, alone)


def test_inception_boxes_follow_random_resized_crop_rules():
    u = uniforms(torch.arange(2000, dtype=torch.int64), NUM_STREAMS).tolist()
    boxes = torch.tensor([inception_box(row, 224, 160, (0.08, 1.0), (3 / 4, 4 / 3)) for row in u])
    top, left, h, w = boxes.unbind(1)
    assert (top >= 0).all() and (left >= 0).all() and (left + w <= 160).all() and (top + h <= 224).all()
    assert (w * h >= 0.08 * 224 * 160 * 0.95).all()
    assert (torch.log(w / h).abs() <= math.log(4 / 3) + 0.05).all()
    # A ratio no attempt can meet falls back to torchvision's centred crop clamped to the range.
    fallback = RandomResizedCrop.get_params(torch.zeros(1, 30, 30), [0.5, 1.0], [10.0, 20.0])
    assert all(inception_box(row, 30, 30, (0.5, 1.0), (10.0, 20.0)) == tuple(fallback) for row in u[:4])


def test_resize_crop_is_a_window_of_the_8_7_resize(batch):
    images, labels, indices = batch
    x, _ = TrainTransform(28, crop="resize_crop", flip=False)(images, labels, indices, 0)
    big = F.interpolate(images.float(), size=(32, 32), mode="bilinear", antialias=True) / 127.5 - 1
    windows = big.unfold(2, 28, 1).unfold(3, 28, 1)  # [B, C, 5, 5, 28, 28]
    error = (windows - x[:, :, None, None]).abs().amax((1, 4, 5)).flatten(1).amin(1)
    assert (error < 1e-6).all()


def test_pad_crop_is_a_window_of_the_padded_image_and_shifts_both_ways(batch):
    images, labels, indices = batch
    x, _ = TrainTransform(28, crop="pad_crop", flip=False)(images, labels, indices, 0)
    padded = F.pad(images.float(), (2, 2, 2, 2)) / 127.5 - 1  # black is -1 after scaling
    windows = padded.unfold(2, 28, 1).unfold(3, 28, 1)  # [B, C, 5, 5, 28, 28]
    error = (windows - x[:, :, None, None]).abs().amax((1, 4, 5)).flatten(1)
    assert (error.amin(1) < 1e-6).all()
    offsets = error.argmin(1)
    assert len(offsets.unique()) > 10  # the 25 shifts, not one window


def test_flip_mirrors_about_half_the_samples(fashion):
    indices = torch.arange(400)
    images = fashion.images[indices]
    x, _ = TrainTransform(28, crop="none", flip=True)(images, fashion.labels[indices], indices, 0)
    plain = images.float() / 127.5 - 1
    flipped = (x - plain.flip(-1)).abs().flatten(1).amax(1) < 1e-6
    unflipped = (x - plain).abs().flatten(1).amax(1) < 1e-6
    assert (flipped | unflipped).all() and 150 < int(flipped.sum()) < 250


def test_randaugment_is_keyed_per_sample(batch):
    images, labels, indices = batch
    transform = TrainTransform(28, crop="none", flip=False, randaugment=True)
    x, _ = transform(images, labels, indices, 1)
    sub, _ = transform(images[3:9], labels[3:9], indices[3:9], 1)
    assert torch.allclose(sub, x[3:9]) and float(x.min()) >= -1 and float(x.max()) <= 1
    assert not torch.allclose(x, TrainTransform(28, crop="none", flip=False)(images, labels, indices, 1)[0])


def test_mixup_cutmix_give_reproducible_soft_labels(batch):
    images, labels, indices = batch
    transform = TrainTransform(28, mixup=0.8, cutmix=1.0, num_classes=10, in_chans=3)
    x, y = transform(images, labels, indices, 0)
    x2, y2 = transform(images, labels, indices, 0)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert x.shape == (32, 3, 28, 28) and y.shape == (32, 10) and y.dtype == torch.float32
    assert torch.allclose(y.sum(1), torch.ones(32)) and (y.amax(1) < 1).any()
    state = torch.get_rng_state()
    transform(images, labels, indices, 0)
    assert torch.equal(state, torch.get_rng_state())  # the global RNG is left untouched
    with pytest.raises(ValueError, match="num_classes"):
        TrainTransform(28, mixup=0.2)


def test_eval_transform_values_size_and_channels():
    images = torch.tensor([0, 255], dtype=torch.uint8).view(2, 1, 1, 1).expand(2, 1, 28, 28)
    x = eval_transform(images, 28)
    assert x.shape == (2, 1, 28, 28) and (x[0] == -1).all() and (x[1] == 1).all()
    rgb = eval_transform(images, (32, 48), in_chans=3)
    assert rgb.shape == (2, 3, 32, 48) and torch.allclose(rgb[1], torch.ones(3, 32, 48))
    grey = eval_transform(images.expand(2, 3, 28, 28).contiguous(), 28, in_chans=1)
    assert grey.shape == (2, 1, 28, 28) and torch.allclose(grey[1], torch.ones(1, 28, 28))
    with pytest.raises(ValueError, match="uint8"):
        eval_transform(images.float(), 28)
