"""README.md, CONTRIBUTING.md and CHANGELOG.md are pages of the site too, from their one source at the root.

Their links are written for the repository (`docs/PRECISION.md`, `CONTRIBUTING.md`); on the site they point to
the page itself. A link to another file of the repository (a config, LICENSE) becomes its path as code: the site
holds only the documentation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PAGES = {"index.md": "README.md", "contributing.md": "CONTRIBUTING.md", "changelog.md": "CHANGELOG.md"}
LINK = re.compile(r"\[([^\]]*)\]\((?!https?://|#)([^)#\s]+)(#[^)\s]*)?\)")


def site_link(match: re.Match[str]) -> str:
    text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
    if target in PAGES.values():
        return f"[{text}]({next(page for page, root in PAGES.items() if root == target)}{anchor})"
    if target.startswith("docs/"):
        return f"[{text}]({target.removeprefix('docs/')}{anchor})"
    if text == target:
        return f"`{target}`"
    return text if text.startswith("`") else f"{text} (`{target}`)"


def site_markdown(text: str) -> str:
    """A root file's Markdown with its links pointing into the site."""
    return LINK.sub(site_link, text)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the root files as pages."""
    from mkdocs.structure.files import File

    root = Path(config.config_file_path).parent
    for page, source in PAGES.items():
        text = site_markdown((root / source).read_text(encoding="utf-8"))
        files.append(File.generated(config, page, content=text))
    return files
