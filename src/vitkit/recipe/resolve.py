"""From a request to the RunConfig a run trains: the one resolver of `vitkit train`, `vitkit finetune` and the
Python API (vitkit.train, vitkit.finetune), so every option means the same from each.

`resolve_recipe(request)` reads the recipe (a TOML file, a shipped recipe by name, a RunConfig, or the command's
default), applies the request's settings in order (`section.field=value`, checked and coerced; an unknown key is
answered with the nearest valid ones), fits the recipe's schedule to a run length given with them (`train.steps`,
or epochs counted on the data), makes a data path absolute, settles `train.threads = 0` and the model, validates,
and says what it adapted and which model trains. With `resume` it returns the run's saved recipe, which the
request must agree with.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import os
import time
import tomllib
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from vitkit.configs import RECIPES_DIR, SUFFIX, shipped_recipes
from vitkit.data import ReadOptions, open_source
from vitkit.data.builtin import NAMES
from vitkit.data.remote import is_url
from vitkit.data.spec import PREFIXES
from vitkit.models.config import ResNetConfig, ViTConfig
from vitkit.models.registry import model_config
from vitkit.precision import say_nothing
from vitkit.recipe.run_config import (
    RECIPE_NAME,
    RESUME_MAY_CHANGE,
    SECTIONS,
    ModelSection,
    RunConfig,
    finetune_defaults,
    toml_value,
)

RUNS_DIR = "runs"
DEFAULT_NAMES = {"train": "fashion_mnist_vit_default", "finetune": "finetune"}  # runs/<name>-<time>
Say = Callable[[str], None]


@dataclass
class RecipeRequest:
    """What `vitkit train`/`vitkit finetune` or vitkit.train/vitkit.finetune asks for, before anything is read.

    `command` picks the base recipe under `recipe` (train: the RunConfig defaults; finetune: the paper's
    fine-tuning, `weights` fixed as model.weights); `settings` are (section.field, value) pairs applied in order;
    `epochs` sets the run length in passes over the training images; `resume` continues the run in `out`;
    `quiet` prints nothing but errors.
    """

    command: str = "train"
    recipe: str | os.PathLike | RunConfig | None = None
    settings: list[tuple[str, Any]] = field(default_factory=list)
    weights: str | None = None
    epochs: float | None = None
    resume: bool = False
    out: str | os.PathLike | None = None
    print_config: bool = False
    quiet: bool = False

    def run_dir(self) -> Path:
        """`out`, or runs/<recipe>-<time> for a new run."""
        if self.out is not None:
            return Path(self.out)
        if self.resume:
            raise ValueError("--resume needs --out, the run directory to continue")
        name = Path(self.recipe).stem if isinstance(self.recipe, (str, os.PathLike)) else None
        return Path(f"{RUNS_DIR}/{name or DEFAULT_NAMES[self.command]}-{time.strftime('%Y%m%d-%H%M%S')}")

    def command_line(self, run_dir: Path) -> list[str]:
        """The `vitkit` arguments that make this request into `run_dir` (a RunConfig recipe saved as a file
        first): what each process of `train.processes` runs."""
        if isinstance(self.recipe, RunConfig):
            raise ValueError("a RunConfig recipe has no command line: save it (to_toml) and give its path")
        words = [self.command, "--out", str(run_dir)]
        words += ["--weights", str(self.weights)] if self.weights is not None else []
        words += ["--config", os.fspath(self.recipe)] if self.recipe is not None else []
        words += ["--epochs", repr(self.epochs)] if self.epochs is not None else []
        words += ["--resume"] if self.resume else []
        words += ["--quiet"] if self.quiet else []
        return words + [f"{key}={toml_value(value)}" for key, value in self.settings]


def resolve_recipe(request: RecipeRequest) -> RunConfig:
    """The validated RunConfig of `request`; a line on stdout tells what was adapted and which model trains,
    except when the request is quiet or prints the recipe itself, and in the processes a launcher started
    (WORLD_SIZE > 1): the command that started them has said it."""
    silent = request.quiet or request.print_config or int(os.environ.get("WORLD_SIZE", "1")) > 1
    say: Say = say_nothing if silent else print
    if request.resume:
        return _resumed(request, say)
    return _resolved(request, _recipe(request, _base(request)), say)


def _base(request: RecipeRequest) -> RunConfig:
    """The recipe a request's settings and recipe file apply over: the command's defaults."""
    return finetune_defaults() if request.command == "finetune" else RunConfig()


def _recipe(request: RecipeRequest, base: RunConfig) -> RunConfig:
    """The request's recipe over `base`; a RunConfig given is copied, so the caller's stays as it was."""
    if isinstance(request.recipe, RunConfig):
        return copy.deepcopy(request.recipe)
    return load_config(request.recipe, base) if request.recipe is not None else base


def _resolved(request: RecipeRequest, config: RunConfig, say: Say) -> RunConfig:
    """`config` with the request's settings applied in order, the run length fitted, the model settled."""
    settings = [
        *([("model.weights", str(request.weights))] if request.weights is not None else []),
        *request.settings,
    ]
    recipe_steps = config.train.steps
    for key, value in settings:
        set_value(config, key, value)
    explicit = {key for key, _ in settings}
    epochs = request.epochs
    if (epochs is not None or "train.epochs" in explicit) and "train.steps" in explicit:
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


def _resumed(request: RecipeRequest, say: Say) -> RunConfig:
    """The saved recipe of the run in `out`. What the request gives (a recipe, settings) must agree with it, so a
    resume stays exact, except in the keys that decide how data is read, not what is computed (RESUME_MAY_CHANGE:
    data.workers, data.prefetch, data.on_corrupt); the error names each differing field with both values."""
    out = request.run_dir()
    saved_path = out / RECIPE_NAME
    if not saved_path.is_file():
        raise FileNotFoundError(f"{saved_path}: missing; {out} is not a run directory to resume")
    saved = load_config(saved_path).validate()
    base = _base(request) if request.recipe is not None else load_config(saved_path)
    given = _resolved(request, _recipe(request, base), say)
    old, new = saved.to_dict(), given.to_dict()
    changed = {
        f"{section}.{key}": (old[section].get(key), new[section].get(key))
        for section in new
        for key in sorted({**old[section], **new[section]})
        if old[section].get(key) != new[section].get(key)
    }
    differs = [
        f"{key} is {saved_value!r} in the run, {given_value!r} given now"
        for key, (saved_value, given_value) in changed.items()
        if key not in RESUME_MAY_CHANGE
    ]
    if differs:
        raise ValueError(
            f"--resume: the recipe differs from the saved {saved_path}: {'; '.join(differs)} "
            f"(a resume continues the saved recipe: drop the change, or start a new run with another --out)"
        )
    for key in changed:
        section, _, name = key.partition(".")
        set_value(saved, key, getattr(getattr(given, section), name))
    return saved


def recipe_file(name_or_path: str | os.PathLike) -> Path:
    """The TOML file a `--config` names. A bare name (no `/`, no `.toml`) is the shipped recipe of that name
    (vitkit.configs) even where a file of that name lies in the current directory, so a stray file cannot stand
    in for a recipe unseen; a path (a `/` or `.toml`) is that file, else the shipped recipe of its stem. Neither
    is a FileNotFoundError that lists the shipped names."""
    text = os.fspath(name_or_path)
    path = Path(text)
    bare = not any(sep in text for sep in ("/", os.sep)) and path.suffix in ("", SUFFIX)
    shipped = RECIPES_DIR / f"{path.stem}{SUFFIX}" if bare else None
    if shipped is not None and path.suffix == "" and shipped.is_file():
        return shipped
    if path.is_file():
        return path
    if shipped is not None and shipped.is_file():
        return shipped
    raise FileNotFoundError(
        f"{name_or_path}: no such config file or shipped recipe (shipped: {', '.join(shipped_recipes())})"
    )


def from_dict(data: dict[str, Any], base: RunConfig | None = None) -> RunConfig:
    """Apply a nested {section: {field: value}} dict (a parsed TOML file) on top of `base`.

    A [model] section replaces the base model entirely (a recipe names its whole architecture); the other
    sections update the base field by field.
    """
    config = base if base is not None else RunConfig()
    for section, values in data.items():
        if not isinstance(values, dict):
            hint = did_you_mean(section, SECTIONS)
            raise ValueError(
                f"config entry {section!r} must be a [section]{hint} (valid sections: {SECTIONS})"
            )
        if section == "model":
            config.model = ModelSection(name=None, overrides={})
            values = dict(sorted(values.items(), key=lambda kv: kv[0] not in ("name", "weights")))
        for name, value in values.items():
            set_value(config, f"{section}.{name}", value)
    return config


def load_config(path: str | os.PathLike, base: RunConfig | None = None) -> RunConfig:
    """Read a TOML recipe: a file, or a shipped recipe by name (vitkit.configs); unknown sections or keys
    are errors that list the valid ones."""
    path = recipe_file(path)
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: invalid TOML ({error})") from None
    return from_dict(data, base)


def parse_value(text: str) -> Any:
    """A command-line value with TOML rules (`1e-3`, `true`, `[2, 2]`, `"x"`); anything else is a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def parse_override(item: str) -> tuple[str, Any]:
    """(key, value) of a `section.field=value` string, the value parsed with TOML rules."""
    key, sep, text = item.partition("=")
    if not sep:
        raise ValueError(f"override {item!r} is not of the form section.field=value")
    return key.strip(), parse_value(text.strip())


def apply_overrides(config: RunConfig, overrides: list[str]) -> RunConfig:
    """Apply `section.field=value` strings in order."""
    for item in overrides:
        set_value(config, *parse_override(item))
    return config


def fit_to_steps(config: RunConfig, recipe_steps: int, explicit: set[str]) -> list[str]:
    """Shorten a recipe's schedule to `config.train.steps` (a quick trial: `vitkit train --steps 30`).

    A warmup that no longer fits keeps its share of the recipe's `recipe_steps`-step run, below the new length.
    Evaluation, few-shot and checkpoint cadences longer than the run need nothing: each also happens at the end.
    Keys in `explicit` (set on the command line) are left as given, so `validate` reports a conflict among them.
    Returns the changes as 'key old -> new'.
    """
    steps, optim = config.train.steps, config.optim
    if "optim.warmup_steps" in explicit or steps <= 0 or optim.warmup_steps < steps:
        return []
    warmup = min(round(optim.warmup_steps * steps / max(recipe_steps, 1)), steps - 1)
    change = f"optim.warmup_steps {optim.warmup_steps} -> {warmup}"
    optim.warmup_steps = warmup
    return [change]


def steps_for_epochs(config: RunConfig, epochs: float) -> int:
    """Steps of `train.batch_size` images that see the training images `epochs` times (rounded up): the run
    length in epochs, the unit timm users count in."""
    if not (math.isfinite(epochs) and epochs > 0):
        raise ValueError(f"--epochs must be a positive number, got {epochs}")
    return max(1, math.ceil(epochs * training_images(config) / config.train.batch_size))


def training_images(config: RunConfig) -> int:
    """Images a run of `config` trains on: its training split less `data.val_split`, or `data.train_subset`."""
    data = config.data
    if data.train_subset:
        return data.train_subset
    train = open_source(data.source, "train", data.data_dir, ReadOptions(on_corrupt=data.on_corrupt))
    return len(train) - data.val_split


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


def describe_architecture(name: str, overrides: dict[str, Any]) -> str:
    """One line of what `name` with `overrides` builds: input, patches, width, depth, classifier."""
    config = model_config(name, **overrides)
    if not isinstance(config, ViTConfig):
        return f"{name}: {type(config).__name__.removesuffix('Config')}, {config.in_chans} channels"
    pair = tuple[int, int]  # ViTConfig makes both sizes (height, width) pairs when it is built
    (height, width), (patch, _) = cast(pair, config.img_size), cast(pair, config.patch_size)
    colour = {1: "grey", 3: "RGB"}.get(config.in_chans, f"{config.in_chans} channels")
    return (
        f"{name}: {height}x{width} {colour}, {patch} px patches, width {config.hidden_size}, depth {config.depth}, "
        f"{config.num_heads} heads, classifier {config.classifier}"
    )


def valid_keys(config: RunConfig, section: str) -> list[str]:
    """Every settable key of a section; [model] also takes the fields of the model's config class (of a ViT or
    a ResNet while no model is named: the data's default, or the weights given, decides later)."""
    keys = [
        f"{section}.{f.name}" for f in dataclasses.fields(getattr(config, section)) if f.name != "overrides"
    ]
    if section == "model":
        classes = [type(model_config(config.model.name))] if config.model.name else [ViTConfig, ResNetConfig]
        keys += list(dict.fromkeys(f"model.{f.name}" for c in classes for f in dataclasses.fields(c)))
    return keys


def did_you_mean(key: str, valid: list[str]) -> str:
    """'; did you mean X?' for the valid key nearest to a mistyped one, or '' when none is near."""
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


RENAMED = {"data.dataset": "data.source"}  # other names a recipe may use for a key


def set_value(config: RunConfig, key: str, value: Any) -> None:
    """Set one `section.field`, coercing to the field's type; an unknown key names the nearest and the valid ones."""
    section, _, name = RENAMED.get(key, key).partition(".")
    if section not in SECTIONS:
        hint = did_you_mean(section, SECTIONS)
        raise ValueError(
            f"unknown config key {key!r}: no section {section!r}{hint} (valid sections: {SECTIONS})"
        )
    target = getattr(config, section)
    hints = typing.get_type_hints(type(target))
    valid = valid_keys(config, section)
    if name in hints and name != "overrides":
        setattr(target, name, _coerce(value, hints[name], key))
    elif section == "model" and f"model.{name}" in valid:
        config.model.overrides[name] = value  # checked against the architecture when the model is built
    else:
        hint = did_you_mean(f"{section}.{name}", valid)
        raise ValueError(f"unknown config key {key!r}{hint} (valid keys: {', '.join(valid)})")


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Check and convert a parsed value to a dataclass field type (ints widen to floats, lists to tuples or lists)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None or (isinstance(value, str) and value.lower() == "none" and type(None) in args):
            return None
        return _coerce(value, next(a for a in args if a is not type(None)), key)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ValueError(f"{key} must be a list of {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a, key) for v, a in zip(value, args, strict=True))
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{key} must be a list of {args[0].__name__} values, got {value!r}")
        return [_coerce(v, args[0], key) for v in value]
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise ValueError(f"{key} must be of type {hint.__name__}, got {value!r}")
