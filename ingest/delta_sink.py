"""Exactly-once Delta writes from Spark micro-batches, with delta-rs (no delta-spark jar needed).

How one micro-batch is written (:func:`write_batch`, called from ``foreachBatch``):

1. If the table's Delta log already records an app transaction ``(app_id, version >= batch_id)``, the
   batch was committed before a crash and Spark is replaying it: write nothing. (delta-rs records app
   transactions but, unlike delta-spark, does not skip replays itself.)
2. If the batch has columns the table lacks, evolve the table schema first (an empty append with
   ``schema_mode="merge"``): ``create_write_transaction`` alone would silently drop them.
3. Executors write the batch's rows to Parquet files directly in the table directory
   (``mapInArrow``); only each file's path, size and statistics travel back to the driver.
4. The driver commits all files and the app transaction ``(app_id, batch_id)`` in one Delta commit.

A crash before step 4 leaves unreferenced Parquet files (invisible to readers, removed by ``vacuum``);
a crash after it is covered by step 1. One ``app_id`` per (query, table): a query that writes two
tables from one batch (events + quarantine) commits each with its own id and the same ``batch_id``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from core.fault_points import fault_point

log = logging.getLogger(__name__)

FILE_META_SCHEMA = "path string, size long, rows long, stats string"
# Rows per Parquet file written by one task; bounds executor memory, not the batch size.
MAX_ROWS_PER_FILE = 500_000


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Delta should store for a Spark schema (timestamps in UTC, like Spark writes).

    Every field, nested ones included, is made nullable: a column added later by schema evolution must be
    readable as null from the files written before it existed.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.schema([_nullable(f) for f in to_arrow_schema(schema, timezone="UTC")])


def _nullable(field: pa.Field) -> pa.Field:
    typ = field.type
    if pa.types.is_struct(typ):
        typ = pa.struct([_nullable(f) for f in typ])
    elif pa.types.is_list(typ) or pa.types.is_large_list(typ):
        typ = pa.list_(_nullable(typ.value_field))
    elif pa.types.is_map(typ):
        typ = pa.map_(typ.key_field, _nullable(typ.item_field))
    return field.with_type(typ).with_nullable(True)


def ensure_table(path: Path, schema: pa.Schema, partition_by: list[str] | None = None) -> None:
    """Create an empty Delta table at ``path`` if there is none, so readers see it before the first batch."""
    from deltalake import DeltaTable

    if has_commits(path):
        return
    path.mkdir(parents=True, exist_ok=True)
    DeltaTable.create(str(path), schema, mode="ignore", partition_by=partition_by)
    log.info("created Delta table %s", path)


def has_commits(path: Path) -> bool:
    """True when ``path`` holds a Delta table with at least one commit. A ``_delta_log`` directory without one is
    what a create interrupted by a full disk leaves (seen in tests/test_chaos.py): it is no table, and every reader
    fails on it with "No files in log segment" until it is created again."""
    log_dir = path / "_delta_log"
    return log_dir.is_dir() and any(p.name[:1].isdigit() for p in log_dir.iterdir())


def committed_batch(path: Path, app_id: str) -> int | None:
    """The last micro-batch id that ``app_id`` committed to the table at ``path`` (None if never)."""
    from deltalake import DeltaTable

    if not has_commits(path):
        return None
    return DeltaTable(str(path)).transaction_version(app_id)


def evolve_schema(path: Path, schema: pa.Schema) -> bool:
    """Add to the table the columns (including nested struct fields) of ``schema`` it lacks.

    Returns True when the schema changed. Types of existing columns are never changed.
    """
    from deltalake import DeltaTable, write_deltalake

    table = DeltaTable(str(path))
    current = pa.schema(table.schema())
    if _covers(current, schema):
        return False
    write_deltalake(str(path), schema.empty_table(), mode="append", schema_mode="merge")
    log.info("evolved schema of %s: %s", path.name, _new_fields(current, schema))
    return True


def _covers(current: pa.Schema | pa.StructType, wanted: pa.Schema | pa.StructType) -> bool:
    have = {f.name: f for f in current}
    for field in wanted:
        mine = have.get(field.name)
        if mine is None:
            return False
        if pa.types.is_struct(field.type) and pa.types.is_struct(mine.type) and not _covers(mine.type, field.type):
            return False
    return True


def _new_fields(current: pa.Schema | pa.StructType, wanted: pa.Schema | pa.StructType, prefix: str = "") -> list[str]:
    have = {f.name: f for f in current}
    out = []
    for field in wanted:
        mine = have.get(field.name)
        if mine is None:
            out.append(prefix + field.name)
        elif pa.types.is_struct(field.type) and pa.types.is_struct(mine.type):
            out += _new_fields(mine.type, field.type, prefix + field.name + ".")
    return out


def write_batch(df: DataFrame, path: Path, app_id: str, batch_id: int, partition_by: list[str] | None = None) -> int:
    """Append ``df`` to the Delta table at ``path`` exactly once for ``(app_id, batch_id)``.

    Returns the number of rows committed (0 for a replayed batch). Safe to call from ``foreachBatch``.
    """
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.transaction import AddAction

    schema = arrow_schema(df.schema)
    ensure_table(path, schema, partition_by)
    done = committed_batch(path, app_id)
    if done is not None and batch_id <= done:
        log.info("%s: batch %d already committed by %s (last %d): skipping the replay", path.name, batch_id,
                 app_id, done)
        return 0
    evolve_schema(path, schema)
    started = time.monotonic()
    files = df.mapInArrow(_parquet_writer(str(path), schema, partition_by or []), FILE_META_SCHEMA).collect()
    actions = [
        AddAction(f.path, f.size, json.loads(f.stats).pop("_partition", {}), int(time.time() * 1000), True,
                  _strip_partition(f.stats))
        for f in files
    ]
    rows = sum(f.rows for f in files)
    if not actions:
        # Nothing to add: no commit (an empty commit per idle micro-batch would only grow the log).
        # A replay of this batch id also writes nothing, so recording it is unnecessary.
        return 0
    table = DeltaTable(str(path))
    fault_point("delta.before_commit")
    table.create_write_transaction(
        actions,
        mode="append",
        schema=pa.schema(table.schema()),
        partition_by=partition_by,
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
    )
    fault_point("delta.after_commit")
    log.info("%s: batch %d committed %d rows in %d files (%.2fs)", path.name, batch_id, rows, len(actions),
             time.monotonic() - started)
    return rows


def _strip_partition(stats: str) -> str:
    parsed = json.loads(stats)
    parsed.pop("_partition", None)
    return json.dumps(parsed)


def _parquet_writer(table_path: str, schema: pa.Schema, partition_by: list[str]):
    """The executor side of :func:`write_batch`: a ``mapInArrow`` function writing Parquet files.

    A closure over plain values only (it is pickled to executors; nothing driver-side travels).
    """

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        groups: dict[tuple, list[pa.RecordBatch]] = {}
        for batch in batches:
            if batch.num_rows == 0:
                continue
            batch = _conform(batch, schema)
            if partition_by:
                table = pa.Table.from_batches([batch])
                keys = table.select(partition_by).group_by(partition_by).aggregate([]).to_pylist()
                for key in keys:
                    mask = None
                    for col, val in key.items():
                        cond = pc.equal(table[col], val) if val is not None else pc.is_null(table[col])
                        mask = cond if mask is None else pc.and_(mask, cond)
                    groups.setdefault(tuple(key.items()), []).extend(table.filter(mask).to_batches())
            else:
                groups.setdefault((), []).append(batch)
        out: dict[str, list[Any]] = {"path": [], "size": [], "rows": [], "stats": []}
        for key, part_batches in groups.items():
            table = pa.Table.from_batches(part_batches, schema=schema)
            data_cols = [c for c in schema.names if c not in partition_by]
            subdir = "/".join(f"{c}={_partition_value(v)}" for c, v in key)
            for start in range(0, table.num_rows, MAX_ROWS_PER_FILE):
                chunk = table.slice(start, MAX_ROWS_PER_FILE)
                rel = f"{subdir + '/' if subdir else ''}part-{uuid.uuid4()}.c000.zstd.parquet"
                full = Path(table_path) / rel
                full.parent.mkdir(parents=True, exist_ok=True)
                data = chunk.select(data_cols)
                pq.write_table(data, str(full), compression="zstd")
                stats = file_stats(data)
                stats["_partition"] = {c: (None if v is None else _partition_value(v)) for c, v in key}
                out["path"].append(rel)
                out["size"].append(full.stat().st_size)
                out["rows"].append(chunk.num_rows)
                out["stats"].append(json.dumps(stats))
        yield pa.RecordBatch.from_pydict(
            out, schema=pa.schema([("path", pa.string()), ("size", pa.int64()), ("rows", pa.int64()),
                                   ("stats", pa.string())])
        )

    return write


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema):
        return batch
    return pa.Table.from_batches([batch]).cast(schema).to_batches()[0]


def _partition_value(value: object) -> str:
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return str(value)


def file_stats(table: pa.Table) -> dict[str, Any]:
    """Delta file statistics: numRecords, and minValues/maxValues/nullCount per column (nested for structs).

    min/max are given for numbers, booleans, dates and timestamps (what analysts filter by); strings and
    binaries get null counts only, which keeps the log small and avoids truncation subtleties.
    """
    import pyarrow.compute as pc

    def column(arr: pa.ChunkedArray | pa.Array, typ: pa.DataType) -> tuple[Any, Any, Any]:
        if pa.types.is_struct(typ):
            mins, maxs, nulls = {}, {}, {}
            combined = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
            for i, field in enumerate(typ):
                child = pc.struct_field(combined, [i])
                lo, hi, nc = column(child, field.type)
                if lo is not None:
                    mins[field.name], maxs[field.name] = lo, hi
                if nc is not None:
                    nulls[field.name] = nc
            return (mins or None), (maxs or None), (nulls or None)
        nulls = arr.null_count
        if (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_temporal(typ)) and \
                len(arr) > nulls:
            mm = pc.min_max(arr)
            return _json_value(mm["min"].as_py()), _json_value(mm["max"].as_py()), nulls
        return None, None, nulls

    stats: dict[str, Any] = {"numRecords": table.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for field in table.schema:
        lo, hi, nulls = column(table[field.name], field.type)
        if lo is not None:
            stats["minValues"][field.name], stats["maxValues"][field.name] = lo, hi
        if nulls is not None:
            stats["nullCount"][field.name] = nulls
    return stats


def _json_value(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        # Delta writes millisecond timestamps in stats; readers widen max by 1 ms for that.
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, float) and value != value:  # NaN has no JSON spelling
        return None
    return value
