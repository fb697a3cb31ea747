"""A headless Chromium driven by Selenium (Debian's chromium and chromium-driver), for the tests that look at a page
as a browser draws it: the serving page, the documentation site at a phone's width. Tests using it skip, with the
reason, where either is missing."""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SCREENSHOTS_ENV = (
    "VITKIT_SCREENSHOTS"  # a folder: the browser tests save their screenshots there to be looked at
)
SKIP_WITHOUT_CHROMIUM = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="headless Chromium not installed (Debian: apt-get install -y chromium chromium-driver)",
)


@contextmanager
def chromium(width: int, height: int, network_log: bool = False) -> Iterator[Any]:
    """A headless Chromium whose viewport is `width` x `height` CSS pixels; `network_log` records its requests
    and responses (read with `driver.get_log("performance")`)."""
    webdriver = pytest.importorskip(
        "selenium.webdriver", reason="selenium is not installed (pip install 'vitkit[test]')"
    )
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument(f"--window-size={width},{height}")  # the window; the viewport is set below
    if network_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(30)
        metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        yield driver
    finally:
        driver.quit()


def save_full_page(driver: Any, name: str, fallback: Path) -> Path:
    """A screenshot of the whole page, not only the viewport, as `name` in $VITKIT_SCREENSHOTS (else `fallback`)."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or fallback)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(base64.b64decode(shot["data"]))
    return path
