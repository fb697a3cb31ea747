"""The reference pages generated at build time, so they cannot drift from the code they describe.

`recipe_page()`: every field of a recipe (vitkit.recipe.run_config.RunConfig and its sections) with its type, its
default and its one line of help (the field's `metadata["help"]`). `cli_page()`: the `--help` of every `vitkit`
command and sub-command, from the argparse parsers vitkit.cli builds. The mkdocs hook `on_files` adds both to
the site; tests/docs/test_reference.py checks what they contain.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
from typing import Any

PAGES = {"reference/recipe.md": "recipe_page", "reference/cli.md": "cli_page"}
HELP_COLUMNS = "100"  # argparse wraps --help to the terminal's width: the page is the same on every machine


def toml_value(value: Any) -> str:
    """A default as a recipe file would write it; `unset` for None (the key is left out)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items()) + "}"
    return repr(value)


def field_default(spec: dataclasses.Field[Any]) -> Any:
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return spec.default


def cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def recipe_page() -> str:
    from vitkit.recipe.run_config import RunConfig

    lines = [
        "# Recipe fields",
        "",
        "Every field of a recipe, generated from `vitkit.recipe.run_config` when the site is built. A recipe file",
        "(`configs/*.toml`) has one table per section; any field can be overridden on the command line as",
        "`section.field=value` (`vitkit train optim.lr=1e-3`). A default of `unset` leaves the key out.",
    ]
    for section in dataclasses.fields(RunConfig):
        cls = field_default(section).__class__
        lines += ["", f"## `[{section.name}]`", "", inspect.getdoc(cls) or "", ""]
        lines += ["| field | type | default | meaning |", "| --- | --- | --- | --- |"]
        for spec in dataclasses.fields(cls):
            meaning = cell(spec.metadata.get("help", ""))
            default = cell(toml_value(field_default(spec)))
            lines.append(
                f"| `{section.name}.{spec.name}` | {cell(str(spec.type))} | `{default}` | {meaning} |"
            )
    return "\n".join(lines) + "\n"


def subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of `parser`'s sub-commands, depth first (`vitkit bench` and its benchmarks)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                found += [child, *subcommands(child)]
    return found


def cli_page() -> str:
    from vitkit.cli import build_parser

    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        parser = build_parser()
        lines = [
            "# Command line",
            "",
            "The `--help` of every `vitkit` command, generated from its argparse parser when the site is built.",
            "A failure is one line on stderr and an exit code: 2 for a wrong request (an argument, a recipe",
            "field, a missing or corrupt input; nothing written), 1 when running it failed, 130 when interrupted.",
        ]
        for command in [parser, *subcommands(parser)]:
            lines += ["", f"## `{command.prog}`", "", "```text", command.format_help().rstrip(), "```"]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return "\n".join(lines) + "\n"


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated pages to the site."""
    from mkdocs.structure.files import File

    for uri, builder in PAGES.items():
        files.append(File.generated(config, uri, content=globals()[builder]()))
    return files
