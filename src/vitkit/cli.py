"""`vitkit <command>`: every module in vitkit.commands is a sub-command (run), its parser (HELP, add_arguments) the
module of the same name in vitkit.commands.parsers; a command is imported only when it runs (`vitkit --help` reads
the HELP strings from the sources, and `vitkit <command> --help` builds that parser: neither imports torch).

Every failure is one line on stderr, `vitkit <command>: error: ...`, naming the path or field, and an exit code:
  2  the request is wrong: an argument, option, recipe field or value, or an input file that is missing,
     corrupt or not what it should be (ValueError, FileNotFoundError); nothing has been written;
  1  the request was fine but running it failed: an OS error (permission denied, read-only, disk full), a run
     directory held by another process, a diverged loss, or a bug;
  130 interrupted: Ctrl-C or SIGTERM, at any moment (vitkit.shutdown).
`vitkit --debug <command>` or VITKIT_DEBUG=1 prints the traceback as well.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import re
import sys
import traceback
from pathlib import Path

import vitkit.commands.parsers
from vitkit import shutdown
from vitkit.commands._arguments import source_literals

DEBUG_ENV = "VITKIT_DEBUG"
USAGE, RUNTIME, INTERRUPTED = 2, 1, 130
OVERRIDE = re.compile(r"[A-Za-z_]\w*\.[A-Za-z_]\w*=")  # section.field=value


def command_helps() -> dict[str, tuple[str, str]]:
    """Command name -> (module name, HELP), read from the modules' source without importing them: the commands
    import torch, which `vitkit --help` and a mistyped command must not wait for."""
    commands = {}
    for path in sorted(Path(next(iter(vitkit.commands.parsers.__path__))).glob("*.py")):
        if path.name.startswith("_"):
            continue
        constants = source_literals(path, ("HELP", "NAME"))
        commands[constants.get("NAME", path.stem)] = (path.stem, constants["HELP"])
    return commands


def chosen_command(argv: list[str]) -> str | None:
    """The command a command line names: its first word that is not an option (`vitkit` itself takes none with
    a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """One sub-parser per module of vitkit.commands, named after the module; with `only`, the other commands are
    listed (with their help) and only its parser is imported (the command itself when it runs)."""
    parser = argparse.ArgumentParser(prog="vitkit", description="Vision Transformers exactly as the paper.")
    debug_help = f"on error, print the traceback too (or set {DEBUG_ENV}=1)"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help) in command_helps().items():
        command = sub.add_parser(name, help=help, description=help)
        if only is not None and name != only:
            continue
        options = importlib.import_module(f"vitkit.commands.parsers.{module_name}")
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
        options.add_arguments(command)
        command.set_defaults(run=functools.partial(run_command, module_name))
    return parser


def run_command(module_name: str, args: argparse.Namespace) -> int:
    """Run the command of vitkit.commands.<module_name>: imported (and torch with it) only now. A Ctrl-C during
    the import is raised once it ends (a second or two): torch's import runs Python code called from C++, where a
    KeyboardInterrupt raised by the signal handler aborts the process (`std::terminate`, exit status 134)."""
    with shutdown.deferred():
        command = importlib.import_module(f"vitkit.commands.{module_name}")
    return int(command.run(args) or 0)


def one_line(text: str) -> str:
    return " ".join(text.split())


def describe(error: BaseException) -> tuple[int, str]:
    """(exit code, one-line message) for an exception that ended a command."""
    if isinstance(error, OSError):
        code = USAGE if isinstance(error, FileNotFoundError) else RUNTIME  # a path given that does not exist
        if error.filename is None:
            return code, one_line(str(error))
        target = f"{error.filename} -> {error.filename2}" if error.filename2 else str(error.filename)
        return code, f"{target}: {one_line(error.strerror or str(error)).lower()}"
    if isinstance(error, ValueError):
        return USAGE, one_line(str(error))
    # vitkit's own runtime errors: a run directory in use, ...
    if type(error).__module__.startswith("vitkit."):
        return RUNTIME, one_line(str(error))
    return RUNTIME, f"{type(error).__name__}: {one_line(str(error))} (run with --debug for the traceback)"


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse a command line; a command's `section.field=value` overrides may stand anywhere, after options too.

    argparse fills a `nargs="*"` positional from one run of words only, so later overrides come back unparsed:
    they are appended in command-line order. Anything else unparsed is an error (exit code 2), as parse_args has.
    """
    args, rest = parser.parse_known_args(argv)
    takes_overrides = isinstance(getattr(args, "overrides", None), list)
    stray = [word for word in rest if not (takes_overrides and OVERRIDE.match(word))]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if rest:
        args.overrides = [*args.overrides, *rest]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run a command; every failure is one line on stderr and an exit code (see the module docstring)."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = chosen_command(words) or ""  # `vitkit --help`: no command imported
    debug = os.environ.get(DEBUG_ENV, "") not in ("", "0")
    if argv is None:  # the program, not a caller that goes on
        shutdown.skip_final_collection()
    try:
        # Ctrl-C and SIGTERM are received from the first moment: importing a command (torch) takes seconds.
        with shutdown.interruptible():
            args = parse(build_parser(command), words)  # argparse reports a bad command line with exit code 2
            shutdown.raise_if_stopped()  # a Ctrl-C whose KeyboardInterrupt an import swallowed
            args.argv = words  # to start the same command in more processes
            debug = debug or args.debug
            return int(args.run(args) or 0)
    except KeyboardInterrupt:
        if argv is None:  # the program, on its way out: a second Ctrl-C ends it quietly
            shutdown.leave_at_next_signal(INTERRUPTED)
        print(f"{' '.join(['vitkit', command]).rstrip()}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except Exception as error:
        if debug:
            traceback.print_exc()
        code, message = describe(error)
        print(f"vitkit {command}: error: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
