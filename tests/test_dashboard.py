"""The dashboard: its queries on a real Delta lake, and the page in a real Streamlit server + headless Chromium."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dashboard.queries import latest_progress, progress_history, table_overview
from nightjar.config import TABLE_BRONZE, TABLE_PIPELINE_PROGRESS, Settings
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
        for k, v in values.items():
            data[k].append(v)
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


def test_queries_on_an_empty_lake(lake: Path) -> None:
    assert table_overview(lake).empty
    assert latest_progress(lake).empty
    assert progress_history(lake).empty


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
        driver.get(url)
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
    while time.monotonic() < deadline:
        cells = [c.strip() for c in _table_cells(driver)]
        if predicate(cells):
            return cells
        time.sleep(0.5)
    raise AssertionError(f"table cells never matched; last cells: {cells[:60]}")
