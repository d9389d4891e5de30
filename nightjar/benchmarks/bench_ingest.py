"""``nightjar bench ingest``: broker raw consume rate vs pipeline bronze ingest rate, in the same run.

1. Produce ``--events`` sample raw lines over two fresh topics of 4 partitions each.
2. Raw rate: one confluent-kafka consumer reads them all (the ceiling for one Python reader).
3. Pipeline rate: the bronze query (Kafka source -> Delta sink, availableNow) ingests them into a
   temporary lake. Reported steady (micro-batches after the first, which pays JVM and Python-worker
   warm-up) and end-to-end (query start to finish).

The ratio pipeline/raw is the figure to compare across machines: both are measured on the same broker,
the same data and the same (noisy, shared) machine, minutes apart.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar bench
# ingest`'s arguments, and --help or a bad argument must not wait for pyspark (nightjar/cli.py).
from core.config import Settings
from core.errors import UserError
from ingest.embedded_broker import EmbeddedBroker, ensure_topics
from ingest.sample_producer import sample_lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=500_000, help="records to produce and ingest (default 500000)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=100_000,
                        help="micro-batch size for the pipeline run (default 100000)")
    parser.add_argument("--keep-lake", action="store_true", help="keep the benchmark's lake directory")


def _produce(settings: Settings, topics: tuple[str, str], n: int) -> float:
    import datetime as dt
    import random

    from confluent_kafka import Producer
    from tqdm import tqdm

    lines = sample_lines(random.Random(7), dt.datetime.now(dt.UTC))
    producer = Producer(settings.kafka_config() | {"linger.ms": 20, "batch.num.messages": 10_000,
                                                   "queue.buffering.max.messages": 1_000_000})
    errors: list[str] = []
    started = time.monotonic()
    with tqdm(total=n, desc="produce", unit="ev", mininterval=1.0) as bar:
        for i in range(n):
            topic, key, value = next(lines)
            target = topics[0] if topic.endswith("syslog") else topics[1]
            while True:
                try:
                    producer.produce(target, value=value, key=key,
                                     on_delivery=lambda err, _m: err and errors.append(err.str()))
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 10_000 == 9_999:
                producer.poll(0)
                bar.update(10_000)
        producer.flush(60)
        bar.update(n - bar.n)
    if errors:
        raise UserError(f"{len(errors)} records were not delivered: {errors[0]}")
    return n / (time.monotonic() - started)


def _raw_consume(settings: Settings, topics: tuple[str, str], n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(settings.kafka_config() | {
        "group.id": f"bench-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "fetch.wait.max.ms": settings.kafka.fetch_wait_max_ms, "enable.partition.eof": False,
    })
    consumer.assign([TopicPartition(t, p, 0) for t in topics for p in range(settings.kafka.topic_partitions)])
    seen = 0
    started = time.monotonic()
    deadline = started + 600
    while seen < n and time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=10_000, timeout=1.0):
            if msg.error() is None:
                seen += 1
    elapsed = time.monotonic() - started
    consumer.close()
    if seen < n:
        raise UserError(f"raw consumer saw only {seen} of {n} records in 600 s")
    return n / elapsed


def _pipeline(settings: Settings, topics: tuple[str, str], n: int, lake: Path, max_per_trigger: int) -> tuple[float, float, int]:
    from core.lake import row_count
    from core.spark_session import build_spark
    from ingest.delta_sink import write_batch
    from ingest.kafka_source import read_kafka
    from nightjar.pipeline import to_bronze

    settings = settings.with_(lake=lake, max_offsets_per_trigger=max_per_trigger)
    spark = build_spark(settings, app_name="nightjar-bench-ingest")
    path = lake / "bronze"
    started = time.monotonic()
    query = (
        to_bronze(read_kafka(spark, settings, topics)).writeStream.queryName("bench_bronze")
        .foreachBatch(lambda df, batch_id: write_batch(df, path, "bench", batch_id))
        .option("checkpointLocation", str(lake / "_checkpoints" / "bench"))
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    elapsed = time.monotonic() - started
    progress = [p for p in query.recentProgress if p.numInputRows]
    rows = row_count(lake, "bronze")
    if rows != n:
        raise UserError(f"bronze holds {rows} rows, expected {n}")
    steady = progress[1:] or progress
    steady_rows = sum(p.numInputRows for p in steady)
    steady_ms = sum(p.durationMs.get("triggerExecution", 0) for p in steady)
    return steady_rows / (steady_ms / 1000), n / elapsed, len(progress)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.events <= 0 or args.max_offsets_per_trigger <= 0:
        raise UserError("--events and --max-offsets-per-trigger must be positive", exit_code=2)
    suffix = uuid.uuid4().hex[:6]
    topics = (f"bench.syslog.{suffix}", f"bench.zeek.{suffix}")
    broker = None
    if settings.bootstrap is None:
        broker = EmbeddedBroker().start()
        settings = settings.with_(bootstrap=broker.bootstrap)
    lake = Path(tempfile.mkdtemp(prefix="nightjar-bench-"))
    try:
        ensure_topics(settings, topics)
        produce_rate = _produce(settings, topics, args.events)
        print(f"produce:           {produce_rate:>10,.0f} events/s", flush=True)
        raw_rate = _raw_consume(settings, topics, args.events)
        print(f"raw consume:       {raw_rate:>10,.0f} events/s  (one confluent-kafka consumer)", flush=True)
        steady, overall, batches = _pipeline(settings, topics, args.events, lake, args.max_offsets_per_trigger)
        print(f"pipeline bronze:   {steady:>10,.0f} events/s  steady ({batches} micro-batches, first excluded)")
        print(f"pipeline bronze:   {overall:>10,.0f} events/s  end to end, incl. start-up")
        print(f"ratio pipeline/raw: {steady / raw_rate:.2f} steady, {overall / raw_rate:.2f} end to end")
    finally:
        if broker is not None:
            broker.stop()
        if not args.keep_lake:
            import shutil

            shutil.rmtree(lake, ignore_errors=True)
        else:
            print(f"lake kept at {lake}")
    return 0
