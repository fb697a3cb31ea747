"""The Python API of the commands: `vitkit.train(...)`, `vitkit.finetune(...)` and `vitkit.evaluate(...)` do what
`vitkit train`, `vitkit finetune` and `vitkit eval` do and return their report as a dict, so a notebook trains,
fine-tunes and evaluates without a shell.

Settings are given per section, as keyword arguments named after the recipe's sections, each a dict of fields:
the shape of a TOML recipe and of RunConfig itself, so a recipe moves between a file, a command line and a call
unchanged, and a mistyped section or field is an error that names the nearest valid one:

    report = vitkit.train(data={"source": "folder:photos"}, model={"name": "ViT-S/16"}, train={"steps": 300})
    report = vitkit.finetune("ViT-B_16.npz", "configs/photos_finetune.toml", data={"source": "folder:photos"})
    report = vitkit.finetune("ViT-B_16.npz", "configs/photos_linear.toml", data={"source": "folder:photos"})

`model="ViT-S/16"` is short for `model={"name": "ViT-S/16"}`.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from vitkit.evaluation.weights import evaluate_weights as evaluate
from vitkit.training.distributed import launched_world_size
from vitkit.training.overrides import did_you_mean, load_config
from vitkit.training.recipe import RECIPE_NAME, SECTIONS, RunConfig, finetune_defaults
from vitkit.training.resolve import default_run_dir, resolve
from vitkit.training.trainer import run_training

__all__ = ["evaluate", "finetune", "train"]

Recipe = str | os.PathLike | RunConfig | None


def train(
    recipe: Recipe = None,
    out: str | os.PathLike | None = None,
    *,
    resume: bool = False,
    epochs: float | None = None,
    quiet: bool = False,
    **sections: dict[str, Any] | str,
) -> dict[str, Any]:
    """Train `recipe` (a TOML path, a RunConfig, or None for the default recipe) with `sections` over it into
    `out` (default runs/<recipe>-<time>); returns report.json. `epochs` sets the length in passes over the
    training images instead of train.steps. `resume=True` continues the run in `out` with its saved recipe."""
    return _run(RunConfig(), "train", recipe, out, resume, epochs, quiet, sections, {})


def finetune(
    weights: str | os.PathLike,
    recipe: Recipe = None,
    out: str | os.PathLike | None = None,
    *,
    resume: bool = False,
    epochs: float | None = None,
    quiet: bool = False,
    **sections: dict[str, Any] | str,
) -> dict[str, Any]:
    """Fine-tune `weights` (anything vitkit.load_weights reads) with the paper's recipe (§3.2, B.1.1) or `recipe`
    under `sections`, as `vitkit finetune --weights` does: a zero-initialised head, position embeddings resampled
    to a new `model.img_size`; with train.fit='linear' (configs/photos_linear.toml) a closed-form head on the
    frozen features instead (vitkit.training.linear_head), with train.fit='last_blocks'
    (configs/photos_last_blocks.toml) the last blocks and a head on cached tokens (vitkit.training.last_blocks).
    Returns report.json."""
    fixed = {"model.weights": str(weights)}
    return _run(finetune_defaults(), "finetune", recipe, out, resume, epochs, quiet, sections, fixed)


def _run(
    base: RunConfig,
    command: str,
    recipe: Recipe,
    out: str | os.PathLike | None,
    resume: bool,
    epochs: float | None,
    quiet: bool,
    sections: dict[str, dict[str, Any] | str],
    fixed: dict[str, Any],
) -> dict[str, Any]:
    settings = [*fixed.items(), *section_settings(sections)]
    if resume:
        if out is None or recipe is not None or settings[len(fixed) :] or epochs is not None:
            raise ValueError("resume=True continues the saved recipe of the run in `out`: give `out` only")
        config = load_config(Path(out) / RECIPE_NAME)
    else:
        if isinstance(recipe, RunConfig):
            config = copy.deepcopy(recipe)  # the caller's config stays as it was
        else:
            config = load_config(Path(recipe), base) if recipe is not None else base
        config = resolve(config, settings, epochs=epochs, say=None if quiet else print)
    name = Path(recipe).stem if isinstance(recipe, (str, os.PathLike)) else command
    run_dir = Path(out) if out is not None else default_run_dir(name)
    if config.train.processes > 1 and launched_world_size() == 1:
        raise ValueError(
            f"train.processes={config.train.processes}: vitkit.{command}() trains in this one process; start the "
            f"processes from the command line (vitkit {command} ... train.processes={config.train.processes}) "
            f"or run this script under torchrun --nproc_per_node {config.train.processes}"
        )
    call = f"vitkit.{command}({', '.join(_arguments(recipe, out, fixed, sections, epochs, resume))})"
    return run_training(config, run_dir, resume=resume, command=[call], quiet=quiet)


def section_settings(sections: dict[str, dict[str, Any] | str]) -> list[tuple[str, Any]]:
    """(section.field, value) pairs of keyword sections; `model="X"` is `model={"name": "X"}`."""
    settings = []
    for section, values in sections.items():
        if section not in SECTIONS:
            hint = did_you_mean(section, SECTIONS)
            raise ValueError(f"unknown recipe section {section!r}{hint} (sections: {', '.join(SECTIONS)})")
        if section == "model" and isinstance(values, str):
            values = {"name": values}
        if not isinstance(values, dict):
            raise ValueError(f"{section}= must be a dict of fields, e.g. {section}={{...}}; got {values!r}")
        settings += [(f"{section}.{key}", value) for key, value in values.items()]
    return settings


def _arguments(
    recipe: Recipe, out: Any, fixed: dict[str, Any], sections: dict[str, Any], epochs: Any, resume: bool
) -> list[str]:
    """The call's arguments as Python source, for run.json: what started the run, as a command line would."""
    given = [repr(v) for v in fixed.values()]
    given += [repr(str(recipe))] if isinstance(recipe, (str, os.PathLike)) else []
    given += ["<RunConfig>"] if isinstance(recipe, RunConfig) else []
    named = {"out": out, "epochs": epochs, "resume": resume or None, **sections}
    given += [f"{key}={value!r}" for key, value in named.items() if value is not None]
    return given
