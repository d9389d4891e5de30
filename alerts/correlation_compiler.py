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
* **Event time is ``_event_time``** (:data:`ingest.arrow_parse.EVENT_TIME_COLUMN`), whatever the caller put there
  (``alerts.detection_input`` uses ``@timestamp`` minus future-dated events), so one host with a wrong clock
  cannot push the watermark ahead. A streaming input
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
compiler, ``alerts/sigma_compiler.py``, writes them); this module never interprets Sigma detections itself. The
group-by and condition fields resolve exactly as the Sigma compiler resolves a detection's fields
(:func:`alerts.sigma_compiler.resolve_field`, over :mod:`ingest.field_resolver`), within the base rules' datasets.
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

from alerts.alert_schema import ENTITY_TYPES, MAX_EVIDENCE
from alerts.sigma_compiler import RuleCompileError, resolve_field
from alerts.window_aggregator import (
    GROUP,
    WATERMARK_METADATA_KEY,
    WindowedRule,
    candidate_columns,
    candidates_from,
    items_of,
    parse_span_us,
    run_windowed,
)
from core.spark_session import PerContext
from ingest.arrow_parse import EVENT_TIME_COLUMN

__all__ = [
    "CorrelationCompileError",
    "SUPPORTED_TYPES",
    "compile_correlation",
    "correlation_rule",
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

TIMESTAMP_FIELD = "@timestamp"
EVENT_ID_FIELD = "event.id"
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
    datasets: tuple[str, ...] | None = None  # the events the base rules read (their logsources); None: all

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
          entity_field: str | None, watermark: str, slide_fraction: int,
          datasets: Sequence[str] | None = None) -> _Plan:
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
                 value_field=value_field, percentile=percentile,
                 datasets=None if datasets is None else tuple(sorted(set(datasets))))


# ------------------------------------------------------------------------------------------------ compile


def compile_correlation(
    corr: SigmaCorrelationRule,
    base_predicates: Mapping[str, str],
    entity_type: str,
    entity_field: str | None = None,
    watermark: str = "10 minutes",
    slide_fraction: int = 5,
    datasets: Sequence[str] | None = None,
) -> Callable[[DataFrame], DataFrame]:
    """Compile ``corr`` into ``events -> candidates`` (:data:`CANDIDATE_SCHEMA`), for static and streaming input.

    ``base_predicates`` maps each referenced rule's name (or id as a string) to its Spark SQL predicate.
    ``entity_type`` is the candidates' ``entity.type``; ``entity_field`` the group-by field whose value is
    ``entity.value`` (default: the first group-by field). Windows are ``corr.timespan`` long and slide by
    ``timespan / slide_fraction`` (1 = tumbling); a streaming input is watermarked by ``watermark`` on
    ``_event_time``. Raises :class:`CorrelationCompileError` for an unsupported type or condition, a missing
    group-by or condition field, or an unknown referenced rule; applying the result raises it too when the
    events lack a field the rule reads or a predicate does not resolve against them. ``datasets``: the datasets
    the base rules read (their logsources); the group-by and condition fields resolve within them (all when None).

    The function runs the rule alone through the shared aggregation (:mod:`alerts.window_aggregator`);
    :func:`correlation_rule` gives the :class:`~alerts.window_aggregator.WindowedRule` the pipeline runs together
    with every other windowed rule, so both give the same candidates.
    """
    plan = _plan(corr, base_predicates, entity_type, entity_field, watermark, slide_fraction, datasets)

    def correlate(events: DataFrame) -> DataFrame:
        rule = _windowed(plan, events.schema, plan.rule_id)
        return run_windowed(_watermarked(plan, events), [rule])

    correlate.__name__ = f"correlate_{plan.rule_id}"
    correlate.__doc__ = describe(corr)
    return correlate


def correlation_rule(corr: SigmaCorrelationRule, base_predicates: Mapping[str, str], entity_type: str,
                     schema: StructType, key: str, entity_field: str | None = None, watermark: str = "10 minutes",
                     slide_fraction: int = 5, datasets: Sequence[str] | None = None) -> WindowedRule:
    """``corr`` as a :class:`~alerts.window_aggregator.WindowedRule` over events of ``schema`` (state key ``key``)."""
    plan = _plan(corr, base_predicates, entity_type, entity_field, watermark, slide_fraction, datasets)
    return _windowed(plan, schema, key)


def _watermarked(plan: _Plan, events: DataFrame) -> DataFrame:
    if not events.isStreaming:
        return events
    if EVENT_TIME_COLUMN not in events.columns:
        raise plan.fail(f"a streaming input needs the event-time column {EVENT_TIME_COLUMN!r} to watermark on")
    # Spark refuses to redefine a watermark ("Redefining watermark is disallowed"): an input whose _event_time is
    # already watermarked upstream keeps that watermark.
    if WATERMARK_METADATA_KEY in events.schema[EVENT_TIME_COLUMN].metadata:
        return events
    return events.withWatermark(EVENT_TIME_COLUMN, plan.watermark)


# -------------------------------------------------------------------------------------------------- apply


def _number_text(col: Column, integral: bool) -> Column:
    if integral:
        return col.cast("bigint").cast("string")
    # 3 decimals, no thousands separators, trailing zeros dropped: 1234.5, 512000000, 0.25
    return F.regexp_replace(F.regexp_replace(F.format_number(col, 3), ",", ""), r"\.?0+$", "")


def _windowed(plan: _Plan, schema: StructType, key: str) -> WindowedRule:
    """The plan as a :class:`WindowedRule` over events of ``schema`` (fields resolved and predicates checked)."""

    def field(path: str) -> tuple[str, DataType]:
        """SQL and type of ``path`` as the Sigma compiler reads it: one resolver for detections and correlations,
        so a correlation grouped by ``User`` groups on what a detection on ``User`` matches."""
        try:
            found = resolve_field(None, path, schema, plan.datasets)
        except RuleCompileError as e:
            raise plan.fail(e.problem) from e
        return found.sql, found.data_type

    for path in (TIMESTAMP_FIELD, EVENT_ID_FIELD):
        field(path)
    group_paths = [[field(f)[0] for f in fields] for fields in plan.group_fields]
    value_path, value_type = field(plan.value_field) if plan.value_field else (None, None)
    matches = _predicates(plan, schema)
    hits = [F.coalesce(m.cast("boolean"), F.lit(False)) for m in matches]
    group = []
    for g, paths in enumerate(group_paths):
        if len(set(plan.group_fields[g])) == 1:
            group.append(F.expr(paths[0]).cast("string"))
        else:  # an alias: read the field of the first referenced rule the event matches
            expr = F.when(hits[0], F.expr(paths[0]).cast("string"))
            for i in range(1, len(paths)):
                expr = expr.when(hits[i], F.expr(paths[i]).cast("string"))
            group.append(expr)
    value = amount = item = None
    if value_path is not None:
        if plan.type == T.VALUE_COUNT:
            value = F.expr(value_path).cast("string")
        elif isinstance(value_type, ByteType | ShortType | IntegerType | LongType | DecimalType):
            amount = F.expr(value_path).cast("double")
        else:
            amount = F.expr(f"try_cast({value_path} AS double)")
        if plan.type in (T.VALUE_MEDIAN, T.VALUE_PERCENTILE):
            item = amount
    if plan.type in _TEMPORAL_TYPES:
        bits = F.lit(0)
        for i, h in enumerate(hits):
            bits = bits + F.when(h, F.lit(1 << i)).otherwise(F.lit(0))
        item = F.struct(F.unix_micros(F.col(f"`{TIMESTAMP_FIELD}`")).alias("t"),
                        F.expr(field(EVENT_ID_FIELD)[0]).cast("string").alias("id"), bits.alias("b"))
    integral = plan.type == T.VALUE_SUM and isinstance(value_type, ByteType | ShortType | IntegerType | LongType
                                                       | DecimalType)
    columns = PerContext(lambda: _finish_columns(plan, integral))  # built at the first batch, then reused
    return WindowedRule(
        key=key, rule_id=plan.rule_id, window_us=parse_span_us(plan.window), slide_us=parse_span_us(plan.slide),
        matches=matches, group=tuple(group), value=value, amount=amount, item=item,
        finish=lambda agg: candidates_from(agg, columns.get()),
        output_mode="update" if _monotone(plan) else "append",
    )


def _monotone(plan: _Plan) -> bool:
    if plan.type in _TEMPORAL_TYPES:
        return True
    if plan.type in (T.VALUE_AVG, T.VALUE_PERCENTILE, T.VALUE_MEDIAN):
        return False
    return plan.extended is None and plan.op in _MONOTONE_OPS


def _predicates(plan: _Plan, schema: StructType) -> tuple[Column, ...]:
    """The base rules' predicates as columns, resolved against the events' schema now, so that a bad rule fails
    alone when it is compiled rather than the query that runs every rule."""
    from pyspark.sql import SparkSession

    try:
        matches = tuple(F.expr(f"({p})") for p in plan.predicates)
        spark = SparkSession.getActiveSession()
        if spark is not None:
            spark.createDataFrame([], schema).select(*matches).schema  # noqa: B018 (analysis only)
    except AnalysisException as e:  # a predicate names a field the events lack, or is not valid SQL
        raise plan.fail(f"a base-rule predicate does not apply to the events: {e}") from e
    return matches


def _ref_items() -> Column:
    return items_of("struct<t: bigint, id: string, b: int>")


def _condition(plan: _Plan) -> Column:
    n = len(plan.names)
    refs = F.col("refs")

    def matched(i: int) -> Column:
        return (F.coalesce(refs, F.lit(0)).bitwiseAND(F.lit(1 << i))) != 0

    if plan.type == T.TEMPORAL_ORDERED:
        return _ordered_chain(n)
    if plan.extended is not None:
        return _extended(plan.extended, plan.names, matched)
    if plan.type == T.EVENT_COUNT:
        subject = F.col("n")
    elif plan.type == T.TEMPORAL:
        subject = F.lit(0)
        for i in range(n):
            subject = subject + F.when(matched(i), 1).otherwise(0)
    elif plan.type == T.VALUE_COUNT:
        subject = F.size(F.col("vset"))
    else:
        subject = _value(plan)
    return F.coalesce(_OPS[plan.op][1](subject, F.lit(plan.threshold)), F.lit(False))


def _value(plan: _Plan) -> Column:
    if plan.type == T.VALUE_SUM:
        return F.col("vsum")
    if plan.type == T.VALUE_AVG:
        return F.try_divide(F.col("vsum"), F.col("nx"))
    p = 0.5 if plan.type == T.VALUE_MEDIAN else plan.percentile / 100
    values = F.array_sort(items_of("double"))
    # nearest rank, like percentile_approx over a small window: the smallest value with p of the values at or below
    rank = F.greatest(F.lit(1), F.ceil(F.size(values) * F.lit(p)).cast("int"))
    return F.when(F.size(values) > 0, F.element_at(values, rank))


def _ordered_chain(n: int) -> Column:
    """True when times t0 < t1 < … < t(n-1) exist with t_i from rule i's events (greedy: earliest each step)."""
    items = _ref_items()

    def times(i: int) -> Column:
        return F.transform(F.filter(items, _has_bit(i)), lambda x: x["t"])

    if n == 1:
        return F.size(times(0)) > 0
    t = F.array_min(times(0))
    for i in range(1, n - 1):
        t = F.array_min(F.filter(times(i), _after(t)))
    return F.coalesce(F.array_max(times(n - 1)) > t, F.lit(False))


def _has_bit(i: int) -> Callable[[Column], Column]:
    return lambda x: (x["b"].bitwiseAND(F.lit(1 << i))) != 0


def _after(previous: Column) -> Callable[[Column], Column]:
    return lambda x: x > previous  # one-argument lambda: F.filter would read a second one as the index


def _extended(node: CorrelationConditionItem | SigmaRuleReference, names: Sequence[str],
              matched: Callable[[int], Column]) -> Column:
    if isinstance(node, SigmaRuleReference):
        return matched(names.index(node.reference))
    assert isinstance(node, CorrelationConditionAND | CorrelationConditionOR)  # `not` rejected by _plan
    parts = [_extended(a, names, matched) for a in node.args]
    out = parts[0]
    for p in parts[1:]:
        out = (out & p) if isinstance(node, CorrelationConditionAND) else (out | p)
    return out


def _detail(plan: _Plan, integral: bool) -> Column:
    refs = F.coalesce(F.col("refs"), F.lit(0))
    if plan.type == T.EVENT_COUNT:
        text = F.concat(F.col("n").cast("string"), F.lit(" events"))
    elif plan.type == T.VALUE_COUNT:
        text = F.concat(F.size(F.col("vset")).cast("string"), F.lit(f" distinct {plan.value_field}"))
    elif plan.type in (T.VALUE_SUM, T.VALUE_AVG, T.VALUE_MEDIAN, T.VALUE_PERCENTILE):
        word = {T.VALUE_SUM: "sum", T.VALUE_AVG: "avg", T.VALUE_MEDIAN: "median",
                T.VALUE_PERCENTILE: f"p{plan.percentile}"}[plan.type]
        text = F.concat(F.lit(f"{word} {plan.value_field} "), _number_text(_value(plan), integral))
    else:
        # The rules that matched, in the rule's order ("ssh_failed then ssh_success").
        sep = " then " if plan.type == T.TEMPORAL_ORDERED else " and "
        text = F.concat_ws(sep, *[F.when(refs.bitwiseAND(F.lit(1 << i)) != 0, F.lit(name))
                                  for i, name in enumerate(plan.names)])
    others = [g for g in range(len(plan.group_by)) if g != plan.entity_index]
    if others:  # the other group-by values are part of what was found ("… (destination.port=22)")
        pairs = F.concat_ws(", ", *[F.concat(F.lit(f"{plan.group_by[g]}="), F.element_at(F.col(GROUP), g + 1))
                                    for g in others])
        text = F.concat(text, F.lit(" ("), pairs, F.lit(")"))
    return text


def _evidence(plan: _Plan) -> Column | None:
    """Temporal rules: each referenced rule's share of the evidence first (for ``temporal_ordered`` the last rule's
    latest events, which prove the order), then the window's earliest events; at most MAX_EVIDENCE, time order."""
    if plan.type not in _TEMPORAL_TYPES:
        return None
    n = len(plan.names)
    share = max(1, MAX_EVIDENCE // n)
    ordered = plan.type == T.TEMPORAL_ORDERED
    items = F.array_sort(F.transform(_ref_items(), lambda x: F.struct(x["t"].alias("t"), x["id"].alias("id"),
                                                                       x["b"].alias("b"))))
    parts = []
    for i in range(n):
        mine = F.transform(F.filter(items, _has_bit(i)), lambda x: F.struct(x["t"].alias("t"), x["id"].alias("id")))
        if ordered and n > 1 and i == n - 1:
            parts.append(F.slice(mine, F.greatest(F.lit(1), F.size(mine) - F.lit(share) + 1), share))
        else:
            parts.append(F.slice(mine, 1, share))
    earliest = F.coalesce(F.transform(F.col("ev"), lambda x: F.struct(F.unix_micros(x["t"]).alias("t"),
                                                                       x["id"].alias("id"))), F.array())
    merged = F.concat(*[F.coalesce(p, F.array()) for p in parts], earliest)
    picked = F.array_sort(F.slice(F.array_distinct(merged), 1, MAX_EVIDENCE))
    return F.transform(picked, lambda x: x["id"]).cast(ArrayType(StringType()))


def _finish_columns(plan: _Plan, integral: bool) -> tuple[Column, list[Column]]:
    """The rule's candidate filter and projection: built once per Spark context, applied to every batch."""
    return candidate_columns(plan.rule_id, plan.entity_type, plan.entity_index, condition=_condition(plan),
                             detail=_detail(plan, integral), evidence_ids=_evidence(plan))
