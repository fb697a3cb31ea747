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
# eval_transform: pixels / 127.5 - 1, i.e. (pixels / 255 - 0.5) / 0.5 per channel.
MEAN, STD = 0.5, 0.5
RESIZE_RULE = (
    "bilinear with antialiasing, aspect ratio kept, until the image covers height x width; then the centre "
    "height x width window (a plain resize when the aspect ratios agree)"
)
CHANNEL_RULE = (
    "1 channel: luminance (0.299 R + 0.587 G + 0.114 B); 3 channels: RGB; a grey image repeated to RGB"
)


def serving_metadata(model: nn.Module) -> dict[str, Any]:
    """The serving facts of a vitkit model, as a JSON-ready dict."""
    config = as_model(model).config
    channels, height, width = config.input_size
    names = getattr(model, "class_names", None)
    return {
        "format": "vitkit-serving-1",
        "vitkit_version": __version__,
        "architecture": type(model).__name__,
        "input_name": "pixels",
        "output_name": "logits",
        "input_layout": "NCHW float32, any batch size",
        "input_size": [channels, height, width],
        "channels": CHANNEL_RULE,
        "value_range": [-1.0, 1.0],
        "mean": [MEAN] * channels,
        "std": [STD] * channels,
        "normalisation": "x = (pixels / 255 - mean) / std, i.e. pixels / 127.5 - 1",
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
