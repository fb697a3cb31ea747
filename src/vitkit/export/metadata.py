"""What a server needs beside the network: class names, input size, channels, normalisation, resize rule.

The same JSON document travels in an ONNX file (metadata_props key `vitkit`) and in a `.pt2` program (extra
file `vitkit.json`), so that a server that has never seen vitkit's Python code can preprocess images exactly as
`vitkit predict` does and name its answers.
"""

from __future__ import annotations

import json
from typing import Any

from torch import nn

from vitkit.models import as_model
from vitkit.models.config import ViTConfig, to_pair
from vitkit.version import __version__

METADATA_KEY = "vitkit"
RESIZE_RULE = (
    "bilinear with antialiasing, aspect ratio kept, until the image covers height x width; then the centre "
    "height x width window (a plain resize when the aspect ratios agree)"
)
CHANNEL_RULE = "3 channels: RGB; 1 channel: luminance; every image mode decoded to them by the steps of `decode`, in order"
# vitkit.data.decode's rule, step by step, in Pillow's terms: a client that follows it gets predict's pixels.
DECODE_STEPS = [
    "open with Pillow; a multi-frame file (GIF, TIFF) gives its first frame",
    "EXIF orientation: applied first (Pillow's ImageOps.exif_transpose), so the image is upright",
    "16-bit greyscale (mode I;16, a 16-bit PNG or TIFF): v -> round(v / 257); 32-bit integer greyscale (mode I): "
    "round(v / 257) when any value exceeds 255, else v; float greyscale (mode F): round(v * 255) when no value "
    "exceeds 1, else round(v); then clipped to [0, 255] as 8-bit greyscale (mode L); NaN or infinity: refused",
    "16 bits per colour channel (a 48- or 64-bit PNG): each value's high byte (v >> 8), as Pillow opens it",
    "transparency (an alpha band, or the transparent colour of a palette, grey or RGB image): the image converted "
    "to RGBA by Pillow and alpha-composited (Image.alpha_composite) onto opaque white (255, 255, 255, 255)",
    "then Pillow's Image.convert straight to RGB (3 channels) or to L (1 channel: L = R * 299/1000 + "
    "G * 587/1000 + B * 114/1000) from whatever mode the image has now (palette, 1-bit, grey, RGB, RGBA, CMYK, "
    "YCbCr, LAB, HSV); an image already in that mode is left as it is",
]


def serving_metadata(model: nn.Module) -> dict[str, Any]:
    """The serving facts of a vitkit model, as a JSON-ready dict."""
    config = as_model(model).config
    channels, height, width = config.input_size
    names = getattr(model, "class_names", None)
    # eval_transform's normalisation: the weights' own; 0.5 (pixels / 127.5 - 1) for the paper's.
    mean, std = config.mean_std
    return {
        "format": "vitkit-serving-1",
        "vitkit_version": __version__,
        "architecture": type(model).__name__,
        "input_name": "pixels",
        "output_name": "logits",
        "input_layout": "NCHW float32, any batch size",
        "input_size": [channels, height, width],
        "channels": CHANNEL_RULE,
        "decode": DECODE_STEPS,
        "value_range": [
            min(-m / s for m, s in zip(mean, std, strict=True)),
            max((1 - m) / s for m, s in zip(mean, std, strict=True)),
        ],
        "mean": list(mean),
        "std": list(std),
        "normalisation": "x = (pixels / 255 - mean) / std"
        + (", i.e. pixels / 127.5 - 1" if set(mean) | set(std) == {0.5} else ", per channel"),
        "resize": RESIZE_RULE,
        "num_classes": config.num_classes,
        "class_names": list(names) if names is not None else None,
        "classifier": config.classifier if isinstance(config, ViTConfig) else "gap",
        "patch_size": list(to_pair(config.patch_size)) if isinstance(config, ViTConfig) else None,
    }


def dumps(metadata: dict[str, Any]) -> str:
    return json.dumps(metadata, indent=1)


def loads(text: str, source: str) -> dict[str, Any]:
    """The metadata document read back; a ValueError naming `source` when it is not one."""
    try:
        metadata = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{source}: the {METADATA_KEY} metadata is not JSON ({error})") from None
    if not isinstance(metadata, dict) or "input_size" not in metadata:
        raise ValueError(f"{source}: the {METADATA_KEY} metadata has no input_size; not a vitkit export")
    return metadata
