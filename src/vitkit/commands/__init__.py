"""Sub-commands of the `vitkit` CLI: one module each, defining HELP, add_arguments(parser) and run(args) -> int;
and the argument types they share (a bad value is argparse's one-line usage error, exit code 2)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A count that must be at least 1 (batch sizes, seeds, images)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
