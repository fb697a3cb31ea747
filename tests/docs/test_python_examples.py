"""Every Python block of the documentation runs (sybil), in page order with one namespace per page.

A failure names the page and the line of the block. A block that cannot run here is marked on the page with a
reason (`<!-- skip: next "reason" -->`), which the site shows above the block (docs/hooks/examples.py).
"""

from __future__ import annotations

import traceback
from pathlib import Path
from unittest import SkipTest

import pytest

from docs.documents import PASTED_PAGES, SYBIL, directive_lines, documents, skipped_blocks, where

# README and the getting-started pages run in tests/docs/test_pasted_chains.py, shell and Python in page order
PAGES = [
    path
    for path in documents()
    if "```python" in path.read_text(encoding="utf-8") and path not in PASTED_PAGES
]


@pytest.mark.slow  # seconds per page: models are built and run, a few training steps taken
@pytest.mark.parametrize("path", PAGES, ids=lambda path: where(path, 1).removesuffix(":1"))
def test_python_blocks_run(path: Path, doc_workspace: Path) -> None:
    document = SYBIL.parse(path)
    ran = 0
    for example in document.examples():
        try:
            example.evaluate()
        except SkipTest:
            continue
        except Exception as error:
            failed: tuple[int, Exception] | None = (failing_line(error, path, example.line), error)
        else:
            failed = None
            ran += 1
        if failed is not None:
            line, error = failed
            message = " ".join(f"{type(error).__name__}: {error}".split())
            pytest.fail(f"{where(path, line)}: the example fails: {message}", pytrace=False)
    assert ran, f"{where(path, 1)}: no Python block ran"


def failing_line(error: Exception, path: Path, block_line: int) -> int:
    """The page line that raised: sybil compiles a block with the page's name and line numbers."""
    lines = [
        line
        for frame, line in traceback.walk_tb(error.__traceback__)
        if frame.f_code.co_filename == str(path)
    ]
    return lines[-1] if lines else block_line


def test_every_skipped_block_says_why() -> None:
    directives = [(path, line) for path in documents() for line in directive_lines(path)]
    with_reason = {(path, line) for path in documents() for line, _ in skipped_blocks(path)}
    missing = [where(path, line) for path, line in directives if (path, line) not in with_reason]
    assert not missing, f"skip directives without a quoted reason: {missing}"
