"""The two row shapes of detection: what a rule emits (a *candidate*) and what the SOC receives (an *alert*).

Every rule — a Sigma single-event rule, a Sigma correlation, a Python rule — is a function
``events DataFrame -> candidates DataFrame`` with :data:`CANDIDATE_SCHEMA`, in batch (backtest, rule tests) and
in streaming alike. The alert builder (suppression, ids, summaries) turns candidates into alert revisions with
:data:`ALERT_SCHEMA`: the columns of the ``alerts`` table and the fields of each JSON message on
``nightjar.alerts`` (the contract in docs/alerts.md, with ``revision``).

``alert_id`` is deterministic — the same rule, entity and window start give the same id — and is computed the
same way in Python (:func:`alert_id`) and in Spark SQL (:func:`alert_id_column`).
"""

from __future__ import annotations

import datetime as dt
import hashlib

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from core.spark_session import PerContext

SEVERITIES: tuple[str, ...] = ("low", "medium", "high", "critical")
ENTITY_TYPES: tuple[str, ...] = ("ip", "user", "host", "domain", "mac", "rule")  # "rule": health alerts
MAX_EVIDENCE = 20  # event ids carried by an alert (the contract's "up to 20")

ENTITY_TYPE = StructType([StructField("type", StringType()), StructField("value", StringType())])

# One row per (rule, entity, window) a rule fired for. In streaming update mode a window that keeps growing
# emits a new candidate row per micro-batch with the larger count; the alert builder merges them.
CANDIDATE_SCHEMA = StructType([
    StructField("rule_id", StringType(), False),
    StructField("entity", ENTITY_TYPE, False),
    StructField("window_start", TimestampType(), False),
    StructField("window_end", TimestampType(), False),
    StructField("first_seen", TimestampType(), False),
    StructField("last_seen", TimestampType(), False),
    StructField("event_count", LongType(), False),
    StructField("evidence", ArrayType(StringType()), False),  # event.id values, at most MAX_EVIDENCE
    StructField("host_name", StringType()),
    StructField("user_name", StringType()),
    StructField("detail", StringType()),  # rule-specific facts for the summary ("14 distinct users")
])

ALERT_SCHEMA = StructType([
    StructField("alert_id", StringType(), False),
    StructField("revision", IntegerType(), False),  # 1 when first raised, +1 per update of a growing window
    StructField("rule_id", StringType(), False),
    StructField("rule_name", StringType(), False),
    StructField("severity", StringType(), False),
    StructField("tags", ArrayType(StringType()), False),
    StructField("entity", ENTITY_TYPE, False),
    StructField("host_name", StringType()),
    StructField("user_name", StringType()),
    StructField("window_start", TimestampType(), False),
    StructField("window_end", TimestampType(), False),
    StructField("first_seen", TimestampType(), False),
    StructField("last_seen", TimestampType(), False),
    StructField("event_count", LongType(), False),
    StructField("evidence", ArrayType(StringType()), False),
    StructField("detected_at", TimestampType(), False),
    StructField("summary", StringType(), False),
])


def _micros(ts: dt.datetime) -> int:
    if ts.tzinfo is None:  # Spark hands back naive datetimes in the session zone, which is UTC
        ts = ts.replace(tzinfo=dt.UTC)
    delta = ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def alert_id(rule_id: str, entity_type: str, entity_value: str, window_start: dt.datetime) -> str:
    """Deterministic id of one alert: same rule + entity + window start ⇒ same id (32 hex digits)."""
    text = f"{rule_id}|{entity_type}|{entity_value}|{_micros(window_start)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def alert_id_column(rule_id: Column, entity_type: Column, entity_value: Column, window_start: Column) -> Column:
    """:func:`alert_id` as a Spark column expression (same digits)."""
    text = F.concat_ws("|", rule_id, entity_type, entity_value, F.unix_micros(window_start).cast("string"))
    return F.substring(F.sha2(text, 256), 1, 32)


def _conform_columns() -> list[Column]:
    """:func:`conform_candidates`' projection (the same for every frame: built once per Spark context)."""
    epoch = F.lit(dt.datetime(1970, 1, 1)).cast(TimestampType())
    fallback: dict[str, Column] = {
        "rule_id": F.lit(""),
        "entity": F.struct(F.lit("").alias("type"), F.lit("").alias("value")),
        "window_start": F.coalesce(F.col("first_seen"), epoch),
        "window_end": F.coalesce(F.col("last_seen"), epoch),
        "first_seen": F.coalesce(F.col("window_start"), epoch),
        "last_seen": F.coalesce(F.col("window_end"), epoch),
        "event_count": F.lit(0).cast("bigint"),
        "evidence": F.array().cast("array<string>"),
    }
    cols = []
    for f in CANDIDATE_SCHEMA.fields:
        col = F.col(f.name)
        if f.name == "evidence":
            col = F.slice(col, 1, MAX_EVIDENCE)
        col = col.cast(f.dataType)  # a cast also gives nested fields the schema's nullability (entity.*)
        if not f.nullable:
            col = F.coalesce(col, fallback[f.name].cast(f.dataType))
        else:  # the identity, but nullable: a literal or non-null expression must not make the column NOT NULL
            col = F.when(col.isNotNull(), col)
        cols.append(col.alias(f.name))
    return cols


_CONFORM_COLUMNS = PerContext(_conform_columns)


def conform_candidates(df: DataFrame) -> DataFrame:
    """``df`` with exactly :data:`CANDIDATE_SCHEMA` (names, order, types and nullability): its columns cast to
    their types, evidence cut to :data:`MAX_EVIDENCE`, non-nullable columns made non-nullable (a rule only emits
    rows where they are set; the fallbacks — window bounds for times, 0, empty — only tell Spark's type system
    so) and nullable ones nullable, so that ``df.to(CANDIDATE_SCHEMA)``, unions with other rules' candidates and
    the sinks' schema checks accept the frame."""
    missing = [f.name for f in CANDIDATE_SCHEMA.fields if f.name not in df.columns]
    if missing:
        raise ValueError(f"candidates lack column(s) {', '.join(missing)} (see alerts.alert_schema.CANDIDATE_SCHEMA)")
    return df.select(*_CONFORM_COLUMNS.get())
