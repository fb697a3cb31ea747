"""The documentation site's getting-started pages in a real headless Chromium, 400 px wide (a phone) and 1280 px
wide: nothing runs off the side, code blocks and tables included (they wrap: docs/stylesheets/extra.css).

The site is built with mkdocs as `make docs` builds it. Full-page screenshots go to $VITKIT_SCREENSHOTS when set
(tests/browser.py), to be looked at."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser import SKIP_WITHOUT_CHROMIUM, chromium, save_full_page
from docs.conftest import serving
from docs.documents import ROOT

pytestmark = [pytest.mark.slow, SKIP_WITHOUT_CHROMIUM]  # half a minute: the site is built
PAGES = ("", "start/install/", "start/main-job/", "start/own-photos/", "start/pretrained/")
WIDTHS = (400, 1280)
# how far the page reaches past the screen, and the code blocks and tables that reach past their boxes (CSS px); 0 when nothing is cut off or scrolls
OVERFLOW = """
const page = document.documentElement.scrollWidth - document.documentElement.clientWidth;
const blocks = Array.from(document.querySelectorAll('pre > code, .md-typeset table'))
  .filter((box) => box.scrollWidth > box.clientWidth + 1)
  .map((box) => box.textContent.trim().split('\\n')[0].slice(0, 60));
return [page, blocks, document.querySelectorAll('pre > code').length];
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install 'vitkit[docs]')")
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--site-dir", str(folder), "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr[-2000:]
    with serving(folder) as url:
        yield url + "/"


@pytest.mark.parametrize("width", WIDTHS)
def test_the_start_pages_fit_the_screen(site: str, width: int, tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    cut: list[str] = []
    with chromium(width, 900) as driver:
        for page in PAGES:
            driver.get(site + page)
            WebDriverWait(driver, 30).until(
                lambda d: d.execute_script(OVERFLOW)[2] > 0
            )  # drawn, on a busy CPU
            overflow, blocks, count = driver.execute_script(OVERFLOW)
            name = (page.strip("/").replace("/", "-") or "index") + f"-{width}.png"
            save_full_page(driver, name, tmp_path)
            assert count > 0, f"/{page}: no code block found"
            if overflow > 0:
                cut.append(f"/{page}: the page is {overflow} px wider than the screen")
            cut += [f"/{page}: a code block or table runs past its box: {first!r}" for first in blocks]
    assert not cut, f"at {width} px: {cut}"
