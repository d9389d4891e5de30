"""``nightjar run``: the streaming pipeline, Kafka -> Delta, exactly once.

Queries (each with its own checkpoint under ``<lake>/_checkpoints/<name>``):

* ``bronze``: every raw Kafka record of both raw topics, as it arrived, plus ``ingested_at``.
* ``events``: the same records parsed and normalized to ECS (``ingest.normalize``), deduplicated within
  the watermark, enriched, into ``events``; what cannot be parsed goes to ``quarantine`` with the reason.
* ``detect``: the detection rules over the ``events`` table (``alerts/detection_stream.py``): alerts to
  ``nightjar.alerts`` and the ``alerts`` table; rule files re-read while running. With ``--available-now`` they
  run after the ingest queries have drained Kafka.

The two queries read Kafka independently: bronze never waits for parsing, and a parser change can be
re-run from Kafka or bronze without touching the raw copy.

Each query reads Kafka with the ``nightjar_kafka`` source and writes Delta with
:func:`ingest.delta_sink.write_batch`, so a restart after any crash re-reads exactly the offsets of the
unfinished micro-batch and a batch already committed to Delta is not written twice.

``--available-now`` drains what is in Kafka when the run starts and exits; otherwise the queries run
until SIGTERM / Ctrl-C, which stops them between micro-batches.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from core.config import (
    RAW_TOPICS,
    TABLE_BRONZE,
    TABLE_DHCP_SESSIONS,
    TABLE_EVENTS,
    TABLE_NETWORKS,
    TABLE_PIPELINE_PROGRESS,
    TABLE_QUARANTINE,
    Settings,
)
from core.errors import DataLossError, UserError, summarize_query_error

log = logging.getLogger(__name__)

QUERY_BRONZE = "bronze"
QUERY_EVENTS = "events"
QUERY_DETECT = "detect"  # the detection queries (alerts/detection_stream.py), started after the ingest queries


def to_bronze(records: DataFrame) -> DataFrame:
    """Kafka records -> bronze rows: the record untouched plus the time the pipeline ingested it."""
    return records.select("key", "value", "topic", "partition", "offset", "timestamp", "headers",
                          F.current_timestamp().alias("ingested_at"))


@dataclass(frozen=True)
class Trigger:
    """How often micro-batches run: ``available_now`` (drain and stop) or a processing-time interval."""

    available_now: bool = False
    interval: str = "1 second"

    def apply(self, writer):  # DataStreamWriter -> DataStreamWriter
        if self.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=self.interval)


_UNITS = {"ms": "milliseconds", "s": "seconds", "sec": "seconds", "m": "minutes", "min": "minutes"}


def parse_interval(text: str) -> str:
    """``1s`` / ``500ms`` / ``2 minutes`` -> Spark's interval spelling; UserError on anything else."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|milliseconds?|seconds?|minutes?)\s*", text)
    if not m:
        raise UserError(f"--trigger {text!r} is not an interval: use e.g. 500ms, 1s, 2 minutes", exit_code=2)
    value, unit = m.groups()
    unit = _UNITS.get(unit, unit if unit.endswith("s") else unit + "s")
    return f"{value} {unit}"


def start_bronze(spark: SparkSession, settings: Settings, trigger: Trigger) -> StreamingQuery:
    from ingest.delta_sink import write_batch
    from ingest.kafka_source import read_kafka

    path = settings.table_path(TABLE_BRONZE)
    app_id = f"nightjar.{QUERY_BRONZE}"

    def write(df: DataFrame, batch_id: int) -> None:
        write_batch(df, path, app_id, batch_id)

    writer = (
        to_bronze(read_kafka(spark, settings)).writeStream.queryName(QUERY_BRONZE)
        .foreachBatch(write)
        .option("checkpointLocation", str(settings.checkpoint(QUERY_BRONZE)))
    )
    return trigger.apply(writer).start()


def start_events(spark: SparkSession, settings: Settings, trigger: Trigger) -> StreamingQuery:
    """Raw records -> ECS ``events`` (parsed, deduplicated, attributed to DHCP lease holders, named by DNS,
    enriched with the reference tables), ``quarantine`` and ``dhcp_sessions``, all from the same micro-batch.

    Each table commits with its own app id and the batch id, so a crash between commits replays the batch and
    writes only the tables that missed it: count in = events + quarantine (+ events still waiting for their
    lease in the operator's state), always. Reference tables are re-read when their Delta version changes, so
    an indicator added to ``iocs`` is matched from the next micro-batch on.
    """
    from enrich.dhcp_sessions import (
        attribute_stream,
        dhcp_networks_from_lake,
        events_from,
        quarantine_from,
        sessions_from,
    )
    from ingest.delta_sink import write_batch
    from ingest.kafka_source import read_kafka
    from ingest.normalize import deduplicate, interval_seconds, parse_records

    events_path = settings.table_path(TABLE_EVENTS)
    quarantine_path = settings.table_path(TABLE_QUARANTINE)
    sessions_path = settings.table_path(TABLE_DHCP_SESSIONS)
    enrich = _static_enrichment(spark, settings)

    def write(df: DataFrame, batch_id: int) -> None:
        df.persist()  # read Kafka, parse and run the stateful operator once for the three tables
        try:
            write_batch(enrich(events_from(df)), events_path, f"nightjar.{QUERY_EVENTS}.{TABLE_EVENTS}", batch_id)
            write_batch(quarantine_from(df), quarantine_path, f"nightjar.{QUERY_EVENTS}.{TABLE_QUARANTINE}",
                        batch_id)
            write_batch(sessions_from(df), sessions_path, f"nightjar.{QUERY_EVENTS}.{TABLE_DHCP_SESSIONS}",
                        batch_id)
        finally:
            df.unpersist()

    parsed = deduplicate(parse_records(to_bronze(read_kafka(spark, settings))), settings.dedup_delay)
    unified = attribute_stream(parsed, dhcp_networks_from_lake(settings.table_path(TABLE_NETWORKS)),
                               watermark_delay_s=interval_seconds(settings.dedup_delay))
    writer = (
        unified.writeStream.queryName(QUERY_EVENTS)
        .foreachBatch(write)
        .option("checkpointLocation", str(settings.checkpoint(QUERY_EVENTS)))
    )
    return trigger.apply(writer).start()


def _static_enrichment(spark: SparkSession, settings: Settings) -> Callable[[DataFrame], DataFrame]:
    """The stream-static joins with the reference tables, current as of each micro-batch."""
    from enrich.reference_data import ReferenceCache
    from enrich.static_joins import enrich_static

    cache = ReferenceCache(spark, settings.lake)
    return lambda events: enrich_static(events, cache.current())


QUERIES: dict[str, Callable[[SparkSession, Settings, Trigger], StreamingQuery]] = {
    QUERY_BRONZE: start_bronze,
    QUERY_EVENTS: start_events,
}


def check_lake_writable(lake: Path) -> None:
    """Fail in one line, before Spark starts, if the lake cannot hold tables and checkpoints."""
    try:
        lake.mkdir(parents=True, exist_ok=True)
        probe = lake / f".write-test-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"lake directory {lake} is not writable ({exc.strerror}): pass --lake DIR") from exc


def run_pipeline(settings: Settings, trigger: Trigger, queries: list[str] | None = None,
                 stop_event: threading.Event | None = None) -> None:
    """Start the queries and wait until they finish (available-now), fail, or ``stop_event`` is set."""
    from core.spark_session import build_spark
    from ingest.embedded_broker import check_reachable, ensure_topics
    from nightjar.progress_recorder import ProgressRecorder

    check_lake_writable(settings.lake)
    check_reachable(settings)
    ensure_topics(settings, RAW_TOPICS)
    spark = build_spark(settings, app_name="nightjar-pipeline")
    recorder = ProgressRecorder(settings.table_path(TABLE_PIPELINE_PROGRESS))
    spark.streams.addListener(recorder)
    names = queries or list(QUERIES)
    stop_event = stop_event or threading.Event()
    started: list[StreamingQuery] = []
    supervisor = None
    try:
        for name in names:
            if name in QUERIES:
                started.append(QUERIES[name](spark, settings, trigger))
                log.info("started query %s (checkpoint %s)", name, settings.checkpoint(name))
        if QUERY_DETECT in names and not trigger.available_now:
            supervisor = _detection(spark, settings, trigger)
            started += supervisor.start()
        _wait(started, stop_event, supervisor)
        if (QUERY_DETECT in names and trigger.available_now and not stop_event.is_set()
                and not any(q.exception() is not None for q in started)):
            # available-now: detect over what the ingest queries wrote, once they are done
            supervisor = _detection(spark, settings, trigger)
            started += supervisor.start()
            _wait(started, stop_event, supervisor)
    finally:
        if supervisor is not None:
            started += [q for q in supervisor.queries() if q not in started]
        for q in started:
            if q.isActive:
                q.stop()
        if supervisor is not None:
            from alerts.alert_sink import close_producers

            close_producers()  # no micro-batch publishes any more
        if not recorder.wait_terminated([str(q.id) for q in started]):
            log.warning("the progress listener did not see every query end: progress may be incomplete")
        recorder.flush()
        spark.streams.removeListener(recorder)
    for q in started:
        if supervisor is not None and supervisor.is_rule_query(q):
            continue  # a failed rule was reported and skipped; it does not fail the pipeline
        _raise_if_failed(q)


def _detection(spark: SparkSession, settings: Settings, trigger: Trigger):
    from alerts.detection_stream import DetectionSupervisor
    from alerts.rule_loader import BUILTIN_RULES

    return DetectionSupervisor(spark, settings, list(settings.rules) or [BUILTIN_RULES], trigger)


def _wait(queries: list[StreamingQuery], stop_event: threading.Event | None, supervisor=None) -> None:
    """Until every query has ended, one has failed, or a stop is requested (polling: awaitTermination
    would raise the failure here, and it is reported once, by ``_raise_if_failed``). Meanwhile the detection
    supervisor re-reads changed rule files and reaps failed rule queries (a broken rule does not stop the rest)."""
    stop_event = stop_event or threading.Event()
    while True:
        rule_queries = supervisor.rule_queries() if supervisor is not None else []
        core = [q for q in queries if supervisor is None or not supervisor.is_rule_query(q)]
        if not any(q.isActive for q in core + rule_queries):
            return
        if any(not q.isActive and q.exception() is not None for q in core):
            return
        if stop_event.wait(0.5):
            log.info("stop requested: stopping %d queries", len(core) + len(rule_queries))
            return
        if supervisor is not None:
            supervisor.poll()


def _raise_if_failed(query: StreamingQuery) -> None:
    exc = query.exception()
    if exc is None:
        return
    summary = summarize_query_error(str(exc))
    if summary.startswith("data loss in Kafka"):
        raise DataLossError(summary)
    raise UserError(f"query {query.name} failed: {summary}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--available-now", action="store_true",
                        help="process what is in Kafka now, then exit")
    parser.add_argument("--trigger", default="1s", metavar="INTERVAL",
                        help="micro-batch interval when running continuously (default 1s)")
    parser.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                        help="cap on records per micro-batch over all partitions (default: no cap)")
    parser.add_argument("--no-fail-on-data-loss", action="store_true",
                        help="when checkpointed offsets are gone from Kafka, re-read from the earliest offset "
                             "and log a warning instead of failing")
    parser.add_argument("--query", action="append", choices=sorted([*QUERIES, QUERY_DETECT]), dest="queries",
                        help="run only this query (repeatable; default: all)")
    parser.add_argument("--rules", action="append", type=Path, metavar="PATH",
                        help="detection rule file or directory (repeatable; default: the built-in rule pack); "
                             "files are re-read while running")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger <= 0:
        raise UserError("--max-offsets-per-trigger must be a positive number", exit_code=2)
    trigger = Trigger(available_now=args.available_now, interval=parse_interval(args.trigger))
    for p in args.rules or []:
        if not p.exists():
            raise UserError(f"rules path {p} does not exist", exit_code=2)
    settings = settings.with_(
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        fail_on_data_loss=not args.no_fail_on_data_loss,
        rules=tuple(args.rules or ()),
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping after the current micro-batch", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("pipeline: bootstrap %s, lake %s, %s", settings.bootstrap_servers, settings.lake,
             "available-now" if trigger.available_now else f"trigger every {trigger.interval}")
    run_pipeline(settings, trigger, args.queries or [*QUERIES, QUERY_DETECT], stop)
    log.info("pipeline stopped")
    return 0
