"""What the dashboard shows, as plain functions over the lake (no Streamlit here, so tests call them directly).

Tables are read with deltalake → Arrow datasets and queried with DuckDB, never through Spark: a JVM per page
view would be far too slow (see ARCHITECTURE.md, decision 5). Every function returns a pandas DataFrame and
copes with a lake that is empty or still being written.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd

from nightjar.config import TABLE_PIPELINE_PROGRESS
from nightjar.lake import describe_tables, is_delta_table, table_dataset

PROGRESS_COLUMNS = [
    "query_name",
    "batch_id",
    "timestamp",
    "num_input_rows",
    "input_rows_per_second",
    "processed_rows_per_second",
    "batch_duration_ms",
    "watermark",
    "state_rows",
    "state_memory_bytes",
]


def table_overview(lake: Path) -> pd.DataFrame:
    """One row per Delta table in the lake: name, rows, version, last commit (UTC)."""
    infos = describe_tables(lake)
    return pd.DataFrame(
        [{"table": i.name, "rows": i.rows, "version": i.version, "last_commit": i.last_commit} for i in infos],
        columns=["table", "rows", "version", "last_commit"],
    )


def _progress(lake: Path, sql: str, params: list | None = None) -> pd.DataFrame:
    if not is_delta_table(lake / TABLE_PIPELINE_PROGRESS):
        return pd.DataFrame(columns=PROGRESS_COLUMNS)
    progress = table_dataset(lake, TABLE_PIPELINE_PROGRESS)  # noqa: F841 - referenced by name in the SQL
    with duckdb.connect() as con:
        return con.execute(sql, params or []).df()


def latest_progress(lake: Path) -> pd.DataFrame:
    """The most recent progress row of each streaming query (the figures at the top of the page)."""
    cols = ", ".join(PROGRESS_COLUMNS)
    return _progress(
        lake,
        f"""
        SELECT {cols} FROM progress
        QUALIFY row_number() OVER (PARTITION BY query_name ORDER BY timestamp DESC, batch_id DESC) = 1
        ORDER BY query_name
        """,
    )


def progress_history(lake: Path, minutes: float = 15.0) -> pd.DataFrame:
    """Progress rows of the last ``minutes`` (relative to the newest row, so a stopped pipeline still shows
    its last run), oldest first: the rows/s and batch-duration charts."""
    cols = ", ".join(PROGRESS_COLUMNS)
    return _progress(
        lake,
        f"""
        SELECT {cols} FROM progress
        WHERE timestamp >= (SELECT max(timestamp) FROM progress) - to_microseconds(CAST(? * 60e6 AS BIGINT))
        ORDER BY timestamp, query_name
        """,
        [minutes],
    )
