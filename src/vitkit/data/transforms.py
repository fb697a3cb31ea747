"""Batched image preprocessing on tensors: the paper's train augmentation and eval resize.

Every per-sample random number (crop box, flip, RandAugment seed) comes from a counter-based
hash of (seed, epoch, sample index, stream), so a sample is augmented identically whatever
batch, rank or resume point it lands in. MixUp / CutMix mix samples *within* a batch and are
therefore keyed per batch: (seed, epoch, first index of the batch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from vitkit.sizes import to_pair

CROPS = ("inception", "resize_crop", "pad_crop", "none")
# 'resize_crop' resizes to img_size * 8/7 before a random img_size crop (28 -> 32, 224 -> 256);
# 'pad_crop' zero-pads (black) to the same size instead: shifts only, at the scale evaluation sees.
RESIZE_CROP_RATIO = 8 / 7
# Inception-crop area range: the paper's (0.08, 1) when the images are large, gentler on tiny ones
# (28x28 Fashion-MNIST, 32x32 CIFAR) where an 8% crop is a handful of pixels.
SCALE_LARGE = (0.08, 1.0)
SCALE_SMALL = (0.25, 1.0)
SMALL_IMAGE_SIDE = 64
INCEPTION_ATTEMPTS = 10
# Uniform streams per sample: (area, log-ratio) per inception attempt, then crop top, left, flip.
TOP, LEFT, FLIP = 2 * INCEPTION_ATTEMPTS, 2 * INCEPTION_ATTEMPTS + 1, 2 * INCEPTION_ATTEMPTS + 2
NUM_STREAMS = 2 * INCEPTION_ATTEMPTS + 3
LUMA = (0.299, 0.587, 0.114)  # ITU-R 601, as PIL's "L" conversion
# A batch of same-size images, or images of several sizes one by one.
Images = torch.Tensor | Sequence[torch.Tensor]
# Per-channel (mean, std) of x = (pixels / 255 - mean) / std: a model config's `mean_std`; None is the paper's 0.5.
MeanStd = tuple[Sequence[float], Sequence[float]] | None

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _signed(value: int) -> int:
    """The int64 with the same 64 bits as an unsigned constant, so torch can hold it."""
    return value - (1 << 64) if value >= 1 << 63 else value


def splitmix64(value: int) -> int:
    """SplitMix64 finaliser on a Python int: the reference the tensor version must equal."""
    z = (value + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def splitmix64_tensor(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64 on int64 tensors (wrapping multiply, logical shifts emulated by masking)."""
    z = x + _signed(_GOLDEN)
    z = (z ^ ((z >> 30) & ((1 << 34) - 1))) * _signed(_MIX1)
    z = (z ^ ((z >> 27) & ((1 << 37) - 1))) * _signed(_MIX2)
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def key(*parts: int) -> int:
    """A 64-bit key chained from integers (seed, epoch, ...), as an unsigned Python int."""
    h = 0
    for part in parts:
        h = splitmix64(h ^ (part & _MASK64))
    return h


def sample_keys(indices: torch.Tensor, *parts: int) -> torch.Tensor:
    """int64 [N] keys of (parts..., sample index), e.g. (seed, epoch): roots of per-sample draws."""
    return splitmix64_tensor(indices.to(torch.int64) ^ _signed(key(*parts)))


def uniforms(keys: torch.Tensor, num_streams: int) -> torch.Tensor:
    """float32 [N, num_streams] in [0, 1): stream s of sample n depends on keys[n] and s only."""
    streams = torch.arange(num_streams, dtype=torch.int64, device=keys.device)
    bits = splitmix64_tensor(keys[:, None] ^ splitmix64_tensor(streams)[None, :])
    return ((bits >> 40) & ((1 << 24) - 1)).to(torch.float32) / float(1 << 24)


def adapt_channels(x: torch.Tensor, in_chans: int | None) -> torch.Tensor:
    """Match the model's input channels: grey repeated to RGB, RGB to luminance."""
    c = x.shape[1]
    if in_chans is None or in_chans == c:
        return x
    if c == 1:
        return x.expand(-1, in_chans, -1, -1).contiguous()
    if c == 3 and in_chans == 1:
        weights = torch.tensor(LUMA, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
        return (x * weights).sum(1, keepdim=True)
    raise ValueError(f"cannot adapt {c}-channel images to in_chans={in_chans} (supported: 1->N, 3->1)")


def normalise(x: torch.Tensor, mean_std: MeanStd) -> torch.Tensor:
    """Inputs in [-1, 1] (the paper's: (pixels / 255 - 0.5) / 0.5) [B, C, h, w] as (pixels / 255 - mean) / std,
    the normalisation other weights were trained with (ImageNet's or CLIP's mean and std); with None or 0.5 for
    every channel they are returned as they are, so the paper's models get exactly the pixels they always had."""
    if mean_std is None or all(value == 0.5 for values in mean_std for value in values):
        return x
    mean, std = (torch.tensor(v, dtype=x.dtype, device=x.device).view(1, -1, 1, 1) for v in mean_std)
    if mean.shape[1] != x.shape[1] or std.shape[1] != x.shape[1]:
        raise ValueError(f"mean_std has {mean.shape[1]} and {std.shape[1]} values for {x.shape[1]} channels")
    return ((x + 1.0) * 0.5 - mean) / std


def _check_uint8(images: torch.Tensor) -> None:
    """Both transforms take raw pixels, so that [0, 255] -> [-1, 1] is unambiguous."""
    if images.dtype != torch.uint8 or images.ndim != 4:
        raise ValueError(f"expected uint8 images [B, C, H, W], got {images.dtype} {tuple(images.shape)}")


def _resize(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Bilinear resize with antialiasing (the paper resizes with tf.image.resize, bilinear)."""
    if tuple(x.shape[-2:]) == size:
        return x
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=True)


def resize_centre_crop(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Resize keeping the aspect ratio until the image covers `size`, then keep the centre `size` window.

    On images with the aspect ratio of `size` (the square images of in-memory datasets) this is a plain resize.
    """
    out_h, out_w = size
    height, width = x.shape[-2:]
    if height * out_w == width * out_h:
        return _resize(x, size)
    scale = max(out_h / height, out_w / width)
    covered = (max(out_h, round(height * scale)), max(out_w, round(width * scale)))
    x = _resize(x, covered)
    top, left = (covered[0] - out_h) // 2, (covered[1] - out_w) // 2
    return x[..., top : top + out_h, left : left + out_w]


def eval_transform(
    images: torch.Tensor,
    img_size: int | tuple[int, int],
    in_chans: int | None = None,
    mean_std: MeanStd = None,
) -> torch.Tensor:
    """The paper's evaluation preprocessing: resize (and centre crop other aspect ratios) to the model size,
    values to [-1, 1], or normalised with the weights' own `mean_std` (a model config's). Any batch size,
    including one image, gives the same pixels."""
    _check_uint8(images)
    x = resize_centre_crop(images.float(), to_pair(img_size))
    return normalise(adapt_channels(x / 127.5 - 1.0, in_chans), mean_std)


def inception_box(
    u: Sequence[float], height: int, width: int, scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[int, int, int, int]:
    """The crop (top, left, h, w) of torchvision's RandomResizedCrop.get_params, drawn from one sample's uniforms.

    u holds the sample's NUM_STREAMS uniforms. The first of INCEPTION_ATTEMPTS (area, log-ratio) draws that fits
    wins, placed with the TOP/LEFT draws; if none fits, the centred fallback crop. Plain float64 arithmetic on
    one sample, so a sample's box does not depend on the batch it is drawn in.
    """
    area = height * width
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for attempt in range(INCEPTION_ATTEMPTS):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * u[attempt])
        aspect = math.exp(log_lo + (log_hi - log_lo) * u[INCEPTION_ATTEMPTS + attempt])
        w, h = round(math.sqrt(target_area * aspect)), round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:  # randint(0, H - h + 1) from a uniform
            return math.floor(u[TOP] * (height - h + 1)), math.floor(u[LEFT] * (width - w + 1)), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        w, h = round(height * max(ratio)), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


class TrainTransform:
    """The training augmentation, batched on tensors (any device) and keyed per sample.

    crop: 'inception' (random area/aspect crop resized to img_size, the paper's pre-training
    augmentation; image by image in uint8, as torchvision's RandomResizedCrop on tensors), 'resize_crop' (resize to img_size * 8/7, random img_size crop: the paper's
    fine-tuning preprocessing), 'pad_crop' (resize to img_size, pad with black to img_size * 8/7, random
    img_size crop: translations of up to 1/14 of the side without the zoom that evaluation does not see; the
    usual augmentation of 28x28 and 32x32 images) or 'none' (resize only). `scale` is the inception area range
    (default (0.08, 1), or (0.25, 1) for inputs under 64 px), `ratio` its aspect range.
    Then an optional horizontal flip, optional RandAugment (per sample, keyed like the crop;
    a Python loop, so slower), values to [-1, 1] (or normalised with the weights' `mean_std`), and optional
    MixUp / CutMix (one draw per batch from torch's RNG seeded with (seed, epoch, first index of the batch):
    reproducible for the same batch composition, i.e. the same world size, unlike the per-sample draws).

    `augment` is the per-sample part: a sample gets the same pixels alone, in a batch of same-size images or in
    a list of images of several sizes, so DataLoader workers apply it to the files of a step and the engine to
    in-memory batches.
    `mix` is the batch part, applied to the assembled batch.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int],
        *,
        crop: str = "inception",
        flip: bool = True,
        seed: int = 0,
        randaugment: bool = False,
        mixup: float = 0.0,
        cutmix: float = 0.0,
        num_classes: int | None = None,
        in_chans: int | None = None,
        scale: tuple[float, float] | None = None,
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        mean_std: MeanStd = None,
    ) -> None:
        if crop not in CROPS:
            raise ValueError(f"crop must be one of {CROPS}, got {crop!r}")
        if (mixup > 0 or cutmix > 0) and num_classes is None:
            raise ValueError("mixup/cutmix need num_classes to build soft labels")
        if scale is not None and not 0 < scale[0] <= scale[1] <= 1:
            raise ValueError(f"scale must satisfy 0 < lo <= hi <= 1, got {scale}")
        if not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"ratio must satisfy 0 < lo <= hi, got {ratio}")
        self.img_size = to_pair(img_size)
        self.crop = crop
        self.flip = flip
        self.seed = seed
        self.in_chans = in_chans
        self.scale = scale
        self.ratio = ratio
        self.mean_std = mean_std
        self.randaugment: torch.nn.Module | None = None
        self.mix: torch.nn.Module | None = None
        if randaugment or mixup > 0 or cutmix > 0:  # torchvision's: its import costs seconds, paid only here
            from torchvision.transforms import v2

            self.randaugment = v2.RandAugment() if randaugment else None
            mixers = []
            if mixup > 0:
                mixers.append(v2.MixUp(alpha=mixup, num_classes=num_classes))
            if cutmix > 0:
                mixers.append(v2.CutMix(alpha=cutmix, num_classes=num_classes))
            self.mix = None if not mixers else mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)

    def __call__(
        self, images: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor, epoch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 [B, C, H, W] -> float32 [B, in_chans, h, w] in [-1, 1], labels (soft with mix)."""
        if labels.shape[0] != images.shape[0]:
            raise ValueError(
                f"images and labels must share the batch size, got {images.shape[0]}, {labels.shape[0]}"
            )
        return self.mix_batch(self.augment(images, indices, epoch), labels, indices, epoch)

    def augment(self, images: Images, indices: torch.Tensor, epoch: int) -> torch.Tensor:
        """The per-sample part: uint8 [B, C, H, W] (or a list of B uint8 [C, H, W] of any sizes) -> float32
        [B, in_chans, h, w] in [-1, 1], keyed by (seed, epoch, index) of each sample."""
        for batch in [images] if isinstance(images, torch.Tensor) else [image[None] for image in images]:
            _check_uint8(batch)
        if indices.shape[0] != len(images):
            raise ValueError(
                f"images and indices must share the batch size, got {len(images)}, {indices.shape[0]}"
            )
        device = images.device if isinstance(images, torch.Tensor) else indices.device
        keys = sample_keys(indices.to(device), self.seed, epoch)
        u = uniforms(keys, NUM_STREAMS)
        x = self._crop(images, u)
        if self.flip:
            x = torch.where((u[:, FLIP] < 0.5).view(-1, 1, 1, 1), x.flip(-1), x)
        x = adapt_channels(x, self.in_chans)
        if self.randaugment is not None:
            x = self._randaugment(x, keys)
        return normalise(x / 127.5 - 1.0, self.mean_std)

    def mix_batch(
        self, x: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor, epoch: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch part: MixUp / CutMix (if on) seeded with (seed, epoch, first index of the batch)."""
        if self.mix is None or len(indices) == 0:
            return x, labels
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(key(self.seed, epoch, int(indices[0])) >> 1)
            return self.mix(x, labels)

    def _crop(self, images: Images, u: torch.Tensor) -> torch.Tensor:
        """Float [0, 255] crops at img_size [B, C, h, w]: Inception crops image by image, the other crops on the
        whole batch when the images share a size."""
        if self.crop == "inception":
            return torch.stack(
                [self._inception_crop(image, row) for image, row in zip(images, u.tolist(), strict=True)]
            ).float()
        if isinstance(images, torch.Tensor):
            return self._fixed_crop(images.float(), u)
        return torch.cat(
            [self._fixed_crop(image[None].float(), u[i : i + 1]) for i, image in enumerate(images)]
        )

    def _inception_crop(self, image: torch.Tensor, u: list[float]) -> torch.Tensor:
        """uint8 [C, H, W] -> the sample's Inception crop resized to img_size (uint8): torchvision's
        resized_crop, bilinear with antialiasing (the area-averaging filter when the crop shrinks)."""
        height, width = image.shape[-2:]
        default = SCALE_SMALL if min(height, width) < SMALL_IMAGE_SIDE else SCALE_LARGE
        top, left, h, w = inception_box(u, height, width, self.scale or default, self.ratio)
        window = image[:, top : top + h, left : left + w]
        if (h, w) == self.img_size:
            return window
        return F.interpolate(
            window[None], size=self.img_size, mode="bilinear", align_corners=False, antialias=True
        )[0]

    def _fixed_crop(self, x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """'resize_crop', 'pad_crop' or 'none' on float [B, C, H, W] images of one size."""
        out_h, out_w = self.img_size
        b = x.shape[0]
        if self.crop == "none":
            return resize_centre_crop(x, self.img_size)
        big_h, big_w = round(out_h * RESIZE_CROP_RATIO), round(out_w * RESIZE_CROP_RATIO)
        if self.crop == "resize_crop":
            x = resize_centre_crop(x, (big_h, big_w))
        else:
            top_pad, left_pad = (big_h - out_h) // 2, (big_w - out_w) // 2
            pads = (left_pad, big_w - out_w - left_pad, top_pad, big_h - out_h - top_pad)
            x = torch.nn.functional.pad(resize_centre_crop(x, self.img_size), pads)
        top = torch.floor(u[:, TOP] * (big_h - out_h + 1)).long()
        left = torch.floor(u[:, LEFT] * (big_w - out_w + 1)).long()
        rows = (top[:, None] + torch.arange(out_h, device=x.device))[:, None, :, None]
        cols = (left[:, None] + torch.arange(out_w, device=x.device))[:, None, None, :]
        batch = torch.arange(b, device=x.device)[:, None, None, None]
        chans = torch.arange(x.shape[1], device=x.device)[None, :, None, None]
        return x[batch, chans, rows, cols]

    def _randaugment(self, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """RandAugment per sample on [0, 255] floats, torch's RNG seeded from the sample's key."""
        assert self.randaugment is not None  # called only with randaugment on
        out = torch.empty_like(x)
        with torch.random.fork_rng(devices=[]):
            for row, k in enumerate(keys.tolist()):
                torch.manual_seed(k & ((1 << 63) - 1))
                out[row] = self.randaugment(x[row] / 255.0) * 255.0
        return out
