"""The documentation's examples, found with their file and line: Python blocks (run by sybil) and `vitkit` lines.

A Python block that cannot run in CI (a GPU, hours, a download) is preceded by a sybil skip directive whose
reason the site shows (docs/hooks/examples.py): `<!-- skip: next "needs a GPU" -->`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from docs.hooks.examples import SKIP
from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parents[2]
# a new user's first hour: run whole, shell and Python in page order, from an empty directory (test_pasted_chains)
START_PAGES = tuple(
    ROOT / "docs" / "start" / n for n in ("install.md", "main-job.md", "own-photos.md", "pretrained.md")
)
PASTED_PAGES = (ROOT / "README.md", *START_PAGES)
SHELL_LANGUAGES = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w-]*)")
LEADING_KEYWORDS = {"do", "then", "else", "time", "exec"}
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")  # VAR=value before a command
DIRECTIVE = re.compile(r"<!--\s*skip:")
SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])


def documents() -> list[Path]:
    """Every Markdown page of the site: the root pages and docs/ (its build hooks aside)."""
    pages = [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md")]
    pages += sorted(path for path in (ROOT / "docs").rglob("*.md") if "hooks" not in path.parts)
    return pages


def where(path: Path, line: int) -> str:
    """`docs/PRECISION.md:42`: how a failure names its example."""
    return f"{path.relative_to(ROOT)}:{line}"


@dataclass(frozen=True)
class CommandLine:
    """One `vitkit ...` command of a shell block: its place and its arguments after `vitkit`."""

    path: Path
    line: int
    text: str
    argv: tuple[str, ...]

    @property
    def where(self) -> str:
        return where(self.path, self.line)


def vitkit_arguments(words: list[str]) -> list[str] | None:
    """The arguments of a vitkit invocation (`vitkit ...`, `.venv/bin/vitkit ...`, `... -m vitkit.cli ...`)."""
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if words and (words[0] == "vitkit" or words[0].endswith("/vitkit")):
        return words[1:]
    for index in range(len(words) - 1):
        if words[index : index + 2] == ["-m", "vitkit.cli"]:
            return words[index + 2 :]
    return None


@dataclass(frozen=True)
class Block:
    """One fenced code block: its language, the page line of its first content line, its lines, and the reason
    of the skip directive just above it (None when it has none)."""

    language: str
    line: int
    lines: tuple[str, ...]
    skipped: str | None

    @property
    def is_shell(self) -> bool:
        return self.language in SHELL_LANGUAGES


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of `path`, in page order."""
    found: list[Block] = []
    fence: str | None = None
    language, start, body, reason, pending_reason = "", 0, [], None, None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = FENCE.match(line)
        if match and (fence is None or match.group(1).startswith(fence)):
            if fence is None:
                fence, language, start, body = match.group(1), match.group(2), number + 1, []
                reason, pending_reason = pending_reason, None
            else:
                found.append(Block(language, start, tuple(body), reason))
                fence = None
            continue
        if fence is not None:
            body.append(line)
        elif line.strip():
            skip = SKIP.search(line)
            pending_reason = skip.group(1) if skip else None
    return found


def shell_commands(block: Block) -> list[tuple[int, str]]:
    """(page line, command) of each command of a shell block, continuation lines joined, prompts dropped."""
    found: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(block.lines, block.line):
        text = line.strip().removeprefix("$ ")
        start, joined = pending if pending else (number, "")
        joined = f"{joined} {text.removesuffix(chr(92))}".strip()
        pending = (start, joined) if text.endswith("\\") else None
        if pending is None and joined:
            found.append((start, joined))
    return found


def shell_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, command) of each shell-block command of `path`."""
    return [command for block in blocks(path) if block.is_shell for command in shell_commands(block)]


def simple_commands(text: str) -> list[list[str]]:
    """The simple commands of a shell line: split at `;`, `&&`, `|`..., a leading `do`/`then`/`time` dropped."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word and set(word) <= set(";&|()"):
            commands.append([])
        elif not (not commands[-1] and word in LEADING_KEYWORDS):
            commands[-1].append(word)
    return [words for words in commands if words]


def command_lines(path: Path) -> list[CommandLine]:
    """Every `vitkit` command in the shell blocks of `path`."""
    commands = []
    for number, text in shell_lines(path):
        try:
            words_list = simple_commands(text)
        except ValueError:  # an unbalanced quote: not a command vitkit would see
            continue
        for words in words_list:
            argv = vitkit_arguments(words)
            if argv is not None:
                commands.append(CommandLine(path, number, text, tuple(argv)))
    return commands


def skipped_blocks(path: Path) -> list[tuple[int, str]]:
    """(line, reason) of each Python block the page marks as not run."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start()) + 1, match.group(1)) for match in SKIP.finditer(text)]


def directive_lines(path: Path) -> list[int]:
    """The line of every skip directive of `path`, with a reason or without."""
    text = path.read_text(encoding="utf-8")
    return [text.count("\n", 0, match.start()) + 1 for match in DIRECTIVE.finditer(text)]
