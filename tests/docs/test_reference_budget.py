"""The reference pages stay reference pages: what is true now, in tables, within one line budget. A study's story
belongs in its reports and the CHANGELOG."""

from __future__ import annotations

from pathlib import Path

REFERENCE_PAGES = ("PRECISION.md", "RESULTS.md", "BENCHMARKS.md")
# 543, plus the DINOv2-B/14 section and the commands against hand-written peers (BENCHMARKS.md)
LINE_BUDGET = 576


def test_the_reference_pages_fit_their_line_budget() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    lines = {name: len((docs / name).read_text().splitlines()) for name in REFERENCE_PAGES}
    assert sum(lines.values()) <= LINE_BUDGET, f"{lines}: {sum(lines.values())} lines, budget {LINE_BUDGET}"
