"""DuckDB over the lake's Delta tables: the one way every dashboard query reads data.

Each table is opened with deltalake at its current version and registered in a fresh in-memory DuckDB
connection as an Arrow dataset view, so DuckDB pushes filters and projections into the Parquet scan and no
Spark session is ever involved (docs/architecture.md, decision 5). A table that does not exist yet is registered as
an empty table with its known schema when one is given, so page queries need no special case for a young lake.

The dashboard owns two tables of its own (the pipeline never writes them): ``alert_triage`` (the analysts'
append-only audit trail, see :mod:`dashboard.triage`) and ``saved_hunts`` (see :mod:`dashboard.hunt`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from core.config import TABLE_ALERT_TRIAGE, TABLE_SAVED_HUNTS  # noqa: F401 (re-exported: the dashboard's own tables)
from core.lake import is_delta_table, table_dataset


def has_table(lake: Path, name: str) -> bool:
    return is_delta_table(lake / name)


def connect(lake: Path, tables: Iterable[str], empty: Mapping[str, pa.Schema] | None = None,
            threads: int = 2) -> duckdb.DuckDBPyConnection:
    """A new DuckDB connection with each of ``tables`` registered under its own name (UTC session time zone).

    Tables missing from the lake are skipped, unless ``empty`` gives their schema: then they are empty views.
    """
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET threads = {int(threads)}")
    empty = empty or {}
    for name in tables:
        if has_table(lake, name):
            con.register(name, table_dataset(lake, name))
        elif name in empty:
            con.register(name, empty[name].empty_table())
    return con


def query(lake: Path, tables: Iterable[str], sql: str, params: Mapping | list | None = None,
          empty: Mapping[str, pa.Schema] | None = None) -> pd.DataFrame:
    """Run one read-only ``sql`` over ``tables`` and return a pandas DataFrame."""
    with connect(lake, tables, empty) as con:
        return con.execute(sql, params or []).df()
