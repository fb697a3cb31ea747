"""README quotes figures that its linked pages hold: each figure in a README paragraph appears, digit for digit,
in a page that paragraph links to, so README and the docs cannot disagree."""

from __future__ import annotations

import re
from pathlib import Path

from docs.documents import ROOT

# A measured figure: a percentage, a ratio (1.2x), a quantity with its unit, or a count with thousands separators.
UNITS = r"(?:\s(?:minutes|min|seconds|s|ms|hours|h|images/s|img/s|GFLOPs|MFLOPs|TFLOP/s|GB|GiB|MB|points))"
FIGURE = re.compile(rf"(?<![\w.,/§])\d[\d,]*(?:\.\d+)?(?:%|x\b|{UNITS}\b)|(?<![\w.,])\d{{1,3}}(?:,\d{{3}})+")
LINK = re.compile(r"\]\(((?:docs/)?[\w/.-]+\.md)(?:#[\w-]*)?\)")
CODE = re.compile(r"```.*?```|`[^`]*`", re.DOTALL)


def paragraphs(text: str) -> list[str]:
    return [paragraph for paragraph in CODE.sub("", text).split("\n\n") if paragraph.strip()]


def unsupported_figures(readme: Path) -> list[str]:
    """'figure (linked pages)' for each README figure that no page linked from its paragraph holds."""
    missing = []
    for paragraph in paragraphs(readme.read_text(encoding="utf-8")):
        figures = FIGURE.findall(paragraph)
        pages = [readme.parent / target for target in LINK.findall(paragraph)]
        texts = [page.read_text(encoding="utf-8") for page in pages if page.is_file()]
        for figure in figures:
            if not any(figure in text for text in texts):
                missing.append(
                    f"{figure} ({', '.join(str(p.relative_to(readme.parent)) for p in pages) or 'no link'})"
                )
    return missing


def test_readme_figures_appear_in_the_pages_they_cite() -> None:
    assert unsupported_figures(ROOT / "README.md") == []


def test_a_figure_the_page_lacks_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "R.md").write_text("reaches 91.08% in 28.3 minutes\n")
    readme = tmp_path / "README.md"
    readme.write_text("It reaches 91.08% in 28.3 minutes ([r](docs/R.md)).\n\nAnd 2.5x faster, unsourced.\n")
    assert unsupported_figures(readme) == ["2.5x (no link)"]
    readme.write_text("It reaches 91.09% in 28.3 minutes ([r](docs/R.md)).\n")
    assert unsupported_figures(readme) == ["91.09% (docs/R.md)"]
