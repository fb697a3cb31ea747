"""The serving page in a real headless Chromium, before and after the first photo: the rollout option keeps its
place (no empty frame above it before a photo), and the page asks the server for no icon it lacks.

Screenshots of both states go to $VITKIT_SCREENSHOTS when set (tests/browser.py), to be looked at."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from browser import SKIP_WITHOUT_CHROMIUM, chromium, save_full_page
from service.conftest import running
from vitkit.service import ServiceOptions, load_served_model

pytestmark = [pytest.mark.slow, SKIP_WITHOUT_CHROMIUM]  # seconds: a browser starts
FIND_OPTION = (
    "const r = document.getElementById('overlay').getBoundingClientRect(); return [r.top, r.height];"
)
FIND_DROP_BOTTOM = "return document.getElementById('drop').getBoundingClientRect().bottom;"


def icon_answers(driver: Any) -> dict[str, int | None]:
    """URL -> HTTP status of every icon request the page made (None: asked, never answered)."""
    asked: dict[str, str] = {}
    answered: dict[str, int] = {}
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message["method"] == "Network.requestWillBeSent":
            asked[params["requestId"]] = params["request"]["url"]
        elif message["method"] == "Network.responseReceived":
            answered[params["requestId"]] = params["response"]["status"]
    return {url: answered.get(id) for id, url in asked.items() if "favicon" in url or url.endswith(".ico")}


def test_the_rollout_option_keeps_its_place_and_no_icon_request_fails(
    weights_dir: Path, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    photo = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8)).save(photo)
    model = load_served_model(str(weights_dir), device="cpu")
    with running(model, ServiceOptions()) as served, chromium(900, 720, network_log=True) as driver:
        driver.get(served.url)
        wait = WebDriverWait(driver, 30)
        state = lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state")  # noqa: E731
        wait.until(lambda d: state(d) == "idle")
        before, height = driver.execute_script(FIND_OPTION)
        gap = before - driver.execute_script(FIND_DROP_BOTTOM)
        save_full_page(driver, "serving-before.png", tmp_path)
        driver.find_element(By.ID, "file").send_keys(str(photo))
        wait.until(lambda d: state(d) in ("done", "error"))
        assert driver.find_element(By.ID, "error").text == ""
        after, _ = driver.execute_script(FIND_OPTION)
        result_top = driver.execute_script(
            "return document.getElementById('result').getBoundingClientRect().top;"
        )
        save_full_page(driver, "serving-after.png", tmp_path)
        icons = icon_answers(driver)
    assert height > 0 and 0 <= gap < 80, f"the rollout option is {gap:.0f} px below the drop zone"
    assert after == before, f"the rollout option moved from {before} to {after} px with the first photo"
    assert result_top > before  # the photo and its classes come below the option
    assert all(status == 200 for status in icons.values()), f"icon requests not answered 200: {icons}"
