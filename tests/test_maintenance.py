"""`nightjar maintain`: compaction keeps every row and the exactly-once bookkeeping of the writers."""

from __future__ import annotations

from deltalake import DeltaTable

from core.lake import row_count, table_dataset
from core.maintenance import maintain_table
from ingest.delta_sink import committed_batch, write_batch


def test_compaction_zorder_and_vacuum_keep_rows_and_app_transactions(spark, lake):
    path = lake / "bronze"
    for batch in range(6):
        write_batch(spark.range(batch * 100, batch * 100 + 100).selectExpr("id", "'t' as topic",
                                                                           "timestamp_seconds(id) as timestamp"),
                    path, "pipeline", batch)
    assert len(DeltaTable(str(path)).file_uris()) >= 6
    result = maintain_table(path, zorder=("topic", "timestamp"), retention_hours=0)
    assert result.zordered and result.files_after == 1 and result.files_before >= 6
    assert result.vacuumed == result.files_before  # the compacted-away files are gone from disk
    assert sorted(table_dataset(lake, "bronze").to_table()["id"].to_pylist()) == list(range(600))
    assert committed_batch(path, "pipeline") == 5
    assert write_batch(spark.range(0, 100), path, "pipeline", 5) == 0  # a replay is still skipped
    assert row_count(lake, "bronze") == 600
    assert list((path / "_delta_log").glob("*.checkpoint.parquet"))


def test_below_min_files_a_table_is_left_as_it_is_and_at_it_compacted(spark, lake):
    """The pipeline's upkeep compacts only once a table has `min_files` files: fewer are cheap to read and rewriting
    them every round would cost I/O for nothing."""
    path = lake / "events"
    for batch in range(3):
        write_batch(spark.range(batch * 10, batch * 10 + 10).coalesce(1), path, "pipeline", batch)  # one file each
    kept = maintain_table(path, retention_hours=168, min_files=4)
    assert (kept.files_before, kept.files_after) == (3, 3)
    write_batch(spark.range(30, 40).coalesce(1), path, "pipeline", 3)
    compacted = maintain_table(path, retention_hours=168, min_files=4)
    assert (compacted.files_before, compacted.files_after) == (4, 1)
    assert compacted.vacuumed == 0  # within the retention period nothing is deleted: readers of old versions keep working
    assert sorted(table_dataset(lake, "events").to_table()["id"].to_pylist()) == list(range(40))
