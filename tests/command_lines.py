"""What a `vitkit train` / `vitkit finetune` command line would train, resolved without training: the recipe tests'
shared helper (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

from vitkit import cli
from vitkit.commands.train import request_from
from vitkit.recipe.resolve import resolve_recipe
from vitkit.recipe.run_config import RunConfig


def resolve(argv: list[str]) -> RunConfig:
    """The RunConfig `vitkit <argv>` would train (argv starts with the command)."""
    args = cli.parse(cli.build_parser(), argv)
    return resolve_recipe(request_from(args, args.command, getattr(args, "weights", None)))
