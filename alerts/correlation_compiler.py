"""Sigma correlation rules -> windowed, watermarked Spark aggregations (batch and streaming alike).

A Sigma correlation rule (``event_count``, ``value_count``, ``value_sum``, ``temporal``, ``temporal_ordered``, …)
says "raise an alert when the events matching these base rules, grouped by these fields, satisfy this
condition within this timespan". :func:`compile_correlation` turns one such rule into a plain function
``events DataFrame -> candidates DataFrame`` with :data:`alerts.alert_schema.CANDIDATE_SCHEMA`, the shape every
Nightjar rule emits. The same function runs on a static DataFrame (rule tests, backtests over the ``events``
table) and on the streaming ``events`` DataFrame (``writeStream.outputMode("update")``), so a rule that fires
in a backtest fires live.

Why this shape (details and examples in docs/correlations.md):

* **Sliding event-time windows.** ``window(_event_time, T, T / slide_fraction)``: Spark's windowed aggregation is
  the one stateful operator whose state Spark evicts by itself once the watermark passes a window's end, so
  state is bounded by ``(T + watermark) / slide`` windows per group. With window length ``T`` and slide ``s``,
  any set of qualifying events whose ``_event_time`` lies within an interval of length ``T - s`` is inside one
  window and is detected; events spread over more than ``T - s`` (up to ``T``) may straddle every window and be
  missed; events spread over ``T`` or more never count together. Overlapping windows raise several
  candidates for one burst; the alert builder merges them (suppression) — they are expected.
* **Event time is ``_event_time``** (:data:`ingest.normalize.EVENT_TIME_COLUMN`), whatever the caller put there
  (``ingest.normalize`` clamps ``@timestamp`` near ingest time; ``alerts.detection_input`` uses ``@timestamp``
  minus future-dated events), so one host with a wrong clock cannot push the watermark ahead. A streaming input
  gets ``withWatermark(_event_time, watermark)`` unless ``_event_time`` is already watermarked upstream (Spark
  forbids redefining a watermark; the upstream one is kept). Events within the watermark are counted; events
  behind it are dropped — Spark filters input by the previous micro-batch's watermark, so in the one batch
  after the watermark moves such events may still form a window, which is emitted once and evicted at once.
  ``first_seen`` / ``last_seen`` and the order of ``temporal_ordered`` use ``@timestamp``, the time the log
  itself states. A static DataFrame without ``_event_time`` (the ``events`` Delta table does not store it) is
  windowed on ``@timestamp``.
* **Update mode.** The condition is a filter applied after the aggregation, which update mode allows: each
  micro-batch emits the windows that changed and now satisfy the condition, with their new totals. For the
  monotone conditions (``gt``/``gte`` on counts, distinct counts, sums of non-negative values, and the temporal
  types) a window that qualified keeps qualifying, so the last candidate per window equals the batch result.
  ``lt``/``lte``/``eq``/``neq`` and averages/percentiles are not monotone: run those in append mode (each
  window emitted once, final, when the watermark passes its end); :func:`update_mode_safe` tells which.
* **Only Spark SQL expressions**, no Python UDF: distinct counts are exact ``size(collect_set(...))``
  (``count(DISTINCT)`` is not allowed in streaming aggregations; ``approx_count_distinct`` could answer 9 for
  10 users at the threshold that matters), evidence is ``min_by(id, (time, id), 20)`` — a bounded top-k, not a
  list of every event.

The single-event predicates of the referenced base rules come in as Spark SQL strings (the Sigma -> SQL
compiler, ``alerts/sigma_compiler.py``, writes them); this module never interprets Sigma detections itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DecimalType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)
from sigma.correlations import (
    CorrelationConditionAND,
    CorrelationConditionItem,
    CorrelationConditionNOT,
    CorrelationConditionOR,
    SigmaCorrelationCondition,
    SigmaCorrelationConditionOperator,
    SigmaCorrelationRule,
    SigmaCorrelationType,
    SigmaExtendedCorrelationCondition,
    SigmaRuleReference,
)

from alerts.alert_schema import ENTITY_TYPE, ENTITY_TYPES, MAX_EVIDENCE
from ingest.normalize import EVENT_TIME_COLUMN

__all__ = [
    "CorrelationCompileError",
    "SUPPORTED_TYPES",
    "compile_correlation",
    "correlation_watermark_column",
    "describe",
    "rule_id_of",
    "update_mode_safe",
    "window_durations",
]

T = SigmaCorrelationType
SUPPORTED_TYPES: tuple[SigmaCorrelationType, ...] = (
    T.EVENT_COUNT, T.VALUE_COUNT, T.VALUE_SUM, T.VALUE_AVG, T.VALUE_PERCENTILE, T.VALUE_MEDIAN,
    T.TEMPORAL, T.TEMPORAL_ORDERED,
)
_VALUE_TYPES = (T.VALUE_COUNT, T.VALUE_SUM, T.VALUE_AVG, T.VALUE_PERCENTILE, T.VALUE_MEDIAN)
_TEMPORAL_TYPES = (T.TEMPORAL, T.TEMPORAL_ORDERED)

_OPS: dict[SigmaCorrelationConditionOperator, tuple[str, Callable[[Column, Column], Column]]] = {
    SigmaCorrelationConditionOperator.LT: ("<", lambda a, b: a < b),
    SigmaCorrelationConditionOperator.LTE: ("<=", lambda a, b: a <= b),
    SigmaCorrelationConditionOperator.GT: (">", lambda a, b: a > b),
    SigmaCorrelationConditionOperator.GTE: (">=", lambda a, b: a >= b),
    SigmaCorrelationConditionOperator.EQ: ("=", lambda a, b: a == b),
    SigmaCorrelationConditionOperator.NEQ: ("!=", lambda a, b: a != b),
}
_MONOTONE_OPS = (SigmaCorrelationConditionOperator.GT, SigmaCorrelationConditionOperator.GTE)

WATERMARK_METADATA_KEY = "spark.watermarkDelayMs"  # Spark marks a watermarked column with this metadata
TIMESTAMP_FIELD = "@timestamp"
EVENT_ID_FIELD = "event.id"
HOST_FIELD = "host.name"
USER_FIELD = "user.name"
# Only there to prove non-nullness to Spark's analyzer (CANDIDATE_SCHEMA has NOT NULL columns): an aggregate
# over at least one row never yields null for these, so the fallback is never used.
_EPOCH = dt.datetime(1970, 1, 1)


class CorrelationCompileError(ValueError):
    """A correlation rule that cannot be compiled (or applied to the given events); the message names the rule."""


def correlation_watermark_column() -> str:
    """The event-time column correlations window and watermark on (``_event_time``)."""
    return EVENT_TIME_COLUMN


def rule_id_of(corr: SigmaCorrelationRule) -> str:
    """The ``rule_id`` of a correlation's candidates: its ``name`` if set, else its ``id``."""
    if corr.name:
        return corr.name
    if corr.id is not None:
        return str(corr.id)
    raise CorrelationCompileError(f"correlation rule {corr.title!r}: has neither a name nor an id")


def _label(corr: SigmaCorrelationRule) -> str:
    return corr.name or (str(corr.id) if corr.id else None) or repr(corr.title)


def _references(corr: SigmaCorrelationRule) -> list[SigmaRuleReference]:
    """The referenced base rules, in the rule's order (the order ``temporal_ordered`` checks)."""
    if corr.referenced_rules:  # filled by SigmaCollection.resolve_rule_references()
        return list(corr.referenced_rules)
    if corr.rules:
        return list(corr.rules)
    if isinstance(corr.condition, SigmaExtendedCorrelationCondition):
        return [SigmaRuleReference(r) for r in corr.condition.get_referenced_rules()]
    return []


def window_durations(corr: SigmaCorrelationRule, slide_fraction: int = 5) -> tuple[str, str]:
    """Spark window and slide durations for ``corr``: (timespan, timespan / slide_fraction)."""
    if not isinstance(slide_fraction, int) or slide_fraction < 1:
        raise CorrelationCompileError(
            f"correlation rule {_label(corr)}: slide_fraction must be a positive integer, not {slide_fraction!r}")
    window_us = corr.timespan.seconds * 1_000_000
    slide_us = window_us // slide_fraction
    if slide_us < 1:
        raise CorrelationCompileError(f"correlation rule {_label(corr)}: slide_fraction {slide_fraction} is "
                                      f"too large for timespan {corr.timespan.spec}")
    return _duration(window_us), _duration(slide_us)


def _duration(us: int) -> str:
    return f"{us // 1_000_000} seconds" if us % 1_000_000 == 0 else f"{us} microseconds"


def update_mode_safe(corr: SigmaCorrelationRule) -> bool:
    """True when a window that satisfies ``corr``'s condition keeps satisfying it as events are added.

    Then the last candidate ``outputMode("update")`` emits for a window equals the batch result. Otherwise
    (``lt``/``lte``/``eq``/``neq``, averages, percentiles) an early candidate may not hold for the final window:
    run the rule in append mode, where each window is emitted once, final. ``value_sum`` counts as monotone:
    the sums rules watch (bytes, packets, counts) are never negative.
    """
    if corr.type in _TEMPORAL_TYPES:
        return True  # extended conditions with `not` are rejected at compile time
    if corr.type in (T.VALUE_AVG, T.VALUE_PERCENTILE, T.VALUE_MEDIAN):
        return False
    cond = corr.condition
    return isinstance(cond, SigmaCorrelationCondition) and cond.op in _MONOTONE_OPS


def _condition_text(corr: SigmaCorrelationRule) -> str:
    cond = corr.condition
    if isinstance(cond, SigmaExtendedCorrelationCondition):
        return cond.expression
    op = _OPS[cond.op][0]
    if corr.type == T.EVENT_COUNT:
        subject = "count"
    elif corr.type in _TEMPORAL_TYPES:
        subject = "rules matched"
    elif corr.type == T.VALUE_PERCENTILE:
        subject = f"p{cond.percentile}({cond.fieldref})"
    else:
        subject = f"{corr.type.name.lower().replace('value_', '')}({cond.fieldref})"
    return f"{subject} {op} {cond.count}"


def describe(corr: SigmaCorrelationRule) -> str:
    """One line for logs: ``ssh_bruteforce: event_count of [ssh_failed] by source.ip within 5m: count >= 20``."""
    joiner = " then " if corr.type == T.TEMPORAL_ORDERED else ", "
    refs = joiner.join(r.reference for r in _references(corr))
    by = ", ".join(corr.group_by or []) or "(nothing)"
    try:
        rid = rule_id_of(corr)
    except CorrelationCompileError:
        rid = repr(corr.title)
    return (f"{rid}: {corr.type.name.lower()} of [{refs}] by {by} within {corr.timespan.spec}: "
            f"{_condition_text(corr)}")


# --------------------------------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class _Plan:
    """Everything compile-time checks established; applying it needs only the events DataFrame."""

    rule_id: str
    label: str
    type: SigmaCorrelationType
    names: tuple[str, ...]  # referenced rules, in order
    predicates: tuple[str, ...]
    group_by: tuple[str, ...]  # field names as written in the rule (aliases included)
    group_fields: tuple[tuple[str, ...], ...]  # per group-by entry: the event field per referenced rule
    entity_type: str
    entity_index: int
    window: str
    slide: str
    watermark: str
    op: SigmaCorrelationConditionOperator | None
    threshold: float | int | None
    extended: CorrelationConditionItem | SigmaRuleReference | None
    value_field: str | None
    percentile: int | None

    def fail(self, problem: str) -> CorrelationCompileError:
        return CorrelationCompileError(f"correlation rule {self.label}: {problem}")


def _predicate_for(ref: SigmaRuleReference, base_predicates: Mapping[str, str], label: str) -> str:
    rule = getattr(ref, "rule", None)  # set only once the collection resolved the references
    if isinstance(rule, SigmaCorrelationRule):
        raise CorrelationCompileError(f"correlation rule {label}: references correlation rule "
                                      f"{ref.reference!r}; chained correlations are not supported")
    keys = [ref.reference]
    if rule is not None:
        keys += [k for k in (rule.name, str(rule.id) if rule.id else None) if k]
    for key in keys:
        predicate = base_predicates.get(key)
        if predicate is not None:
            if not predicate.strip():
                raise CorrelationCompileError(
                    f"correlation rule {label}: the predicate of referenced rule {ref.reference!r} is empty")
            return predicate
    raise CorrelationCompileError(f"correlation rule {label}: unknown referenced rule {ref.reference!r} "
                                  f"(no predicate given for {' / '.join(keys)})")


def _group_fields(corr: SigmaCorrelationRule, refs: Sequence[SigmaRuleReference],
                  label: str) -> tuple[tuple[str, ...], ...]:
    """Per group-by entry, the event field to read for each referenced rule (Sigma ``aliases``)."""
    out = []
    for name in corr.group_by or []:
        alias = corr.aliases.aliases.get(name) if corr.aliases else None
        if alias is None:
            out.append(tuple(name for _ in refs))
            continue
        mapping = {r.reference: f for r, f in alias.mapping.items()}
        missing = [r.reference for r in refs if r.reference not in mapping]
        if missing:
            raise CorrelationCompileError(f"correlation rule {label}: alias {name!r} has no field for "
                                          f"referenced rule(s) {', '.join(missing)}")
        out.append(tuple(mapping[r.reference] for r in refs))
    return tuple(out)


def _check_extended(node: CorrelationConditionItem | SigmaRuleReference, label: str) -> None:
    if isinstance(node, CorrelationConditionNOT):
        # "A and not B" would fire on a half-seen window in update mode, before B arrives.
        raise CorrelationCompileError(f"correlation rule {label}: 'not' in a temporal condition is not "
                                      "supported (a streaming window cannot prove an event's absence)")
    if isinstance(node, CorrelationConditionItem):
        for arg in node.args:
            _check_extended(arg, label)


def _plan(corr: SigmaCorrelationRule, base_predicates: Mapping[str, str], entity_type: str,
          entity_field: str | None, watermark: str, slide_fraction: int) -> _Plan:
    label = _label(corr)

    def fail(problem: str) -> CorrelationCompileError:
        return CorrelationCompileError(f"correlation rule {label}: {problem}")

    if not isinstance(corr, SigmaCorrelationRule):
        raise CorrelationCompileError(f"not a Sigma correlation rule: {corr!r}")
    if corr.type not in SUPPORTED_TYPES:
        raise fail(f"unsupported correlation type {corr.type.name.lower()!r} "
                   f"(supported: {', '.join(t.name.lower() for t in SUPPORTED_TYPES)})")
    rule_id = rule_id_of(corr)
    refs = _references(corr)
    if not refs:
        raise fail("references no rules")
    predicates = tuple(_predicate_for(r, base_predicates, label) for r in refs)
    names = tuple(r.reference for r in refs)
    if not corr.group_by:
        raise fail("has no group-by: a candidate needs an entity (group-by field) to be about")
    group_by = tuple(corr.group_by)
    if entity_field is None:
        entity_field = group_by[0]
    if entity_field not in group_by:
        raise fail(f"entity field {entity_field!r} is not one of its group-by fields ({', '.join(group_by)})")
    if entity_type not in ENTITY_TYPES:
        raise fail(f"entity type {entity_type!r} is not one of {', '.join(ENTITY_TYPES)}")
    if not isinstance(watermark, str) or not watermark.strip():
        raise fail(f"watermark must be a delay like '10 minutes', not {watermark!r}")
    window, slide = window_durations(corr, slide_fraction)

    cond = corr.condition
    op = threshold = extended = value_field = percentile = None
    if isinstance(cond, SigmaExtendedCorrelationCondition):
        if corr.type == T.TEMPORAL_ORDERED:
            raise fail("temporal_ordered takes its order from the rules list; "
                       "an expression condition is not supported")
        _check_extended(cond.parsed, label)
        extended = cond.parsed
    else:
        op, threshold = cond.op, cond.count
        if corr.type == T.TEMPORAL_ORDERED and not (op == SigmaCorrelationConditionOperator.GTE
                                                    and threshold == len(refs)):
            raise fail(f"temporal_ordered needs all {len(refs)} rules in order "
                       f"(condition gte: {len(refs)}), not {_OPS[op][0]} {threshold}")
        if corr.type in _VALUE_TYPES:
            value_field = cond.fieldref
            if isinstance(value_field, list):
                if len(value_field) != 1:
                    raise fail(f"condition field must be one field, not {value_field!r}")
                value_field = value_field[0]
            if not value_field:
                raise fail(f"{corr.type.name.lower()} needs a condition field")
        if corr.type == T.VALUE_PERCENTILE:
            percentile = cond.percentile
            if percentile is None or not 0 <= percentile <= 100:
                raise fail(f"value_percentile needs a percentile between 0 and 100, not {percentile!r}")
    return _Plan(rule_id=rule_id, label=label, type=corr.type, names=names, predicates=predicates,
                 group_by=group_by, group_fields=_group_fields(corr, refs, label), entity_type=entity_type,
                 entity_index=group_by.index(entity_field), window=window, slide=slide,
                 watermark=watermark.strip(), op=op, threshold=threshold, extended=extended,
                 value_field=value_field, percentile=percentile)


# ------------------------------------------------------------------------------------------------ compile


def compile_correlation(
    corr: SigmaCorrelationRule,
    base_predicates: Mapping[str, str],
    entity_type: str,
    entity_field: str | None = None,
    watermark: str = "10 minutes",
    slide_fraction: int = 5,
) -> Callable[[DataFrame], DataFrame]:
    """Compile ``corr`` into ``events -> candidates`` (:data:`CANDIDATE_SCHEMA`), for static and streaming input.

    ``base_predicates`` maps each referenced rule's name (or id as a string) to its Spark SQL predicate.
    ``entity_type`` is the candidates' ``entity.type``; ``entity_field`` the group-by field whose value is
    ``entity.value`` (default: the first group-by field). Windows are ``corr.timespan`` long and slide by
    ``timespan / slide_fraction`` (1 = tumbling); a streaming input is watermarked by ``watermark`` on
    ``_event_time``. Raises :class:`CorrelationCompileError` for an unsupported type or condition, a missing
    group-by or condition field, or an unknown referenced rule; applying the result raises it too when the
    events lack a field the rule reads or a predicate does not resolve against them.
    """
    plan = _plan(corr, base_predicates, entity_type, entity_field, watermark, slide_fraction)

    def correlate(events: DataFrame) -> DataFrame:
        return _apply(plan, events)

    correlate.__name__ = f"correlate_{plan.rule_id}"
    correlate.__doc__ = describe(corr)
    return correlate


# -------------------------------------------------------------------------------------------------- apply


def _field_path(schema: StructType, columns: Sequence[str], path: str) -> tuple[str, DataType] | None:
    """Quoted column path and type of ECS field ``path`` (``source.ip`` -> `source`.`ip`), or None if absent.

    A flat column literally named ``path`` wins; otherwise the dots walk nested structs, trying the longest
    field name first at each level so a field name that itself contains a dot still resolves.
    """
    if path in columns:
        return f"`{path}`", schema[path].dataType
    parts = path.split(".")

    def walk(struct: StructType, i: int) -> tuple[list[str], DataType] | None:
        for j in range(len(parts), i, -1):
            name = ".".join(parts[i:j])
            if name in struct.fieldNames():
                dtype = struct[name].dataType
                if j == len(parts):
                    return [name], dtype
                if isinstance(dtype, StructType):
                    rest = walk(dtype, j)
                    if rest is not None:
                        return [name, *rest[0]], rest[1]
        return None

    found = walk(schema, 0)
    if found is None:
        return None
    return ".".join(f"`{p.replace('`', '``')}`" for p in found[0]), found[1]


def _number_text(col: Column, integral: bool) -> Column:
    if integral:
        return col.cast("string")
    # 3 decimals, no thousands separators, trailing zeros dropped: 1234.5, 512000000, 0.25
    return F.regexp_replace(F.regexp_replace(F.format_number(col, 3), ",", ""), r"\.?0+$", "")


def _apply(plan: _Plan, events: DataFrame) -> DataFrame:
    schema, columns = events.schema, events.columns
    streaming = events.isStreaming

    def field(path: str) -> tuple[str, DataType]:
        found = _field_path(schema, columns, path)
        if found is None:
            raise plan.fail(f"field {path!r} is not a column of the events")
        return found

    def optional(path: str) -> Column:
        found = _field_path(schema, columns, path)
        return F.col(found[0]).cast("string") if found else F.lit(None).cast("string")

    ts_path = field(TIMESTAMP_FIELD)[0]
    id_path = field(EVENT_ID_FIELD)[0]
    if EVENT_TIME_COLUMN in columns:
        time_col = EVENT_TIME_COLUMN
    elif streaming:
        raise plan.fail(f"a streaming input needs the event-time column {EVENT_TIME_COLUMN!r} to watermark on")
    else:
        time_col = TIMESTAMP_FIELD  # the events table does not store _event_time: backtests use @timestamp
    group_paths = [[field(f)[0] for f in fields] for fields in plan.group_fields]
    value_path, value_type = field(plan.value_field) if plan.value_field else (None, None)

    # Spark refuses to redefine a watermark ("Redefining watermark is disallowed"): an input whose _event_time is
    # already watermarked upstream keeps that watermark.
    rewatermark = streaming and WATERMARK_METADATA_KEY not in schema[EVENT_TIME_COLUMN].metadata
    df = events.withWatermark(EVENT_TIME_COLUMN, plan.watermark) if rewatermark else events
    n = len(plan.names)
    value = []
    if value_path is not None:
        if plan.type == T.VALUE_COUNT:
            value = [F.col(value_path).cast("string").alias("_v")]
        elif isinstance(value_type, ByteType | ShortType | IntegerType | LongType):
            value = [F.col(value_path).cast("bigint").alias("_v")]
        elif isinstance(value_type, DecimalType) and plan.type == T.VALUE_SUM:
            value = [F.col(value_path).alias("_v")]
        else:
            value = [F.expr(f"try_cast({value_path} AS double)").alias("_v")]
    try:
        matches = [F.coalesce(F.expr(f"({p})").cast("boolean"), F.lit(False)).alias(f"_m{i}")
                   for i, p in enumerate(plan.predicates)]
        # Prune to the few columns the aggregation needs before window() copies each row slide_fraction times.
        matched = df.select(
            F.col(f"`{time_col}`"),  # as is: it carries the watermark
            F.coalesce(F.col(ts_path), F.col(f"`{time_col}`")).alias("_ts"),
            F.col(id_path).cast("string").alias("_id"),
            optional(HOST_FIELD).alias("_host"),
            optional(USER_FIELD).alias("_user"),
            *matches,
            *value,
            *[F.col(p).cast("string").alias(f"_f{g}_{i}")
              for g, paths in enumerate(group_paths) for i, p in enumerate(paths)],
        )
    except AnalysisException as e:  # a predicate names a field the events lack, or is not valid SQL
        raise plan.fail(f"a base-rule predicate does not apply to the events: {e}") from e

    hit = [F.col(f"_m{i}") for i in range(n)]
    keys = []
    for g in range(len(group_paths)):
        if len(set(plan.group_fields[g])) == 1:
            keys.append(F.col(f"_f{g}_0").alias(f"_g{g}"))
        else:  # an alias: read the field of the first referenced rule the event matches
            expr = F.when(hit[0], F.col(f"_f{g}_0"))
            for i in range(1, n):
                expr = expr.when(hit[i], F.col(f"_f{g}_{i}"))
            keys.append(expr.alias(f"_g{g}"))
    keyed = matched.select(F.col(f"`{time_col}`"), "_ts", "_id", "_host", "_user", *hit,
                           *([F.col("_v")] if value else []), *keys)
    any_hit = hit[0]
    for h in hit[1:]:
        any_hit = any_hit | h
    wanted = any_hit
    for g in range(len(group_paths)):
        wanted = wanted & F.col(f"_g{g}").isNotNull()  # Sigma: events without the group-by value are ignored
    keyed = keyed.where(wanted)

    grouped = keyed.groupBy(F.window(F.col(f"`{time_col}`"), plan.window, plan.slide).alias("_w"),
                            *[F.col(f"_g{g}") for g in range(len(group_paths))])
    aggregated = grouped.agg(*_aggregates(plan)).where(_condition(plan))
    return aggregated.select(*_candidate_columns(plan, value_type))


def _order(*cols: str) -> str:
    return f"struct({', '.join(cols)})"


def _aggregates(plan: _Plan) -> list[Column]:
    n = len(plan.names)
    # The earliest events' ids in (time, id) order: a bounded top-k, so state does not grow with the burst.
    aggs = [
        F.count(F.lit(1)).alias("_n"),
        F.min("_ts").alias("_first"),
        F.max("_ts").alias("_last"),
        F.expr(f"min_by(named_struct('t', _ts, 'id', _id), {_order('_ts', '_id')}, {MAX_EVIDENCE}) "
               "FILTER (WHERE _id IS NOT NULL)").alias("_ev"),
        # A representative host/user: that of the earliest event that has one (deterministic, unlike first()).
        F.expr(f"min_by(_host, {_order('_host IS NULL', '_ts', '_id')})").alias("_host"),
        F.expr(f"min_by(_user, {_order('_user IS NULL', '_ts', '_id')})").alias("_user"),
    ]
    if plan.type == T.VALUE_COUNT:
        aggs.append(F.size(F.collect_set("_v")).alias("_val"))
    elif plan.type == T.VALUE_SUM:
        aggs.append(F.try_sum("_v").alias("_val"))  # null on overflow instead of failing the stream
    elif plan.type == T.VALUE_AVG:
        aggs.append(F.avg("_v").alias("_val"))
    elif plan.type == T.VALUE_MEDIAN:
        aggs.append(F.percentile_approx("_v", 0.5).alias("_val"))
    elif plan.type == T.VALUE_PERCENTILE:
        aggs.append(F.percentile_approx("_v", plan.percentile / 100).alias("_val"))
    elif plan.type in _TEMPORAL_TYPES:
        share = max(1, MAX_EVIDENCE // n)  # evidence from every referenced rule, not just the noisiest one
        ordered = plan.type == T.TEMPORAL_ORDERED
        for i in range(n):
            aggs.append(F.count_if(f"_m{i}").alias(f"_c{i}"))
            # For temporal_ordered the last rule's latest events are the ones that prove the order.
            pick = "max_by" if ordered and n > 1 and i == n - 1 else "min_by"
            aggs.append(F.expr(f"{pick}(named_struct('t', _ts, 'id', _id), {_order('_ts', '_id')}, {share}) "
                               f"FILTER (WHERE _m{i} AND _id IS NOT NULL)").alias(f"_e{i}"))
        if ordered and n > 1:
            aggs.append(F.expr("min(_ts) FILTER (WHERE _m0)").alias("_t_first"))
            aggs.append(F.expr(f"max(_ts) FILTER (WHERE _m{n - 1})").alias("_t_last"))
            # Middle rules need every time to find the earliest one after the previous step (exact greedy
            # chain); two-rule correlations, the common case, keep only a min and a max.
            for i in range(1, n - 1):
                aggs.append(F.expr(f"collect_list(_ts) FILTER (WHERE _m{i})").alias(f"_l{i}"))
    return aggs


def _ordered_chain(n: int) -> Column:
    """True when times t0 < t1 < … < t(n-1) exist with t_i from rule i's events (greedy: earliest each step)."""
    if n == 1:
        return F.col("_c0") > 0
    def after(previous: Column) -> Callable[[Column], Column]:
        return lambda x: x > previous  # one-argument lambda: F.filter would read a second one as the index

    t = F.col("_t_first")
    for i in range(1, n - 1):
        t = F.array_min(F.filter(F.col(f"_l{i}"), after(t)))
    return F.coalesce(F.col("_t_last") > t, F.lit(False))


def _extended(node: CorrelationConditionItem | SigmaRuleReference, names: Sequence[str]) -> Column:
    if isinstance(node, SigmaRuleReference):
        return F.col(f"_c{names.index(node.reference)}") > 0
    assert isinstance(node, CorrelationConditionAND | CorrelationConditionOR)  # `not` rejected by _plan
    parts = [_extended(a, names) for a in node.args]
    out = parts[0]
    for p in parts[1:]:
        out = (out & p) if isinstance(node, CorrelationConditionAND) else (out | p)
    return out


def _rules_matched(n: int) -> Column:
    total = F.lit(0)
    for i in range(n):
        total = total + F.when(F.col(f"_c{i}") > 0, 1).otherwise(0)
    return total


def _condition(plan: _Plan) -> Column:
    n = len(plan.names)
    if plan.type == T.TEMPORAL_ORDERED:
        return _ordered_chain(n)
    if plan.extended is not None:
        return _extended(plan.extended, plan.names)
    subject = (F.col("_n") if plan.type == T.EVENT_COUNT
               else _rules_matched(n) if plan.type == T.TEMPORAL
               else F.col("_val"))
    return F.coalesce(_OPS[plan.op][1](subject, F.lit(plan.threshold)), F.lit(False))


def _detail(plan: _Plan, value_type: DataType | None) -> Column:
    if plan.type == T.EVENT_COUNT:
        text = F.concat(F.col("_n").cast("string"), F.lit(" events"))
    elif plan.type == T.VALUE_COUNT:
        text = F.concat(F.col("_val").cast("string"), F.lit(f" distinct {plan.value_field}"))
    elif plan.type in (T.VALUE_SUM, T.VALUE_AVG, T.VALUE_MEDIAN, T.VALUE_PERCENTILE):
        word = {T.VALUE_SUM: "sum", T.VALUE_AVG: "avg", T.VALUE_MEDIAN: "median",
                T.VALUE_PERCENTILE: f"p{plan.percentile}"}[plan.type]
        integral = plan.type == T.VALUE_SUM and isinstance(value_type, ByteType | ShortType | IntegerType
                                                           | LongType | DecimalType)
        text = F.concat(F.lit(f"{word} {plan.value_field} "), _number_text(F.col("_val"), integral))
    else:
        # The rules that matched, in the rule's order ("ssh_failed then ssh_success").
        sep = " then " if plan.type == T.TEMPORAL_ORDERED else " and "
        text = F.concat_ws(sep, *[F.when(F.col(f"_c{i}") > 0, F.lit(name)) for i, name in enumerate(plan.names)])
    others = [g for g in range(len(plan.group_by)) if g != plan.entity_index]
    if others:  # the other group-by values are part of what was found ("… (destination.port=22)")
        pairs = F.concat_ws(", ", *[F.concat(F.lit(f"{plan.group_by[g]}="), F.col(f"_g{g}")) for g in others])
        text = F.concat(text, F.lit(" ("), pairs, F.lit(")"))
    return text


def _evidence(plan: _Plan) -> Column:
    if plan.type in _TEMPORAL_TYPES:
        # Each rule's share first, then fill up with the window's earliest events; keep MAX_EVIDENCE; time order.
        merged = F.concat(*[F.coalesce(F.col(f"_e{i}"), F.array()) for i in range(len(plan.names))],
                          F.coalesce(F.col("_ev"), F.array()))
        picked = F.array_sort(F.slice(F.array_distinct(merged), 1, MAX_EVIDENCE))
    else:
        picked = F.col("_ev")  # min_by(…, k) is already in ascending (time, id) order
    return F.coalesce(F.transform(picked, lambda x: x["id"]), F.array().cast(ArrayType(StringType())))


def _candidate_columns(plan: _Plan, value_type: DataType | None) -> list[Column]:
    epoch = F.lit(_EPOCH)
    start, end = F.col("_w.start"), F.col("_w.end")
    # coalesce/cast only make Spark's schema say NOT NULL / nullable exactly as CANDIDATE_SCHEMA does.
    columns = [
        F.lit(plan.rule_id).alias("rule_id"),
        F.struct(F.lit(plan.entity_type).alias("type"),
                 F.col(f"_g{plan.entity_index}").alias("value")).cast(ENTITY_TYPE).alias("entity"),
        F.coalesce(start, epoch).alias("window_start"),
        F.coalesce(end, epoch).alias("window_end"),
        F.coalesce(F.col("_first"), start, epoch).alias("first_seen"),
        F.coalesce(F.col("_last"), end, epoch).alias("last_seen"),
        # a streaming aggregate's count comes back from the state store as nullable
        F.coalesce(F.col("_n"), F.lit(0)).cast(LongType()).alias("event_count"),
        _evidence(plan).cast(ArrayType(StringType())).alias("evidence"),
        F.col("_host").alias("host_name"),
        F.col("_user").alias("user_name"),
        F.nullif(_detail(plan, value_type), F.lit("")).alias("detail"),  # nullable, like the schema
    ]
    return columns
