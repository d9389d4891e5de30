"""``nightjar run``: the streaming pipeline, Kafka -> Delta -> alerts, exactly once, supervised.

The topology (docs/topology.md has the diagram and the measurements behind it) is two queries, plus one per
Python rule that brings its own plan:

* ``ingest`` reads Kafka once. Each micro-batch: every record -> ``bronze``; parsed to events (``ingest.arrow_parse``)
  -> DHCP sessions and host attribution (``enrich.dhcp_sessions``, the one ``applyInPandasWithState`` operator)
  -> reference joins (``enrich.static_joins``) -> ``events``; unparseable records -> ``quarantine``; session
  changes -> ``dhcp_sessions``; and the single-event rules over the batch's events -> alerts, in the same batch.
* ``windowed`` reads new ``events`` commits and runs every correlation and windowed Python rule in one
  aggregation (``alerts.window_aggregator``) -> alerts. (``windowed-append`` joins it when a rule needs append
  mode.)

Each table commits with its own Delta app id and the batch id (``ingest.delta_sink``), so a batch replayed after
a crash writes only what it had not written; alerts go to Kafka before their Delta commit.

Supervision: a query that fails at run time is restarted from its checkpoint with exponential backoff; the rules
it carries are marked ``restarting`` (``nightjar rules list``, ``pipeline_progress``). A rule still down after
``Settings.health_grace_s`` (or down for good) raises a health alert to the SOC, closed by its next revision when the
rule runs again; a transient that recovers within the grace is only recorded. Data loss and a failure that keeps
coming back for ``--max-restarts`` attempts stop the run with one line. Rule files are re-read while running:
the ingest batch picks up single-event rules at once, the windowed query restarts on its checkpoint with the new
rule set (unchanged rules keep their windows).

``--available-now`` drains what is in Kafka, then runs the detections over what was written, and exits. The
ingest query is stopped only after a micro-batch without new input has run: that batch releases the events still
waiting for a DHCP lease, so a backfill always ends with all of its events written.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar run`'s
# arguments, and --help or a bad argument must not wait for the stages' own dependencies (pandas, scikit-learn,
# pySigma) (nightjar/cli.py).
from alerts.rule_sources import add_rules_arguments, rules_from_args
from core.batch_gate import BatchNotStarted, StopRequest, batch_function, stop_between_batches
from core.checkpoints import clear_unplanned_first_batch
from core.config import (
    DETECTION_POLL,
    RAW_TOPICS,
    TABLE_ALERTS,
    TABLE_BRONZE,
    TABLE_DHCP_SESSIONS,
    TABLE_EVENTS,
    TABLE_NETWORKS,
    TABLE_PIPELINE_PROGRESS,
    TABLE_QUARANTINE,
    Settings,
)
from core.durations import parse_duration
from core.errors import DataLossError, UserError, summarize_query_error
from core.fault_points import fault_point
from core.lake import add_create_argument, require_lake
from core.spark_session import (
    build_spark,
    in_this_query,
    materialized,
    materialized_rows,
    release,
)
from core.triggers import (
    QUERIES,
    QUERY_AUTH_SESSIONS,
    QUERY_DETECT,
    QUERY_INGEST,
    QUERY_ML,
    QUERY_WINDOWED,
    QUERY_WINDOWED_APPEND,
    Trigger,
    parse_interval,
)
from ingest.arrow_parse import parse_bronze
from ingest.embedded_broker import check_reachable, ensure_topics
from nightjar.rebuild_events import require_current_events

log = logging.getLogger(__name__)

BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 60.0)
DEFAULT_MAX_RESTARTS = 5  # consecutive restarts of the ingest query before the run gives up
AUX_START_CAP_S = 120.0  # the longest a live run defers a query that is off the alert path (auth_sessions)
ROWS_PER_WRITE_TASK = 2000  # an ingest batch's rows per write/rule task (see write_partitions)
DRAIN_TRIGGER = "1 second"  # micro-batch interval of a drain: back to back while batches take longer
HEALTH_APP_ID = "nightjar.health"  # the Delta app id (and batch sequence) of the health alerts in the alerts table
OUTAGE_WORDS = "has been down for"  # in the summary of every outage's first health alert revision


class InterruptedBatchFilter(logging.Filter):
    """Log records that are the stop's own doing, not failures, become one INFO line once the run is stopping:

    * py4j's "exception while executing the Python Proxy" ERROR with a Java ``InterruptedException`` (or a refused
      connection: the JVM stopped first) is the micro-batch the stop interrupted; the next run replays it from its
      checkpoint;
    * py4j's "Exception while sending command." (logged on the root logger) is a call into the JVM that the JVM's
      own shutdown cut (seen at the end of ``nightjar demo``).

    Before the stop such records are real failures and stay as they are."""

    def __init__(self) -> None:
        super().__init__()
        self.stopping = threading.Event()

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.stopping.is_set():
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BatchNotStarted):
            _as_info(record, "%s", str(exc))
        elif exc is not None and (any(m in _text(exc) for m in STOP_INTERRUPTIONS)
                                or BARE_JVM_CALL_FAILURE.match(_text(exc).strip())):
            _as_info(record, "a micro-batch was interrupted by the stop; the next run replays it from its checkpoint")
        elif record.levelno >= logging.ERROR and str(record.msg).startswith(PY4J_SEND_FAILED):
            cause = (_text(exc).splitlines()[:1] or ["connection closed"])[0]
            _as_info(record, "a call into the JVM was cut by the stop (py4j: %s)", cause)
        return True


def _as_info(record: logging.LogRecord, msg: str, *args: object) -> None:
    record.levelno, record.levelname = logging.INFO, "INFO"
    record.msg, record.args = msg, args
    record.exc_info = record.exc_text = None


def _text(exc: BaseException | None) -> str:
    try:  # a Py4JJavaError asks the JVM for its text, which may be going away
        return str(exc)
    except Exception:
        return ""


PY4J_SEND_FAILED = "Exception while sending command"
# What a micro-batch dies of when the stop interrupts it, or the JVM's own SIGTERM hook closed the gateway first.
STOP_INTERRUPTIONS = ("InterruptedException", "ClosedByInterruptException", "Connection refused")
# A micro-batch's failure reduced to the JVM call that failed, no cause (core.errors.short_batch_errors): seen at the
# end of `nightjar demo`, whose SIGTERM also reaches the JVM, when Spark's own shutdown hook cut the batch's job.
# After the stop only; before it, it is a failure like any other (the batch is replayed by the next run either way).
BARE_JVM_CALL_FAILURE = re.compile(r"An error occurred while calling o\d+\.\w+\.?$")
INTERRUPTED_BATCHES = InterruptedBatchFilter()
logging.getLogger("py4j.clientserver").addFilter(INTERRUPTED_BATCHES)
logging.getLogger().addFilter(INTERRUPTED_BATCHES)  # py4j's java_gateway logs the cut connection on the root logger


def to_bronze(records: DataFrame) -> DataFrame:
    """Kafka records -> bronze rows: the record untouched plus the time the pipeline ingested it."""
    return records.select("key", "value", "topic", "partition", "offset", "timestamp", "headers",
                          F.current_timestamp().alias("ingested_at"))


# -- the ingest query ----------------------------------------------------------------------------------------------
def start_ingest(spark: SparkSession, settings: Settings, trigger: Trigger, detector=None) -> StreamingQuery:
    """Kafka -> bronze, events, quarantine, dhcp_sessions and single-event alerts, all from one micro-batch.

    ``detector`` (``alerts.detection_stream.SingleEventDetector``) runs the single-event rules over the batch's
    events after they are committed; a failure there fails the batch, which is replayed (the tables it already
    committed skip the replay).
    """
    from alerts.detection_stream import BATCH_TS, batch_time
    from enrich.dhcp_sessions import (
        attribute_stream,
        dhcp_networks_from_lake,
        events_from,
        quarantine_from,
        records_from,
        sessions_from,
    )
    from ingest.delta_sink import write_batch
    from ingest.kafka_source import read_kafka

    paths = {name: settings.table_path(name)
             for name in (TABLE_BRONZE, TABLE_EVENTS, TABLE_QUARANTINE, TABLE_DHCP_SESSIONS)}
    enrich = _static_enrichment(spark, settings)

    def app(table: str) -> str:
        return f"nightjar.{QUERY_INGEST}.{table}"

    tables_ready = False  # the run's first batch creates the tables, even when it brings no records
    side_tables = {TABLE_BRONZE: records_from, TABLE_QUARANTINE: quarantine_from, TABLE_DHCP_SESSIONS: sessions_from}
    # Threads kept for the query's life (a pool per batch would open new Py4J connections every micro-batch).
    writers = ThreadPoolExecutor(len(side_tables), thread_name_prefix="ingest-write")
    checkpoint = settings.checkpoint(QUERY_INGEST)

    def write(df: DataFrame, batch_id: int) -> None:
        nonlocal tables_ready
        # Kafka read, parsed and attributed once for every table, and stored as plain rows: the plans below (four
        # writes, the enrichment, the rules) are then planned over a scan of stored blocks, not over the whole
        # ingest plan with a cache lookup each (see core.spark_session.materialized).
        t0 = time.monotonic()
        stored, rows = materialized_rows(df)
        t_read = time.monotonic()
        try:
            # An idle micro-batch (a live run between arrivals, the drain's last) has nothing to write or detect: skip
            # the four table writes and the rules, each a Spark job with Python workers (~10 s per empty batch
            # measured at load 14, during which a record that arrives waits).
            if tables_ready and rows == 0:
                if detector is not None:
                    detector.idle()
                fault_point("batch.end")
                return
            # bronze, quarantine and dhcp_sessions are written beside the events chain (enrich, write, rules): each
            # table commits on its own app transaction, so no order between them matters for a replay, and side by
            # side their small jobs and commits overlap (docs/performance.md, "Ingest query: execution").
            # The batch comes in the lease state's shuffle partitions (fixed by the checkpoint); a live batch of tens
            # of rows would then run every write and rule as that many tasks, each with its Python worker round trip
            # and its own Delta file. Small batches go on in fewer partitions (docs/performance.md, "Ingest query:
            # execution"): a coalesce of stored blocks is a narrow read, no shuffle.
            unified = stored.coalesce(write_partitions(rows))
            side = [writers.submit(in_this_query(write_batch), frame(unified), paths[table], app(table), batch_id)
                    for table, frame in side_tables.items()]
            try:
                # Stored by the events write, its first reader (a job saved); the rules then read the stored rows.
                events = materialized(enrich(events_from(unified)), eager=False)
                try:
                    write_batch(events, paths[TABLE_EVENTS], app(TABLE_EVENTS), batch_id)
                    t_events = time.monotonic()
                    if detector is not None:
                        detector(events, batch_id, lambda: batch_time(unified, checkpoint, batch_id))
                    t_rules = time.monotonic()
                finally:
                    release(events)
                for done in side:
                    done.result()  # a failed side write fails the batch, which is replayed
            finally:
                wait(side)  # after a failure above too: no job of this batch outlives it
            # Where a micro-batch's time goes (the profile of a live run is these lines): read = Kafka, parse and
            # the DHCP operator; events = joins and the events write; side writes finish after that.
            log.info("ingest batch %d: %d records; read+parse+attribute %.2fs, enrich+events write %.2fs, "
                     "single-event rules %.2fs, side writes waited %.2fs", batch_id, rows, t_read - t0,
                     t_events - t_read, t_rules - t_events, time.monotonic() - t_rules)
            fault_point("batch.end")  # every table and the batch's state written; Spark's commit log not yet
            tables_ready = True
        finally:
            release(stored)

    drain = trigger.available_now
    records = read_kafka(spark, settings, drain=drain)
    parsed = parse_bronze(to_bronze(records), max_record_bytes=settings.max_record_bytes, raw_record=True)
    # A drain holds an event for its lease one micro-batch at most (the run stops after a batch without input,
    # which releases them); a live run up to lease_hold_s.
    hold_s = 0.0 if drain else settings.lease_hold_s
    unified = attribute_stream(parsed, dhcp_networks_from_lake(settings.table_path(TABLE_NETWORKS)), hold_s=hold_s)
    writer = (unified.withColumn(BATCH_TS, F.current_timestamp()).writeStream.queryName(QUERY_INGEST)
              .foreachBatch(batch_function(write)).option("checkpointLocation", str(checkpoint)))
    # The operator's processing-time timeouts make Spark run micro-batches for ever, also under availableNow: a
    # drain reads up to the ends the topics had at start (endingOffsets) under a processing-time trigger, and the
    # supervisor stops it between two micro-batches, once one without input has run.
    return writer.trigger(processingTime=DRAIN_TRIGGER if drain else trigger.interval).start()


def write_partitions(rows: int) -> int:
    """Partitions for an ingest micro-batch of ``rows`` rows: one per :data:`ROWS_PER_WRITE_TASK` started (at least
    one; coalescing never adds any, so a large batch keeps the state's partitions and both cores)."""
    return max(1, -(-rows // ROWS_PER_WRITE_TASK))


def _static_enrichment(spark: SparkSession, settings: Settings) -> Callable[[DataFrame], DataFrame]:
    """The stream-static joins with the reference tables, current as of each micro-batch."""
    from enrich.reference_data import ReferenceCache
    from enrich.static_joins import enrich_static

    cache = ReferenceCache(settings.lake)
    return lambda events: enrich_static(events, cache.current())


def check_lake_writable(lake: Path) -> None:
    """Fail in one line, before Spark starts, if the lake cannot hold tables and checkpoints."""
    try:
        lake.mkdir(parents=True, exist_ok=True)
        probe = lake / f".write-test-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"lake directory {lake} is not writable ({exc.strerror}): pass --lake DIR") from exc


# -- supervision ---------------------------------------------------------------------------------------------------
@dataclass
class Managed:
    """A query the supervisor keeps running: how to start it, which rules it carries, how it has fared."""

    name: str
    start: Callable[[], StreamingQuery]
    rules: Callable[[], list[str]] = list
    max_restarts: int | None = None  # None: retry for ever (detections: coverage is what matters)
    query: StreamingQuery | None = None
    restarts: int = 0
    restart_at: float | None = None
    done: bool = False
    history: list[StreamingQuery] = field(default_factory=list)
    # Started by the supervisor's poll once this is true (None: at once). For queries off the alert path, so that
    # their cold first batches do not share the cores with the first batches that lead to an alert.
    start_after: Callable[[], bool] | None = None


@dataclass
class Outage:
    """A rule whose query failed and has not completed a batch since (see Supervisor.check_outages)."""

    since: dt.datetime  # the first failure, naive UTC: the health alert's window start, hence its id
    since_mono: float  # the same moment on the monotonic clock, for the grace
    error: str  # the newest failure
    final: str | None = None  # why it will not come back by itself: alert at once
    raised: dict | None = None  # the health alert revision published for it (None: none yet)
    carried: bool = False  # raised by an earlier run and never closed: closed once the rule completes a batch here


class Supervisor:
    """Starts the queries, restarts the ones that fail, follows the rule files, reports rule health."""

    def __init__(self, spark: SparkSession, settings: Settings, trigger: Trigger, names: list[str],
                 recorder=None, poll_s: float = 10.0, max_restarts: int = DEFAULT_MAX_RESTARTS,
                 stop_request: threading.Event | None = None) -> None:
        from alerts.detection_stream import RuleHealth, RuleSet, SingleEventDetector
        from alerts.rule_sources import rule_sources

        self.spark, self.settings, self.trigger, self.names = spark, settings, trigger, names
        INTERRUPTED_BATCHES.stopping.clear()  # a new run in the same process (tests, the demo): not stopping yet
        # Set by a signal handler: from then on no query is started, and the stop's wait counts from its moment.
        self.stop_request = stop_request or StopRequest()
        self.recorder = recorder
        self.poll_s = poll_s
        self.max_restarts = max_restarts
        self.health = RuleHealth(sink=recorder.add_rows if recorder is not None else None)
        self.health.on_failure = self._health_alerts
        self.ruleset = RuleSet(spark, rule_sources(settings.rules, settings.builtin_rules), self.health)
        self.ruleset.reload(force=True)
        self.detector = SingleEventDetector(settings, self.ruleset, f"nightjar.{QUERY_INGEST}.alerts")
        self.managed: dict[str, Managed] = {}
        self._windowed_sig: dict[str, tuple] = {}
        self._last_reload = time.monotonic()
        self._health_batch: int | None = None
        # Health alerts not yet in the alerts table (e.g. its disk was full): retried every poll, same batch id.
        self._health_pending: list[tuple[int, list[dict]]] = []
        self._outages: dict[str, Outage] = {}  # rule id -> its current outage
        self.carry_open_outages()
        self._health_warned: set[int] = set()
        # Rule failures arrive from the query threads (foreachBatch) and from poll(): one publisher at a time.
        self._health_lock = threading.RLock()

    # -- starting ------------------------------------------------------------------------------------------------
    def start_ingest(self) -> None:
        single = lambda: [r.rule_id for r in self.ruleset.current()[0]]  # noqa: E731
        self._add(Managed(QUERY_INGEST, lambda: start_ingest(self.spark, self.settings, self.trigger,
                                                             self.detector if QUERY_DETECT in self.names else None),
                          rules=single, max_restarts=self.max_restarts))

    def start_detection(self) -> None:
        if QUERY_DETECT not in self.names:
            return
        self._sync_detection()
        self._start_ml()

    def _start_ml(self) -> None:
        """ML scoring (alerts/ml): its own small query, started when a trained model is in the lake; it picks up
        newer model versions between micro-batches by itself."""
        from alerts.ml.ml_scoring import RULES, models_available, start_ml_scoring

        if QUERY_ML not in self.managed and models_available(self.settings):
            self._add(Managed(QUERY_ML, lambda: start_ml_scoring(self.spark, self.settings, self.trigger, self.health),
                              rules=lambda: list(RULES)))

    def start_enrichment(self) -> None:
        """The stream-stream enrichment over the events table: ``auth_sessions`` (restarted for ever, like a rule)."""
        if QUERY_AUTH_SESSIONS not in self.names:
            return
        from alerts.detection_stream import events_stream
        from enrich.auth_sessions import start_auth_sessions

        # A live run starts it once the events table holds a first micro-batch (there is nothing to join before),
        # or after AUX_START_CAP_S: its cold first batches (planning, code generation, two state stores) then no
        # longer compete with the ingest and windowed queries' first batches, which lead to the first alert.
        # A drain starts it at once: it must read to the end before the run exits.
        wait = None if self.trigger.available_now else _events_written_or_after(
            self.settings.table_path(TABLE_EVENTS), time.monotonic() + AUX_START_CAP_S)
        self._add(Managed(QUERY_AUTH_SESSIONS, lambda: start_auth_sessions(
            self.spark, self.settings, self.trigger, events_stream(
                self.spark, self.settings, self.ruleset.schema, self.settings.checkpoint(QUERY_AUTH_SESSIONS))),
            start_after=wait))

    def _sync_detection(self) -> None:
        """Start, restart or stop the detection queries so they match the current rules."""
        from alerts.detection_stream import (
            own_query_name,
            start_own_query,
            start_windowed,
            windowed_signature,
        )

        _, windowed, own = self.ruleset.current()
        for name, mode in ((QUERY_WINDOWED, "update"), (QUERY_WINDOWED_APPEND, "append")):
            rules = [r for r in windowed if r.windowed.output_mode == mode]
            sig = windowed_signature(rules, mode)
            if self._windowed_sig.get(name) == sig and (name in self.managed or not rules):
                continue
            if name in self.managed:
                log.info("rules changed: restarting query %s on its checkpoint", name)
                self._remove(name)
            self._windowed_sig[name] = sig
            if rules:
                self._add(Managed(name, lambda rules=rules, mode=mode: start_windowed(
                    self.spark, self.settings, self.ruleset, rules, self.trigger.polling(DETECTION_POLL), mode),
                    rules=lambda rules=rules: [r.rule_id for r in rules]))
        wanted = {own_query_name(r): r for r in own}
        for name in [n for n in self.managed if n.startswith("rule.")]:
            rule = wanted.get(name)
            if rule is None or self.managed[name].rules() != [rule.rule_id] or \
                    getattr(self.managed[name], "digest", None) != rule.digest:
                log.info("rule query %s: its rule changed or was removed, stopping it", name)
                self._remove(name)
        for name, rule in wanted.items():
            if name not in self.managed:
                m = Managed(name, lambda rule=rule: start_own_query(self.spark, self.settings, self.ruleset, rule,
                                                                    self.trigger.polling(DETECTION_POLL)),
                            rules=lambda rule=rule: [rule.rule_id])
                m.digest = rule.digest  # type: ignore[attr-defined]
                self._add(m)

    def _add(self, m: Managed) -> None:
        self.managed[m.name] = m
        if m.start_after is not None and not m.start_after():
            log.info("query %s: starts once the events table has a first micro-batch (at most %.0f s from now)",
                     m.name, AUX_START_CAP_S)
            return
        m.start_after = None
        self._start(m)

    def _start(self, m: Managed) -> None:
        clear_unplanned_first_batch(self.settings.checkpoint(m.name))  # a kill in the first offset write
        m.query = m.start()
        m.history.append(m.query)
        m.restart_at = None
        log.info("query %s started (checkpoint %s)", m.name, self.settings.checkpoint(m.name))

    def _remove(self, name: str) -> None:
        m = self.managed.pop(name)
        if m.query is not None and m.query.isActive:
            m.query.stop()

    # -- watching --------------------------------------------------------------------------------------------------
    def queries(self) -> list[StreamingQuery]:
        return [q for m in self.managed.values() for q in m.history]

    def active(self) -> list[Managed]:
        return [m for m in self.managed.values() if not m.done]

    def poll(self) -> None:
        """One round: notice failures and restart what is due; in a live run, follow the rule files."""
        now = time.monotonic()
        self.check_outages()
        for m in list(self.managed.values()):
            if m.start_after is not None:  # waiting for its first start
                if self.stop_request.is_set():  # stopping: a cold start now would only delay the stop
                    continue
                if m.start_after():
                    m.start_after = None
                    try:
                        self._start(m)
                    except Exception as exc:
                        self._failed(m, summarize_query_error(str(exc)))
                continue
            if m.done or (m.query is None and m.restart_at is None):
                continue
            if m.restart_at is not None:
                if now >= m.restart_at:
                    log.info("restarting query %s (attempt %d)", m.name, m.restarts)
                    try:
                        self._start(m)
                    except Exception as exc:  # e.g. the broker is still unreachable
                        self._failed(m, summarize_query_error(str(exc)))
                continue
            if m.query.isActive:
                if m.restarts and m.query.lastProgress is not None:  # a trigger completed since the restart
                    log.info("query %s is running again after %d restart(s)", m.name, m.restarts)
                    m.restarts = 0  # --max-restarts counts failures in a row, not over the run's whole life
                if self.trigger.available_now and m.name == QUERY_INGEST and self._drained(m.query):
                    log.info("ingest: input drained and waiting events released: stopping the query")
                    INTERRUPTED_BATCHES.stopping.set()
                    m.query.stop()  # between two micro-batches: the next one is up to DRAIN_TRIGGER away
                    m.done = True
                continue
            exc = m.query.exception()
            if exc is None and self.trigger.available_now and m.name != QUERY_INGEST:
                m.done = True  # available-now: finished
                continue
            # A live query, or the drain (stopped by the supervisor, above), never ends by itself: an end without
            # a recorded error (a JVM Error that killed the query thread) is a failure too, never a quiet stop.
            self._failed(m, summarize_query_error(str(exc)) if exc is not None else
                         "the query thread ended without reporting an error (see the pipeline log)")
        if not self.trigger.available_now and now - self._last_reload >= self.poll_s:
            self._last_reload = now
            if self.ruleset.reload():
                self._sync_detection()
            if QUERY_DETECT in self.names:
                self._start_ml()  # a first model trained while running starts the ML scoring query
            self.health.report_if_due()

    @staticmethod
    def _drained(query: StreamingQuery) -> bool:
        """A micro-batch without input has run, and it was not this run's first: a restarted drain's first batch can
        be the replay of the empty batch the previous drain stopped after, which asks Kafka nothing (no data-loss
        check, no new offsets); the next one does."""
        history = query.recentProgress
        return len(history) >= 2 and int(history[-1].get("numInputRows", 0)) == 0

    def _failed(self, m: Managed, error: str) -> None:
        if error.startswith("data loss in Kafka"):
            raise DataLossError(error)
        m.restarts += 1
        rules = m.rules()
        if rules:
            self.health.failed(rules, error)
        if m.max_restarts is not None and m.restarts > m.max_restarts:
            self._down_for_good(rules, f"its query {m.name} failed {m.restarts} times in a row and the run stops")
            raise UserError(f"query {m.name} failed {m.restarts} times in a row; last error: {error}")
        delay = BACKOFF_S[min(m.restarts - 1, len(BACKOFF_S) - 1)]
        m.restart_at = time.monotonic() + delay
        # A warning: most failures are transients that the restart cures; the rules' health alert says when not.
        log.warning("query %s failed (%s); restarting from its checkpoint in %.0f s", m.name, error, delay)

    def stop(self) -> None:
        self.check_outages()
        with self._health_lock:
            quiet = [rid for rid, o in self._outages.items() if o.raised is None]
        if quiet:  # the run ends within their grace: the operator's log says so, the SOC gets no alert
            log.warning("stopping while rule(s) %s are down within their %s grace (no health alert raised)",
                        ", ".join(sorted(quiet)), _span(self.settings.health_grace_s))
        if not self.flush_health_alerts():
            log.error("%d health alert batch(es) could not be written to the alerts table before the stop (the SOC "
                      "may have them on the alerts topic); see the warnings above", len(self._health_pending))
        INTERRUPTED_BATCHES.stopping.set()
        self.health.stopping.set()  # batches the stop interrupts are no rule failures: no health alerts for them
        if self.recorder is not None:
            self.recorder.stopping = True
        # Each query stops once its running micro-batch is done (core.batch_gate): an interrupted batch's tasks log
        # ERRORs in Spark's log, and its work is done again by the next run.
        stop_between_batches([m.query for m in self.managed.values() if m.query is not None],
                             self.settings.stop_wait_s, stop=_stop_query,
                             requested_at=getattr(self.stop_request, "requested_at", None))

    # -- health alerts ---------------------------------------------------------------------------------------------
    # A rule is *down* from its query's first failure until one of its batches completes again (RuleHealth's status
    # back to running). Down for less than Settings.health_grace_s is a transient (a restart that failed at start
    # under load and came back): recorded in pipeline_progress and the log, no alert. Down longer, or for good (its
    # own evaluation disabled it, or its query used up --max-restarts), is an outage: one health alert, and a second
    # revision of the same alert when the rule runs again, so the SOC sees it closed.
    def _health_alerts(self, rule_ids: list[str], error: str, at: dt.datetime) -> None:
        """RuleHealth's failure hook (query threads and poll): note when each rule went down; alert when due."""
        with self._health_lock:
            for rid in rule_ids:
                outage = self._outages.get(rid)
                if outage is None:
                    self._outages[rid] = Outage(since=at, since_mono=time.monotonic(), error=error)
                    log.warning("rule %s is down (its query failed: %s); a health alert follows if it is not running "
                                "again within %s", rid, error[:200], _span(self.settings.health_grace_s))
                else:
                    outage.error = error
        self.check_outages()

    def carry_open_outages(self) -> None:
        """Health alerts an earlier run raised and did not close (it stopped while the rule was down): this run closes
        each with its next revision once the rule completes a batch, so no outage stays open on the SOC's side."""
        from alerts.alert_builder import naive_utc
        from alerts.detection_stream import HEALTH_RULE, open_alerts

        for alert in open_alerts(self.settings.lake, {HEALTH_RULE.rule_id}):
            # Revision 2 is the recovery: closed. Alerts of the former one-alert-per-failure scheme (no "has been
            # down" summary) had no recovery revision: closing them all on an upgrade would flood the SOC.
            if alert["revision"] == 1 and alert["entity"]["type"] == "rule" and OUTAGE_WORDS in alert["summary"]:
                since = naive_utc(alert["window_start"])
                self._outages[alert["entity"]["value"]] = Outage(
                    since=since, since_mono=time.monotonic(), error="see the first revision (an earlier run)",
                    raised={**alert, "window_start": since}, carried=True)

    def _down_for_good(self, rule_ids: list[str], reason: str) -> None:
        """The rules will not come back by themselves (their query gave up): alert now, without waiting for the
        grace."""
        with self._health_lock:
            for rid in rule_ids:
                if rid in self._outages:
                    self._outages[rid].final = reason
        self.check_outages()

    def check_outages(self) -> None:
        """Raise the health alerts of outages past their grace (or final), close those of rules running again,
        then publish what is pending. Called by every poll and on every failure."""
        from alerts.detection_stream import STATUS_DISABLED, STATUS_RUNNING

        now, at = time.monotonic(), dt.datetime.now(dt.UTC).replace(tzinfo=None)
        with self._health_lock:
            for rid, outage in list(self._outages.items()):
                entry = self.health.get(rid)
                down_s = (at - outage.since).total_seconds()
                if outage.carried and (entry is None or entry.last_batch_at is None):
                    continue  # not run in this run yet
                if entry is None or entry.status == STATUS_RUNNING:  # a batch completed again (or the rule was removed)
                    del self._outages[rid]
                    how = "is running again" if entry is not None else "was removed from the rule set"
                    if outage.raised is None:
                        log.warning("rule %s %s after %s: a transient within the %s grace, no health alert",
                                    rid, how, _span(down_s), _span(self.settings.health_grace_s))
                    else:
                        log.info("rule %s %s after %s: closing its health alert", rid, how, _span(down_s))
                        self._queue_health_alert(self._health_revision(
                            rid, outage, outage.raised["revision"] + 1, at,
                            f"rule {rid} {how} after {_span(down_s)} (down from {_utc(outage.since)} to {_utc(at)} "
                            f"UTC); it had failed: {outage.error}"))
                    continue
                if outage.raised is not None:
                    continue
                if entry.status == STATUS_DISABLED:
                    outage.final = outage.final or "it is disabled until its file changes (its own evaluation failed " \
                                                   "too often)"
                if outage.final is None and now - outage.since_mono < self.settings.health_grace_s:
                    continue
                why = outage.final or "its query has not run a batch since; restarting from its checkpoint"
                outage.raised = self._health_revision(
                    rid, outage, 1, at, f"rule {rid} {OUTAGE_WORDS} {_span(down_s)} since {_utc(outage.since)} UTC: "
                                        f"{why}. Last error: {outage.error}")
                log.error("rule %s has been down for %s: health alert raised (%s)", rid, _span(down_s), why)
                self._queue_health_alert(outage.raised)
        self.flush_health_alerts()

    def _health_revision(self, rid: str, outage: Outage, revision: int, at: dt.datetime, detail: str) -> dict:
        """One revision of the health alert of ``rid``'s outage: its id comes from the rule and the time it went
        down, so the recovery is the next revision of the alert that reported the outage."""
        from alerts.alert_schema import alert_id
        from alerts.detection_stream import HEALTH_RULE

        entity = {"type": "rule", "value": rid}
        the_id = outage.raised["alert_id"] if outage.raised else alert_id(HEALTH_RULE.rule_id, "rule", rid, outage.since)
        return {"alert_id": the_id, "revision": revision,
                "rule_id": HEALTH_RULE.rule_id, "rule_name": HEALTH_RULE.name, "severity": HEALTH_RULE.severity,
                "tags": list(HEALTH_RULE.tags), "entity": entity, "host_name": None, "user_name": None,
                "window_start": outage.since, "window_end": at, "first_seen": outage.since, "last_seen": at,
                "event_count": 1, "evidence": [], "detected_at": at,
                "summary": f"{HEALTH_RULE.name}: {detail}"[:600]}

    def _queue_health_alert(self, revision: dict) -> None:
        from ingest.delta_sink import committed_batch

        if self._health_batch is None:  # continue after the batches earlier runs published
            self._health_batch = committed_batch(self.settings.table_path(TABLE_ALERTS), HEALTH_APP_ID) or 0
        self._health_batch += 1
        self._health_pending.append((self._health_batch, [revision]))

    def flush_health_alerts(self) -> bool:
        """Publish the pending health alerts in order; True when none is left. A publish that fails (the lake's disk
        full while Kafka took the message) is retried with the same batch id and content: the alerts table gets the
        revision once (Delta app transaction) and the topic at worst carries an identical copy."""
        from alerts.alert_sink import publish_alerts

        with self._health_lock:
            while self._health_pending:
                batch, revisions = self._health_pending[0]
                try:
                    publish_alerts(revisions, self.settings, batch, HEALTH_APP_ID)
                except Exception as exc:
                    if batch not in self._health_warned:  # one line per alert batch, not one per poll
                        self._health_warned.add(batch)
                        log.warning("health alert(s) for %s not yet in the alerts table (%s); retrying",
                                    ", ".join(r["entity"]["value"] for r in revisions), summarize_query_error(str(exc)))
                    return False
                self._health_pending.pop(0)
                self._health_warned.discard(batch)  # written: its warning need not be remembered
            return True


def _span(seconds: float) -> str:
    """A duration for the SOC: ``45 s``, ``2 min 10 s``, ``1 h 5 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _utc(ts: dt.datetime) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S")


def run_pipeline(settings: Settings, trigger: Trigger, queries: list[str] | None = None,
                 stop_event: threading.Event | None = None, max_restarts: int = DEFAULT_MAX_RESTARTS) -> None:
    """Start the queries and supervise them until they finish (available-now), the run fails, or ``stop_event``
    (a :class:`~core.batch_gate.StopRequest` makes the stop's wait count from the moment it was set)."""
    from nightjar.progress_recorder import ProgressRecorder

    check_lake_writable(settings.lake)
    check_reachable(settings)
    ensure_topics(settings, RAW_TOPICS)
    spark = build_spark(settings, app_name="nightjar-pipeline")
    recorder = ProgressRecorder(settings.table_path(TABLE_PIPELINE_PROGRESS))
    spark.streams.addListener(recorder)
    names = list(queries or QUERIES)
    stop_event = stop_event or StopRequest()
    supervisor = Supervisor(spark, settings, trigger, names, recorder, max_restarts=max_restarts,
                            stop_request=stop_event)
    upkeep = None
    if not trigger.available_now and settings.upkeep_interval_s > 0:  # compaction, checkpoints, vacuum: upkeep.py
        from nightjar.upkeep import Upkeep

        upkeep = Upkeep(settings, interval_s=settings.upkeep_interval_s).start()
    try:
        if QUERY_INGEST in names:
            supervisor.start_ingest()
            if trigger.available_now:  # detect over what the ingest query wrote, once it is done
                _supervise(supervisor, stop_event)
        if not stop_event.is_set():
            supervisor.start_detection()
            supervisor.start_enrichment()
            _supervise(supervisor, stop_event)
    finally:
        if upkeep is not None:
            upkeep.stop()
        supervisor.stop()
        from alerts.alert_sink import close_producers

        close_producers()  # no micro-batch publishes any more
        # A SIGTERM to the whole process group (the demo's stop, a service manager) also reaches the JVM, whose own
        # hook may stop Spark before this: then nothing more can be asked of it, and the Python side still finishes.
        jvm_up = _jvm_alive(spark)
        if not jvm_up:
            log.info("the JVM stopped before the pipeline (its own SIGTERM hook): the interrupted batches' progress "
                     "is not recorded; the next run replays them")
        elif not recorder.wait_terminated([str(q.id) for q in supervisor.queries()]):
            log.warning("the progress listener did not see every query end: progress may be incomplete")
        supervisor.health.report()
        recorder.flush()
        if jvm_up and _jvm_alive(spark):
            try:
                spark.streams.removeListener(recorder)
            except (Py4JError, OSError) as exc:  # the JVM's hook can still win the race between check and call
                log.info("the JVM stopped while the pipeline finished (%s): nothing left to unregister",
                         type(exc).__name__)


def _events_written_or_after(events: Path, deadline: float) -> Callable[[], bool]:
    """True once the events table has a commit after its creation (version 1: a first micro-batch with events),
    or from ``deadline`` (monotonic) on. Reads one file name, no Spark: it is asked every poll."""
    log_dir = events / "_delta_log"
    first, checkpointed = log_dir / f"{1:020d}.json", log_dir / "_last_checkpoint"  # (an old log's first commits
    return lambda: time.monotonic() >= deadline or first.exists() or checkpointed.exists()  # may be cleaned up)


def _stop_query(query: StreamingQuery) -> None:
    try:
        query.stop()
    except Exception as exc:  # the JVM already stopped (its own SIGTERM hook): nothing left to stop
        log.info("query %s: already stopped with the JVM (%s)", query.name, summarize_query_error(str(exc)))


def _jvm_alive(spark: SparkSession) -> bool:
    try:
        spark._jvm.java.lang.System.nanoTime()
        return True
    except Exception:
        return False


def _supervise(supervisor: Supervisor, stop_event: threading.Event) -> None:
    # A drain is stopped right after its first micro-batch without input: poll often enough to stop it before the
    # next trigger.
    interval = 0.1 if supervisor.trigger.available_now else 0.5
    while supervisor.active():
        supervisor.poll()
        if not supervisor.active():
            return
        if stop_event.wait(interval):
            log.info("stop requested: stopping %d queries", len(supervisor.active()))
            return


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--available-now", action="store_true",
                        help="process what is in Kafka now, run the detections over it, then exit")
    parser.add_argument("--trigger", default="1s", metavar="INTERVAL",
                        help="micro-batch interval when running continuously (default 1s)")
    parser.add_argument("--max-offsets-per-trigger", type=int, metavar="N",
                        help="cap on records per micro-batch over all partitions (default 50000: live batches "
                             "take what arrived since the last one, a backlog is caught up in large batches)")
    parser.add_argument("--max-record-bytes", type=int, metavar="N",
                        help="records larger than this go to quarantine unparsed (default 65536)")
    parser.add_argument("--no-fail-on-data-loss", action="store_true",
                        help="when checkpointed offsets are gone from Kafka, re-read from the earliest offset "
                             "and log a warning instead of failing")
    parser.add_argument("--max-restarts", type=int, default=DEFAULT_MAX_RESTARTS, metavar="N",
                        help=f"restarts of the ingest query after run-time failures before the run fails "
                             f"(default {DEFAULT_MAX_RESTARTS}; detection queries are restarted for ever)")
    parser.add_argument("--upkeep-every", metavar="INTERVAL",
                        help="compact, checkpoint and vacuum the pipeline's tables this often while running "
                             "(default 10m; 0 turns it off; see nightjar/upkeep.py)")
    parser.add_argument("--query", action="append", choices=list(QUERIES), dest="queries",
                        help="run only this part (repeatable; default: all)")
    add_rules_arguments(parser, "detection rule file or directory, re-read while running")
    add_create_argument(parser)


def run(args: argparse.Namespace, settings: Settings) -> int:
    for flag in ("max_offsets_per_trigger", "max_record_bytes"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            raise UserError(f"--{flag.replace('_', '-')} must be a positive number", exit_code=2)
    if args.max_restarts < 0:
        raise UserError("--max-restarts must not be negative", exit_code=2)
    require_lake(settings.lake, args.create)  # a mistyped --lake must not become a new, empty lake
    require_current_events(settings.lake)  # an old contract's events: one line naming `nightjar rebuild-events`
    trigger = Trigger(available_now=args.available_now, interval=parse_interval(args.trigger))
    # --rules wins over NIGHTJAR_RULES (the directory the dashboard's rule lab saves into); both run beside the pack
    rules_from_args(args, settings)  # a missing path, or no rules at all: one line, exit 2
    changes = {"fail_on_data_loss": not args.no_fail_on_data_loss,
               "rules": tuple(args.rules) if args.rules else settings.rules}
    if args.builtin_rules is not None:
        changes["builtin_rules"] = args.builtin_rules
    if args.upkeep_every is not None:
        try:
            changes["upkeep_interval_s"] = parse_duration(args.upkeep_every, "--upkeep-every")
        except ValueError as exc:
            raise UserError(str(exc), exit_code=2) from None
    if args.max_offsets_per_trigger is not None:
        changes["max_offsets_per_trigger"] = args.max_offsets_per_trigger
    if args.max_record_bytes is not None:
        changes["max_record_bytes"] = args.max_record_bytes
    settings = settings.with_(**changes)
    stop = StopRequest()

    def on_signal(signum: int, _frame: object) -> None:
        # Each query stops after its running micro-batch (Supervisor.stop); one still running Settings.stop_wait_s
        # after this moment is interrupted: its offsets are not committed, so the next run replays it exactly.
        log.info("received %s: stopping the queries", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("pipeline: bootstrap %s, lake %s, %s", settings.bootstrap_servers, settings.lake,
             "available-now" if trigger.available_now else f"trigger every {trigger.interval}")
    run_pipeline(settings, trigger, args.queries or list(QUERIES), stop, max_restarts=args.max_restarts)
    log.info("pipeline stopped")
    return 0
