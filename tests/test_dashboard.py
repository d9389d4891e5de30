"""The dashboard's pipeline page: its queries on a real Delta lake, and the page in a real Streamlit server + headless
Chromium. The analyst pages (alerts, detail, triage, hunt, entities, coverage) are in test_dashboard_pages.py."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from core.config import TABLE_BRONZE, TABLE_DHCP_SESSIONS, TABLE_PIPELINE_PROGRESS, Settings
from core.errors import UserError
from dashboard.alerts_data import entity_context
from dashboard.entities import dhcp_history
from dashboard.queries import (
    LEASE_COLUMNS,
    current_leases,
    latest_progress,
    lease_history,
    open_lease_count,
    progress_history,
    table_overview,
)
from nightjar.progress_recorder import PROGRESS_SCHEMA

T0 = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


def _bronze(lake: Path, n: int, start: int = 0) -> None:
    rows = pa.table({"value": pa.array([f"line {i}".encode() for i in range(start, start + n)], pa.binary()),
                     "offset": pa.array(range(start, start + n), pa.int64())})
    write_deltalake(str(lake / TABLE_BRONZE), rows, mode="append")


def _progress(lake: Path, rows: list[tuple[str, int, dt.datetime, float]]) -> None:
    data = {name: [] for name in PROGRESS_SCHEMA.names}
    for query, batch, ts, rate in rows:
        values = {"query_name": query, "query_id": f"id-{query}", "run_id": "run", "batch_id": batch,
                  "timestamp": ts, "num_input_rows": batch * 10, "input_rows_per_second": rate,
                  "processed_rows_per_second": rate, "batch_duration_ms": 1000 + batch, "watermark": None,
                  "state_rows": batch, "state_memory_bytes": 0, "progress_json": "{}"}
        for k in data:  # columns this test does not set (rule health, exclusions) stay null
            data[k].append(values.get(k))
    write_deltalake(str(lake / TABLE_PIPELINE_PROGRESS), pa.table(data, schema=PROGRESS_SCHEMA), mode="append")


@pytest.fixture
def filled_lake(lake: Path) -> Path:
    _bronze(lake, 37)
    _bronze(lake, 5, start=37)
    _progress(lake, [
        ("bronze", 1, T0, 100.0),
        ("bronze", 2, T0 + dt.timedelta(seconds=10), 250.0),
        ("events", 1, T0 + dt.timedelta(seconds=5), 80.0),
        ("bronze", 0, T0 - dt.timedelta(minutes=30), 1.0),  # older than the 15-minute chart window
    ])
    return lake


def test_table_overview_counts_rows_per_table(filled_lake: Path) -> None:
    overview = table_overview(filled_lake).set_index("table")
    assert overview.loc[TABLE_BRONZE, "rows"] == 42
    assert overview.loc[TABLE_BRONZE, "version"] == 1
    assert overview.loc[TABLE_PIPELINE_PROGRESS, "rows"] == 4


def test_latest_progress_is_the_newest_batch_of_each_query(filled_lake: Path) -> None:
    latest = latest_progress(filled_lake)
    assert latest["query_name"].tolist() == ["bronze", "events"]
    assert latest["batch_id"].tolist() == [2, 1]
    assert latest["processed_rows_per_second"].tolist() == [250.0, 80.0]


def test_progress_history_keeps_the_recent_window(filled_lake: Path) -> None:
    history = progress_history(filled_lake, minutes=15)
    assert sorted(zip(history["query_name"], history["batch_id"], strict=True)) == [
        ("bronze", 1), ("bronze", 2), ("events", 1)]


# --- DHCP sessions ---------------------------------------------------------------------------------------------

MOVED_IP = "10.20.0.50"
MAC_A, HOST_A = "00-0C-29-AA-0B-01", "ws-alpha"
MAC_B, HOST_B = "00-0C-29-BB-0C-02", "laptop-bravo"
MAC_C, MAC_D = "00-0C-29-CC-0D-03", "00-0C-29-DD-0E-04"
DHCP_SCHEMA = pa.schema([
    ("session_id", pa.string()), ("ip", pa.string()), ("mac", pa.string()), ("hostname", pa.string()),
    ("lease_start", pa.timestamp("us", "UTC")), ("lease_end", pa.timestamp("us", "UTC")),
    ("end_reason", pa.string()), ("state", pa.string()), ("updated_at", pa.timestamp("us", "UTC")),
    ("dataset", pa.string()),
])


def _at(hh: int, mm: int) -> dt.datetime:
    return dt.datetime(2026, 11, 22, hh, mm, tzinfo=dt.UTC)


def _sessions(lake: Path, rows: list[tuple]) -> None:
    table = pa.Table.from_pylist([dict(zip(DHCP_SCHEMA.names, r, strict=True)) for r in rows], schema=DHCP_SCHEMA)
    write_deltalake(str(lake / TABLE_DHCP_SESSIONS), table, mode="append")


@pytest.fixture
def dhcp_lake(lake: Path) -> Path:
    """MOVED_IP went from host A (open 10:00, renewed 10:10, closed ``reassigned`` 10:35) to host B (open
    10:35); another IP was released (its renewal and release share one log time: closed must win the tie);
    a third IP is still held. Appended in several commits, rows out of time order, as a stream writes them."""
    _sessions(lake, [
        ("sA", MOVED_IP, MAC_A, HOST_A, _at(10, 0), _at(11, 0), None, "open", _at(10, 0), "dhcpd"),
        ("sC", "10.20.0.60", MAC_C, "printer-c", _at(9, 0), _at(10, 0), "release", "closed", _at(9, 20), "dhcpd"),
        ("sC", "10.20.0.60", MAC_C, "printer-c", _at(9, 0), _at(10, 0), None, "open", _at(9, 0), "dhcpd"),
    ])
    _sessions(lake, [
        ("sC", "10.20.0.60", MAC_C, "printer-c", _at(9, 0), _at(10, 20), None, "renewed", _at(9, 20), "dhcpd"),
        # the renewal message carried no host name: the session keeps the one it had
        ("sA", MOVED_IP, MAC_A, None, _at(10, 0), _at(11, 10), None, "renewed", _at(10, 10), "dhcpd"),
        ("sD", "10.20.0.70", MAC_D, "nas-d", _at(10, 20), _at(11, 20), None, "open", _at(10, 20), "zeek.dhcp"),
    ])
    _sessions(lake, [
        ("sB", MOVED_IP, MAC_B, HOST_B, _at(10, 35), _at(11, 35), None, "open", _at(10, 35), "zeek.dhcp"),
        ("sA", MOVED_IP, MAC_A, None, _at(10, 0), _at(10, 35), "reassigned", "closed", _at(10, 35), "zeek.dhcp"),
    ])
    return lake


def test_current_holder_of_a_reassigned_ip_is_the_new_host(dhcp_lake: Path) -> None:
    now = current_leases(dhcp_lake, ip=MOVED_IP)
    assert now[["mac", "hostname", "state"]].values.tolist() == [[MAC_B, HOST_B, "open"]]
    assert now["lease_start"].tolist() == [pd.Timestamp(_at(10, 35))]


def test_lease_history_has_both_sessions_newest_first(dhcp_lake: Path) -> None:
    history = lease_history(dhcp_lake, MOVED_IP)
    assert list(history.columns) == LEASE_COLUMNS
    assert history[["mac", "hostname", "state", "end_reason"]].values.tolist() == [
        [MAC_B, HOST_B, "open", None], [MAC_A, HOST_A, "closed", "reassigned"]]
    assert history["lease_end"].tolist() == [pd.Timestamp(_at(11, 35)), pd.Timestamp(_at(10, 35))]
    assert lease_history(dhcp_lake, MOVED_IP, limit=1)["mac"].tolist() == [MAC_B]
    released = lease_history(dhcp_lake, " 10.20.0.60 ")
    assert released[["state", "end_reason"]].values.tolist() == [["closed", "release"]]


def test_closed_sessions_are_not_current_leases(dhcp_lake: Path) -> None:
    everyone = current_leases(dhcp_lake)
    assert everyone["mac"].tolist() == [MAC_B, MAC_D]  # newest lease first; A reassigned, C released
    assert open_lease_count(dhcp_lake) == 2
    assert current_leases(dhcp_lake, ip="10.20.0.60").empty
    assert current_leases(dhcp_lake, limit=1)["mac"].tolist() == [MAC_B]


def test_current_leases_by_mac_or_host_name(dhcp_lake: Path) -> None:
    assert current_leases(dhcp_lake, mac_or_host="00:0c:29:bb:0c:02")["ip"].tolist() == [MOVED_IP]
    assert current_leases(dhcp_lake, mac_or_host="000c.29dd.0e04")["hostname"].tolist() == ["nas-d"]
    assert current_leases(dhcp_lake, mac_or_host="LAPTOP-BRAVO")["mac"].tolist() == [MAC_B]
    assert current_leases(dhcp_lake, mac_or_host=HOST_A).empty  # A's only session is closed


def test_entity_pages_and_alert_context_show_each_session_in_its_current_state(dhcp_lake: Path) -> None:
    """The entity page's DHCP history and an alert's entity context read the same current sessions as the lease
    history: the closed-wins tie, the host name a renewal did not repeat, the holder at the alert's time first."""
    by_ip = dhcp_history(dhcp_lake, "ip", MOVED_IP)
    assert by_ip[["mac", "hostname", "state"]].values.tolist() == [[MAC_B, HOST_B, "open"], [MAC_A, HOST_A, "closed"]]
    assert dhcp_history(dhcp_lake, "host", "PRINTER-C")[["state", "end_reason"]].values.tolist() == [
        ["closed", "release"]]
    assert dhcp_history(dhcp_lake, "mac", MAC_D)["ip"].tolist() == ["10.20.0.70"]
    context = entity_context(dhcp_lake, "ip", MOVED_IP, at=_at(10, 20))[TABLE_DHCP_SESSIONS]
    assert context[["mac", "hostname", "held_at_alert"]].values.tolist() == [[MAC_A, HOST_A, True],
                                                                            [MAC_B, HOST_B, False]]
    assert entity_context(dhcp_lake, "host", HOST_A)[TABLE_DHCP_SESSIONS]["state"].tolist() == ["closed"]


def test_dhcp_queries_without_the_table(lake: Path) -> None:
    for result in (current_leases(lake), current_leases(lake, ip=MOVED_IP), lease_history(lake, MOVED_IP)):
        assert result.empty
        assert list(result.columns) == LEASE_COLUMNS
    assert open_lease_count(lake) == 0


@pytest.mark.parametrize("bad", ["10.20.0.999", "10.20.0.50' OR '1'='1", "", "ws-alpha"])
def test_a_bad_ip_is_refused_with_a_clear_message(dhcp_lake: Path, bad: str) -> None:
    with pytest.raises(UserError, match="is not an IP address"):
        lease_history(dhcp_lake, bad)
    with pytest.raises(UserError, match="is not an IP address"):
        current_leases(dhcp_lake, ip=bad)


def test_queries_on_an_empty_lake(lake: Path) -> None:
    assert table_overview(lake).empty
    assert latest_progress(lake).empty
    assert progress_history(lake).empty


def test_analyst_pages_queries_on_an_empty_lake(lake: Path) -> None:
    """A young lake (no alerts, events or triage yet): every page query answers empty instead of failing."""
    from dashboard import coverage, entities, triage
    from dashboard.alerts_data import QUEUE_COLUMNS, alert_queue, alert_volume, current_alert, filter_options

    assert alert_queue(lake).empty and list(alert_queue(lake).columns) == QUEUE_COLUMNS
    assert alert_volume(lake).empty and current_alert(lake, "nope") is None
    assert filter_options(lake) == {"rules": [], "assignees": []}
    assert triage.history(lake, "nope").empty and triage.status_of(lake, "nope") == "new"
    for fn in (entities.event_timeline, entities.entity_alerts, entities.dhcp_history, entities.logins,
               entities.top_peers, entities.top_ports):
        assert fn(lake, "ip", "10.0.0.1").empty
    assert coverage.query_health(lake).empty and coverage.rule_stats(lake).empty
    assert (coverage.coverage_table(lake)["alerts"] == 0).all()


# --- the page, in a real browser -----------------------------------------------------------------------------

def _chrome():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver_path = shutil.which("chromedriver")
    assert binary and driver_path, "Chromium and ChromeDriver are installed by `scripts/setup --with-browser`"
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--window-size=1400,1000"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(driver_path), options=opts)


@contextlib.contextmanager
def serve_dashboard(settings: Settings, log_file: Path) -> Iterator[str]:
    """A real dashboard (``nightjar dashboard``'s launcher) on a free loopback port: yields its URL, stops it after."""
    from dashboard.launcher import start_dashboard, stop_dashboard, wait_until_ready
    from ingest.embedded_broker import free_port

    port = free_port()
    proc = start_dashboard(settings, port, log_file=log_file)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, timeout=90, proc=proc)
        yield url
    finally:
        stop_dashboard(proc)


def _wait_for_text(driver, predicate, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = driver.find_element("tag name", "body").text
        if predicate(text):
            return text
        time.sleep(0.5)
    raise AssertionError(f"page never showed what was expected; last text:\n{text[:2000]}")


def _table_cells(driver) -> list[str]:
    # st.dataframe draws on a canvas; its accessible grid carries the cell values for screen readers.
    return [c.text or c.get_attribute("textContent") for c in driver.find_elements("css selector", "[role=gridcell]")]


@pytest.mark.browser
def test_dashboard_page_shows_tables_and_progress_and_refreshes(filled_lake: Path, tmp_path: Path) -> None:
    from dashboard.launcher import start_dashboard, stop_dashboard, wait_until_ready
    from ingest.embedded_broker import free_port

    port = free_port()
    os.environ["NIGHTJAR_DASHBOARD_REFRESH_S"] = "1"
    proc = start_dashboard(Settings(lake=filled_lake), port, log_file=tmp_path / "dashboard.log")
    driver = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, timeout=90, proc=proc)
        driver = _chrome()
        driver.get(url + "/pipeline")
        text = _wait_for_text(driver, lambda t: "Tables" in t and "bronze: rows/s" in t)
        assert "events: rows/s" in text
        assert "250" in text and "80" in text  # the latest rows/s of each query, not an older batch's
        cells = _wait_for_text_cells(driver, lambda cs: "42" in cs)
        assert "pipeline_progress" in cells and "4" in cells

        _bronze(filled_lake, 58, start=42)  # the pipeline commits more: the page follows without a reload
        _wait_for_text_cells(driver, lambda cs: "100" in cs)
    finally:
        os.environ.pop("NIGHTJAR_DASHBOARD_REFRESH_S", None)
        if driver is not None:
            driver.quit()
        stop_dashboard(proc)
    assert proc.poll() is not None


def _wait_for_text_cells(driver, predicate, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    cells: list[str] = []
    from selenium.common.exceptions import StaleElementReferenceException

    while time.monotonic() < deadline:
        try:
            cells = [c.strip() for c in _table_cells(driver)]
        except StaleElementReferenceException:  # a rerun replaced the grid while it was being read
            time.sleep(0.2)
            continue
        if predicate(cells):
            return cells
        time.sleep(0.5)
    raise AssertionError(f"table cells never matched; last cells: {cells[:60]}")


@pytest.mark.browser
def test_dashboard_page_answers_who_has_this_ip_now(dhcp_lake: Path, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    from dashboard.launcher import start_dashboard, stop_dashboard, wait_until_ready
    from ingest.embedded_broker import free_port

    port = free_port()
    proc = start_dashboard(Settings(lake=dhcp_lake), port, log_file=tmp_path / "dashboard.log")
    driver = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_ready(url, timeout=90, proc=proc)
        driver = _chrome()
        driver.get(url + "/pipeline")
        # Without input: the open-lease count and the newest open leases (B and D, not A nor the released C).
        text = _wait_for_text(driver, lambda t: "Newest 20 open leases" in t and re.search(r"Open leases\n\d", t))
        assert re.search(r"Open leases\n(\d+)", text).group(1) == "2"
        cells = _wait_for_text_cells(driver, lambda cs: HOST_B in cs and "nas-d" in cs)
        assert HOST_A not in cells and "printer-c" not in cells

        box = driver.find_element("css selector", "input[aria-label='IP, MAC or hostname']")
        box.send_keys(MOVED_IP, Keys.ENTER)
        cells = _wait_for_text_cells(driver, lambda cs: HOST_A in cs)  # the history table, the section's end
        assert "reassigned" in cells and MAC_A in cells and HOST_B in cells
        assert "nas-d" not in cells  # the open-lease list gave way to this IP's history

        def who_has(page: str) -> str:
            return page.split("Who has this IP now", 1)[-1].split(f"Lease history of {MOVED_IP}", 1)[0]

        # Streamlit draws elements as they arrive: wait until the answer itself is on the page, not just headings.
        text = _wait_for_text(driver, lambda t: "Who has this IP now" in t and "is held by" in who_has(t))
        now = who_has(text)
        assert HOST_B in now and MAC_B in now
        assert HOST_A not in now and MAC_A not in now
    finally:
        if driver is not None:
            driver.quit()
        stop_dashboard(proc)
    assert proc.poll() is not None


def test_the_dashboards_event_queries_read_only_core_and_enrichment_columns() -> None:
    """Entity pages, alert evidence and shipped hunts read ``events`` by the contract's typed columns only (a
    source's own field lives in ``detail`` and is read through the field resolver or a dataset view)."""
    import re

    import dashboard
    from ingest.field_resolver import ALL_COLUMN_TYPES

    folder = Path(dashboard.__file__).parent
    named = set()
    for module in [*folder.glob("*.py"), *folder.glob("views/*.py")]:
        if "rule_lab" in module.name:
            continue  # the rule lab compiles rules, whose fields the resolver places
        # a quoted name followed by a field: a struct column of events ("source".ip, "zeek".conn_state, ...)
        named |= {m.group(1) + m.group(2) for m in re.finditer(r'"([a-z_]+)"((?:\.[a-z_]+)+)', module.read_text())}
    assert {"source.ip", "event.dataset", "user.name", "dns.question.name", "source.geo.country_iso_code"} <= named
    leaves_and_structs = set(ALL_COLUMN_TYPES) | {p.rsplit(".", i)[0] for p in ALL_COLUMN_TYPES for i in (1, 2)}
    assert sorted(named - leaves_and_structs) == []
