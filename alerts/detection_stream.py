"""Streaming detection: the rules over the ``events`` table as it grows, alerts to Kafka and Delta, rules reloaded
while running.

Shape (why: stateless rules can change between micro-batches; a windowed aggregation's plan cannot):

- **one query for every single-event rule** (``detect``): reads new ``events`` commits (``nightjar_delta``
  source), and in each micro-batch applies the rules *current at that batch* — a rule file added, changed or
  disabled takes effect from the next batch, no restart;
- **one query per stateful rule** (Sigma correlations, windowed Python rules), ``detect.<rule_id>``: its own
  watermarked aggregation in update mode and its own checkpoint (named by the rule's digest, so a changed rule
  starts afresh and an unchanged one resumes its state). The supervisor polls the rules directory and starts,
  restarts or stops these queries as files change; a broken rule is logged (file, rule, problem) and skipped.

Every query folds its candidates into alert revisions with an :class:`~alerts.alert_builder.AlertBuilder`
(seeded from the ``alerts`` table at start, so suppression survives restarts) and publishes them with
:func:`alerts.alert_sink.publish_alerts`: Kafka delivery confirmed, then one Delta commit with the query's app id
and batch id — a replayed batch is skipped, so each revision lands in ``alerts`` exactly once.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import threading
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from alerts.alert_builder import AlertBuilder, RuleMeta
from alerts.detection_input import detection_input, events_schema
from alerts.rule_loader import Rule, RuleError, load_rules, rule_files
from core.config import TABLE_ALERTS, TABLE_EVENTS, Settings
from ingest.normalize import EVENT_TIME_COLUMN

log = logging.getLogger(__name__)

QUERY_DETECT = "detect"
BATCH_TS = "_batch_ts"  # the micro-batch's timestamp: the same when a batch is replayed (detected_at)
_publish_lock = threading.Lock()  # queries publish from their own threads; Delta commits one at a time


def open_alerts(lake: Path, rule_ids: set[str]) -> list[dict]:
    """The newest revision of every alert of ``rule_ids`` in the ``alerts`` table (empty when there is none)."""
    from core.lake import table_dataset

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

    def set_rules(self, rules: dict[str, RuleMeta]) -> None:
        self.builder.rules = rules

    def process(self, candidates: list[dict], batch_id: int, detected_at: dt.datetime) -> int:
        from alerts.alert_sink import publish_alerts

        if not candidates:
            return 0
        saved = copy.deepcopy(self.builder.open)
        try:
            revisions = self.builder.add(candidates, detected_at)
            if not revisions:
                return 0
            with _publish_lock:
                publish_alerts(revisions, self.settings, batch_id, self.app_id)
            return len(revisions)
        except BaseException:
            self.builder.open = saved  # the batch will be replayed: fold it again from the same state
            raise


def _rows(df: DataFrame) -> tuple[list[dict], dt.datetime]:
    rows = [r.asDict(recursive=True) for r in df.collect()]
    ts = rows[0].pop(BATCH_TS) if rows else dt.datetime.now(dt.UTC).replace(tzinfo=None)
    for r in rows[1:]:
        r.pop(BATCH_TS, None)
    return rows, ts


class DetectionSupervisor:
    """Runs the detection queries and keeps them in step with the rule files."""

    def __init__(self, spark: SparkSession, settings: Settings, rule_paths: list[Path], trigger,
                 poll_s: float = 10.0) -> None:
        self.spark, self.settings, self.rule_paths, self.trigger = spark, settings, rule_paths, trigger
        self.poll_s = poll_s
        self.schema = events_schema(spark)
        self.stateless: dict[str, Rule] = {}
        self.stateful: dict[str, tuple[Rule, StreamingQuery]] = {}
        self.errors: list[RuleError] = []
        self._fingerprint: tuple = ()
        self._lock = threading.Lock()
        self._folder: AlertFolder | None = None
        self.stateless_query: StreamingQuery | None = None
        self._retired: list[StreamingQuery] = []  # rule queries that failed (reported, not restarted)
        self._broken: set[tuple[str, str]] = set()  # (rule id, digest) that failed: wait for a changed file
        self._last_poll = time.monotonic()

    # -- rules ----------------------------------------------------------------------------------------------
    def _files_fingerprint(self) -> tuple:
        out = []
        for f in rule_files(self.rule_paths):
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
        rules, errors = load_rules(self.rule_paths, self.schema)
        for e in errors:
            if str(e) not in {str(x) for x in self.errors}:
                log.error("rule skipped: %s", e)
        self.errors = errors
        with self._lock:
            self.stateless = {r.rule_id: r for r in rules if not r.stateful}
            if self._folder is not None:
                self._folder.set_rules({r.rule_id: r.meta for r in self.stateless.values()})
        wanted = {r.rule_id: r for r in rules if r.stateful}
        for rid, (rule, query) in list(self.stateful.items()):
            if rid not in wanted or wanted[rid].digest != rule.digest:
                log.info("rule %s %s: stopping its query", rid, "removed" if rid not in wanted else "changed")
                query.stop()
                del self.stateful[rid]
        for rid, rule in wanted.items():
            if rid not in self.stateful and (rid, rule.digest) not in self._broken:
                self.stateful[rid] = (rule, self._start_stateful(rule))
        log.info("rules loaded: %d single-event, %d stateful, %d problem(s)", len(self.stateless), len(wanted),
                 len(errors))
        return True

    # -- queries --------------------------------------------------------------------------------------------
    def _events(self) -> DataFrame:
        from ingest.delta_sink import arrow_schema, ensure_table
        from ingest.delta_source import read_delta_stream

        path = self.settings.table_path(TABLE_EVENTS)
        # The detection queries may start before the events query has written anything: create the table
        # (empty, the schema the events query writes) so the source knows its schema from the first batch.
        ensure_table(path, arrow_schema(StructType([f for f in self.schema.fields if f.name != EVENT_TIME_COLUMN])))
        return read_delta_stream(self.spark, path)

    def start(self) -> list[StreamingQuery]:
        self.reload(force=True)
        self.stateless_query = self._start_stateless()
        return self.queries()

    def queries(self) -> list[StreamingQuery]:
        qs = [q for _, q in self.stateful.values()]
        return ([self.stateless_query] if self.stateless_query is not None else []) + qs

    def _start_stateless(self) -> StreamingQuery:
        with self._lock:
            metas = {r.rule_id: r.meta for r in self.stateless.values()}
        self._folder = folder = AlertFolder(self.settings, f"nightjar.{QUERY_DETECT}", metas)

        def write(df: DataFrame, batch_id: int) -> None:
            with self._lock:
                rules = list(self.stateless.values())
            if not rules:
                return
            batch = df.cache()  # the new events files are read once, for every rule and the batch timestamp
            try:
                events = detection_input(batch.drop(BATCH_TS))
                parts = [r.detect(events) for r in rules]
                cands = parts[0]
                for p in parts[1:]:
                    cands = cands.unionByName(p)
                rows = [r.asDict(recursive=True) for r in cands.collect()]
                if not rows:
                    return
                detected = batch.select(BATCH_TS).limit(1).collect()[0][0]
            finally:
                batch.unpersist()
            n = folder.process(rows, batch_id, detected)
            if n:
                log.info("detect batch %d: %d alert revision(s)", batch_id, n)

        stream = self._events().withColumn(BATCH_TS, F.current_timestamp())
        writer = (stream.writeStream.queryName(QUERY_DETECT).foreachBatch(write)
                  .option("checkpointLocation", str(self.settings.checkpoint(QUERY_DETECT))))
        return self.trigger.apply(writer).start()

    def _start_stateful(self, rule: Rule) -> StreamingQuery:
        name = f"{QUERY_DETECT}.{rule.rule_id}"
        folder = AlertFolder(self.settings, f"nightjar.{name}.{rule.digest}", {rule.rule_id: rule.meta})

        def write(df: DataFrame, batch_id: int) -> None:
            rows, detected = _rows(df)
            n = folder.process(rows, batch_id, detected)
            if n:
                log.info("%s batch %d: %d alert revision(s)", name, batch_id, n)

        out = rule.detect(detection_input(self._events())).withColumn(BATCH_TS, F.current_timestamp())
        writer = (out.writeStream.queryName(name).outputMode(rule.output_mode).foreachBatch(write)
                  .option("checkpointLocation", str(self.settings.checkpoint(f"{QUERY_DETECT}/{rule.rule_id}-"
                                                                            f"{rule.digest}"))))
        log.info("started query %s (%s, %s)", name, rule.kind, rule.source.name)
        return self.trigger.apply(writer).start()

    def rule_queries(self) -> list[StreamingQuery]:
        return [q for _, q in self.stateful.values()]

    def is_rule_query(self, query: StreamingQuery) -> bool:
        return any(q is query or q.id == query.id for _, q in self.stateful.values()) or any(
            q.id == query.id for q in self._retired)

    def poll(self) -> None:
        """Between waits: re-read changed rule files; report and drop a rule query that failed."""
        now = time.monotonic()
        for rid, (rule, q) in list(self.stateful.items()):
            if not q.isActive and q.exception() is not None:
                log.error("rule %s (%s) failed and is skipped until its file changes: %s", rid, rule.source,
                          " ".join(str(q.exception()).split())[:500])
                self._retired.append(q)
                self._broken.add((rid, rule.digest))
                del self.stateful[rid]
        if now - self._last_poll >= self.poll_s:
            self._last_poll = now
            self.reload()

    def stop(self) -> None:
        for q in self.queries():
            if q.isActive:
                q.stop()
