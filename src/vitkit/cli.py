"""`vitkit <command>`: every module in vitkit.commands is a sub-command (HELP, add_arguments, run)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import vitkit.commands


def build_parser() -> argparse.ArgumentParser:
    """One sub-parser per module of vitkit.commands, named after the module."""
    parser = argparse.ArgumentParser(prog="vitkit", description="Vision Transformers exactly as the paper.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(vitkit.commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"vitkit.commands.{info.name}")
        name = getattr(module, "NAME", info.name)
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(command)
        command.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command; bad input becomes one line on stderr and exit code 2, never a traceback."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # to start the same command in more processes
    try:
        return int(args.run(args) or 0)
    except (ValueError, FileNotFoundError) as error:
        print(f"vitkit {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"vitkit {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
