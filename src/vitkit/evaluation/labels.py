"""Class names for tables and figures: the model's own (`model.class_names`, saved with its weights), which must
be the data's classes in the data's order, or the data's for weights that carry none."""

from __future__ import annotations

import torch


def class_mismatch(saved: list[str], found: list[str]) -> str:
    """One line saying how the data's classes differ from a model's: added, missing, or reordered."""
    added, missing = sorted(set(found) - set(saved)), sorted(set(saved) - set(found))
    if added or missing:
        return (
            f"the model was trained on {len(saved)} classes and the data has {len(found)} "
            f"(new: {added[:5]}, missing: {missing[:5]}); a renamed or added class folder changes the labels"
        )
    return "the data names the model's classes in another order, which would permute every label"


def class_labels(model_names: list[str] | None, data_classes: list[str], what: str) -> list[str]:
    """The names to label results with; a ValueError naming `what` (the weights and the data) when the model's
    classes are not the data's, so accuracy is never measured against permuted labels."""
    if model_names is None or list(model_names) == list(data_classes):
        return list(data_classes)
    raise ValueError(f"{what}: {class_mismatch(list(model_names), list(data_classes))}")


def per_class(confusion: torch.Tensor, names: list[str]) -> dict[str, dict[str, float | None]]:
    """{class name: {images, top1}} from a confusion matrix whose rows are the true classes (top1 None for a
    class without images)."""
    images = confusion.sum(1)
    correct = confusion.diagonal()
    return {
        name: {"images": int(images[i]), "top1": float(correct[i] / images[i]) if images[i] else None}
        for i, name in enumerate(names)
    }
