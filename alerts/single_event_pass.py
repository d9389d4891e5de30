"""Every single-event rule over one batch of events in a few passes, not one plan branch per rule.

A SigmaHQ checkout brings ~2,400 single-event rules. One filter per rule, unioned, is a plan of thousands of scans
of the batch, which Spark plans for minutes (and a backtest ran one job per rule). Here every rule is one ``CASE``
in an array of the (rule, entity) pairs an event matched, computed in one projection over the batch; the rules are
grouped by their logsource's scope (``event.dataset IN (...)``, with event codes), and a group's arrays are
evaluated only for the events in its scope. Only the events
that matched something leave the executors, with the few columns a candidate needs; the candidates themselves
(one per event and rule, as :func:`alerts.rule_loader.single_event_candidates` makes them) are assembled on the
driver, where the alert builder takes them anyway.

A pass holds at most :data:`RULES_PER_PASS` rules, which keeps one projection's generated code small enough to
compile (the JVM limits a method to 64 KB). Above :data:`INTERPRETED_ABOVE` rules the passes run without generated
code (:func:`rule_evaluation`): with SigmaHQ's 2,398 rules, Janino was still compiling one micro-batch of 306
events after two minutes, while Spark's interpreted expressions evaluate each predicate directly.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from alerts.alert_schema import MAX_EVIDENCE
from alerts.rule_loader import Rule
from core.spark_session import session_conf

RULES_PER_PASS = 60
INTERPRETED_ABOVE = 100  # rules; the built-in pack (a handful) keeps generated code, a SigmaHQ checkout does not
INTERPRETED_EVALUATION = {"spark.sql.codegen.wholeStage": "false", "spark.sql.codegen.factoryMode": "NO_CODEGEN"}


def matches(events: DataFrame, rules: Sequence[Rule], rules_per_pass: int = RULES_PER_PASS) -> DataFrame | None:
    """One row per event that matched at least one of ``rules`` (single-event Sigma rules, with ``match``):
    ``id``, ``ts``, ``host``, ``user`` and ``hits`` (array of ``rule_id``, ``type``, ``value``: the rules it matched
    and the entity each names). None when there is no rule. ``events``: the detection input (batch or static).

    One projection over the events, not a union of a scan per pass: every task of a stage deserializes the whole
    stage's plan, so a union of 40 passes over 4 partitions had 160 tasks each deserializing all 2,398 SigmaHQ
    predicates (measured: minutes for 306 events). Each pass is an array, evaluated only for its scope's events."""
    by_scope: dict[str | None, list[Rule]] = defaultdict(list)
    for rule in rules:
        if rule.match is None:
            raise ValueError(f"rule {rule.rule_id} has no compiled single-event match (a {rule.kind} rule)")
        by_scope[rule.match.scope].append(rule)
    if not by_scope:
        return None
    passes = []
    for scope, scoped_rules in by_scope.items():
        for k in range(0, len(scoped_rules), rules_per_pass):
            hits = _hits(scoped_rules[k:k + rules_per_pass])
            passes.append(hits if scope is None else F.when(F.expr(scope), hits))
    host = (F.coalesce(F.col("host.name"), F.col("host.hostname")) if "host" in events.columns
            else F.lit(None)).cast("string")
    user = (F.col("user.name") if "user" in events.columns else F.lit(None)).cast("string")
    every = F.flatten(F.filter(F.array(*passes), lambda a: a.isNotNull()))
    return (events.where(F.col("`@timestamp`").isNotNull())
            .select(F.col("event.id").alias("id"), F.col("`@timestamp`").alias("ts"), host.alias("host"),
                    user.alias("user"), every.alias("hits"))
            .where(F.size("hits") > 0))


def _hits(rules: Sequence[Rule]) -> Column:
    return F.filter(F.array(*[
        F.when(F.expr(r.match.predicate),
               F.struct(F.lit(r.rule_id).alias("rule_id"), F.lit(r.entity_type).alias("type"),
                        F.expr(r.match.entity_sql).cast("string").alias("value")))
        for r in rules]), lambda h: h.isNotNull() & h["value"].isNotNull())


@contextlib.contextmanager
def rule_evaluation(spark: SparkSession, rules: int) -> Iterator[None]:
    """Run the block's jobs the way ``rules`` rules are cheapest: interpreted above :data:`INTERPRETED_ABOVE`
    rules, else as the session is configured."""
    if rules > INTERPRETED_ABOVE:
        with session_conf(spark, INTERPRETED_EVALUATION):
            yield
    else:
        yield


def collect_candidates(events: DataFrame, rules: Sequence[Rule],
                       rules_per_pass: int = RULES_PER_PASS) -> list[dict]:
    """The candidates of every rule in ``rules`` over ``events``, as dicts of
    :data:`alerts.alert_schema.CANDIDATE_SCHEMA` — each rule's own ``detect`` would give the same rows. Rules
    without compiled SQL (none today) run their ``detect``."""
    own = [r for r in rules if r.match is None]
    out = [row.asDict(recursive=True) for r in own for row in r.detect(events).collect()]
    found = matches(events, [r for r in rules if r.match is not None], rules_per_pass)
    if found is None:
        return out
    with rule_evaluation(events.sparkSession, len(rules)):
        rows = found.collect()
    for row in rows:
        for hit in row["hits"]:
            out.append({"rule_id": hit["rule_id"], "entity": {"type": hit["type"], "value": hit["value"]},
                        "window_start": row["ts"], "window_end": row["ts"], "first_seen": row["ts"],
                        "last_seen": row["ts"], "event_count": 1, "evidence": [row["id"]][:MAX_EVIDENCE],
                        "host_name": row["host"], "user_name": row["user"], "detail": None})
    return out
