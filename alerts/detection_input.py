"""The events every rule sees: the ``events`` table's rows plus the event-time column windows and watermarks use.

Detections reason in the time the event happened (``@timestamp``): a brute force is twenty failures within five
minutes *of log time*, whether the logs arrive live or are replayed a month later by a backfill. So the
correlation windows and the watermark run on ``@timestamp`` itself (as :data:`ingest.arrow_parse.EVENT_TIME_COLUMN`),
not on the time the records were ingested.

One guard keeps a forged clock from breaking that: an event stamped more than :data:`MAX_CLOCK_SKEW` after it was
ingested (a host whose clock says 2099) is left out of detection — it would push the watermark ahead and make
Spark drop every honest event behind it. Such events stay in ``events`` for hunting.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from enrich.reference_data import reference_from_tables
from enrich.static_joins import enrich_static
from ingest.arrow_parse import ERROR_COLUMN, EVENT_TIME_COLUMN, events_of, parse_bronze
from ingest.events_contract import CORE_FIELDS, ENRICHMENT_FIELDS, arrow_schema

MAX_CLOCK_SKEW = "10 minutes"


EXCLUDED_METRIC = "excluded_future"  # observed metric: events kept out of detection (pipeline_progress)


def kept_for_detection() -> Column:
    """True for a parsed event that detection reads: it has a time, not later than its ingestion plus
    :data:`MAX_CLOCK_SKEW` (a future-dated event would hold a window's watermark and state open)."""
    ts, ingested = F.col("`@timestamp`"), F.col("event.ingested")
    return ts.isNotNull() & (ingested.isNull() | (ts <= ingested + F.expr(f"INTERVAL {MAX_CLOCK_SKEW}")))


def unusable_lines(parsed: DataFrame) -> DataFrame:
    """The records of ``parse_bronze``'s output that no rule will see — quarantined, or left out by
    :func:`detection_input` — as (partition, offset, problem): what ``nightjar rules test`` reports per sample line,
    so a sample that tests nothing (e.g. a negative one dated after the samples' ingestion time) is not a silent pass."""
    err, ts, ingested = F.col(ERROR_COLUMN), F.col("`@timestamp`"), F.col("event.ingested")
    problem = (F.when(err.isNotNull(), F.format_string("does not parse (%s: %s)", err["parser"], err["reason"]))
               .when(ts.isNull(), F.lit("has no time: detection leaves it out"))
               .otherwise(F.format_string("is dated %s, after its ingestion at %s: detection leaves future-dated "
                                          "events out", ts.cast("string"), ingested.cast("string"))))
    return parsed.where(err.isNotNull() | ~kept_for_detection()).select("partition", "offset", problem.alias("problem"))


def detection_input(events: DataFrame, observe_as: str | None = None) -> DataFrame:
    """``events`` (static or streaming) with :data:`EVENT_TIME_COLUMN` = ``@timestamp``; future-dated rows dropped.

    With ``observe_as``, the rows dropped are counted as the observed metric :data:`EXCLUDED_METRIC` under that
    name, so a streaming query reports them in its progress (and ``pipeline_progress``) instead of losing them
    silently."""
    sane = kept_for_detection()
    base = events.drop(EVENT_TIME_COLUMN) if EVENT_TIME_COLUMN in events.columns else events
    if observe_as is not None:
        base = base.observe(observe_as, F.count_if(~sane).alias(EXCLUDED_METRIC))
    return base.where(sane).withColumn(EVENT_TIME_COLUMN, F.col("`@timestamp`"))


def events_schema(spark: SparkSession) -> StructType:
    """The schema rules compile against: the ``events`` table's (parsed + enriched) plus :data:`EVENT_TIME_COLUMN`.

    Derived from the code that writes the table — an empty parse through the enrichment — so it cannot drift; with
    the narrow contract that plan analyses in milliseconds, so nothing is stored.
    """
    from ingest.file_source import lines_dataframe  # deferred: loads pyspark's data source API

    empty = events_of(parse_bronze(lines_dataframe(spark, [])))
    return detection_input(enrich_static(empty, reference_from_tables({}))).schema


def contract_schema() -> StructType:
    """The same schema as :func:`events_schema`, built from the events contract alone (no Spark session).

    Compiling a rule only needs the column paths and types, so ``nightjar rules check`` and other compile-only
    callers use this and start no JVM; a test checks that it agrees with :func:`events_schema` leaf by leaf."""
    columns = arrow_schema((*CORE_FIELDS, *ENRICHMENT_FIELDS))
    arrow = columns.append(pa.field(EVENT_TIME_COLUMN, pa.timestamp("us", tz="UTC")))
    return from_arrow_schema(arrow)
