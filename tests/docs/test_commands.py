"""Every `vitkit ...` line in the shell blocks of the documentation is resolved, and the short ones run.

Resolving a line is parsing it with vitkit's own parser (an unknown option or a bad value fails), then whatever
`RESOLVE` holds for its command. For `train` and `finetune` that is the command itself with `--print-config`
where the command has it (the recipe resolved as for training, nothing trained), and otherwise the recipe with
its flags and overrides built and validated as the command does before it trains; a `--resume` line, whose
recipe is its run's own, is parsed only. The commands in `RUN` (seconds each) run for real, in page order in one
workspace per page (tests/docs/conftest.py), so `vitkit convert` writes what `vitkit predict` reads. A failure
names the page and line of the command.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from docs.documents import PASTED_PAGES, CommandLine, blocks, command_lines, documents, where
from vitkit.cli import build_parser, main, parse

COMMANDS = [command for path in documents() for command in command_lines(path)]
RUN = {"models", "demo", "convert", "predict"}
# fits on cached features: one pass over the workspace's photos (and a few steps of its tiny ViT's last blocks)
FROZEN_RECIPES = {"photos_linear", "photos_last_blocks"}


def runs(command: CommandLine) -> bool:
    """Whether a line runs for real: the commands of RUN, and the fits on cached features whose runs later lines
    read."""
    words = command.argv
    frozen = words[:1] == ("finetune",) and any(Path(word).stem in FROZEN_RECIPES for word in words)
    return bool(words) and (words[0] in RUN or frozen)


def run_with(*extra: str) -> Callable[[argparse.Namespace], None]:
    """A resolver that runs the line with `extra` options added (e.g. `--print-config`) and expects success."""

    def resolve(args: argparse.Namespace) -> None:
        code = main([*args.argv, *extra])
        assert code == 0, f"exit code {code}"

    return resolve


RESOLVE: dict[str, Callable[[argparse.Namespace], None]] = {
    command: run_with("--print-config") for command in ("train", "finetune")
}


def failure(command: CommandLine, what: str, capsys: pytest.CaptureFixture[str]) -> str:
    error = " ".join(capsys.readouterr().err.split()[-40:])
    return f"{command.where}: `vitkit {' '.join(command.argv)}` {what}: {error}"


@pytest.mark.parametrize("command", COMMANDS, ids=[command.where for command in COMMANDS])
def test_command_resolves(
    command: CommandLine, doc_workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        args = parse(build_parser(), list(command.argv))
    except SystemExit as exit:  # argparse: --help (0) or a usage error (2)
        args, code = None, exit.code
    if args is None:
        assert code == 0, failure(command, "does not parse", capsys)
        return
    args.argv = list(command.argv)
    error = None
    try:
        if not getattr(args, "resume", False):
            RESOLVE.get(args.command, lambda args: None)(args)
    except (ValueError, FileNotFoundError, AssertionError) as raised:
        error = raised
    assert error is None, f"{command.where}: `vitkit {' '.join(command.argv)}` does not resolve: {error}"


# README and the getting-started pages run whole, from an empty directory, in tests/docs/test_pasted_chains.py
PAGES_THAT_RUN = [
    path
    for path in documents()
    if path not in PASTED_PAGES and any(runs(command) for command in command_lines(path))
]


@pytest.mark.slow
@pytest.mark.parametrize("path", PAGES_THAT_RUN, ids=lambda path: where(path, 1).removesuffix(":1"))
def test_short_commands_run(path: Path, doc_workspace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    skipped = {  # the lines of the blocks a skip directive marks as not run here (downloads, hours)
        line
        for block in blocks(path)
        if block.skipped
        for line in range(block.line, block.line + len(block.lines))
    }
    for command in command_lines(path):
        if runs(command) and command.line not in skipped:
            code = main(list(command.argv))
            assert code == 0, failure(command, f"exits with {code}", capsys)
