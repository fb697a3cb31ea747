"""`vitkit.create_model(name, pretrained=...)`: a registered variant, randomly initialised or with weights.

The models package builds architectures and knows nothing of files; this is where a name meets its published
checkpoint (vitkit.weights.hub), so `create_model('ViT-B/16', pretrained=True, num_classes=10, img_size=384)`
is the paper's fine-tuning start (§3.2): ImageNet-21k weights, a zero-initialised 10-class head, position
embeddings resampled to the 24x24 grid.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from vitkit.models import create_model as create_architecture
from vitkit.models import model_config
from vitkit.models.registry import Model
from vitkit.weights.hub import ARCHITECTURE_FIELDS, default_for
from vitkit.weights.load import load_weights


def create_model(
    name: str,
    *,
    pretrained: bool | str | os.PathLike = False,
    device: str | torch.device | None = None,
    **overrides: Any,
) -> Model:
    """Build a registered variant, e.g. create_model('ViT-B/16', num_classes=10, img_size=384).

    `pretrained=True` loads the variant's published ImageNet-21k checkpoint (`vitkit weights list`); a string
    loads anything `load_weights` reads (a checkpoint name, URL, 'hf-hub:timm/<name>', a file or directory),
    which must hold this architecture. With weights, `num_classes` / `img_size` are fine-tuning overrides (a
    new zero-initialised head, resampled position embeddings). `device='meta'` builds without allocating.
    """
    if pretrained is False:
        return create_architecture(name, device=device, **overrides)
    source = default_for(name).name if pretrained is True else pretrained
    model = load_weights(source, **overrides)
    expected = model_config(name)
    wrong = [
        f"{f} {getattr(model.config, f)!r} (the registry's {getattr(expected, f)!r})"
        for f in ARCHITECTURE_FIELDS
        if f not in overrides and getattr(model.config, f, None) != getattr(expected, f, None)
    ]
    if wrong:
        raise ValueError(f"{source}: holds no {name} model: {'; '.join(wrong)}")
    return model.to(device) if device is not None else model
