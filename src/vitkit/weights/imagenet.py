"""The ImageNet class names of the published checkpoints (imagenet_classes/, from timm's ImageNet info files: see
its README), so that `vitkit predict` with an official checkpoint prints "tabby, tabby cat", not "281".

A checkpoint loaded by its name (`ViT-B/16-i21k-in1k-384`) gets the names of the classes its head was trained on;
a file gets them when it is recognisably a published one: it has the file name of a published checkpoint (as the
bucket and `vitkit weights get` name it: `ViT-B_16.npz`) and that checkpoint's number of classes. Names the
weights carry themselves are never replaced.
"""

from __future__ import annotations

import functools
from pathlib import Path, PurePosixPath

from vitkit.models.registry import Model
from vitkit.weights.hub import I1K, I21K, PRETRAINED, Pretrained

CLASSES_DIR = Path(__file__).parent / "imagenet_classes"
FILES = {I1K: "imagenet-1k.txt", I21K: "imagenet-21k.txt"}


@functools.cache
def _read(dataset: str) -> tuple[str, ...]:
    return tuple((CLASSES_DIR / FILES[dataset]).read_text(encoding="utf-8").splitlines())


def imagenet_class_names(dataset: str) -> list[str]:
    """The class names of `dataset` ('ImageNet-1k' or 'ImageNet-21k') in the published heads' index order."""
    if dataset not in FILES:
        raise ValueError(f"no class names for {dataset!r}; vitkit ships {', '.join(FILES)}")
    return list(_read(dataset))


def published_class_names(entry: Pretrained) -> list[str]:
    """The names of the classes a published checkpoint's head was trained on (its fine-tuning's, else its
    pre-training's)."""
    return imagenet_class_names(entry.fine_tuning or entry.pretraining)


def recognised_file(path: str | Path, num_classes: int) -> Pretrained | None:
    """The published checkpoint a file is, by its file name and its head's class count; None if it is none."""
    name = Path(path).name
    return next(
        (
            entry
            for entry in PRETRAINED.values()
            if not entry.hub_id
            and PurePosixPath(entry.file).name == name
            and entry.num_classes == num_classes
        ),
        None,
    )


def name_classes(model: Model, entry: Pretrained | None) -> Model:
    """`model` with the class names of the published checkpoint `entry`, unless it has names of its own or
    another head (a new one of another class count)."""
    named = entry is not None and (entry.fine_tuning or entry.pretraining) in FILES  # not CLIP's projection
    if (
        entry is not None
        and named
        and model.class_names is None
        and model.config.num_classes == entry.num_classes
    ):
        model.class_names = published_class_names(entry)
    return model
