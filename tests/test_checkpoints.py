"""core/checkpoints.py: a first offset write cut short by a kill no longer keeps a stateful query from starting."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from core.checkpoints import batch_timestamp, clear_unplanned_first_batch


def _stateful_query(spark, source: Path, checkpoint: Path):
    counts = (spark.readStream.schema("k string").json(str(source)).groupBy("k").count())
    rows: list = []
    query = (counts.writeStream.outputMode("complete").trigger(availableNow=True)
             .option("checkpointLocation", str(checkpoint))
             .foreachBatch(lambda df, _id: rows.extend(df.collect())).start())
    return query, rows


def _leftover(checkpoint: Path) -> list[Path]:
    """What a SIGKILL between Spark's write of the first offsets and their rename leaves behind."""
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True)
    (checkpoint / "metadata").write_text(json.dumps({"id": "8d1345ee-4661-4067-94d1-a8f136890cf5"}) + "\n")
    tmp = offsets / ".0.8d1345ee-4661-4067-94d1-a8f136890cf5.tmp"
    tmp.write_text('v1\n{"batchWatermarkMs":0}\n')
    crc = offsets / "..0.8d1345ee-4661-4067-94d1-a8f136890cf5.tmp.crc"
    crc.write_bytes(b"crc")
    return [tmp, crc]


def test_a_killed_first_offset_write_is_cleared_and_the_stateful_query_starts(spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text('{"k": "x"}\n{"k": "x"}\n{"k": "y"}\n')

    stuck = tmp_path / "stuck"
    _leftover(stuck)
    query, _ = _stateful_query(spark, source, stuck)
    with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):  # the failure this repairs
        query.awaitTermination(120)

    checkpoint = tmp_path / "cp"
    leftovers = _leftover(checkpoint)
    assert sorted(clear_unplanned_first_batch(checkpoint)) == sorted(leftovers)
    query, rows = _stateful_query(spark, source, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted((r["k"], r["count"]) for r in rows) == [("x", 2), ("y", 1)]

    # with a committed batch nothing is touched, not even a temporary file of the next one
    assert (checkpoint / "offsets" / "0").exists()
    later = checkpoint / "offsets" / ".1.0000.tmp"
    later.write_text("partial")
    assert clear_unplanned_first_batch(checkpoint) == [] and later.exists()


@pytest.mark.parametrize("layout", ["none", "empty"])
def test_nothing_to_clear_without_offsets(tmp_path, layout):
    if layout == "empty":
        (tmp_path / "offsets").mkdir()
    assert clear_unplanned_first_batch(tmp_path) == []


def test_batch_timestamp_from_the_offset_log_is_the_batch_current_timestamp(spark, tmp_path):
    """The detector's detected_at comes from the offset log, not a Spark job: it must equal what the batch saw."""
    from pyspark.sql import functions as F

    source, checkpoint = tmp_path / "in", tmp_path / "cp"
    source.mkdir()
    seen: dict[int, object] = {}
    for n in range(2):
        (source / f"{n}.json").write_text(json.dumps({"k": str(n)}) + "\n")
        stream = spark.readStream.schema("k string").json(str(source)).withColumn("us", F.unix_micros(F.current_timestamp()))
        query = (stream.writeStream.trigger(availableNow=True).option("checkpointLocation", str(checkpoint))
                 .foreachBatch(lambda df, batch_id: seen.update({batch_id: df.collect()[0].us})).start())
        query.awaitTermination(120)
        assert query.exception() is None
    assert sorted(seen) == [0, 1]
    epoch = dt.datetime(1970, 1, 1)
    for batch_id, micros in seen.items():  # (micros: independent of the machine's time zone)
        assert batch_timestamp(checkpoint, batch_id) == epoch + dt.timedelta(microseconds=micros)
    assert seen[0] != seen[1]
    assert batch_timestamp(checkpoint, 7) is None  # no such batch: the caller falls back to a Spark job
