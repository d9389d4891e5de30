"""The exactly-once Delta sink: replay skipping, schema evolution, statistics, executor-side writes."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
from deltalake import DeltaTable

from core.lake import row_count, table_dataset
from ingest.delta_sink import committed_batch, file_stats, write_batch


def test_a_replayed_batch_writes_nothing(spark, lake):
    path = lake / "t"
    df = spark.range(0, 100).selectExpr("id", "cast(id * 2 as int) as twice")
    assert write_batch(df, path, "app", 0) == 100
    assert write_batch(spark.range(100, 150), path, "app", 1) == 50
    version = DeltaTable(str(path)).version()
    assert write_batch(df, path, "app", 1) == 0  # crash after the Delta commit, Spark replays batch 1
    assert write_batch(df, path, "app", 0) == 0
    assert DeltaTable(str(path)).version() == version
    assert row_count(lake, "t") == 150
    assert committed_batch(path, "app") == 1
    # Another query writing the same table has its own id and is not skipped.
    assert write_batch(spark.range(0, 7), path, "other-app", 0) == 7
    assert row_count(lake, "t") == 157


def test_schema_evolution_adds_top_level_and_nested_columns(spark, lake):
    path = lake / "evolving"
    write_batch(spark.sql("select 1 as a, named_struct('x', 10) as s"), path, "app", 0)
    write_batch(spark.sql("select 2 as a, named_struct('x', 20, 'y', 'new') as s, 'b!' as b"), path, "app", 1)
    table = table_dataset(lake, "evolving").to_table()
    assert set(table.column_names) == {"a", "s", "b"}
    rows = sorted(table.to_pylist(), key=lambda r: r["a"])
    assert rows == [{"a": 1, "s": {"x": 10, "y": None}, "b": None}, {"a": 2, "s": {"x": 20, "y": "new"}, "b": "b!"}]


def test_files_are_written_by_executors_with_delta_statistics(spark, lake):
    path = lake / "stats"
    df = spark.sql(
        "select id, timestamp_seconds(1800000000 + id) as ts, named_struct('n', id * 10) as nested "
        "from range(0, 1000)"
    ).repartition(4)
    write_batch(df, path, "app", 0)
    actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True)).to_pylist()
    assert len(actions) == 4  # one file per task: each executor task wrote its own rows
    assert sum(a["num_records"] for a in actions) == 1000
    assert min(a["min.id"] for a in actions) == 0 and max(a["max.id"] for a in actions) == 999
    assert max(a["max.nested.n"] for a in actions) == 9990


def test_file_stats_values():
    ts = [dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC), None]
    table = pa.table({"i": pa.array([3, None]), "t": pa.array(ts, pa.timestamp("us", tz="UTC")),
                      "s": pa.array(["x", "y"])})
    stats = file_stats(table)
    assert json.loads(json.dumps(stats)) == {
        "numRecords": 2,
        "minValues": {"i": 3, "t": "2026-01-02T03:04:05.678Z"},
        "maxValues": {"i": 3, "t": "2026-01-02T03:04:05.678Z"},
        "nullCount": {"i": 1, "t": 1, "s": 0},
    }


def test_partitioned_table(spark, lake):
    path = lake / "parted"
    df = spark.sql("select id, cast(id % 3 as string) as day from range(0, 30)")
    write_batch(df, path, "app", 0, partition_by=["day"])
    dt_ = DeltaTable(str(path))
    assert dt_.metadata().partition_columns == ["day"]
    got = table_dataset(lake, "parted").to_table().to_pylist()
    assert len(got) == 30 and all(int(r["day"]) == r["id"] % 3 for r in got)


def test_a_filter_pushed_into_the_scan_finds_rows_of_a_column_without_min_max(spark, lake):
    """The writer records min/max for numbers and times only; deltalake 1.6.6 made such a string column's file
    guarantee ``col >= null``, so a pushed-down ``ip = …`` found nothing. ``table_dataset`` must not prune on it."""
    import duckdb
    import pyarrow.compute as pc

    rows = [("s1", "10.20.0.21", 1), ("s2", "10.10.0.5", 2), ("s3", "10.20.0.21", 3)]
    write_batch(spark.createDataFrame(rows, "session_id string, ip string, n int"), lake / "leases", "app", 0)
    dataset = table_dataset(lake, "leases")
    assert dataset.to_table(filter=pc.field("ip") == "10.20.0.21").column("session_id").to_pylist() == ["s1", "s3"]
    con = duckdb.connect()
    con.register("leases", dataset)
    assert con.execute("SELECT count(*) FROM leases WHERE ip = $ip", {"ip": "10.20.0.21"}).fetchall() == [(2,)]
    assert con.execute("SELECT count(*) FROM leases WHERE n >= 2").fetchall() == [(2,)]
