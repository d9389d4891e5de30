"""Streaming detection: the rules over the events as they are written, alerts to Kafka and Delta, rules reloaded
while running, rule health tracked.

Where each kind of rule runs (why: docs/performance.md):

- **single-event rules** (Sigma detections without a correlation) run inside the ingest query's micro-batch, on
  the enriched events it has just written (:class:`SingleEventDetector`): no second hop through Delta, so an IOC
  hit or a sudo by a non-admin alerts in the same micro-batch that parsed it. The rules current at each batch
  apply: a rule file added, changed or disabled takes effect from the next batch, no restart. They run together,
  one projection per batch (:mod:`alerts.single_event_pass`), so a SigmaHQ checkout's thousands of rules plan.
- **windowed rules** (Sigma correlations and windowed Python rules) run together in one streaming query over the
  ``events`` table (:func:`start_windowed`): one read and one aggregation for all of them
  (:mod:`alerts.window_aggregator`). When the rule files change the query restarts on the same checkpoint; the
  windows of unchanged rules survive (their state keys carry the rule's digest).
- **Python rules with their own detect()** run in a query each (:func:`start_own_query`), as before.

Every query folds candidates into alert revisions with an :class:`AlertFolder` (seeded from the ``alerts`` table,
so suppression survives restarts) and publishes them with :func:`alerts.alert_sink.publish_alerts`: Kafka
delivery confirmed, then one Delta commit with the query's app id and batch id — a replayed batch is skipped, so
each revision lands in ``alerts`` exactly once.

Rule health (:class:`RuleHealth`) is what ``nightjar rules list``, ``pipeline_progress`` and the dashboard show:
running / restarting / failed / disabled, the last batch, the last alert, the last error. A rule whose windowed
evaluation raises is retried (the batch fails and the query restarts from its checkpoint, with backoff); only a
rule that fails :data:`RULE_FAULT_LIMIT` times in a row — its definition, not the machine, is at fault — is
disabled, and a health alert tells the SOC that coverage dropped.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from alerts.alert_builder import AlertBuilder, RuleMeta
from alerts.alert_sink import publish_alerts
from alerts.detection_input import detection_input, events_schema
from alerts.rule_loader import Rule, RuleError, load_rules, not_applicable_line, rule_files
from alerts.single_event_pass import collect_candidates
from alerts.window_aggregator import RULE, aggregate, finish
from core.batch_gate import batch_function
from core.checkpoints import batch_timestamp
from core.config import TABLE_ALERTS, TABLE_EVENTS, TABLE_PIPELINE_PROGRESS, Settings
from core.errors import summarize_query_error
from core.lake import is_delta_table, table_dataset
from core.spark_session import NO_DATA_BATCHES_OFF, materialized, release, session_conf
from core.triggers import QUERY_WINDOWED, QUERY_WINDOWED_APPEND, Trigger
from ingest.arrow_parse import EVENT_TIME_COLUMN
from ingest.delta_sink import arrow_schema, ensure_table
from ingest.delta_source import initial_offset_file, pruned_schema, read_delta_stream

log = logging.getLogger(__name__)

BATCH_TS = "_batch_ts"  # the micro-batch's timestamp: the same when a batch is replayed (detected_at)
RULE_FAULT_LIMIT = 3  # consecutive failures of one rule's own evaluation before it is disabled
HEALTH_RULE = RuleMeta(rule_id="nightjar.rule_health", name="Detection rule stopped working", severity="high",
                       tags=(), suppress_s=3600.0, count_merge="sum")
_publish_lock = threading.Lock()  # queries publish from their own threads; Delta commits one at a time

STATUS_RUNNING, STATUS_RESTARTING, STATUS_FAILED, STATUS_DISABLED = "running", "restarting", "failed", "disabled"


def open_alerts(lake: Path, rule_ids: set[str]) -> list[dict]:
    """The newest revision of every alert of ``rule_ids`` in the ``alerts`` table (empty when there is none)."""
    try:
        table = table_dataset(lake, TABLE_ALERTS).to_table().to_pylist()
    except Exception:  # no table yet
        return []
    newest: dict[str, dict] = {}
    for row in table:
        if row["rule_id"] in rule_ids and (row["alert_id"] not in newest
                                           or row["revision"] > newest[row["alert_id"]]["revision"]):
            newest[row["alert_id"]] = row
    return list(newest.values())


class AlertFolder:
    """Candidates of one query's micro-batches -> published alert revisions (exactly once per batch in Delta)."""

    def __init__(self, settings: Settings, app_id: str, rules: dict[str, RuleMeta]) -> None:
        self.settings, self.app_id = settings, app_id
        self.builder = AlertBuilder(rules, open_alerts(settings.lake, set(rules)))

    @property
    def held(self) -> int:
        """Open alerts held in memory (bounded: the builder drops those whose suppression span has passed)."""
        return len(self.builder.open)

    def set_rules(self, rules: dict[str, RuleMeta]) -> None:
        known = set(self.builder.rules)
        self.builder.rules = rules
        fresh = set(rules) - known
        if fresh:  # a rule added at run time: continue its open alerts from the table
            for a in open_alerts(self.settings.lake, fresh):
                self.builder.open.setdefault((a["rule_id"], a["entity"]["type"], a["entity"]["value"]), dict(a))

    def process(self, candidates: list[dict], batch_id: int, detected_at: dt.datetime) -> list[dict]:
        """Fold and publish; returns the revisions published (empty for nothing new or a replayed batch)."""
        if not candidates:
            return []
        saved = copy.deepcopy(self.builder.open)
        try:
            revisions = self.builder.add(candidates, detected_at)
            if not revisions:
                return []
            with _publish_lock:
                publish_alerts(revisions, self.settings, batch_id, self.app_id)
            return revisions
        except BaseException:
            self.builder.open = saved  # the batch will be replayed: fold it again from the same state
            raise


def batch_time(df: DataFrame, checkpoint: Path | None = None, batch_id: int | None = None) -> dt.datetime:
    """The micro-batch timestamp carried in :data:`BATCH_TS` (deterministic on replay).

    With the query's ``checkpoint`` and ``batch_id`` it is read from the offset log (the same value, without a Spark
    job: :func:`core.checkpoints.batch_timestamp`); the ``limit(1)`` over ``df`` is the fallback."""
    if checkpoint is not None and batch_id is not None:
        logged = batch_timestamp(checkpoint, batch_id)
        if logged is not None:
            return logged
    row = df.select(BATCH_TS).limit(1).collect()
    return row[0][0] if row else dt.datetime.now(dt.UTC).replace(tzinfo=None)


# -- rule health ---------------------------------------------------------------------------------------------------
@dataclass
class HealthEntry:
    rule_id: str
    status: str = STATUS_RUNNING
    query: str = ""
    last_batch_at: dt.datetime | None = None
    last_alert_at: dt.datetime | None = None
    error: str | None = None
    failures: int = 0  # consecutive failures attributed to the rule itself


# The periodic report of every rule's state writes at most this many rows per second on average: with the pack's ~20
# rules that is every report_s (30 s), with a SigmaHQ checkout's ~2,400 every 20 minutes — 30-s reports of 2,400
# rows would put 7 million rows a day into pipeline_progress. Status changes and alerts are written at once anyway.
HEALTH_ROWS_PER_S = 2.0


class RuleHealth:
    """Per-rule status, shared by every detection query of one pipeline (driver side, thread-safe).

    ``sink`` receives a row for every status change, a rule's first batch and every rule that alerted in a batch,
    and, at most every ``report_s`` (longer for thousands of rules: :data:`HEALTH_ROWS_PER_S`), the current state of
    every rule (the pipeline appends them to ``pipeline_progress``); ``on_failure`` publishes health alerts.
    """

    def __init__(self, sink: Callable[[list[dict]], None] | None = None, report_s: float = 30.0) -> None:
        self._rules: dict[str, HealthEntry] = {}
        self._lock = threading.Lock()
        self.sink = sink
        self.report_s = report_s
        self._last_report = 0.0
        self.on_failure: Callable[[list[str], str, dt.datetime], None] | None = None
        # Set when the pipeline stops: a batch the stop interrupts fails, but no rule failed (no health alert).
        self.stopping = threading.Event()

    def entries(self) -> list[HealthEntry]:
        with self._lock:
            return [replace(e) for e in self._rules.values()]

    def get(self, rule_id: str) -> HealthEntry | None:
        with self._lock:
            e = self._rules.get(rule_id)
            return replace(e) if e else None

    def track(self, rule_ids: Iterable[str], query: str) -> None:
        with self._lock:
            for rid in rule_ids:
                e = self._rules.setdefault(rid, HealthEntry(rid))
                e.query = query
                if e.status in (STATUS_RESTARTING, STATUS_FAILED):
                    continue
                e.status = STATUS_RUNNING

    def forget(self, keep: set[str]) -> None:
        """Drop rules that no longer exist (their files were removed); disabled ones stay listed."""
        with self._lock:
            for rid in [r for r, e in self._rules.items() if r not in keep and e.status != STATUS_DISABLED]:
                del self._rules[rid]

    def batch_done(self, query: str, rule_ids: Iterable[str], at: dt.datetime, alerted: Iterable[str] = ()) -> None:
        recovered, first = [], []
        alerted = set(alerted)
        with self._lock:
            for rid in rule_ids:
                e = self._rules.setdefault(rid, HealthEntry(rid, query=query))
                if e.last_batch_at is None:
                    first.append(rid)
                e.last_batch_at = at
                e.failures = 0
                if rid in alerted:
                    e.last_alert_at = at
                if e.status in (STATUS_RESTARTING, STATUS_FAILED):
                    e.status, e.error = STATUS_RUNNING, None
                    recovered.append(rid)
        for rid in recovered:
            log.info("rule %s is running again", rid)
        if self._report():
            return
        # written at once: a rule running again, a rule's first batch, a rule's new "last alert"
        news = list(dict.fromkeys([*recovered, *first, *sorted(alerted)]))
        if news:
            self._emit([self.get(r) for r in news])

    def failed(self, rule_ids: Iterable[str], error: str, status: str = STATUS_RESTARTING) -> None:
        rule_ids = list(rule_ids)
        if self.stopping.is_set():  # the stop cancelled the batch's jobs; the next run replays the batch
            log.info("the stop interrupted a batch of %d rule(s); not a rule failure: %s", len(rule_ids), error[:200])
            return
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        newly = []
        with self._lock:
            for rid in rule_ids:
                e = self._rules.setdefault(rid, HealthEntry(rid))
                if e.status != status or e.error != error:
                    newly.append(rid)
                e.status, e.error = status, error
        if newly:
            self._emit([self.get(r) for r in newly])
            if self.on_failure is not None:
                try:
                    self.on_failure(newly, error, now)
                except Exception:
                    log.exception("could not publish the health alert for %s", ", ".join(newly))

    def fault(self, rule_id: str, error: str) -> bool:
        """A failure of the rule's own evaluation; True when it has now failed too often and is disabled."""
        with self._lock:
            e = self._rules.setdefault(rule_id, HealthEntry(rule_id))
            e.failures += 1
            disable = e.failures >= RULE_FAULT_LIMIT
        self.failed([rule_id], error, STATUS_DISABLED if disable else STATUS_RESTARTING)
        return disable

    def disabled(self, rule_id: str, error: str) -> None:
        with self._lock:
            e = self._rules.setdefault(rule_id, HealthEntry(rule_id))
            same = e.status == STATUS_DISABLED and e.error == error
            e.status, e.error = STATUS_DISABLED, error
        if not same:
            self._emit([self.get(rule_id)])

    def _emit(self, entries: list[HealthEntry | None]) -> None:
        if self.sink is not None:
            self.sink([health_row(e) for e in entries if e is not None])

    def _report(self, force: bool = False) -> bool:
        """Emit every rule's state when the report is due (or ``force``); True when it was."""
        now = time.monotonic()
        with self._lock:
            interval = max(self.report_s, len(self._rules) / HEALTH_ROWS_PER_S)
        if not force and now - self._last_report < interval:
            return False
        self._last_report = now
        self._emit(self.entries())
        return True

    def report(self) -> None:
        """Every rule's state, now (the end of a run)."""
        self._report(force=True)

    def report_if_due(self) -> None:
        """Every rule's state if the periodic report is due (a live pipeline's poll, between batches)."""
        self._report()


def health_row(e: HealthEntry) -> dict:
    """A ``pipeline_progress`` row for a rule's health (``query_name`` ``rule:<id>``)."""
    return {"query_name": f"rule:{e.rule_id}", "query_id": e.query, "run_id": "", "batch_id": -1,
            "timestamp": dt.datetime.now(dt.UTC), "rule_id": e.rule_id, "status": e.status, "error": e.error,
            "last_batch_at": _aware(e.last_batch_at), "last_alert_at": _aware(e.last_alert_at)}


def read_rule_health(lake: Path) -> dict[str, dict]:
    """The newest health row per rule from ``pipeline_progress`` (what the last ``nightjar run`` reported)."""
    if not is_delta_table(lake / TABLE_PIPELINE_PROGRESS):
        return {}
    dataset = table_dataset(lake, TABLE_PIPELINE_PROGRESS)
    if "rule_id" not in dataset.schema.names:
        return {}
    import pyarrow.dataset as ds

    rows = dataset.to_table(columns=["rule_id", "timestamp", "status", "error", "last_batch_at", "last_alert_at",
                                     "query_id"], filter=ds.field("rule_id").is_valid()).to_pylist()
    newest: dict[str, dict] = {}
    for r in rows:
        if r["rule_id"] not in newest or r["timestamp"] >= newest[r["rule_id"]]["timestamp"]:
            newest[r["rule_id"]] = r
    return newest


def _aware(ts: dt.datetime | None) -> dt.datetime | None:
    return ts.replace(tzinfo=dt.UTC) if ts is not None and ts.tzinfo is None else ts


# -- the rules ---------------------------------------------------------------------------------------------------
@dataclass
class RuleSet:
    """The rules under ``paths`` as last read, and what changed; driver side, read by the queries' batches."""

    spark: SparkSession
    paths: list[Path]
    health: RuleHealth = field(default_factory=RuleHealth)
    single_event: list[Rule] = field(default_factory=list)
    windowed: list[Rule] = field(default_factory=list)
    own_query: list[Rule] = field(default_factory=list)
    errors: list[RuleError] = field(default_factory=list)
    disabled: set[str] = field(default_factory=set)  # rule ids disabled at run time, until their file changes
    _fingerprint: tuple = ()
    _disabled_digest: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.schema = events_schema(self.spark)
        self._lock = threading.Lock()

    def _files_fingerprint(self) -> tuple:
        out = []
        for f in rule_files(self.paths):
            try:
                st = f.stat()
                out.append((str(f), st.st_mtime_ns, st.st_size))
            except OSError:
                continue
        return tuple(out)

    def reload(self, force: bool = False) -> bool:
        """Re-read the rules if any file changed; returns whether anything was re-read."""
        fp = self._files_fingerprint()
        if fp == self._fingerprint and not force:
            return False
        self._fingerprint = fp
        rules, errors = load_rules(self.paths, self.schema)
        known = {str(x) for x in self.errors}
        for e in errors:
            if e.not_applicable:  # nothing to read, nothing wrong: one line below, no health entry
                continue
            if str(e) not in known:
                log.error("rule skipped: %s", e)
            if e.rule:
                self.health.disabled(e.rule, e.problem)
        if (line := not_applicable_line(errors)) and line != not_applicable_line(self.errors):
            log.info("%s", line)
        with self._lock:
            self.errors = errors
            # a rule disabled at run time stays disabled until its definition changes
            for rid, digest in list(self._disabled_digest.items()):
                if not any(r.rule_id == rid and r.digest == digest for r in rules):
                    del self._disabled_digest[rid]
            active = [r for r in rules if r.rule_id not in self._disabled_digest]
            self.single_event = [r for r in active if not r.stateful]
            self.windowed = [r for r in active if r.stateful and r.windowed is not None]
            self.own_query = [r for r in active if r.stateful and r.windowed is None]
        self.health.forget({r.rule_id for r in rules} | {e.rule for e in errors if e.rule})
        log.info("rules loaded: %d single-event, %d windowed, %d with their own query, %d problem(s)",
                 len(self.single_event), len(self.windowed), len(self.own_query),
                 sum(not e.not_applicable for e in errors))
        return True

    def disable(self, rule: Rule, error: str) -> None:
        """Take a rule out until its file changes (its definition fails at run time)."""
        with self._lock:
            self._disabled_digest[rule.rule_id] = rule.digest
            self.single_event = [r for r in self.single_event if r.rule_id != rule.rule_id]
            self.windowed = [r for r in self.windowed if r.rule_id != rule.rule_id]
            self.own_query = [r for r in self.own_query if r.rule_id != rule.rule_id]
        log.error("rule %s (%s) disabled until its file changes: %s", rule.rule_id, rule.source, error)

    def metas(self, rules: Iterable[Rule]) -> dict[str, RuleMeta]:
        return {r.rule_id: r.meta for r in rules}

    def current(self) -> tuple[list[Rule], list[Rule], list[Rule]]:
        with self._lock:
            return list(self.single_event), list(self.windowed), list(self.own_query)


def windowed_signature(rules: Iterable[Rule], output_mode: str) -> tuple:
    """What the windowed query's plan depends on: the rules of ``output_mode`` and their digests."""
    return tuple(sorted((r.rule_id, r.digest) for r in rules if r.windowed.output_mode == output_mode))


# -- single-event rules, in the ingest micro-batch ---------------------------------------------------------------
class SingleEventDetector:
    """Runs the current single-event rules over one micro-batch of enriched events and publishes their alerts."""

    QUERY = "ingest"

    def __init__(self, settings: Settings, ruleset: RuleSet, app_id: str) -> None:
        self.settings, self.ruleset = settings, ruleset
        single, _, _ = ruleset.current()
        self.folder = AlertFolder(settings, app_id, ruleset.metas(single))

    def __call__(self, events: DataFrame, batch_id: int, detected_at: Callable[[], dt.datetime]) -> int:
        """``events``: the batch's enriched events (batch DataFrame); returns the revisions published."""
        rules, _, _ = self.ruleset.current()
        ids = [r.rule_id for r in rules]
        if not rules:
            return 0
        self.folder.set_rules(self.ruleset.metas(rules))
        self.ruleset.health.track(ids, self.QUERY)
        try:
            rows = collect_candidates(detection_input(events), rules)
        except Exception as exc:
            self.ruleset.health.failed(ids, _one_line(exc))
            raise  # the ingest batch fails and is replayed from its checkpoint: nothing is lost
        at = detected_at() if rows else dt.datetime.now(dt.UTC).replace(tzinfo=None)
        published = self.folder.process(rows, batch_id, at) if rows else []
        self.ruleset.health.batch_done(self.QUERY, ids, at, {a["rule_id"] for a in published})
        if published:
            log.info("ingest batch %d: %d alert revision(s) from single-event rules; %d open alert(s) held", batch_id,
                     len(published), self.folder.held)
        return len(published)

    def idle(self) -> None:
        """A micro-batch without events: nothing to evaluate, but the rules' health records the batch."""
        rules, _, _ = self.ruleset.current()
        if rules:
            ids = [r.rule_id for r in rules]
            self.ruleset.health.track(ids, self.QUERY)
            self.ruleset.health.batch_done(self.QUERY, ids, dt.datetime.now(dt.UTC).replace(tzinfo=None), set())


# -- windowed rules: one query ------------------------------------------------------------------------------------
def events_stream(spark: SparkSession, settings: Settings, schema, checkpoint: Path | None = None,
                  columns: Sequence[str] | None = None) -> DataFrame:
    """The ``events`` table as a stream (created empty first, so its schema is known before the first batch).

    ``checkpoint``: the checkpoint of the query that reads it. The source keeps its initial offset there, so a
    crash in the query's first batch followed by new commits neither loses nor repeats events (#13/#16);
    without it (tests, one-off reads) that case is unsafe.
    ``columns``: read only these (dotted paths, e.g. ``"source.ip"``) of ``schema``: a query that needs a few
    dozen of the table's ~430 leaves then reads and converts only those."""
    from pyspark.sql.types import StructType

    path = settings.table_path(TABLE_EVENTS)
    stored = StructType([f for f in schema.fields if f.name != EVENT_TIME_COLUMN])
    ensure_table(path, arrow_schema(stored))
    keep = initial_offset_file(checkpoint, TABLE_EVENTS) if checkpoint is not None else None
    read = pruned_schema(stored, columns) if columns is not None else None
    return read_delta_stream(spark, path, initial_offset_file=keep, schema=read)


def start_windowed(spark: SparkSession, settings: Settings, ruleset: RuleSet, rules: list[Rule], trigger: Trigger,
                   output_mode: str = "update") -> StreamingQuery:
    """One streaming query for every windowed rule of ``output_mode`` (see the module doc)."""
    name = QUERY_WINDOWED if output_mode == "update" else QUERY_WINDOWED_APPEND
    specs = [r.windowed for r in rules]
    by_key = {r.windowed.key: r for r in rules}
    folder = AlertFolder(settings, f"nightjar.{name}", ruleset.metas(rules))
    ids = [r.rule_id for r in rules]
    ruleset.health.track(ids, name)

    def write(df: DataFrame, batch_id: int) -> None:
        batch = materialized(df)  # read by the distinct and by every rule's finish: see materialized()
        try:
            # Only the rules with updated windows in this batch run their finish (one plan per rule, unioned): a
            # small live batch touches a few of the windowed rules, and a batch that only advanced the watermark
            # none. Finish is row-wise, so a rule without rows has no candidates. materialized() did the state work.
            present = {r[0] for r in batch.select(RULE).distinct().collect()}
            rows = _finish_all(batch, [s for s in specs if s.key in present], by_key, ruleset, name)
            at = batch_time(batch, checkpoint, batch_id) if rows else dt.datetime.now(dt.UTC).replace(tzinfo=None)
        finally:
            release(batch)
        published = folder.process(rows, batch_id, at) if rows else []
        ruleset.health.batch_done(name, ids, at, {a["rule_id"] for a in published})
        if published:
            log.info("%s batch %d: %d alert revision(s); %d open alert(s) held", name, batch_id, len(published),
                     folder.held)

    checkpoint = settings.checkpoint(name)
    events = detection_input(events_stream(spark, settings, ruleset.schema, checkpoint), observe_as=name)
    events = events.withWatermark(EVENT_TIME_COLUMN, settings.detection_watermark)
    out = aggregate(events, specs).withColumn(BATCH_TS, F.current_timestamp())
    writer = (out.writeStream.queryName(name).outputMode(output_mode).foreachBatch(batch_function(write))
              .option("checkpointLocation", str(checkpoint)))
    # Update mode emits nothing when only the watermark moves: no such batches (see NO_DATA_BATCHES_OFF).
    with session_conf(spark, NO_DATA_BATCHES_OFF if output_mode == "update" else {}):
        query = trigger.apply(writer).start()
    log.info("started query %s: %d windowed rule(s) (%s)", name, len(rules), ", ".join(sorted(ids)))
    return query


def _finish_all(batch: DataFrame, specs: list, by_key: dict[str, Rule], ruleset: RuleSet, query: str) -> list[dict]:
    """Every rule's finish over the batch's aggregated rows; on failure, rule by rule, so one broken rule is found
    (and, failing again and again, disabled) while the others keep alerting."""
    if not specs:
        return []
    try:
        return [r.asDict(recursive=True) for r in finish(batch, specs).collect()]
    except Exception as exc:
        whole = exc
    if ruleset.health.stopping.is_set():  # cancelled by the stop, not broken: no rule to single out
        raise whole
    rows, broken = [], []
    for spec in specs:
        try:
            rows += [r.asDict(recursive=True) for r in finish(batch, [spec]).collect()]
        except Exception as exc:
            broken.append((by_key[spec.key], _one_line(exc)))
    if not broken:  # the batch as a whole failed for a reason no single rule reproduces: retry the batch
        ruleset.health.failed([r.rule_id for r in by_key.values()], _one_line(whole))
        raise whole
    retry = False
    for rule, error in broken:
        if ruleset.health.fault(rule.rule_id, error):
            ruleset.disable(rule, error)
        else:
            retry = True
    if retry:  # not yet known to be the rule's own fault: the query restarts from its checkpoint, with backoff
        raise RuntimeError(f"{query}: rule(s) {', '.join(r.rule_id for r, _ in broken)} failed: {broken[0][1]}")
    return rows


# -- Python rules with their own detect() ---------------------------------------------------------------------------
def own_query_name(rule: Rule) -> str:
    return f"rule.{rule.rule_id}"


def start_own_query(spark: SparkSession, settings: Settings, ruleset: RuleSet, rule: Rule, trigger: Trigger) -> StreamingQuery:
    """A Python rule whose detect() is its own plan: a query of its own (checkpoint named by its digest)."""
    name = own_query_name(rule)
    folder = AlertFolder(settings, f"nightjar.{name}.{rule.digest}", {rule.rule_id: rule.meta})
    ruleset.health.track([rule.rule_id], name)

    def write(df: DataFrame, batch_id: int) -> None:
        rows = [r.asDict(recursive=True) for r in df.collect()]
        at = rows[0].pop(BATCH_TS) if rows else dt.datetime.now(dt.UTC).replace(tzinfo=None)
        for r in rows[1:]:
            r.pop(BATCH_TS, None)
        published = folder.process(rows, batch_id, at)
        ruleset.health.batch_done(name, [rule.rule_id], at, {a["rule_id"] for a in published})

    checkpoint = settings.checkpoint(f"rules/{rule.rule_id}-{rule.digest}")
    out = rule.detect(detection_input(events_stream(spark, settings, ruleset.schema, checkpoint))).withColumn(
        BATCH_TS, F.current_timestamp())
    writer = (out.writeStream.queryName(name).outputMode(rule.output_mode).foreachBatch(batch_function(write))
              .option("checkpointLocation", str(checkpoint)))
    log.info("started query %s (%s, %s)", name, rule.kind, rule.source.name)
    return trigger.apply(writer).start()


def _one_line(exc: object) -> str:
    return summarize_query_error(str(exc))[:500]
