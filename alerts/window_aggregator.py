"""Every windowed rule in one stateful aggregation: keyed by (rule, group values, window), one pass over the events.

Why: a streaming query per correlation rule scans the ``events`` input once per rule, shuffles once per rule and
pays the micro-batch's fixed costs once per rule; on two cores fourteen of them could not keep up with 200
events/s (docs/performance.md). Here each event is read once; the rules it matches turn it into one row per
(rule, window) it falls in, and a single ``groupBy(rule, group, window)`` keeps a fixed set of generic
aggregates that every windowed rule type needs:

=========  =====================================================================================
``n``      events in the window (``event_count``)
``first``  / ``last``: earliest / latest ``@timestamp``
``ev``     the :data:`MAX_EVIDENCE` earliest ``(time, event.id)``: bounded top-k, not a list of all
``host``   / ``user``: the host / user of the earliest event that has one
``refs``   bitwise OR of which referenced rules matched (temporal correlations)
``vset``   distinct values (``value_count``)
``vsum``   / ``nx``: sum and count of numeric values (``value_sum``, ``value_avg``)
``items``  rule-defined JSON items (``temporal_ordered``, percentiles, Python rules needing the rows)
=========  =====================================================================================

A rule is a :class:`WindowedRule`: which events it reads (one predicate per referenced rule), its group-by values,
window length and slide, what it contributes to ``vset``/``vsum``/``items``, and ``finish``: a row-wise function
from the aggregated rows of that rule to candidates (:data:`alerts.alert_schema.CANDIDATE_SCHEMA`) — the
condition and the detail text. The state schema does not depend on the rules, so the rule set can change
between restarts of the query while every unchanged rule keeps its windows: the state key includes the rule's
digest (a changed rule starts afresh).

Windows are Spark's own sliding windows (start aligned to the epoch, ``window`` long, every ``slide``), computed
per rule; the window column carries the watermark metadata Spark's ``window()`` would give it, so Spark evicts a
window's state once the watermark passes its end, exactly as for ``groupBy(window(...))``. Batch input (backtests,
rule samples) runs the same functions without a watermark, so a rule fires in a backtest iff it fires live.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType

from alerts.alert_schema import ENTITY_TYPE, MAX_EVIDENCE, conform_candidates
from core.durations import parse_duration
from ingest.arrow_parse import EVENT_TIME_COLUMN

RULE, GROUP, WINDOW = "_rule", "_g", "_w"
WATERMARK_METADATA_KEY = "spark.watermarkDelayMs"  # how Spark marks an event-time column (and window()'s output)
_ROW_TYPE = ("struct<r: string, s: bigint, len: bigint, g: array<string>, b: int, v: string, x: double, "
             "item: string>")


@dataclass(frozen=True)
class WindowedRule:
    """One windowed rule as the shared aggregation runs it (see the module doc).

    ``matches``: one boolean column per referenced rule (bit ``i`` of ``refs``); an event is in the rule's input
    when any matches. ``group``: its group-by values (strings; an event with a null value is left out, as Sigma
    says). ``value`` feeds ``vset`` (string), ``amount`` feeds ``vsum``/``nx`` (double), ``item`` is collected
    into ``items`` (any column; stored as JSON). ``finish(aggregated)`` maps this rule's aggregated rows to
    candidates, row by row (it runs in streaming plans and in ``foreachBatch`` alike).
    """

    key: str                 # state key: rule id + digest, so a changed rule starts with empty windows
    rule_id: str
    window_us: int
    slide_us: int
    matches: tuple[Column, ...]
    group: tuple[Column, ...]
    finish: Callable[[DataFrame], DataFrame]
    value: Column | None = None
    amount: Column | None = None
    item: Column | None = None
    output_mode: str = "update"  # "append": emitted once per window, when the watermark passes its end

    @property
    def overlapping(self) -> int:
        return math.ceil(self.window_us / self.slide_us)


def _rows_of(rule: WindowedRule, t_us: Column) -> Column:
    """``array<_ROW_TYPE>``: one element per window of ``rule`` the event falls in (empty when it does not match)."""
    hits = [F.coalesce(m.cast("boolean"), F.lit(False)) for m in rule.matches]
    bits = F.lit(0)
    for i, h in enumerate(hits):
        bits = bits + F.when(h, F.lit(1 << i)).otherwise(F.lit(0))
    group = F.array(*[g.cast("string") for g in rule.group])
    wanted = bits > 0
    for g in rule.group:
        wanted = wanted & g.isNotNull()
    window, slide = F.lit(rule.window_us), F.lit(rule.slide_us)
    last = t_us - F.pmod(t_us, slide)  # the latest window start at or before the event (epoch-aligned)
    starts = F.sequence(last - F.lit((rule.overlapping - 1) * rule.slide_us), last, slide)
    starts = F.filter(starts, lambda s: s + window > t_us)
    value = rule.value.cast("string") if rule.value is not None else F.lit(None).cast("string")
    amount = rule.amount.cast("double") if rule.amount is not None else F.lit(None).cast("double")
    item = F.to_json(F.struct(rule.item.alias("v"))) if rule.item is not None else F.lit(None).cast("string")

    def element(s: Column) -> Column:
        return F.struct(F.lit(rule.key).alias("r"), s.alias("s"), window.alias("len"), group.alias("g"),
                        bits.alias("b"), value.alias("v"), amount.alias("x"), item.alias("item"))

    return F.when(wanted, F.transform(starts, element)).cast(f"array<{_ROW_TYPE}>")


def time_column(events: DataFrame) -> str:
    """The event-time column windows use: ``_event_time`` when present (streaming), else ``@timestamp``."""
    return EVENT_TIME_COLUMN if EVENT_TIME_COLUMN in events.columns else "@timestamp"


def explode_rules(events: DataFrame, rules: Sequence[WindowedRule]) -> DataFrame:
    """One row per (event, matching rule, window): the input of :func:`aggregate`."""
    time_col = time_column(events)
    t_us = F.unix_micros(F.col(f"`{time_col}`"))
    empty = F.array().cast(f"array<{_ROW_TYPE}>")
    rows = F.flatten(F.array(*[F.coalesce(_rows_of(r, t_us), empty) for r in rules]))
    ts = F.coalesce(F.col("`@timestamp`"), F.col(f"`{time_col}`"))
    delay = _watermark_delay_ms(events, time_col)
    e = F.col("_e")
    window = F.struct(F.timestamp_micros(e["s"]).alias("start"), F.timestamp_micros(e["s"] + e["len"]).alias("end"))
    # Spark's window() copies the time column's watermark metadata onto the window column; doing the same tells
    # the aggregation to evict a window once the watermark passes its end.
    window = window.alias(WINDOW, metadata={WATERMARK_METADATA_KEY: delay}) if delay is not None else window.alias(WINDOW)
    host = F.col("host.name") if "host" in events.columns else F.lit(None).cast("string")
    user = F.col("user.name") if "user" in events.columns else F.lit(None).cast("string")
    # Flat columns first, then the explode: a generator beside nested field accesses trips Spark's nested-column
    # pruning ("Could not find user#… in […]").
    flat = events.select(
        ts.alias("_ts"), F.col("event.id").cast("string").alias("_id"), host.cast("string").alias("_host"),
        user.cast("string").alias("_user"), rows.alias("_rows"))
    exploded = flat.select("_ts", "_id", "_host", "_user", F.explode("_rows").alias("_e"))
    return exploded.select(e["r"].alias(RULE), e["g"].alias(GROUP), window, "_ts", "_id", "_host", "_user",
                           e["b"].alias("_b"), e["v"].alias("_v"), e["x"].alias("_x"), e["item"].alias("_item"))


def _watermark_delay_ms(events: DataFrame, time_col: str) -> int | None:
    if not events.isStreaming:
        return None
    meta = events.schema[time_col].metadata
    if WATERMARK_METADATA_KEY not in meta:
        raise ValueError(f"a streaming input needs a watermark on {time_col!r} (withWatermark) so windows end")
    return int(meta[WATERMARK_METADATA_KEY])


def _order(*cols: str) -> str:
    return f"struct({', '.join(cols)})"


def aggregate(events: DataFrame, rules: Sequence[WindowedRule]) -> DataFrame:
    """The generic aggregates per (rule, group, window) — streaming (update or append mode) or batch."""
    grouped = explode_rules(events, rules).groupBy(RULE, GROUP, WINDOW)
    return grouped.agg(
        F.count(F.lit(1)).alias("n"),
        F.min("_ts").alias("first"),
        F.max("_ts").alias("last"),
        F.expr(f"min_by(named_struct('t', _ts, 'id', _id), {_order('_ts', '_id')}, {MAX_EVIDENCE}) "
               "FILTER (WHERE _id IS NOT NULL)").alias("ev"),
        F.expr(f"min_by(_host, {_order('_host IS NULL', '_ts', '_id')})").alias("host"),
        F.expr(f"min_by(_user, {_order('_user IS NULL', '_ts', '_id')})").alias("user"),
        F.bit_or("_b").alias("refs"),
        F.collect_set("_v").alias("vset"),
        F.try_sum("_x").alias("vsum"),  # null on overflow instead of failing the stream
        F.count("_x").alias("nx"),
        F.collect_list("_item").alias("items"),
    )


def finish(aggregated: DataFrame, rules: Sequence[WindowedRule]) -> DataFrame:
    """Candidates of every rule from the aggregated rows (each rule's ``finish`` on its own rows)."""
    parts = [r.finish(aggregated.where(F.col(RULE) == F.lit(r.key))) for r in rules]
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def run_windowed(events: DataFrame, rules: Sequence[WindowedRule]) -> DataFrame:
    """``events -> candidates`` for ``rules`` (batch, or streaming with one rule: finish is row-wise)."""
    return finish(aggregate(events, rules), rules)


# -- building blocks for finish functions ------------------------------------------------------------------------
def items_of(item_type: str) -> Column:
    """The ``items`` column parsed back into ``array<item_type>`` (nulls dropped)."""
    return F.filter(F.transform(F.col("items"), lambda s: F.from_json(s, f"struct<v: {item_type}>")["v"]),
                    lambda v: v.isNotNull())


def evidence() -> Column:
    """The aggregate's evidence ids, in (time, id) order."""
    return F.coalesce(F.transform(F.col("ev"), lambda x: x["id"]), F.array().cast(ArrayType(StringType())))


def candidates(aggregated: DataFrame, rule_id: str, entity_type: str, entity_index: int, *,
               condition: Column, detail: Column | None, evidence_ids: Column | None = None,
               host: Column | None = None, user: Column | None = None, first: Column | None = None,
               last: Column | None = None, count: Column | None = None) -> DataFrame:
    """Rows of ``aggregated`` satisfying ``condition`` as candidates (the common columns filled from the generic
    aggregates unless given)."""
    return candidates_from(aggregated, candidate_columns(
        rule_id, entity_type, entity_index, condition=condition, detail=detail, evidence_ids=evidence_ids, host=host,
        user=user, first=first, last=last, count=count))


def candidates_from(aggregated: DataFrame, columns: tuple[Column, list[Column]]) -> DataFrame:
    """:func:`candidates` from columns built before by :func:`candidate_columns` (e.g. once per rule and Spark
    context, :class:`core.spark_session.PerContext`: they do not depend on the batch)."""
    where, select = columns
    return conform_candidates(aggregated.where(where).select(*select))


def candidate_columns(rule_id: str, entity_type: str, entity_index: int, *, condition: Column,
                      detail: Column | None, evidence_ids: Column | None = None, host: Column | None = None,
                      user: Column | None = None, first: Column | None = None, last: Column | None = None,
                      count: Column | None = None) -> tuple[Column, list[Column]]:
    """The filter and the projection of :func:`candidates`: expressions only, no DataFrame."""
    w = F.col(WINDOW)
    return F.coalesce(condition, F.lit(False)), [
        F.lit(rule_id).alias("rule_id"),
        F.struct(F.lit(entity_type).alias("type"),
                 F.element_at(F.col(GROUP), entity_index + 1).alias("value")).cast(ENTITY_TYPE).alias("entity"),
        w["start"].alias("window_start"),
        w["end"].alias("window_end"),
        (first if first is not None else F.col("first")).alias("first_seen"),
        (last if last is not None else F.col("last")).alias("last_seen"),
        (count if count is not None else F.col("n")).cast("bigint").alias("event_count"),
        (evidence_ids if evidence_ids is not None else evidence()).alias("evidence"),
        (host if host is not None else F.col("host")).alias("host_name"),
        (user if user is not None else F.col("user")).alias("user_name"),
        F.nullif(detail, F.lit("")).alias("detail") if detail is not None else F.lit(None).cast("string").alias(
            "detail"),
    ]


def parse_span_us(text: str) -> int:
    """``"1 hour"`` / ``"30 minutes"`` / ``"1h"`` -> microseconds (see :func:`core.durations.parse_duration`)."""
    return int(round(parse_duration(text) * 1_000_000))


def build(key: str, rule_id: str, window: str, slide: str | None, **fields) -> WindowedRule:
    """A :class:`WindowedRule` from duration texts (``slide`` defaults to ``window``: tumbling)."""
    window_us = parse_span_us(window)
    slide_us = parse_span_us(slide) if slide else window_us
    if window_us <= 0 or slide_us <= 0 or slide_us > window_us:
        raise ValueError(f"rule {rule_id}: window {window!r} and slide {slide!r} must be positive, slide <= window")
    return WindowedRule(key=key, rule_id=rule_id, window_us=window_us, slide_us=slide_us, **fields)


