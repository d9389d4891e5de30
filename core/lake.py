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

from core.config import KNOWN_TABLES, TABLE_PIPELINE_PROGRESS, Settings
from core.errors import UserError


def is_delta_table(path: Path) -> bool:
    """A committed Delta table: its log holds a commit or a checkpoint (a writer creates ``_delta_log`` and the
    data files before its first commit lands, so the folder alone is not enough)."""
    log = path / "_delta_log"
    return log.is_dir() and ((log / "_last_checkpoint").exists() or any(log.glob("*.json")))


def require_lake(lake: Path, create: bool) -> None:
    """Refuse to start a new, empty lake at a path that does not exist, unless asked to (``--create``).

    Why: a mistyped ``--lake`` (or ``NIGHTJAR_LAKE``) used to give a new lake with every table, and a pipeline that
    ran "fine" over nothing the operator meant. The default ``./lake`` is created as before (the first run of a
    checkout), and so is any path given with ``create``. Raises a :class:`UserError` with exit status 2 (an argument
    error) that names the path and both ways out.
    """
    if create or lake.exists() or lake.absolute() == Path(Settings.lake).absolute():
        return
    raise UserError(f"lake directory {lake} does not exist: check --lake (or NIGHTJAR_LAKE), or pass --create to "
                    "start a new lake there", exit_code=2)


def add_create_argument(parser: argparse.ArgumentParser) -> None:
    """``--create``: the one spelling of "a new lake at this path is intended" (see :func:`require_lake`)."""
    parser.add_argument("--create", action="store_true",
                        help="start a new lake if the --lake directory does not exist (default: refuse, "
                             "except for ./lake)")


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

    Not ``to_pyarrow_dataset()`` as it comes either: deltalake 1.6.6 turns a column whose file statistics give a null
    count but no min/max (the project's writer records min/max for numbers and times only) into the file guarantee
    ``col >= null``, which is never true, so any filter on that column that DuckDB or pyarrow pushes into the scan
    finds nothing (measured: ``dhcp_sessions WHERE ip = '10.20.0.21'`` gave 0 of 38 rows). The files of an
    unpartitioned table (every table the pipeline writes) are kept without those guarantees; Parquet's own row-group
    statistics still prune. A partitioned table keeps deltalake's dataset (its partition values need the guarantees).
    """
    table = _delta(lake, name)
    dataset = table.to_pyarrow_dataset()
    if table.metadata().partition_columns:
        return dataset
    fragments = [f.format.make_fragment(f.path, f.filesystem) for f in dataset.get_fragments()]
    return ds.FileSystemDataset(fragments, dataset.schema, dataset.format, dataset.filesystem)


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


def excluded_from_detection(lake: Path) -> int:
    """Events the detections left out (stamped too far after they were ingested), summed over ``pipeline_progress``."""
    return _progress_sum(lake, "excluded_rows")


def late_for_windowed_rules(lake: Path) -> int:
    """Rows the windowed rules' state left out as older than its watermark, summed over ``pipeline_progress``
    (Spark counts partial aggregates per group and window, not events)."""
    return _progress_sum(lake, "late_rows")


def _progress_sum(lake: Path, column: str) -> int:
    import pyarrow.compute as pc

    if not is_delta_table(lake / TABLE_PIPELINE_PROGRESS):
        return 0
    dataset = table_dataset(lake, TABLE_PIPELINE_PROGRESS)
    if column not in dataset.schema.names:  # a lake written before the column existed
        return 0
    return int(pc.sum(dataset.to_table(columns=[column])[column]).as_py() or 0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object per table")


def run(args: argparse.Namespace, settings: Settings) -> int:
    import json

    lake = settings.lake
    if not lake.exists():
        raise UserError(f"lake directory {lake} does not exist (run `nightjar run` or pass --lake DIR)")
    infos = describe_tables(lake)
    excluded = excluded_from_detection(lake)
    late = late_for_windowed_rules(lake)
    if args.json:
        for i in infos:
            print(json.dumps({"table": i.name, "rows": i.rows, "version": i.version,
                              "last_commit": i.last_commit.isoformat() if i.last_commit else None}))
        if excluded:
            print(json.dumps({"excluded_from_detection": excluded}))
        if late:
            print(json.dumps({"late_for_windowed_rules": late}))
        return 0
    if not infos:
        print(f"no tables in {lake}")
        return 0
    width = max(len(i.name) for i in infos)
    print(f"{'table':<{width}}  {'rows':>12}  {'version':>7}  last commit (UTC)")
    for i in infos:
        when = i.last_commit.strftime("%Y-%m-%d %H:%M:%S") if i.last_commit else "-"
        print(f"{i.name:<{width}}  {i.rows:>12,}  {i.version:>7}  {when}")
    if excluded:
        print(f"{excluded:,} event(s) left out of detection: stamped more than 10 minutes after they were ingested "
              "(a clock ahead, or a replay into the future); they are in `events` for hunting")
    if late:
        print(f"{late:,} late row(s) left out of the windowed rules: events older than their watermark (an older "
              "capture replayed after a newer one); single-event rules and `nightjar backtest` still see them")
    return 0
