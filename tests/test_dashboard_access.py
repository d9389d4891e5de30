"""What an analyst reaching the dashboard gets: no developer chrome, in a real Streamlit server and headless Chromium.

A small lake (no pipeline run: a few rows written with deltalake) is enough for these checks, so the module stays
fast next to test_dashboard_pages.py, whose pages need a lake built by the real pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings
from tests.test_dashboard import _chrome, _wait_for_text, serve_dashboard

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("access") / "lake"
    path.mkdir()
    return path


@pytest.fixture(scope="module")
def served(small_lake: Path, tmp_path_factory) -> Iterator[str]:
    with serve_dashboard(Settings(lake=small_lake), tmp_path_factory.mktemp("dash") / "dashboard.log") as url:
        yield url


@pytest.fixture(scope="module")
def driver(served: str):
    d = _chrome()
    yield d
    d.quit()


def _menu_items(driver) -> list[str]:
    """The test ids of the toolbar's main-menu entries, menu opened by a click ([] when there is no menu)."""
    buttons = driver.find_elements("css selector", "[data-testid=stMainMenuButton]")
    if not buttons:
        return []
    buttons[0].click()
    deadline = time.monotonic() + 10
    items: list[str] = []
    while time.monotonic() < deadline and not items:
        items = [e.get_attribute("data-testid") for e in
                 driver.find_elements("css selector", "[data-testid=stMainMenuList] [data-testid^=stMainMenuItem-]")]
        time.sleep(0.2)
    return items


def test_no_deploy_button_nor_developer_menu_on_localhost(served: str, driver) -> None:
    """Streamlit's default ("auto") shows the developer chrome to anyone on localhost: the launcher turns it off."""
    driver.get(served + "/")
    _wait_for_text(driver, lambda t: "Alerts" in t)
    time.sleep(1.0)  # the toolbar is drawn with the first session message
    assert driver.find_elements("css selector", "[data-testid=stToolbar]"), "the toolbar itself is drawn"
    assert not driver.find_elements("css selector", "[data-testid=stAppDeployButton]")
    assert "Deploy" not in [b.text.strip() for b in driver.find_elements("css selector", "button")]
    items = _menu_items(driver)
    assert "stMainMenuItem-print" in items, items  # the viewer's menu is still there...
    for developer_option in ("rerun", "autoRerun", "clearCache", "deploy"):  # ... without the developer's entries
        assert f"stMainMenuItem-{developer_option}" not in items, items
