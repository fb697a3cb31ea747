"""What a `vitkit train` / `vitkit finetune` command line would train, resolved without training, and its overrides
as the Python API's keyword sections: the recipe tests' shared helpers (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

from vitkit import cli
from vitkit.commands.train import request_from
from vitkit.recipe.resolve import parse_override, resolve_recipe
from vitkit.recipe.run_config import RunConfig


def resolve(argv: list[str]) -> RunConfig:
    """The RunConfig `vitkit <argv>` would train (argv starts with the command)."""
    args = cli.parse(cli.build_parser(), argv)
    return resolve_recipe(request_from(args, args.command, getattr(args, "weights", None)))


def api_sections(overrides: list[str]) -> dict[str, dict]:
    """`section.field=value` strings as the keyword sections of vitkit.train(...)."""
    sections: dict[str, dict] = {}
    for key, value in map(parse_override, overrides):
        section, _, name = key.partition(".")
        sections.setdefault(section, {})[name] = value
    return sections
