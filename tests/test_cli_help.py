"""`vitkit --help` lists every command without importing any of them or torch (it answers in a fraction of a
second), `vitkit <command>` imports only that command, and `import vitkit` finds each public name on use."""

from __future__ import annotations

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
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("vitkit.commands.")))
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
    assert commands == ["vitkit.commands.weights"] and args.names == ["ViT-B/16-i21k"]


@pytest.mark.parametrize("name", vitkit.__all__ + ["inspect", "__version__"])
def test_every_public_name_resolves(name):
    assert getattr(vitkit, name) is not None
