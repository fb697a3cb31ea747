"""Images of any mode from disk to model inputs; unreadable files are reported, not fatal."""

from __future__ import annotations

import os

import torch

from vitkit.data.decode import ImageDecodeError, decode_image, find_images
from vitkit.data.transforms import eval_transform


def read_images(
    paths: list[str | os.PathLike], limit: int | None = None, max_pixels: int | None = None
) -> tuple[list[torch.Tensor], list[str], list[dict[str, str]]]:
    """(uint8 [3, H, W] images decoded by vitkit.data.decode's rule, their paths, skipped [{path, reason}]) for
    files and directories of images; reading stops after `limit` readable images."""
    files, skipped = find_images(paths)
    images: list[torch.Tensor] = []
    names: list[str] = []
    for f in files:
        if limit is not None and len(images) >= limit:
            break
        try:
            images.append(decode_image(f, max_pixels=max_pixels))
        except ImageDecodeError as error:
            skipped.append({"path": str(f), "reason": str(error).removeprefix(f"{f}: ")})
            continue
        names.append(str(f))
    return images, names, skipped


def preprocess(images: list[torch.Tensor], img_size: tuple[int, int], in_chans: int) -> torch.Tensor:
    """The eval preprocessing (resize to the model size, bilinear with antialiasing; values to [-1, 1];
    RGB to luminance for 1-channel models): [N, in_chans, H, W] float32."""
    out = []
    for image in images:
        out.append(eval_transform(image[None], img_size, in_chans))
    if not out:
        return torch.empty(0, in_chans, *img_size)
    return torch.cat(out)
