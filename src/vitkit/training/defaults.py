"""Defaults that follow the data and the machine: the model a recipe trains when it names none, and the threads
a process uses when the recipe says 0 (`machine_threads`).

A named model is the registry's variant as it is (`model.name=ViT-S/16` on the command line means exactly what
`[model] name = "ViT-S/16"` in a TOML means): 224 px, RGB, its own classifier. With no model named, the data
decides:

- the built-in small sets train ViT-Mini/4 (4 layers of width 96, 4x4 patches, global average pooling) at their
  own scale: Fashion-MNIST and digits as 28x28 grey images (digits are upsampled, so a Fashion-MNIST run fine-tunes
  on them with the same architecture: configs/digits_transfer.toml), CIFAR and the synthetic shapes as 32x32 RGB;
- image collections (`folder:`, `hf:`, `wds:`, a bare directory), whose images are photographs of any size, train
  ViT-Ti/16 at 224 px in RGB: the smallest of the paper's family (DeiT-Ti's shape, 5.5M parameters), at the
  resolution and 16 px patches of the published checkpoints, so a run from scratch and a fine-tuned ViT-B/16 see
  the same 14x14 grid of patches of the same pixels.
"""

from __future__ import annotations

import os
from typing import Any

from vitkit.models.config import ViTConfig, to_pair
from vitkit.models.registry import model_config

SMALL_VIT = "ViT-Mini/4"
PHOTO_VIT = "ViT-Ti/16"
GREY_28 = dict(img_size=28, in_chans=1, classifier="gap")
RGB_32 = dict(img_size=32, in_chans=3, classifier="gap")
BUILT_IN = {
    "fashion_mnist": GREY_28,
    "digits": GREY_28,
    "cifar10": RGB_32,
    "cifar100": RGB_32,
    "synthetic": RGB_32,
}


def default_model(source: str) -> tuple[str, dict[str, Any]]:
    """(registry name, architecture fields over the registry's) of the model trained on `source` by default."""
    if source in BUILT_IN:
        return SMALL_VIT, dict(BUILT_IN[source])
    return PHOTO_VIT, {}


def describe_architecture(name: str, overrides: dict[str, Any]) -> str:
    """One line of what `name` with `overrides` builds: input, patches, width, depth, classifier."""
    config = model_config(name, **overrides)
    if not isinstance(config, ViTConfig):
        return f"{name}: {type(config).__name__.removesuffix('Config')}, {config.in_chans} channels"
    (height, width), (patch, _) = to_pair(config.img_size), to_pair(config.patch_size)
    colour = {1: "grey", 3: "RGB"}.get(config.in_chans, f"{config.in_chans} channels")
    return (
        f"{name}: {height}x{width} {colour}, {patch} px patches, width {config.hidden_size}, depth {config.depth}, "
        f"{config.num_heads} heads, classifier {config.classifier}"
    )


def machine_threads(processes: int = 1) -> int:
    """torch intra-op threads per process for `train.threads = 0`: the cores this process may run on
    (os.sched_getaffinity: a container's or taskset's share, not the machine's count; os.cpu_count where there is
    no affinity), shared evenly by the `processes` of the run on this machine (or torchrun's LOCAL_WORLD_SIZE)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    local = max(processes, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, cores // local)
