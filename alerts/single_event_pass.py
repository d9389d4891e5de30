"""Every single-event rule over one batch of events in a few passes, not one plan branch per rule.

A SigmaHQ checkout brings ~2,400 single-event rules. One filter per rule, unioned, is a plan of thousands of scans
of the batch, which Spark plans for minutes (and a backtest ran one job per rule). Here the rules are grouped by
their logsource's scope (``event.dataset IN (...)``, with event codes): each scope's events are selected once,
and each of its rules is one ``CASE`` in an array of the (rule, entity) pairs an event matched, exploded into
candidates. A pass holds at most :data:`RULES_PER_PASS` rules, which keeps the generated code of one projection
small enough to compile (the JVM limits a method to 64 KB; a few hundred Sigma predicates in one projection ran
the driver out of heap).

The answer is the union of each rule's own ``detect`` (:func:`alerts.rule_loader.single_event_candidates`): the
same candidates, in another order. Rules without compiled SQL (none today) fall back to their ``detect``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import reduce

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from alerts.rule_loader import Rule, candidates_of

RULES_PER_PASS = 60
_HIT = "_nightjar_hit"


def single_event_candidates_all(events: DataFrame, rules: Sequence[Rule],
                                rules_per_pass: int = RULES_PER_PASS) -> DataFrame | None:
    """The candidates of every rule in ``rules`` over ``events`` (a batch or static DataFrame of the detection
    input); None when there is no rule."""
    by_scope: dict[str | None, list[Rule]] = defaultdict(list)
    parts: list[DataFrame] = []
    for rule in rules:
        if rule.match is None:
            parts.append(rule.detect(events))
        else:
            by_scope[rule.match.scope].append(rule)
    for scope, scoped_rules in by_scope.items():
        scoped = events if scope is None else events.where(F.expr(scope))
        for k in range(0, len(scoped_rules), rules_per_pass):
            parts.append(_one_pass(scoped, scoped_rules[k:k + rules_per_pass]))
    return reduce(DataFrame.unionByName, parts) if parts else None


def _one_pass(events: DataFrame, rules: Sequence[Rule]) -> DataFrame:
    hits = F.array(*[
        F.when(F.expr(r.match.predicate),
               F.struct(F.lit(r.rule_id).alias("rule_id"), F.lit(r.entity_type).alias("type"),
                        F.expr(r.match.entity_sql).cast("string").alias("value")))
        for r in rules])
    matched = events.select("*", F.explode(F.filter(hits, lambda h: h.isNotNull())).alias(_HIT))
    hit = F.col(_HIT)
    return candidates_of(matched, hit["rule_id"], hit["type"], hit["value"])
