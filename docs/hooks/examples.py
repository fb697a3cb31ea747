"""A Python example the tests do not run says why on the page, not only in its source.

The tests (tests/docs/) run every Python block of the documentation; a block that cannot run there (a GPU, hours,
a download) is preceded by sybil's directive with a reason, `<!-- skip: next "needs a GPU" -->`. An HTML comment
is invisible on the site, so this hook shows the reason above the block.
"""

from __future__ import annotations

import re
from typing import Any

SKIP = re.compile(r'<!--\s*skip:\s*next\s+"([^"]+)"\s*-->')


def on_page_markdown(markdown: str, **_: Any) -> str:
    """mkdocs hook: each skip directive becomes a note carrying its reason."""
    return SKIP.sub(lambda match: f'!!! note "Not run by the tests"\n    {match.group(1)}\n', markdown)
