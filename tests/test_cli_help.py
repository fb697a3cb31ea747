"""`vitkit --help` lists every command without importing any of them or torch (it answers in a fraction of a
second), `vitkit <command> --help` builds that command's parser without torch too, `vitkit <command>` imports only
that command, and `import vitkit` finds each public name on use."""

from __future__ import annotations

import importlib.metadata
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import vitkit
from vitkit import cli

COMMANDS = sorted(p.stem for p in (Path(cli.__file__).parent / "commands").glob("[!_]*.py"))
PROBE = """
import sys
from vitkit import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
shared = ("vitkit.commands._arguments", "vitkit.commands.parsers")  # what the cli itself imports
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("vitkit.commands.") and m not in shared))
"""


def loaded_after(*argv: str) -> str:
    run = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120)
    return run.stdout.strip().splitlines()[-1]


def test_help_lists_every_command_and_imports_none(capsys):
    assert loaded_after("--help") == "[]"
    assert loaded_after("no-such-command") == "[]"
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listed = capsys.readouterr().out
    assert all(f"    {name} " in listed for name in COMMANDS), listed


PARSERS_PROBE = """
import sys
from vitkit import cli
for name in sys.argv[1:]:
    cli.build_parser(name)
print(sorted(m for m in ("torch", "numpy", "PIL") if m in sys.modules))
"""


def test_every_command_has_its_parser():
    parsers = sorted(p.stem for p in (Path(cli.__file__).parent / "commands" / "parsers").glob("[!_]*.py"))
    assert parsers == COMMANDS


def test_a_commands_parser_imports_no_torch():
    """What `vitkit <command> --help` costs: each parser built, with every option (every benchmark's too), and
    torch never imported."""
    run = subprocess.run(
        [sys.executable, "-c", PARSERS_PROBE, *COMMANDS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_the_options_constants_read_from_source_are_the_modules():
    from vitkit.commands import _arguments
    from vitkit.data.decode import DEFAULT_MAX_PIXELS, MAX_PIXELS_ENV
    from vitkit.data.pack import FORMATS
    from vitkit.evaluation.run_directory import SPLITS
    from vitkit.precision import PRECISIONS

    assert _arguments.PRECISIONS == PRECISIONS and _arguments.MAX_PIXELS_ENV == MAX_PIXELS_ENV
    assert _arguments.DEFAULT_MAX_PIXELS == DEFAULT_MAX_PIXELS
    assert _arguments.literal("vitkit.evaluation.run_directory", "SPLITS") == SPLITS
    assert _arguments.literal("vitkit.data.pack", "FORMATS") == FORMATS
    with pytest.raises(LookupError, match="no literal"):
        _arguments.literal("vitkit.precision", "inference_precision")


def test_a_command_imports_only_itself(monkeypatch):
    imported = []
    real = cli.importlib.import_module
    monkeypatch.setattr(  # torch's own imports pass through it too
        cli.importlib,
        "import_module",
        lambda name, *rest, **kw: imported.append(name) or real(name, *rest, **kw),
    )
    args = cli.build_parser("weights").parse_args(["weights", "path", "ViT-B/16-i21k"])
    commands = [name for name in imported if name.startswith("vitkit.commands.")]
    assert commands == ["vitkit.commands.parsers.weights"] and args.names == ["ViT-B/16-i21k"]
    imported.clear()
    cli.main(["weights", "path", "ViT-B/16-i21k"])
    assert [name for name in imported if name.startswith("vitkit.commands.")][-1] == "vitkit.commands.weights"


@pytest.mark.parametrize("name", vitkit.__all__ + ["inspect", "__version__"])
def test_every_public_name_resolves(name):
    value = getattr(vitkit, name)
    if name == "__version__":
        assert value == importlib.metadata.version("vitkit")
    else:
        assert inspect.isfunction(value) or inspect.isclass(value) or inspect.ismodule(value), value
