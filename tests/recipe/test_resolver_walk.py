"""The way in, measured: a typical `vitkit train --config X section.field=value --steps N` goes from the parsed
arguments to the validated RunConfig through at most 4 files and climbs back up at most once.

What is measured (sys.setprofile, every call of a Python function defined in a vitkit source file):

- The walk starts at `run(args)` of vitkit/commands/train.py, with the arguments parsed, and ends when the resolver
  returns the validated RunConfig (vitkit.recipe.resolve.resolve_recipe; nothing is trained).
- A call inside the models or data package stays that layer's business: the file of the function the walk calls
  there counts (the model registry consulted for the architecture, a data source opened to count images), what
  that function calls in turn does not (the registry's ViTConfig checking its sizes in vitkit/sizes.py). Every
  other call is followed, wherever it leads.
- Files entered: the distinct files of the followed calls' functions, commands/train.py included.
- A climb back up: a followed call from file A into another file B that the walk entered before A (in the order
  of first entry B is above A): having come down from B, the reader is sent back up to it. A return to a caller
  is not a climb, nor a call down into a file entered earlier from above it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import vitkit
from vitkit import cli
from vitkit.commands import train as train_command

SOURCE = Path(vitkit.__file__).parent
LAYERS = (str(SOURCE / "models"), str(SOURCE / "data"))  # whose internals the walk does not follow
Call = tuple[str, str]  # (caller's file, callee's file), relative to src/


def _file(frame: FrameType | None) -> str | None:
    """The vitkit file of the nearest vitkit frame from `frame` outwards (dataclass-made __init__ is skipped)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith(str(SOURCE)):
            return str(Path(frame.f_code.co_filename).relative_to(SOURCE.parent))
        frame = frame.f_back
    return None


def _in_a_layer(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.startswith(LAYERS):
            return True
        frame = frame.f_back
    return False


def followed_calls(run: Callable[[], Any]) -> list[Call]:
    """The followed calls of `run()`, in order."""
    calls: list[Call] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if (
            event == "call"
            and frame.f_code.co_filename.startswith(str(SOURCE))
            and not _in_a_layer(frame.f_back)
        ):
            calls.append((_file(frame.f_back) or "", str(_file(frame))))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def files_and_climbs(calls: list[Call]) -> tuple[list[str], list[Call]]:
    """(the files entered, in the order of first entry; the climbs back up)."""
    order: dict[str, int] = {}
    climbs = []
    for caller, callee in calls:
        if caller:  # "" is the test calling in
            order.setdefault(caller, len(order))
        if caller and callee != caller and callee in order and order[callee] < order[caller]:
            climbs.append((caller, callee))
        order.setdefault(callee, len(order))
    return list(order), climbs


class Resolved(Exception):
    """Ends the walk where the validated recipe is handed on."""


def walk_of(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[Call]]:
    """The files entered and the climbs back up of `vitkit <argv>` from its parsed arguments to its RunConfig."""
    resolve_recipe = train_command.resolve_recipe

    def resolve_then_stop(*args: Any, **kwargs: Any) -> None:
        raise Resolved(resolve_recipe(*args, **kwargs))

    monkeypatch.setattr(train_command, "resolve_recipe", resolve_then_stop)
    args = cli.parse(cli.build_parser(), argv)
    args.argv = argv
    calls = followed_calls(lambda: pytest.raises(Resolved, train_command.run, args))
    return files_and_climbs(calls)


def test_the_walk_to_the_recipe_enters_4_files_and_climbs_back_at_most_once(monkeypatch, capsys):
    files, climbs = walk_of(
        ["train", "--config", "fashion_mnist_vit", "optim.lr=1e-3", "--steps", "30"], monkeypatch
    )
    assert files == [
        "vitkit/commands/train.py",
        "vitkit/recipe/resolve.py",
        "vitkit/recipe/run_config.py",
        "vitkit/models/registry.py",
    ]
    assert len(climbs) <= 1, climbs
    assert "30 steps instead of the recipe's 11000" in capsys.readouterr().out  # the request was resolved


def test_the_measure_counts_a_file_that_calls_back_up():
    """A -> B -> C -> B: three files, one climb (C back up to B); A calling B again, or C, climbs nowhere."""
    calls = [("a.py", "b.py"), ("b.py", "c.py"), ("c.py", "b.py"), ("a.py", "b.py"), ("a.py", "c.py")]
    assert files_and_climbs(calls) == (["a.py", "b.py", "c.py"], [("c.py", "b.py")])
