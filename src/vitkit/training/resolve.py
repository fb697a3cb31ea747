"""From a recipe and the settings given with it to the RunConfig a run trains: the one path of `vitkit train`,
`vitkit finetune` and the Python API (vitkit.train, vitkit.finetune).

Settings apply in order on top of the recipe; a run length given with them (`train.steps`, or epochs) shortens
the recipe's schedule to fit (`fit_to_steps`); the model is settled (the data's default unless one is named or
given: vitkit.training.defaults) and said; `train.threads = 0` becomes this machine's cores.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vitkit.data.builtin import NAMES
from vitkit.data.remote import is_url
from vitkit.data.spec import PREFIXES
from vitkit.training.defaults import describe_architecture, machine_threads
from vitkit.training.epochs import steps_for_epochs
from vitkit.training.overrides import fit_to_steps, set_value
from vitkit.training.recipe import RunConfig

RUNS_DIR = "runs"


def default_run_dir(name: str) -> Path:
    """runs/<name>-<time>: where a run goes when no directory is given."""
    return Path(f"{RUNS_DIR}/{name}-{time.strftime('%Y%m%d-%H%M%S')}")


def resolve(
    config: RunConfig,
    settings: list[tuple[str, Any]],
    *,
    epochs: float | None = None,
    say: Callable[[str], None] | None = print,
) -> RunConfig:
    """`config` with `settings` ((section.field, value) pairs) applied in order, the run length fitted and the
    model settled (validated); `say` (None: quiet) tells what was adapted and which model trains."""
    say = say or (lambda line: None)
    recipe_steps = config.train.steps
    for key, value in settings:
        set_value(config, key, value)
    explicit = {key for key, _ in settings}
    if epochs is not None or "train.epochs" in explicit:
        if "train.steps" in explicit:
            raise ValueError("give the run length once: in epochs or in steps (train.steps)")
    if "train.steps" in explicit:
        config.train.epochs = 0.0  # a length in steps given replaces the recipe's in epochs
    epochs = epochs if epochs is not None else config.train.epochs or None
    if epochs is not None:
        config.train.steps = steps_for_epochs(config, epochs)
        config.train.epochs = 0.0  # said once and settled: the saved recipe (and a resume) counts steps
        say(f"{epochs:g} epochs: {config.train.steps} steps of {config.train.batch_size} images")
    if epochs is not None or "train.steps" in explicit:
        changes = fit_to_steps(config, recipe_steps, explicit)
        if changes:
            say(f"{config.train.steps} steps instead of the recipe's {recipe_steps}: {', '.join(changes)}")
    config.data.source = absolute_source(config.data.source)
    if config.train.threads == 0:
        config.train.threads = machine_threads(config.train.processes)
    chosen_by_data = config.model.name is None and config.model.weights is None
    config.validate()
    if config.model.name is not None:
        why = (
            f"the default for {config.data.source}; name another with --model" if chosen_by_data else "named"
        )
        say(f"model {describe_architecture(config.model.name, config.model.overrides)} ({why})")
    return config


def absolute_source(spec: str) -> str:
    """`spec` with the path of a folder:, hf: or wds: source (or a bare directory) made absolute, so the run's
    saved recipe names the same images from any working directory (eval, fewshot and resume read it); a URL
    (wds:s3://...) is kept as it is."""
    kind, sep, path = spec.partition(":")
    if sep and f"{kind}:" in PREFIXES and path and not is_url(path):
        return f"{kind}:{Path(path).expanduser().absolute()}"
    if spec not in NAMES and Path(spec).expanduser().is_dir():
        return str(Path(spec).expanduser().absolute())
    return spec
