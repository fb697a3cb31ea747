"""Setting recipe fields: TOML sections, `section.field=value` strings, mappings; checked, coerced, and an unknown
key answered with the nearest valid ones ("did you mean")."""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from vitkit.configs import recipe_file
from vitkit.models.config import ResNetConfig, ViTConfig
from vitkit.models.registry import model_config
from vitkit.training.recipe import SECTIONS, ModelSection, RunConfig


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


def load_config(path: str | Path, base: RunConfig | None = None) -> RunConfig:
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


def apply_mapping(config: RunConfig, values: dict[str, Any]) -> RunConfig:
    """Apply {"section.field": value} in order: the Python form of command-line overrides (vitkit.train)."""
    for key, value in values.items():
        set_value(config, key, value)
    return config


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
