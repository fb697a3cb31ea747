"""The page in a real headless Chromium (Debian's chromium and chromium-driver, driven by Selenium): it uploads a
photo of a run's test set and shows the class names the API gives, with bars, the rollout and the time taken."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import requests
from PIL import Image

from browser import SKIP_WITHOUT_CHROMIUM, chromium
from service.conftest import running
from vitkit.service import ServiceOptions, load_served_model

SCREENSHOT_ENV = "VITKIT_SERVING_SCREENSHOT"  # also save the page's screenshot there (docs/figures)
selenium = pytest.importorskip("selenium", reason="selenium is not installed (pip install 'vitkit[test]')")

pytestmark = [pytest.mark.slow, SKIP_WITHOUT_CHROMIUM]


def test_the_page_shows_the_run_s_top_5_with_bars_and_the_rollout(photo_run: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    photo = sorted((photo_run.parent / "photos" / "test").rglob("*.png"))[0]
    big = tmp_path / "photo.png"  # shown larger than the 28 px it is
    Image.open(photo).resize((224, 224), Image.Resampling.NEAREST).save(big)
    model = load_served_model(str(photo_run), device="cpu")
    with running(model, ServiceOptions()) as served:
        expected = requests.post(
            f"{served.url}/predict", data=big.read_bytes(), headers={"Content-Type": "image/png"}, timeout=30
        ).json()["predictions"]
        with chromium(900, 720) as driver:
            driver.get(served.url)
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "idle")
            assert (
                "run: " in driver.find_element(By.ID, "model").text
                and "28x28 px" in driver.find_element(By.ID, "model").text
            )
            driver.find_element(By.ID, "file").send_keys(str(big))
            wait.until(
                lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") in ("done", "error")
            )
            assert driver.find_element(By.ID, "error").text == ""
            names = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#classes .name")]
            widths = [
                e.value_of_css_property("width")
                for e in driver.find_elements(By.CSS_SELECTOR, "#classes .bar")
            ]
            timing = driver.find_element(By.ID, "timing").text
            shot = tmp_path / "serving-page.png"
            driver.save_screenshot(str(shot))
            # the canvas: the photo with the rollout drawn over it (red where attention concentrates)
            canvas = driver.execute_script(
                "const c = document.getElementById('canvas');"
                "return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data);"
            )
    assert names == [p["class"] for p in expected] and len(names) == 5
    assert float(widths[0].removesuffix("px")) > float(widths[-1].removesuffix("px")) >= 0
    assert timing.startswith("answered in ") and "ms" in timing
    rgba = np.array(canvas, dtype=np.uint8).reshape(-1, 4)
    assert (
        rgba[:, 0].astype(int).mean() > rgba[:, 2].astype(int).mean() + 5
    )  # the red-yellow overlay is there
    with Image.open(shot) as image:
        assert image.size[0] >= 800 and np.asarray(image.convert("RGB")).std() > 10
    if os.environ.get(SCREENSHOT_ENV):
        shutil.copyfile(shot, os.environ[SCREENSHOT_ENV])
