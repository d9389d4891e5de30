"""The nightjar_kafka streaming source against a real Tansu broker and a real Spark session."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from ingest.embedded_broker import ensure_topics
from ingest.kafka_source import KafkaBroker, KafkaOptions, KafkaPartitionRange, _cap, pack_ranges
from tests.kafka_records import produce


def _stream(spark, settings, topics, **options):
    reader = (spark.readStream.format("nightjar_kafka")
              .option("kafka.bootstrap.servers", settings.bootstrap_servers)
              .option("subscribe", ",".join(topics)))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _drain(spark, df, name, tmp_path):
    """Run ``df`` with availableNow into a memory table; return (rows, per-batch input counts)."""
    query = (df.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / f"cp-{name}"))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert not query.isActive, "availableNow query did not finish"
    assert query.exception() is None, query.exception()
    rows = spark.sql(f"select * from {name}").collect()
    batches = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    return rows, batches


def test_reads_every_record_of_every_partition_of_two_topics(spark, settings, tmp_path):
    t1, t2 = "src.a." + tmp_path.name[-8:], "src.b." + tmp_path.name[-8:]
    ensure_topics(settings, (t1, t2), partitions=4)
    sent = produce(settings.bootstrap_servers, t1, 1500, headers=True) | produce(settings.bootstrap_servers, t2, 700)
    rows, _ = _drain(spark, _stream(spark, settings, (t1, t2), startingOffsets="earliest"), "two_topics", tmp_path)
    assert len(rows) == 2200
    assert {r.value for r in rows} == sent
    assert len({(r.topic, r.partition, r.offset) for r in rows}) == 2200
    assert {r.partition for r in rows} == {0, 1, 2, 3}
    by_topic = {t: sorted(r.offset for r in rows if r.topic == t and r.partition == 0) for t in (t1, t2)}
    assert by_topic[t1] == list(range(375)) and by_topic[t2] == list(range(175))
    sample = next(r for r in rows if r.topic == t1)
    assert sample.headers[0].key == "seq" and sample.key == sample.headers[0].value
    assert all(r.headers is None for r in rows if r.topic == t2)
    assert all(r.timestamp is not None for r in rows)


def test_packed_tasks_read_every_record_once_with_one_consumer_per_task(spark, settings, tmp_path):
    """maxTasks packs the eight partitions' ranges into two tasks, cutting the long ones: nothing lost or doubled."""
    t1, t2 = "pk.a." + tmp_path.name[-8:], "pk.b." + tmp_path.name[-8:]
    ensure_topics(settings, (t1, t2), partitions=4)
    sent = produce(settings.bootstrap_servers, t1, 1500, headers=True) | produce(settings.bootstrap_servers, t2, 300)
    df = _stream(spark, settings, (t1, t2), startingOffsets="earliest", maxTasks=2, minTaskRows=100)
    rows, batches = _drain(spark, df, "packed", tmp_path)
    assert batches == [1800]
    assert len(rows) == 1800 and {r.value for r in rows} == sent
    assert len({(r.topic, r.partition, r.offset) for r in rows}) == 1800
    assert sorted(r.offset for r in rows if r.topic == t1 and r.partition == 2) == list(range(375))


def test_pack_ranges_balances_tasks_and_cuts_long_ranges():
    ranges = [KafkaPartitionRange("a", 0, 0, 900), KafkaPartitionRange("a", 1, 10, 110),
              KafkaPartitionRange("b", 0, 5, 5 + 200)]
    tasks = pack_ranges(ranges, max_tasks=2, min_task_rows=100)
    assert len(tasks) == 2
    loads = sorted(sum(r.rows for r in t.ranges) for t in tasks)
    assert loads == [600, 600]
    pieces = sorted((r.topic, r.partition, r.start, r.end) for t in tasks for r in t.ranges)
    # every offset of every range exactly once
    covered = {(t, p, o) for t, p, s, e in pieces for o in range(s, e)}
    assert len(covered) == sum(e - s for _t, _p, s, e in pieces) == 1200
    assert covered == {(r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)}
    # a small batch is one task; min_task_rows decides how many before max_tasks does
    assert len(pack_ranges(ranges, max_tasks=4, min_task_rows=5_000)) == 1
    assert len(pack_ranges(ranges, max_tasks=4, min_task_rows=500)) == 3
    assert pack_ranges([], max_tasks=2, min_task_rows=10) == []
    assert [t.value for t in pack_ranges(ranges, 2, 100)] == [t.value for t in pack_ranges(ranges[::-1], 2, 100)]


def test_max_offsets_per_trigger_splits_the_backlog_into_capped_batches(spark, settings, tmp_path, unique_topic):
    ensure_topics(settings, (unique_topic,), partitions=4)
    produce(settings.bootstrap_servers, unique_topic, 1000)
    df = _stream(spark, settings, (unique_topic,), startingOffsets="earliest", maxOffsetsPerTrigger=300)
    rows, batches = _drain(spark, df, "capped", tmp_path)
    assert len(rows) == 1000
    assert batches == [300, 300, 300, 100]


def test_starting_offsets_json_and_latest(spark, settings, tmp_path, unique_topic):
    ensure_topics(settings, (unique_topic,), partitions=4)
    produce(settings.bootstrap_servers, unique_topic, 400)  # 100 per partition
    spec = json.dumps({unique_topic: {"0": 90, "1": -2, "2": -1}})  # partition 3 absent: earliest
    rows, _ = _drain(spark, _stream(spark, settings, (unique_topic,), startingOffsets=spec), "json_start", tmp_path)
    per_partition = {p: sum(1 for r in rows if r.partition == p) for p in range(4)}
    assert per_partition == {0: 10, 1: 100, 2: 0, 3: 100}
    rows, _ = _drain(spark, _stream(spark, settings, (unique_topic,), startingOffsets="latest"), "latest", tmp_path)
    assert rows == []


def test_true_end_offset_is_found_when_the_broker_reports_a_batch_base(settings, unique_topic):
    """Tansu reports (base offset of the last batch + 1) as the end; the source must find the real end."""
    ensure_topics(settings, (unique_topic,), partitions=1)
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "linger.ms": 200})
    for i in range(250):
        producer.produce(unique_topic, value=str(i).encode(), partition=0)
    producer.flush(10)
    options = KafkaOptions.parse({"kafka.bootstrap.servers": settings.bootstrap_servers, "subscribe": unique_topic})
    broker = KafkaBroker(options)
    try:
        _, reported = broker.earliest_and_reported_end(unique_topic, 0)
        earliest, ends = broker.bounds({unique_topic: [0]})
        assert (earliest[unique_topic][0], ends[unique_topic][0]) == (0, 250)
        assert reported <= 250  # Tansu: far less than 250 when the records went out in one batch
        assert broker.bounds({unique_topic: [0]})[1][unique_topic][0] == 250  # cached answer agrees
    finally:
        broker.close()


def test_a_live_batch_reads_up_to_what_is_known_to_exist_when_the_end_is_not_found_in_time(settings, unique_topic):
    """A broker too slow to show a partition's end within pollTimeoutMs: a live micro-batch goes on with an end that
    exists (the next one reads the rest) instead of failing the query; a drain's fixed target still fails."""
    ensure_topics(settings, (unique_topic,), partitions=1)
    producer = Producer({"bootstrap.servers": settings.bootstrap_servers, "linger.ms": 200})
    for i in range(250):
        producer.produce(unique_topic, value=str(i).encode(), partition=0)
    producer.flush(10)
    slow = KafkaOptions.parse({"kafka.bootstrap.servers": settings.bootstrap_servers, "subscribe": unique_topic,
                               "pollTimeoutMs": "0"})  # no time at all to read up to the end
    broker = KafkaBroker(slow)
    try:
        _, reported = broker.earliest_and_reported_end(unique_topic, 0)
        with pytest.raises(RuntimeError, match="timed out finding the end offset"):
            broker.bounds({unique_topic: [0]})
        _, ends = broker.bounds({unique_topic: [0]}, exact=False)
        assert reported <= ends[unique_topic][0] <= 250 and broker.approximate == {(unique_topic, 0)}
        assert (unique_topic, 0) not in broker._true_end_cache  # a lower bound is never taken for the end later
    finally:
        broker.close()
    patient = KafkaBroker(KafkaOptions.parse({"kafka.bootstrap.servers": settings.bootstrap_servers,
                                              "subscribe": unique_topic}))
    try:
        assert patient.bounds({unique_topic: [0]}, exact=False)[1][unique_topic][0] == 250 and not patient.approximate
    finally:
        patient.close()


def test_cap_spreads_the_limit_in_proportion_to_backlog_and_reads_exactly_the_limit():
    begin = {"t": {0: 0, 1: 100, 2: 50}}
    ends = {"t": {0: 600, 1: 400, 2: 50}}
    capped = _cap(begin, ends, 300)
    taken = {p: capped["t"][p] - begin["t"][p] for p in begin["t"]}
    assert sum(taken.values()) == 300
    assert taken == {0: 200, 1: 100, 2: 0}
    assert _cap(begin, ends, 10_000) == ends


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"subscribe": "x"}, "kafka.bootstrap.servers is required"),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe is required"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "x", "maxOffsetsPerTrigger": "-5"}, "positive integer"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "x", "startingOffsets": "{bad"}, "startingOffsets must be"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "x", "failOnDataLoss": "maybe"}, "true or false"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "x", "maxTasks": "0"}, "maxTasks must be a positive"),
    ],
)
def test_bad_options_name_the_option(options, problem):
    with pytest.raises(ValueError, match=problem):
        KafkaOptions.parse(options)
