"""The events every rule sees: the ``events`` table's rows plus the event-time column windows and watermarks use.

Detections reason in the time the event happened (``@timestamp``): a brute force is twenty failures within five
minutes *of log time*, whether the logs arrive live or are replayed a month later by a backfill. So the
correlation windows and the watermark run on ``@timestamp`` itself (as :data:`ingest.normalize.EVENT_TIME_COLUMN`),
not on the time the records were ingested.

One guard keeps a forged clock from breaking that: an event stamped more than :data:`MAX_CLOCK_SKEW` after it was
ingested (a host whose clock says 2099) is left out of detection — it would push the watermark ahead and make
Spark drop every honest event behind it. Such events stay in ``events`` for hunting.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from ingest.normalize import EVENT_TIME_COLUMN

log = logging.getLogger(__name__)

MAX_CLOCK_SKEW = "10 minutes"


EXCLUDED_METRIC = "excluded_future"  # observed metric: events kept out of detection (pipeline_progress)


def detection_input(events: DataFrame, observe_as: str | None = None) -> DataFrame:
    """``events`` (static or streaming) with :data:`EVENT_TIME_COLUMN` = ``@timestamp``; future-dated rows dropped.

    With ``observe_as``, the rows dropped are counted as the observed metric :data:`EXCLUDED_METRIC` under that
    name, so a streaming query reports them in its progress (and ``pipeline_progress``) instead of losing them
    silently."""
    ts = F.col("`@timestamp`")
    ingested = F.col("event.ingested")
    sane = ts.isNotNull() & (ingested.isNull() | (ts <= ingested + F.expr(f"INTERVAL {MAX_CLOCK_SKEW}")))
    base = events.drop(EVENT_TIME_COLUMN) if EVENT_TIME_COLUMN in events.columns else events
    if observe_as is not None:
        base = base.observe(observe_as, F.count_if(~sane).alias(EXCLUDED_METRIC))
    return base.where(sane).withColumn(EVENT_TIME_COLUMN, ts)


def events_schema(spark: SparkSession) -> StructType:
    """The schema rules compile against: the ``events`` table's (parsed + enriched), plus the event-time column.

    Derived from the code that writes the table (:func:`derive_events_schema`), so it cannot drift; kept per version
    of that code by :mod:`alerts.events_schema_store` (deriving it costs 25–40 s on a cold JVM, and every run, rule
    test and backtest needs it before its first batch), and once per Spark context in this process (a run asks for
    it from the rule set and again from the ML scoring query).
    """
    from pyspark import SparkContext

    from alerts import events_schema_store

    context = id(SparkContext._active_spark_context)
    if context not in _SCHEMAS:
        version = events_schema_store.fingerprint()
        stored = events_schema_store.load(version)
        if stored is None:
            started = time.monotonic()
            stored = derive_events_schema(spark).jsonValue()
            where = events_schema_store.save(version, stored)
            log.info("events schema derived from the parsers in %.1f s (code version %s; stored in %s)",
                     time.monotonic() - started, version, where or "nothing")
        _SCHEMAS[context] = stored
    return StructType.fromJson(_SCHEMAS[context])  # a fresh object: callers may not change the cached one


def derive_events_schema(spark: SparkSession) -> StructType:
    """The events schema as the code builds it: an empty parse through the enrichment and :func:`detection_input`."""
    from enrich.reference_data import reference_from_tables
    from enrich.static_joins import enrich_static
    from ingest.file_source import lines_dataframe
    from ingest.normalize import parse_records, to_events

    empty = to_events(parse_records(lines_dataframe(spark, [])))
    return detection_input(enrich_static(empty, reference_from_tables(spark, {}))).schema


_SCHEMAS: dict[int, dict] = {}  # Spark context id -> the events schema as JSON
