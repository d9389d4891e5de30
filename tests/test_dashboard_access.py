"""What an analyst reaching the dashboard gets, in a real Streamlit server and headless Chromium: an identity from the
login proxy's header (no name box), no developer chrome, a hunt result capped in bytes with a message instead of
Streamlit's MessageSizeError, a rule lab whose file name box starts empty.

A small lake (no pipeline run: a few rows written with deltalake) is enough for these checks, so the module stays
fast next to test_dashboard_pages.py, whose pages need a lake built by the real pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.rule_loader import BUILTIN_RULES
from core.config import Settings
from tests.test_dashboard import _chrome, _wait_for_text, serve_dashboard

pytestmark = pytest.mark.browser
HUNT_MAX_BYTES = 5_000_000  # the served dashboard's hunt result cap (4.77 MiB)
USER_HEADER = "X-Forwarded-User"  # the served dashboard trusts this header (as behind a login proxy)


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory) -> Path:
    """One alert (written as the pipeline's alert sink writes them), nothing else."""
    from alerts.alert_sink import write_alert_rows
    from tests.test_alert_sink import make_alert

    path = tmp_path_factory.mktemp("access") / "lake"
    path.mkdir()
    write_alert_rows([make_alert()], Settings(lake=path), "tests", 0)
    return path


@pytest.fixture(scope="module")
def served(small_lake: Path, rules_dir: Path, tmp_path_factory) -> Iterator[str]:
    with serve_dashboard(Settings(lake=small_lake, rules=(rules_dir,), hunt_max_bytes=HUNT_MAX_BYTES,
                                  dashboard_user_header=USER_HEADER),
                         tmp_path_factory.mktemp("dash") / "dashboard.log") as url:
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


# --- rule lab --------------------------------------------------------------------------------------------------------

def test_rule_lab_file_name_starts_empty_so_a_typed_name_is_the_name_used(served: str, driver, rules_dir: Path) -> None:
    """The box was pre-filled with the loaded rule's file name, so a name typed into it was appended to that one
    (sudo_non_admin.yml.hidden.yml was saved). Typing the loaded file's own name into the empty box names exactly
    that file: the save stops at "exists, confirm the overwrite" (before any validation) and names it."""
    from selenium.webdriver.common.keys import Keys

    driver.get(f"{served}/rules?rule_id=sudo_non_admin")
    _wait_for_text(driver, lambda t: "Validate and save" in t)
    box = driver.find_element("css selector", "input[aria-label='File name']")
    assert box.get_attribute("value") == ""
    assert "sudo_non_admin.yml" in box.get_attribute("placeholder")
    box.send_keys("sudo_non_admin.yml", Keys.ENTER)
    time.sleep(1.0)
    assert driver.find_element("css selector", "input[aria-label='File name']").get_attribute("value") == \
        "sudo_non_admin.yml"
    [b for b in driver.find_elements("css selector", "button") if b.text.strip() == "Validate and save"][0].click()
    text = _wait_for_text(driver, lambda t: "Not saved:" in t)
    assert f"{rules_dir / 'sudo_non_admin.yml'} exists" in text
    assert "confirm the overwrite" in text
    assert sorted(p.name for p in rules_dir.iterdir()) == sorted(p.name for p in BUILTIN_RULES.iterdir()
                                                                 if p.name != "__pycache__")


# --- hunt ------------------------------------------------------------------------------------------------------------

def test_a_hunt_over_the_byte_cap_shows_the_limit_and_the_rows_that_fit(served: str, driver) -> None:
    """Eight 2-MB values under the served 4.77-MiB cap (in production 64 MiB; eight 30-MB values were a 240-MB
    message Streamlit refused): two rows are shown, with one message naming the limit and how to narrow the query."""
    from urllib.parse import quote

    sql = "SELECT i, repeat('x', 2000000) AS s FROM range(8) t(i)"
    driver.get(f"{served}/hunt?q={quote(sql)}")
    _wait_for_text(driver, lambda t: "Saved hunts" in t and "4.77 MiB at most" in t)
    [b for b in driver.find_elements("css selector", "button") if b.text.strip() == "Run"][0].click()
    # Streamlit sends the page's elements one by one: the count can be on screen before the warning under it.
    text = _wait_for_text(driver, lambda t: "row(s) in" in t and "Cut at" in t)
    assert "2 row(s) in" in text
    assert ("Cut at 4.77 MiB (the hunt result limit, NIGHTJAR_HUNT_MAX_BYTES): the first 2 row(s) fit. Select fewer "
            "or shorter columns") in text
    assert "MessageSizeError" not in text and "exceeds" not in text


# --- the analyst's identity ------------------------------------------------------------------------------------------

def _record_button(driver, timeout: float = 30.0):
    """The "Record" button. A Streamlit rerun can replace the buttons while they are read (a stale element): look
    again until the page has settled."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return [b for b in driver.find_elements("css selector", "button") if b.text.strip() == "Record"][0]
        except (StaleElementReferenceException, IndexError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _click_record(driver, timeout: float = 30.0) -> None:
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            _record_button(driver, timeout).click()
            return
        except StaleElementReferenceException:  # replaced between finding and clicking
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_proxy_headers_user_is_shown_and_recorded_and_no_name_box_exists(served: str, small_lake: Path) -> None:
    """Chromium sends X-Forwarded-User on every request, WebSocket included (CDP Network.setExtraHTTPHeaders), as a
    login proxy in front of the dashboard would: the sidebar names that user, there is no box to type a name into,
    and the triage action recorded in alert_triage carries that user."""
    from dashboard import triage
    from tests.test_alert_sink import make_alert

    alert_id = make_alert()["alert_id"]
    proxied = _chrome()
    try:
        proxied.execute_cdp_cmd("Network.enable", {})
        proxied.execute_cdp_cmd("Network.setExtraHTTPHeaders", {"headers": {USER_HEADER: "mallory.analyst"}})
        proxied.get(f"{served}/alert?alert_id={alert_id}")
        text = _wait_for_text(proxied, lambda t: "Analyst: mallory.analyst" in t and "Status: new" in t)
        assert "From the proxy header X-Forwarded-User" in text and "Triage is disabled" not in text
        assert proxied.find_elements("css selector", "[data-testid=stSidebar] input") == []  # no name box
        _click_record(proxied)  # the first action: acknowledge
        _wait_for_text(proxied, lambda t: "Recorded: acknowledge by mallory.analyst" in t)
    finally:
        proxied.quit()
    hist = triage.history(small_lake, alert_id)
    assert hist[["action", "analyst"]].values.tolist() == [["ack", "mallory.analyst"]]


def test_without_the_header_there_is_no_identity_and_triage_is_disabled(served: str, driver) -> None:
    """The same dashboard opened without the proxy (no header): no one to record, so no triage, and no box to claim
    a name either."""
    from tests.test_alert_sink import make_alert

    driver.get(f"{served}/alert?alert_id={make_alert()['alert_id']}")
    text = _wait_for_text(driver, lambda t: "Triage is disabled" in t)
    assert "the request carries no X-Forwarded-User header: open the dashboard through its login proxy" in text
    assert "Analyst:" not in text
    assert not _record_button(driver).is_enabled()
    assert driver.find_elements("css selector", "[data-testid=stSidebar] input") == []


def test_on_loopback_without_a_login_the_configured_local_name_is_recorded(small_lake: Path, tmp_path: Path) -> None:
    """No proxy header, no OIDC, the dashboard serving 127.0.0.1 only: the configured local name (--analyst) is the
    identity — shown, recorded with the triage action, and still no box to type another one."""
    from dashboard import triage
    from tests.test_alert_sink import make_alert

    alert_id = make_alert()["alert_id"]
    before = len(triage.history(small_lake, alert_id))
    with serve_dashboard(Settings(lake=small_lake, analyst="alice"), tmp_path / "dashboard.log") as url:
        local = _chrome()
        try:
            local.get(f"{url}/alert?alert_id={alert_id}")
            text = _wait_for_text(local, lambda t: "Analyst: alice" in t and "Status:" in t)
            assert "From the local user, loopback only" in text and "Triage is disabled" not in text
            assert local.find_elements("css selector", "[data-testid=stSidebar] input") == []
            _click_record(local)
            _wait_for_text(local, lambda t: "Recorded: acknowledge by alice" in t)
        finally:
            local.quit()
    hist = triage.history(small_lake, alert_id)
    assert len(hist) == before + 1 and hist["analyst"].tolist()[-1] == "alice"
