"""The nightjar_delta streaming source against real Delta tables (delta-rs) and a real Spark session."""

from __future__ import annotations

import datetime as dt
import json
import re
import stat
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadMaxFiles
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ingest.delta_sink import write_batch
from ingest.delta_source import (
    DataFile,
    DeltaSourceOptions,
    DeltaStreamReader,
    _pack,
    _parse_partition_value,
    commit_order,
    initial_offset_file,
    parquet_columns,
    pruned_schema,
    read_snapshot,
)

NARROW = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _append(path: Path, first: int, count: int, **kwargs) -> None:
    """One commit of rows ``first .. first+count-1`` (one file unless ``partition_by`` splits it)."""
    ids = list(range(first, first + count))
    write_deltalake(str(path), pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=NARROW),
                    mode="append", **kwargs)


def _stream(spark, path: Path, schema: StructType | None = None, **options):
    reader = spark.readStream.format("nightjar_delta").option("path", str(path))
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _drain(df, checkpoint: Path) -> tuple[list[Row], list[int]]:
    """Run ``df`` with availableNow through foreachBatch; return (all rows, row count of each non-empty batch)."""
    batches: list[list[Row]] = []
    query = (df.writeStream.foreachBatch(lambda batch, _id: batches.append(batch.collect()))
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert not query.isActive, "availableNow query did not finish"
    assert query.exception() is None, query.exception()
    return [row for batch in batches for row in batch], [len(b) for b in batches if b]


def _failure(df, checkpoint: Path) -> str:
    """Run ``df`` expecting the query to fail; return the error text."""
    query = (df.writeStream.foreachBatch(lambda batch, _id: batch.count())
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception) as caught:  # noqa: B017 - StreamingQueryException wraps the Python error
        query.awaitTermination(180)
    return str(caught.value)


def _record(df, checkpoint: Path, delivered: dict[int, list[int]], crash: int | None = None) -> None:
    """Run ``df`` with availableNow, keeping each successful batch's sorted ids in ``delivered`` by batch id;
    with ``crash``, that batch fails (after reading its rows) and so does the query."""

    def keep(batch, batch_id):
        ids = sorted(r.id for r in batch.collect())
        if batch_id == crash:
            raise RuntimeError(f"crash in batch {crash} holding {ids}")
        delivered.setdefault(batch_id, ids)

    query = (df.writeStream.foreachBatch(keep).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    if crash is None:
        query.awaitTermination(180)
        assert not query.isActive and query.exception() is None, query.exception()
        return
    with pytest.raises(Exception, match=f"crash in batch {crash}"):  # noqa: B017
        query.awaitTermination(180)


def _ids(rows: list[Row]) -> list[int]:
    return sorted(r.id for r in rows)


def test_reads_every_commit_once_and_a_restart_reads_only_new_commits(spark, tmp_path):
    table, checkpoint = tmp_path / "t", tmp_path / "cp"
    for i in range(3):
        _append(table, i * 100, 100)
    rows, _ = _drain(_stream(spark, table), checkpoint)
    assert _ids(rows) == list(range(300))
    assert {r.name for r in rows} == {f"n{i}" for i in range(300)}

    _append(table, 300, 50)
    _append(table, 350, 50)
    rows, batches = _drain(_stream(spark, table), checkpoint)
    assert _ids(rows) == list(range(300, 400))
    rows, batches = _drain(_stream(spark, table), checkpoint)  # nothing new: no rows at all
    assert rows == [] and batches == []


def test_a_batch_that_failed_is_replayed_with_exactly_its_files(spark, tmp_path):
    """Spark logs a batch's (start, end) before running it: after a crash the same files come again, even
    though more commits have arrived since, and nothing is delivered twice once the batch succeeds."""
    table, checkpoint = tmp_path / "t", tmp_path / "cp"
    for i in range(3):
        _append(table, i * 10, 10)
    delivered: dict[int, list[int]] = {}
    _record(_stream(spark, table, maxFilesPerTrigger=1, startingVersion=0), checkpoint, delivered, crash=1)
    assert delivered == {0: list(range(10))}
    _append(table, 30, 10)  # arrives between the crash and the restart

    # A bigger limit now: a re-planned batch 1 would hold versions 1-3, the replayed one holds version 1 only.
    _record(_stream(spark, table, maxFilesPerTrigger=100, startingVersion=0), checkpoint, delivered)
    assert delivered == {0: list(range(10)), 1: list(range(10, 20)), 2: list(range(20, 40))}


def test_starting_version_latest_and_number(spark, tmp_path):
    table = tmp_path / "t"
    for i in range(3):  # versions 0, 1, 2
        _append(table, i * 10, 10)
    rows, _ = _drain(_stream(spark, table, startingVersion="latest"), tmp_path / "cp-latest")
    assert rows == []
    _append(table, 30, 10)  # version 3: after the "latest" query started
    rows, _ = _drain(_stream(spark, table, startingVersion="latest"), tmp_path / "cp-latest")
    assert _ids(rows) == list(range(30, 40))

    rows, _ = _drain(_stream(spark, table, startingVersion=1), tmp_path / "cp-1")
    assert _ids(rows) == list(range(10, 40))
    message = _failure(_stream(spark, table, startingVersion=9), tmp_path / "cp-9")
    assert "startingVersion=9 is past the latest version (3)" in message


def test_max_files_per_trigger_splits_a_commit_and_a_snapshot_without_loss(spark, tmp_path):
    table = tmp_path / "t"
    # Version 0: five files of 10 rows (one per partition value); versions 1 and 2: one file each.
    ids = list(range(50))
    write_deltalake(str(table), pa.table({"id": ids, "name": [f"n{i}" for i in ids], "p": [i // 10 for i in ids]}),
                    partition_by=["p"])
    write_deltalake(str(table), pa.table({"id": list(range(50, 60)), "name": ["x"] * 10, "p": [0] * 10}),
                    mode="append")
    write_deltalake(str(table), pa.table({"id": list(range(60, 70)), "name": ["y"] * 10, "p": [1] * 10}),
                    mode="append")
    # From version 0: the commits' files in log order, two per batch, a batch may span two versions.
    rows, batches = _drain(_stream(spark, table, startingVersion=0, maxFilesPerTrigger=2), tmp_path / "cp-log")
    assert _ids(rows) == list(range(70))
    assert batches == [20, 20, 20, 10]
    # earliest: the 7 files of the current snapshot, two per batch.
    rows, batches = _drain(_stream(spark, table, maxFilesPerTrigger=2), tmp_path / "cp-snapshot")
    assert _ids(rows) == list(range(70))
    assert batches == [20, 20, 20, 10]
    rows, batches = _drain(_stream(spark, table, maxBytesPerTrigger=1), tmp_path / "cp-bytes")  # >= 1 file each
    assert _ids(rows) == list(range(70)) and len(batches) == 7


ECS_V1 = StructType([
    StructField("@timestamp", TimestampType()),
    StructField("event", StructType([StructField("dataset", StringType()), StructField("original", StringType())])),
    StructField("source", StructType([StructField("ip", StringType())])),
    StructField("tags", ArrayType(StringType())),
    StructField("labels", MapType(StringType(), StringType())),
    StructField("related", StructType([StructField("hosts", ArrayType(
        StructType([StructField("name", StringType()), StructField("seen", TimestampType())])))])),
])
# Version 2 of the schema adds a nested field and a top-level column (as delta_sink's schema evolution does).
ECS_V2 = StructType([
    ECS_V1["@timestamp"], ECS_V1["event"],
    StructField("source", StructType([StructField("ip", StringType()), StructField("port", IntegerType())])),
    ECS_V1["tags"], ECS_V1["labels"], ECS_V1["related"],
    StructField("seq", LongType()),
])


def _ecs_rows(first: int, count: int, v2: bool) -> list[tuple]:
    base = dt.datetime(2024, 3, 10, 12, 0, 0, 123456)
    out = []
    for i in range(first, first + count):
        ts = base + dt.timedelta(seconds=i, microseconds=i)
        source = (f"10.0.0.{i % 250}", 1000 + i) if v2 else (f"10.0.0.{i % 250}",)
        row = (ts, ("system.auth", f"line {i} \u00e9"), source, [f"t{i}", "ssh"] if i % 3 else [],
               {"k": str(i)} if i % 2 else None,
               ([(f"h{i}", ts), (None, None)],) if i % 4 else None)
        out.append((*row, i) if v2 else row)
    return out


def test_nested_structs_arrays_maps_and_timestamps_round_trip_across_schema_evolution(spark, tmp_path):
    table = tmp_path / "events"
    old = spark.createDataFrame(_ecs_rows(0, 40, v2=False), ECS_V1)
    new = spark.createDataFrame(_ecs_rows(40, 40, v2=True), ECS_V2)
    assert write_batch(old, table, "test.ecs", 0) == 40
    assert write_batch(new, table, "test.ecs", 1) == 40  # evolves the table to ECS_V2
    df = _stream(spark, table)
    assert [f.name for f in df.schema] == ECS_V2.names
    rows, _ = _drain(df, tmp_path / "cp")

    def key(r: Row):
        return r["@timestamp"]

    expected = sorted(new.collect(), key=key)
    got = sorted(rows, key=key)
    assert got[40:] == expected  # the evolved batch, exactly (nested values, timestamps to the microsecond)
    expected_old = sorted(old.collect(), key=key)
    for mine, theirs in zip(got[:40], expected_old, strict=True):
        assert mine["source"]["port"] is None and mine["seq"] is None  # older files: the new fields are null
        assert (mine["@timestamp"], mine["event"], mine["tags"], mine["labels"], mine["related"]) == \
            (theirs["@timestamp"], theirs["event"], theirs["tags"], theirs["labels"], theirs["related"])
        assert mine["source"]["ip"] == theirs["source"]["ip"]


def test_a_pruned_schema_reads_only_its_leaves_with_the_same_values_across_schema_evolution(spark, tmp_path):
    """The ML query reads ~20 of the events table's ~430 leaves: the source then asks Parquet for those leaves only,
    and the values are the full read's (older files' missing fields null)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    table = tmp_path / "events"
    write_batch(spark.createDataFrame(_ecs_rows(0, 40, v2=False), ECS_V1), table, "test.ecs", 0)
    write_batch(spark.createDataFrame(_ecs_rows(40, 40, v2=True), ECS_V2), table, "test.ecs", 1)
    paths = ["@timestamp", "event.dataset", "source.port", "related", "related.hosts"]
    narrow = pruned_schema(ECS_V2, paths)
    assert narrow.simpleString() == ("struct<@timestamp:timestamp,event:struct<dataset:string>,"
                                     "source:struct<port:int>,related:" + ECS_V2["related"].dataType.simpleString()
                                     + ">")
    # the Parquet columns asked for: leaves of the narrowed structs, whole columns otherwise, none the file lacks
    stored_v1 = to_arrow_schema(ECS_V1, timezone="UTC")
    target = to_arrow_schema(narrow, timezone="UTC")
    # (version 1 files have no source.port: one leaf of source is read so the struct is null where the file's is)
    assert parquet_columns(target, stored_v1) == ["@timestamp", "event.dataset", "source.ip", "related"]
    assert parquet_columns(target, to_arrow_schema(ECS_V2, timezone="UTC")) == ["@timestamp", "event.dataset", "source.port",
                                                                "related"]

    pruned, _ = _drain(_stream(spark, table, narrow), tmp_path / "cp1")
    full, _ = _drain(_stream(spark, table), tmp_path / "cp2")

    def view(r: Row):
        return r["@timestamp"], r["event"]["dataset"], r["source"]["port"] if r["source"] else None, r["related"]

    assert sorted(map(view, pruned), key=str) == sorted(map(view, full), key=str)
    assert len(pruned) == 80 and sum(r["source"]["port"] is None for r in pruned) == 40  # structs not null
    assert all(r["event"]["dataset"] == "system.auth" for r in pruned)
    for bad, problem in ((["event.nope"], "column event.nope is not in"), (["tags.x"], "column tags is not a struct")):
        with pytest.raises(ValueError, match=problem):
            pruned_schema(ECS_V2, bad)


def test_a_partitioned_table_gets_its_partition_values(spark, tmp_path):
    table = tmp_path / "t"
    data = pa.table({
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "site": ["a b:c", "a b:c", "x%y", "plain"],
        "day": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 2)]),
        "n": pa.array([7, None, 7, 8], pa.int32()),
        "at": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3, 4000, tzinfo=dt.UTC)] * 4, pa.timestamp("us", tz="UTC")),
    })
    write_deltalake(str(table), data, partition_by=["site", "day", "n", "at"])
    write_deltalake(str(table), data.slice(0, 1), partition_by=["site", "day", "n", "at"], mode="append")
    for start in ("earliest", "0"):  # partition values from the snapshot and from the commit log
        rows, _ = _drain(_stream(spark, table, startingVersion=start), tmp_path / f"cp-{start}")
        got = sorted((r.id, r.site, r.day, r.n, r.at.replace(tzinfo=None) if r.at else None) for r in rows)
        want = [(1, "a b:c", dt.date(2024, 1, 1), 7), (1, "a b:c", dt.date(2024, 1, 1), 7),
                (2, "a b:c", dt.date(2024, 1, 1), None), (3, "x%y", dt.date(2024, 1, 2), 7),
                (4, "plain", dt.date(2024, 1, 2), 8)]
        assert [g[:4] for g in got] == want
        expected_at = spark.createDataFrame([(dt.datetime(2024, 1, 1, 1, 2, 3, 4000, tzinfo=dt.UTC),)], "at timestamp")
        assert {g[4] for g in got} == {expected_at.first().at.replace(tzinfo=None)}


def test_compaction_does_not_redeliver_rows_and_vacuumed_files_fail_clearly(spark, tmp_path):
    table, checkpoint = tmp_path / "t", tmp_path / "cp"
    for i in range(4):
        _append(table, i * 25, 25)
    rows, _ = _drain(_stream(spark, table), checkpoint)
    assert _ids(rows) == list(range(100))
    DeltaTable(str(table)).optimize.compact()  # version 4: dataChange=false adds and removes
    _append(table, 100, 25)  # version 5
    rows, _ = _drain(_stream(spark, table), checkpoint)
    assert _ids(rows) == list(range(100, 125))

    DeltaTable(str(table)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    rows, _ = _drain(_stream(spark, table), tmp_path / "cp-fresh")  # earliest: the compacted snapshot
    assert _ids(rows) == list(range(125))
    message = _failure(_stream(spark, table, startingVersion=0), tmp_path / "cp-from-0")
    assert re.search(r"data file \S+\.parquet \(added in version [0-3]\) is gone: it was vacuumed", message)
    assert str(table) in message


def test_a_commit_that_removes_data_fails_unless_told_to_ignore_it(spark, tmp_path):
    table = tmp_path / "t"
    _append(table, 0, 10)  # version 0
    _append(table, 10, 10)  # version 1
    DeltaTable(str(table)).delete("id < 5")  # version 2: rewrites the first file without ids 0..4
    _append(table, 20, 10)  # version 3
    message = _failure(_stream(spark, table, startingVersion=0), tmp_path / "cp-default")
    assert "version 2 of" in message and "(DELETE) rewrote data" in message
    assert "ignoreChanges=true" in message and "startingVersion=3" in message
    rows, _ = _drain(_stream(spark, table, startingVersion=0, ignoreChanges="true"), tmp_path / "cp-changes")
    assert _ids(rows) == sorted([*range(30), *range(5, 10)])  # the rewritten file arrives again

    DeltaTable(str(table)).delete()  # version 4: removes every file, adds none
    _append(table, 30, 5)
    message = _failure(_stream(spark, table, startingVersion=3), tmp_path / "cp-delete")
    assert "version 4 of" in message and "deleted data" in message
    rows, _ = _drain(_stream(spark, table, startingVersion=3, ignoreDeletes="true"), tmp_path / "cp-deletes")
    assert _ids(rows) == list(range(20, 35))


def test_a_missing_table_fails_without_a_schema_and_is_waited_for_with_one(spark, tmp_path):
    table = tmp_path / f"not-yet-{uuid.uuid4().hex[:6]}"
    with pytest.raises(Exception, match="no Delta table at .* yet") as caught:  # noqa: B017
        _stream(spark, table)
    assert "Start the pipeline that writes it first" in str(caught.value)

    schema = StructType([StructField("id", LongType()), StructField("name", StringType())])
    checkpoint = tmp_path / "cp"
    rows, batches = _drain(_stream(spark, table, schema=schema), checkpoint)
    assert rows == [] and batches == []
    _append(table, 0, 10)
    _append(table, 10, 10)
    rows, _ = _drain(_stream(spark, table, schema=schema), checkpoint)
    assert _ids(rows) == list(range(20))


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({}, "option path is required"),
        ({"path": "s3://bucket/t"}, "only local table paths"),
        ({"path": "/t", "startingVersion": "yesterday"}, "startingVersion must be"),
        ({"path": "/t", "maxFilesPerTrigger": "0"}, "maxFilesPerTrigger must be a positive integer"),
        ({"path": "/t", "maxBytesPerTrigger": "lots"}, "maxBytesPerTrigger must be a positive size"),
        ({"path": "/t", "ignoreDeletes": "maybe"}, "ignoreDeletes must be true or false"),
    ],
)
def test_bad_options_name_the_option(options, problem):
    with pytest.raises(ValueError, match=problem):
        DeltaSourceOptions.parse(options)


def test_option_values_and_helpers():
    opts = DeltaSourceOptions.parse({"PATH": "file:///data/lake/events", "startingversion": "12",
                                     "maxBytesPerTrigger": "64m"})
    assert (opts.path, opts.starting_version, opts.max_bytes_per_trigger) == ("/data/lake/events", 12, 64 << 20)
    assert opts.max_files_per_trigger == 1000 and not opts.ignore_changes
    files = [DataFile(f"f{i}", size, (), 0) for i, size in enumerate([5, 1, 1, 1, 9])]
    groups = _pack(files, 2)
    assert len(groups) == 2 and sorted(len(g) for g in groups) == [1, 4]  # the 9-byte file alone
    assert _pack(files[:1], 2) == [files[:1]] and _pack([], 2) == []
    assert _parse_partition_value("2024-01-01 01:02:03.004", pa.timestamp("us", tz="UTC")) == \
        dt.datetime(2024, 1, 1, 1, 2, 3, 4000, tzinfo=dt.UTC)
    assert _parse_partition_value("true", pa.bool_()) is True
    assert _parse_partition_value("2024-02-29", pa.date32()) == dt.date(2024, 2, 29)


# --- the starting snapshot is read in commit order ---------------------------------------------------------

EVENTS = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
T0 = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)


def _commit_named(path: Path, name: str, ids: list[int], at: dt.timedelta, modified: int) -> None:
    """One append commit of one file called ``name`` (so a test decides how paths sort), every row at T0 + ``at``,
    with ``modified`` as the add action's modificationTime."""
    if not (path / "_delta_log").exists():
        DeltaTable.create(str(path), EVENTS)  # version 0: no files
    data = pa.table({"id": ids, "ts": [T0 + at] * len(ids)}, schema=EVENTS)
    pq.write_table(data, path / name)
    DeltaTable(str(path)).create_write_transaction(
        [AddAction(name, (path / name).stat().st_size, {}, modified, True, json.dumps({"numRecords": len(ids)}))],
        mode="append", schema=EVENTS)


def _late_named_table(path: Path, commits: int = 5) -> None:
    """Commits 1..n: 10 rows each, commit k at minute 10k, in files whose names *and* modification times sort
    newest first: path order (the old snapshot order) delivers the latest rows first."""
    for k in range(commits):
        _commit_named(path, f"part-{commits - k}.parquet", list(range(k * 10, k * 10 + 10)),
                      dt.timedelta(minutes=10 * k), modified=2_000_000_000_000 - k)


def _file_ids(table: Path, files: list[DataFile]) -> list[list[int]]:
    return [sorted(pq.read_table(table / f.path, columns=["id"]).column("id").to_pylist()) for f in files]


def _windowed_counts(spark, table: Path, checkpoint: Path) -> dict[dt.datetime, int]:
    """A 5-minute window count with a 1-minute watermark over the table from earliest, one file per batch:
    the last count each window reported (update mode), i.e. the rows that were not dropped as late."""
    counts: dict[dt.datetime, int] = {}

    def keep(batch, _id):
        for row in batch.collect():
            counts[row.window.start.replace(tzinfo=None)] = row["count"]

    windowed = (_stream(spark, table, maxFilesPerTrigger=1).withWatermark("ts", "1 minute")
                .groupBy(F.window("ts", "5 minutes")).count())
    query = (windowed.writeStream.outputMode("update").foreachBatch(keep)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None, query.exception()
    return counts


def _minute(m: float) -> dt.datetime:
    return (T0 + dt.timedelta(minutes=m)).replace(tzinfo=None)


def test_a_watermarked_window_started_on_an_existing_table_counts_every_row(spark, tmp_path):
    """Path order put the newest commit's file first: its rows moved the watermark past every older commit,
    whose rows were then dropped as late (4 of the 5 windows lost). Commit order counts all of them."""
    table = tmp_path / "events"
    _late_named_table(table)
    assert [f.path for f in read_snapshot(str(table), 5)] == [f"part-{5 - k}.parquet" for k in range(5)]
    assert [f.path for f in read_snapshot(str(table), 5, "path")] == [f"part-{k}.parquet" for k in range(1, 6)]
    counts = _windowed_counts(spark, table, tmp_path / "cp")
    assert counts == {_minute(10 * k): 10 for k in range(5)}


def test_a_restart_in_the_middle_of_the_snapshot_delivers_each_row_once_in_commit_order(spark, tmp_path):
    table, checkpoint = tmp_path / "events", tmp_path / "cp"
    _late_named_table(table)
    delivered: dict[int, list[int]] = {}
    _record(_stream(spark, table, maxFilesPerTrigger=1), checkpoint, delivered, crash=2)
    assert delivered == {0: list(range(10)), 1: list(range(10, 20))}
    _commit_named(table, "part-0.parquet", list(range(50, 60)), dt.timedelta(minutes=50), modified=1)  # version 6

    _record(_stream(spark, table, maxFilesPerTrigger=2), checkpoint, delivered)
    # Batch 2 replays exactly its logged file; then the rest of the snapshot, two files a batch; then version 6.
    assert delivered == {0: list(range(10)), 1: list(range(10, 20)), 2: list(range(20, 30)),
                         3: list(range(30, 50)), 4: list(range(50, 60))}


def test_a_replayed_first_batch_reads_the_snapshot_it_was_planned_on(spark, tmp_path):
    """Spark keeps no start offset for batch 0: a replay asks initialOffset() again, which names the table's
    version now. A commit made between the crash and the restart must not change what batch 0 reads (it used
    to read the newer snapshot whole, and then the rest of the older one again: 30 rows twice)."""
    table, checkpoint = tmp_path / "events", tmp_path / "cp"
    _late_named_table(table)
    delivered: dict[int, list[int]] = {}
    _record(_stream(spark, table, maxFilesPerTrigger=2), checkpoint, delivered, crash=0)
    assert delivered == {}
    _commit_named(table, "part-0.parquet", list(range(50, 60)), dt.timedelta(minutes=50), modified=1)  # version 6
    _record(_stream(spark, table, maxFilesPerTrigger=2), checkpoint, delivered)
    assert delivered == {0: list(range(20)), 1: list(range(20, 40)), 2: list(range(40, 50)), 3: list(range(50, 60))}


def test_an_offset_without_an_order_still_counts_the_snapshot_in_path_order(tmp_path):
    """Checkpoints written before the commit order hold snapshot offsets whose index counts files by path:
    such a query resumes on exactly the files it would have read before, and new offsets say "commit"."""
    table = tmp_path / "events"
    _late_named_table(table)
    by_path = sorted(read_snapshot(str(table), 5), key=lambda f: f.path)
    reader = DeltaStreamReader({"path": str(table), "maxFilesPerTrigger": "1"}, from_arrow_schema(EVENTS))

    old = {"version": 5, "index": 0, "snapshot": True}  # one file (part-1, the newest rows) already read
    end = reader.latestOffset(old, ReadMaxFiles(2))
    assert end == {"version": 5, "index": 2, "snapshot": True}  # still spelled the old way
    planned = [f.path for p in reader.partitions(old, end) for f in p.files]
    assert sorted(planned) == [f.path for f in by_path[1:3]] == ["part-2.parquet", "part-3.parquet"]
    last = reader.latestOffset(end, ReadMaxFiles(10))
    assert last == {"version": 5, "index": 4, "snapshot": True}
    assert sorted(f.path for p in reader.partitions(end, last) for f in p.files) == ["part-4.parquet", "part-5.parquet"]
    assert reader.latestOffset(last, ReadMaxFiles(10)) == {"version": 6, "index": -1, "snapshot": False}
    # An old checkpoint's first batch replayed: Spark asks initialOffset() again (now in commit order), but
    # the logged end counts by path, and so does the replay.
    replayed = reader.partitions(reader.initialOffset(), old)
    assert [f.path for p in replayed for f in p.files] == ["part-1.parquet"]

    start = reader.initialOffset()
    assert start == {"version": 5, "index": -1, "snapshot": True, "order": "commit"}
    end = reader.latestOffset(start, ReadMaxFiles(1))
    assert end == {"version": 5, "index": 0, "snapshot": True, "order": "commit"}
    assert [f.path for p in reader.partitions(start, end) for f in p.files] == ["part-5.parquet"]  # commit 1
    with pytest.raises(Exception, match="unknown snapshot order 'size'"):
        reader.latestOffset({**start, "order": "size"}, ReadMaxFiles(1))


def test_a_compacted_file_is_ordered_by_the_newest_commit_it_holds(spark, tmp_path):
    """OPTIMIZE merges partition a's commits 0 and 2 into one file: it goes after partition b's commit 1, so
    the rows of commit 1 are not made late by commit 2's rows (ordering it by its oldest commit would)."""
    table = tmp_path / "events"

    def append(ids: range, partition: str, at: dt.timedelta) -> None:
        data = pa.table({"id": list(ids), "ts": [T0 + at] * len(ids), "p": [partition] * len(ids)})
        write_deltalake(str(table), data, mode="append", partition_by=["p"])

    append(range(0, 10), "a", dt.timedelta(0))  # version 0
    append(range(10, 20), "b", dt.timedelta(seconds=30))  # version 1
    append(range(20, 30), "a", dt.timedelta(minutes=20))  # version 2
    DeltaTable(str(table)).optimize.compact()  # version 3: partition a's two files become one
    append(range(30, 40), "b", dt.timedelta(minutes=40))  # version 4
    files = read_snapshot(str(table), 4)
    assert _file_ids(table, files) == [list(range(10, 20)), [*range(0, 10), *range(20, 30)], list(range(30, 40))]
    assert [commit_order(str(table), 4, {f.path for f in files})[f.path] for f in files] == [(1, 0), (2, -1), (4, 0)]
    counts = _windowed_counts(spark, table, tmp_path / "cp")
    assert counts == {_minute(0): 20, _minute(20): 10, _minute(40): 10}

    # Log cleanup after a checkpoint: the adds of versions 0-2 are gone, so the files they placed come first
    # (by modification time); what the log still has keeps its commit order.
    DeltaTable(str(table)).create_checkpoint()
    for version in range(3):
        (table / "_delta_log" / f"{version:020d}.json").unlink()
    again = read_snapshot(str(table), 4)
    assert sorted(map(tuple, _file_ids(table, again[:2]))) == sorted(map(tuple, _file_ids(table, files[:2])))
    assert again[2] == files[2]
    assert len(commit_order(str(table), 4, {f.path for f in again})) == 1


# --- the initial offset survives a replayed batch 0 (#13/#16) -----------------------------------------------


def test_the_initial_offset_is_computed_once_and_the_stored_one_outlives_the_reader(tmp_path):
    """Spark asks initialOffset() on every trigger until batch 0 is planned, and again when batch 0 is replayed:
    the answer must not move with the table. In memory it holds for one reader; the file holds across restarts."""
    table, stored = tmp_path / "t", tmp_path / "cp" / "nightjar_delta" / "t.initial.json"
    _append(table, 0, 10)  # version 0
    schema = from_arrow_schema(NARROW)
    plain = DeltaStreamReader({"path": str(table), "startingVersion": "latest"}, schema)
    assert plain.initialOffset() == {"version": 1, "index": -1, "snapshot": False}
    _append(table, 10, 10)  # version 1: must still be ahead of the start
    assert plain.initialOffset() == {"version": 1, "index": -1, "snapshot": False}
    # A new reader (a restart) without the file computes a new start: version 1 would be skipped.
    assert DeltaStreamReader({"path": str(table), "startingVersion": "latest"}, schema).initialOffset()["version"] == 2

    options = {"path": str(table), "startingVersion": "latest", "initialOffsetFile": str(stored)}
    first = DeltaStreamReader(options, schema).initialOffset()
    assert first == {"version": 2, "index": -1, "snapshot": False}
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())["table"] == str(table)
    assert [p.name for p in stored.parent.iterdir()] == [stored.name]  # no temporary file left behind
    _append(table, 20, 10)  # version 2
    assert DeltaStreamReader(options, schema).initialOffset() == first  # restarted: the stored start

    other = tmp_path / "other"
    _append(other, 0, 1)
    with pytest.raises(Exception, match="holds the initial offset of a query on .*/t, not .*/other"):
        DeltaStreamReader({**options, "path": str(other)}, schema).initialOffset()
    stored.write_text("{not json")
    with pytest.raises(Exception, match="is not a stored initial offset"):
        DeltaStreamReader(options, schema).initialOffset()


def _spark_replays_batch_0(options: dict[str, str], table: Path) -> list[int]:
    """What Spark does around a crash in batch 0, call by call (MicroBatchExecution, PythonMicroBatchStream):
    plan batch 0 from initialOffset() and log its end; commit 1 lands meanwhile; the query dies before batch 0
    is committed; commits 2 and 3 arrive; a new reader (the restart) replays batch 0 from a fresh
    initialOffset() to the logged end, then plans on. Returns every id delivered, in order."""
    schema = from_arrow_schema(NARROW)
    first = DeltaStreamReader(options, schema)
    start = first.initialOffset()
    _append(table, 0, 10)  # version 1: lands between initialOffset() and latestOffset() of the first trigger
    logged_end = first.latestOffset(start, ReadMaxFiles(1000))
    assert [f for p in first.partitions(start, logged_end) for f in p.files]  # batch 0 reads commit 1, then dies
    _append(table, 10, 10)  # versions 2 and 3: between the crash and the restart
    _append(table, 20, 10)
    restarted = DeltaStreamReader(options, schema)
    batches = [(restarted.initialOffset(), logged_end)]  # batch 0 replayed: Spark has no start offset for it
    batches.append((logged_end, restarted.latestOffset(logged_end, ReadMaxFiles(1000))))
    files = [f for begin, end in batches for p in restarted.partitions(begin, end) for f in p.files]
    return [i for ids in _file_ids(table, sorted(files, key=lambda f: f.version)) for i in ids]


@pytest.mark.parametrize("keep_initial", [False, True])
def test_latest_loses_the_rows_of_a_replayed_batch_0_unless_the_initial_offset_is_stored(tmp_path, keep_initial):
    """startingVersion=latest: batch 0 held commit 1 and crashed; commits 2 and 3 arrived before the restart.
    initialOffset() computed again starts past batch 0's logged end, so commit 1 is never delivered."""
    table = tmp_path / "t"
    _append(table, 1000, 10)  # version 0: before the query, never delivered
    options = {"path": str(table), "startingVersion": "latest"}
    if keep_initial:
        options["initialOffsetFile"] = str(initial_offset_file(tmp_path / "cp", "t"))
    delivered = _spark_replays_batch_0(options, table)
    if keep_initial:
        assert delivered == list(range(30))
    else:
        assert delivered == list(range(10, 30))  # commit 1 lost


@pytest.mark.parametrize("keep_initial", [False, True])
def test_a_crash_in_batch_0_on_an_empty_table_repeats_every_row_unless_the_initial_offset_is_stored(
        spark, tmp_path, keep_initial):
    """The windowed rules on a fresh lake: events_stream creates an empty ``events`` table, then tails it from
    earliest. The first batch (empty: Spark always runs batch 0) crashes; ingest commits 3 times; the query
    restarts. initialOffset() computed again names the snapshot of the table now, so the replayed batch 0
    reads every row, and batch 1 reads them again from the logged end. Stored in the checkpoint: each once."""
    table, checkpoint = tmp_path / "events", tmp_path / "cp"
    DeltaTable.create(str(table), NARROW)  # version 0: no files, as ensure_table leaves it
    options: dict = {"schema": from_arrow_schema(NARROW)}
    if keep_initial:
        options["initialOffsetFile"] = initial_offset_file(checkpoint, "events")
    delivered: dict[int, list[int]] = {}
    _record(_stream(spark, table, **options), checkpoint, delivered, crash=0)
    assert delivered == {}
    for i in range(3):  # versions 1-3: between the crash and the restart
        _append(table, i * 10, 10)
    _record(_stream(spark, table, **options), checkpoint, delivered)
    got = sorted(i for ids in delivered.values() for i in ids)
    if keep_initial:
        assert got == list(range(30)) and delivered[0] == []
        assert stat.S_IMODE((checkpoint / "nightjar_delta" / "events.initial.json").stat().st_mode) == 0o600
    else:
        assert got == sorted([*range(30), *range(30)])  # every row twice
