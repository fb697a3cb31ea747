"""`vitkit train`: train from a TOML recipe (default: the five-minute Fashion-MNIST ViT), then evaluate.

Also the front end of `vitkit finetune`. The flags and overrides only become a request (vitkit.recipe.resolve.
RecipeRequest): the resolver and the runner are those of vitkit.train/vitkit.finetune (vitkit.api).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from vitkit.api import ProcessesFailed, run_resolved
from vitkit.recipe.resolve import RecipeRequest, parse_override, resolve_recipe


def run(args: argparse.Namespace) -> int:
    return train_request(args, request_from(args, "train"))


def request_from(args: argparse.Namespace, command: str, weights: str | None = None) -> RecipeRequest:
    """The request of a `vitkit train`/`vitkit finetune` command line: the flag shorthands, then the
    section.field=value overrides, in the order given."""
    settings = [*_flags(args).items(), *(parse_override(item) for item in args.overrides)]
    return RecipeRequest(
        command,
        args.config,
        settings,
        weights,
        args.epochs,
        args.resume,
        args.out,
        args.print_config,
        args.quiet,
    )


def train_request(args: argparse.Namespace, request: RecipeRequest) -> int:
    """Resolve the request and train; the final evaluations and the run directory are printed (train and finetune)."""
    config = resolve_recipe(request)
    request = dataclasses.replace(request, out=request.run_dir())  # one name for the run, said below
    try:
        # a diverged loss (NonFiniteLoss) exits 1 via vitkit.cli; the closing lines are run_resolved's
        run_resolved(request, config, command=["vitkit", *args.argv])
    except ProcessesFailed as failed:  # its error message is on stderr already
        return failed.exit_code
    return 0


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags = {
        "model.name": args.model,
        "optim.lr": args.lr,
        "train.batch_size": args.batch_size,
        "train.steps": args.steps,
        "train.seed": args.seed,
        "train.checkpoint_every": args.checkpoint_every,
        "data.data_dir": args.data_dir,
        "train.precision": args.precision,
    }
    return {key: value for key, value in flags.items() if value is not None}
