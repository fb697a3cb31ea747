"""What a `vitkit train` / `vitkit finetune` command line would train, resolved without training: the recipe tests'
shared helper (tests/ is on pytest's pythonpath)."""

from __future__ import annotations

from vitkit import cli
from vitkit.commands.train import resolve_config
from vitkit.training.overrides import load_config
from vitkit.training.recipe import RunConfig, finetune_defaults


def resolve(argv: list[str]) -> RunConfig:
    """The RunConfig `vitkit <argv>` would train (argv starts with the command)."""
    args = cli.parse(cli.build_parser(), argv)
    base = finetune_defaults() if args.command == "finetune" else RunConfig()
    fixed = {"model.weights": args.weights} if args.command == "finetune" else {}
    return resolve_config(args, load_config(args.config, base) if args.config else base, fixed)
