"""The options several commands share: --precision, --compile, --max-pixels (no command itself: `_` keeps it
out of `vitkit --help`; argparse lives in commands/ only).

A command's parser is built without importing torch (`vitkit train --help` answers as fast as `vitkit --help`):
the constants its options name (choices, defaults) are read from their modules' source (`literal`), and a
command imports what it runs on inside `run`.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).parents[1]


def source_literals(path: Path, names: Iterable[str]) -> dict[str, Any]:
    """The literal values the source file `path` assigns at its top level to any of `names`, read without
    importing it."""
    wanted = set(names)
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in ast.parse(path.read_text(), str(path)).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in wanted
    }


def literal(module: str, name: str) -> Any:
    """The constant `name` of the vitkit module `module` ("vitkit.precision"), read from its source."""
    path = PACKAGE_DIR.joinpath(*module.split(".")[1:]).with_suffix(".py")
    values = source_literals(path, [name])
    if name not in values:
        raise LookupError(f"{path}: no literal {name} = ... at the top level")
    return values[name]


PRECISIONS = literal("vitkit.precision", "PRECISIONS")
DEFAULT_MAX_PIXELS = literal("vitkit.data.decode", "DEFAULT_MAX_PIXELS")
MAX_PIXELS_ENV = literal("vitkit.data.decode", "MAX_PIXELS_ENV")


def add_precision_argument(
    parser: argparse.ArgumentParser, default: str | None = "auto", what: str = ""
) -> None:
    """The `--precision auto|bf16|fp32` flag of every command."""
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=default,
        help=f"{what}bf16 autocast or float32; 'auto' picks bf16 on CUDA, and on CPUs with native bf16 units "
        "(amx_bf16 / avx512_bf16) when a short measurement, made once per machine and cached, finds it faster "
        "(docs/PRECISION.md)",
    )


def add_compile_argument(parser: argparse.ArgumentParser) -> None:
    """The `--compile` flag of the batched inference commands."""
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model for inference, its weights frozen (compiling takes seconds to a minute; "
        "pays on many batches: docs/PRECISION.md)",
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of pixels, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1 pixel, got {value}")
    return value


def add_max_pixels_argument(parser: argparse.ArgumentParser) -> None:
    """--max-pixels, shared by the commands that read images."""
    parser.add_argument(
        "--max-pixels",
        type=_positive_int,
        default=None,
        metavar="N",
        help=f"refuse images of more than N pixels before decoding them "
        f"(default ${MAX_PIXELS_ENV} or {DEFAULT_MAX_PIXELS:,})",
    )
