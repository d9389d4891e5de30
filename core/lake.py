"""The lake: a directory of standard Delta tables, read without Spark (deltalake -> Arrow).

Shared by ``nightjar tables``, the dashboard and the tests. Row counts come from the Delta log's per-file
statistics (``numRecords``), so counting a large table reads no data files; a file written without
statistics falls back to counting its rows.

``nightjar tables`` lists the tables with row counts, versions and last-commit times.
"""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from core.config import KNOWN_TABLES, Settings
from core.errors import UserError


def is_delta_table(path: Path) -> bool:
    return (path / "_delta_log").is_dir()


def list_tables(lake: Path) -> list[str]:
    """Names of the Delta tables directly under ``lake``: the known ones first in contract order."""
    if not lake.is_dir():
        return []
    found = {p.name for p in lake.iterdir() if p.is_dir() and not p.name.startswith("_") and is_delta_table(p)}
    return [t for t in KNOWN_TABLES if t in found] + sorted(found - set(KNOWN_TABLES))


def _delta(lake: Path, name: str):
    from deltalake import DeltaTable

    path = lake / name
    if not is_delta_table(path):
        raise UserError(f"no Delta table {name!r} under {lake} (tables there: {', '.join(list_tables(lake)) or 'none'})")
    return DeltaTable(str(path))


def row_count(lake: Path, name: str) -> int:
    """Rows in table ``name`` at its latest version, from the log statistics where present."""
    table = _delta(lake, name)
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return 0
    counts = actions.column("num_records").to_pylist()
    if all(c is not None for c in counts):
        return int(sum(counts))
    return table.to_pyarrow_dataset().count_rows()


def table_dataset(lake: Path, name: str) -> ds.Dataset:
    """The table's current files as a pyarrow dataset (lazy; filter and project before ``to_table``).

    Not ``DeltaTable.to_pyarrow_table()``: with deltalake 1.6 it aborts the interpreter at exit (measured).
    """
    return _delta(lake, name).to_pyarrow_dataset()


@dataclass(frozen=True)
class TableInfo:
    name: str
    rows: int
    version: int
    last_commit: dt.datetime | None


def describe_tables(lake: Path) -> list[TableInfo]:
    out = []
    for name in list_tables(lake):
        table = _delta(lake, name)
        history = table.history(1)
        ts = history[0].get("timestamp") if history else None
        when = dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC) if ts else None
        out.append(TableInfo(name, row_count(lake, name), table.version(), when))
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object per table")


def run(args: argparse.Namespace, settings: Settings) -> int:
    import json

    lake = settings.lake
    if not lake.exists():
        raise UserError(f"lake directory {lake} does not exist (run `nightjar run` or pass --lake DIR)")
    infos = describe_tables(lake)
    if args.json:
        for i in infos:
            print(json.dumps({"table": i.name, "rows": i.rows, "version": i.version,
                              "last_commit": i.last_commit.isoformat() if i.last_commit else None}))
        return 0
    if not infos:
        print(f"no tables in {lake}")
        return 0
    width = max(len(i.name) for i in infos)
    print(f"{'table':<{width}}  {'rows':>12}  {'version':>7}  last commit (UTC)")
    for i in infos:
        when = i.last_commit.strftime("%Y-%m-%d %H:%M:%S") if i.last_commit else "-"
        print(f"{i.name:<{width}}  {i.rows:>12,}  {i.version:>7}  {when}")
    return 0
