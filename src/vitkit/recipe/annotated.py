"""The resolved recipe as annotated TOML (`vitkit train --print-config`, `vitkit.train(print_config=True)`): every field with its value, its default
and its one line of help, all read from the section dataclasses, so the listing cannot drift from the code.
The output is itself a recipe: saved to a file, it is a `--config`."""

from __future__ import annotations

import dataclasses
from typing import Any

from vitkit.models.registry import model_config
from vitkit.recipe.resolve import describe_architecture
from vitkit.recipe.run_config import SECTIONS, RunConfig, toml_value

COMMENT_COLUMN = 44


def annotated_toml(config: RunConfig) -> str:
    """`config` (validated: its model settled) as TOML, each line commented with the field's help and default."""
    lines = []
    for section in SECTIONS:
        values = getattr(config, section)
        defaults = type(values)()
        lines.append(f"[{section}]")
        for f in dataclasses.fields(values):
            if f.name == "overrides":
                continue
            default = getattr(defaults, f.name)
            lines.append(
                _line(f.name, getattr(values, f.name), f"{f.metadata['help']} (default {_shown(default)})")
            )
        if section == "model":
            lines += _architecture_lines(config)
        lines.append("")
    return "\n".join(lines)


def _architecture_lines(config: RunConfig) -> list[str]:
    """The architecture fields set over the model's own, each beside the registry's value, and what is built."""
    m = config.model
    if m.name is None:
        return [
            _line(key, value, "architecture field over the weights'") for key, value in m.overrides.items()
        ]
    registry = model_config(m.name)
    lines = [
        _line(key, value, f"architecture field; {m.name} has {_shown(getattr(registry, key, None))}")
        for key, value in m.overrides.items()
    ]
    return [*lines, f"# builds {describe_architecture(m.name, m.overrides)}"]


def _line(key: str, value: Any, comment: str) -> str:
    text = f"{key} = {toml_value(value)}" if value is not None else f"# {key} unset"
    return f"{text:<{COMMENT_COLUMN}}# {comment}"


def _shown(value: Any) -> str:
    return "unset" if value is None else toml_value(list(value) if isinstance(value, tuple) else value)
