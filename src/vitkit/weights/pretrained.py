"""`from_pretrained`: a save_pretrained directory (or a training run's `final/`) back to a model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vitkit.models.config import config_from_dict
from vitkit.models.registry import Model
from vitkit.storage import CONFIG_NAME, FINAL_DIR, WEIGHTS_NAME, load_state_dict, pop_class_names, read_config
from vitkit.weights.vitkit_state import instantiate


def from_pretrained(
    directory: str | os.PathLike, *, keep_pre_logits: bool = False, **overrides: Any
) -> Model:
    """Rebuild a model written by `save_pretrained` (or a training run's `final/`), fine-tuning overrides too.

    `img_size=` resamples position embeddings, `num_classes=K` a head of another class count (or `reset_head`)
    swaps in a zero-initialised head (dropping the pre-logits layer unless `keep_pre_logits`); see
    `vitkit.load_weights`.
    """
    directory = resolve_directory(directory)
    fields = read_config(directory)  # its own errors name the file
    names = pop_class_names(fields, directory / CONFIG_NAME)
    try:
        config = config_from_dict(fields)
    except (TypeError, ValueError) as error:  # an unknown field, a value of the wrong kind or range
        raise ValueError(f"{directory / CONFIG_NAME}: {error}") from None
    weights = directory / WEIGHTS_NAME
    model = instantiate(
        config, load_state_dict(weights), str(weights), keep_pre_logits=keep_pre_logits, **overrides
    )
    if names is not None and not overrides.get("reset_head") and model.config.num_classes == len(names):
        model.class_names = names  # a new head has no names yet
    return model


def resolve_directory(directory: str | os.PathLike) -> Path:
    """A save_pretrained directory, or a training run directory whose `final/` is one."""
    directory = Path(directory)
    if (directory / FINAL_DIR / CONFIG_NAME).is_file():
        return directory / FINAL_DIR
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no such directory")
    return directory
