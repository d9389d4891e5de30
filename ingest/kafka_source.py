"""Kafka as a Spark streaming source, on PySpark's Python Data Source API and confluent-kafka.

Why a Python source: the JVM connector (``spark-sql-kafka-0-10``) lives only in Maven repositories,
which these machines cannot reach (docs/architecture.md, decision 2).

Usage::

    df = read_kafka(spark, settings)                    # the raw topics, with Nightjar's settings
    # or, spelled out:
    spark.dataSource.register(KafkaDataSource)
    df = (spark.readStream.format("nightjar_kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "nightjar.raw.syslog,nightjar.raw.zeek")
          .option("startingOffsets", "earliest")         # or "latest", or JSON per partition
          .option("maxOffsetsPerTrigger", 100000)        # optional
          .option("failOnDataLoss", "true")              # default, like Spark's Kafka source
          .option("maxTasks", 2)                         # optional: Spark tasks per micro-batch (see below)
          .load())

Columns: ``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int, ``offset`` long,
``timestamp`` timestamp (Kafka's record timestamp), ``headers`` array<struct<key, value>> (null if none).

Offsets are ``{topic: {partition: next_offset}}``. Spark writes each micro-batch's (start, end) to its
offset log before running it, so a restarted query re-reads exactly the same range: with an idempotent
sink (see ``delta_sink``) every record lands exactly once.

Tasks: without ``maxTasks`` each topic partition's range is one Spark task, like Spark's own Kafka source. With
``maxTasks=N`` a micro-batch is read by at most N tasks and by one task per ``minTaskRows`` records (default 5,000):
ranges are cut and packed so the tasks get about equal shares, and one consumer per task reads all of its ranges.
Why: every task of the ingest query pays a fixed cost that has nothing to do with its records — deserializing the
wide parse plan and generating its projections' code (about 0.5 s of CPU each, profiled in docs/performance.md) —
so a live micro-batch of a few hundred records spread over eight partitions paid it eight times.

Broker quirks handled here (measured on Tansu 0.6, harmless on Apache Kafka):

* the "latest" offset a broker reports may be the base offset of the last record *batch* + 1, not the
  true end. The true end is found by reading from (reported end - 1) to the end-of-partition event;
  the answer is cached per reported end, so the extra read happens only when new data arrived.
* a consumer waits ``fetch.wait.max.ms`` at a partition's end, so the waits are kept short.
* an in-memory broker that restarts loses its topics: a checkpoint then points past a partition's end.
  That is data loss; by default the query fails with a message naming the topic and partition and the
  option to change (``failOnDataLoss``); with ``failOnDataLoss=false`` the partition is read again from
  its earliest offset and a warning is logged.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from core.config import RAW_TOPICS, Settings
from core.fault_points import fault_point

log = logging.getLogger(__name__)

SOURCE_NAME = "nightjar_kafka"
SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "headers array<struct<key: string, value: binary>>"
)
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)

EARLIEST, LATEST = -2, -1  # the conventional Kafka spellings in startingOffsets JSON
DATA_LOSS_HINT = (
    "set failOnDataLoss=false (`nightjar run --no-fail-on-data-loss`) to re-read such partitions from their "
    "earliest offset and continue, or start with a fresh checkpoint"
)


class KafkaDataLoss(RuntimeError):
    """Offsets that a checkpoint recorded are gone from the broker. The message names the partitions."""


@dataclass(frozen=True)
class KafkaOptions:
    """The source's options, validated once on the driver."""

    client_config: dict[str, str]
    topics: tuple[str, ...]
    starting_offsets: str
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    fetch_wait_max_ms: int
    poll_timeout_s: float
    read_batch_rows: int
    # None: one task per topic partition; else at most this many tasks per micro-batch, min_task_rows records each
    max_tasks: int | None = None
    min_task_rows: int = 5_000
    # "latest": read only what the topics hold when the query starts (a drain under any trigger, not only
    # availableNow: the pipeline drains under a processing-time trigger so it can stop between micro-batches)
    ending_offsets: str | None = None

    @staticmethod
    def parse(options: dict[str, str]) -> KafkaOptions:
        opts = {k.lower(): v for k, v in options.items()}
        client = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        if "bootstrap.servers" not in client:
            raise ValueError("nightjar_kafka: option kafka.bootstrap.servers is required (HOST:PORT[,HOST:PORT])")
        topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        if not topics:
            raise ValueError("nightjar_kafka: option subscribe is required (comma-separated topic names)")
        max_offsets = opts.get("maxoffsetspertrigger")
        if max_offsets is not None and (not str(max_offsets).isdigit() or int(max_offsets) <= 0):
            raise ValueError(f"nightjar_kafka: maxOffsetsPerTrigger must be a positive integer, got {max_offsets!r}")
        fail = opts.get("failondataloss", "true").lower()
        if fail not in ("true", "false"):
            raise ValueError(f"nightjar_kafka: failOnDataLoss must be true or false, got {fail!r}")
        starting = opts.get("startingoffsets", "latest").strip()
        if starting not in ("earliest", "latest"):
            try:
                parsed = json.loads(starting)
                assert isinstance(parsed, dict)
            except (ValueError, AssertionError) as exc:
                raise ValueError(
                    "nightjar_kafka: startingOffsets must be earliest, latest or JSON like "
                    f'{{"topic": {{"0": 42, "1": -2}}}}, got {starting!r}'
                ) from exc
        ending = opts.get("endingoffsets")
        if ending is not None and ending.strip() != "latest":
            raise ValueError(f"nightjar_kafka: endingOffsets can only be latest (drain what is there), got {ending!r}")
        max_tasks = _positive_int(opts, "maxtasks", "maxTasks")
        min_task_rows = _positive_int(opts, "mintaskrows", "minTaskRows") or 5_000
        return KafkaOptions(
            client_config=client,
            topics=topics,
            starting_offsets=starting,
            max_offsets_per_trigger=int(max_offsets) if max_offsets else None,
            fail_on_data_loss=fail == "true",
            fetch_wait_max_ms=int(opts.get("fetchwaitmaxms", "25")),
            poll_timeout_s=float(opts.get("polltimeoutms", "30000")) / 1000,
            read_batch_rows=int(opts.get("readbatchrows", "10000")),
            ending_offsets=ending.strip() if ending else None,
            max_tasks=max_tasks,
            min_task_rows=min_task_rows,
        )

    def consumer_config(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            # A throwaway group: offsets live in Spark's checkpoint, never in Kafka's group coordinator.
            "group.id": f"nightjar-source-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "fetch.wait.max.ms": self.fetch_wait_max_ms,
            "socket.timeout.ms": 10_000,
        }
        conf.update(self.client_config)
        return conf


def _positive_int(opts: dict[str, str], key: str, name: str) -> int | None:
    value = opts.get(key)
    if value is None:
        return None
    if not str(value).isdigit() or int(value) <= 0:
        raise ValueError(f"nightjar_kafka: {name} must be a positive integer, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class KafkaPartitionRange:
    """Records ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def rows(self) -> int:
        return self.end - self.start


class KafkaReadTask(InputPartition):
    """One Spark task: one or more ranges, read by one consumer (one range each without ``maxTasks``)."""

    def __init__(self, ranges: list[KafkaPartitionRange]):
        super().__init__(",".join(f"{r.topic}/{r.partition}/{r.start}-{r.end}" for r in ranges))
        self.ranges = ranges


def pack_ranges(ranges: list[KafkaPartitionRange], max_tasks: int, min_task_rows: int) -> list[KafkaReadTask]:
    """At most ``max_tasks`` tasks of at least ``min_task_rows`` records each (but one at least), about equal.

    Ranges longer than an equal share are cut at offset boundaries, then the pieces go largest first to the task
    with the fewest records so far. Deterministic: the same ranges always give the same tasks.
    """
    total = sum(r.rows for r in ranges)
    if not ranges:
        return []
    n = max(1, min(max_tasks, -(-total // min_task_rows)))
    share = -(-total // n)
    pieces = []
    for r in ranges:
        for start in range(r.start, r.end, share):
            pieces.append(KafkaPartitionRange(r.topic, r.partition, start, min(start + share, r.end)))
    bins: list[list[KafkaPartitionRange]] = [[] for _ in range(n)]
    loads = [0] * n
    for piece in sorted(pieces, key=lambda r: (-r.rows, r.topic, r.partition, r.start)):
        i = loads.index(min(loads))
        bins[i].append(piece)
        loads[i] += piece.rows
    return [KafkaReadTask(sorted(b, key=lambda r: (r.topic, r.partition, r.start))) for b in bins if b]


Offsets = dict[str, dict[str, int]]


def _sorted(offsets: dict[str, dict[int, int]]) -> Offsets:
    # Spark compares offsets as JSON text: keep a canonical order so equal offsets serialize equally.
    return {t: {str(p): int(offsets[t][p]) for p in sorted(offsets[t])} for t in sorted(offsets)}


def _as_ints(offsets: Offsets) -> dict[str, dict[int, int]]:
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in offsets.items()}


class KafkaBroker:
    """Driver-side offset queries (one consumer, reused across micro-batches)."""

    def __init__(self, options: KafkaOptions):
        from confluent_kafka import Consumer

        self.options = options
        self.consumer = Consumer(options.consumer_config())
        self._true_end_cache: dict[tuple[str, int], tuple[int, int]] = {}
        # partitions whose end the last bounds(exact=False) call could only bound from below (see _resolve_true_ends)
        self.approximate: set[tuple[str, int]] = set()

    def close(self) -> None:
        self.consumer.close()

    def partitions(self) -> dict[str, list[int]]:
        """Partitions of each subscribed topic that exists now (a missing topic has none)."""
        from confluent_kafka import KafkaException

        try:
            meta = self.consumer.list_topics(timeout=10)
        except KafkaException as exc:
            raise RuntimeError(
                f"nightjar_kafka: cannot reach Kafka at {self.options.client_config['bootstrap.servers']}: {exc}"
            ) from exc
        out = {}
        for topic in self.options.topics:
            tmeta = meta.topics.get(topic)
            if tmeta is not None and tmeta.error is None:
                out[topic] = sorted(tmeta.partitions)
        return out

    def earliest_and_reported_end(self, topic: str, partition: int) -> tuple[int, int]:
        from confluent_kafka import TopicPartition

        return self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)

    def bounds(self, parts: dict[str, list[int]],
               exact: bool = True) -> tuple[dict[str, dict[int, int]], dict[str, dict[int, int]]]:
        """(earliest, true end) offsets for every partition in ``parts``.

        ``exact=False`` (a live micro-batch, which the next one continues): when the broker is too slow to show a
        partition's end in time, that end is the highest offset known to exist instead, and the partition is listed
        in :attr:`approximate`; with ``exact`` (a drain's fixed target, the starting offsets) that is an error."""
        earliest: dict[str, dict[int, int]] = {}
        ends: dict[str, dict[int, int]] = {}
        to_resolve: dict[tuple[str, int], int] = {}
        for topic, plist in parts.items():
            earliest[topic], ends[topic] = {}, {}
            for p in plist:
                low, reported = self.earliest_and_reported_end(topic, p)
                earliest[topic][p] = low
                cached = self._true_end_cache.get((topic, p))
                if reported <= low:
                    ends[topic][p] = low
                elif cached is not None and cached[0] == reported:
                    ends[topic][p] = cached[1]
                else:
                    to_resolve[(topic, p)] = reported
        self.approximate = set()
        if to_resolve:
            for (topic, p), end in self._resolve_true_ends(to_resolve, exact).items():
                ends[topic][p] = end
                if (topic, p) not in self.approximate:  # a lower bound is not the end: never cached
                    self._true_end_cache[(topic, p)] = (to_resolve[(topic, p)], end)
        return earliest, ends

    def _resolve_true_ends(self, reported: dict[tuple[str, int], int], exact: bool = True) -> dict[tuple[str, int], int]:
        """Read from (reported end - 1) up to the end-of-partition event, which carries the true end.

        Not exact and out of time: a partition's end is the larger of the reported end and the last offset read + 1.
        Both are offsets that exist (Tansu reports the last batch's base offset + 1; Kafka its high watermark), so a
        micro-batch up to there reads nothing that is not there, and the next one reads the rest. Seen at load 20 on
        two cores: the end was not found within 30 s six times in ten minutes, and each time the ingest query failed
        and restarted cold."""
        from confluent_kafka import KafkaError, TopicPartition

        self.consumer.assign([TopicPartition(t, p, max(0, r - 1)) for (t, p), r in reported.items()])
        ends: dict[tuple[str, int], int] = {}
        last_seen: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + self.options.poll_timeout_s
        try:
            while len(ends) < len(reported):
                if time.monotonic() > deadline:
                    missing = sorted(set(reported) - set(ends))
                    if exact:
                        raise RuntimeError(f"nightjar_kafka: timed out finding the end offset of {missing}")
                    for key in missing:
                        ends[key] = max(reported[key], last_seen.get(key, -1) + 1)
                    self.approximate = set(missing)
                    log.warning("nightjar_kafka: the end offset of %s was not found within %.0fs (a slow broker); "
                                "this micro-batch reads up to offsets known to exist, the next one the rest",
                                missing, self.options.poll_timeout_s)
                    break
                # consume() waits its whole timeout unless num_messages arrive: short waits, or every micro-batch's
                # offset query paid 2 x 0.5 s here (measured: latestOffset took 1.0 s in every live batch).
                for msg in self.consumer.consume(num_messages=10_000, timeout=0.02):
                    key = (msg.topic(), msg.partition())
                    err = msg.error()
                    if err is None:
                        last_seen[key] = msg.offset()
                    elif err.code() == KafkaError._PARTITION_EOF:
                        ends[key] = max(msg.offset(), last_seen.get(key, -1) + 1)
                    elif err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                        # The partition shrank between the two calls (recreated): its end is its start.
                        ends[key] = 0
                    else:
                        raise RuntimeError(f"nightjar_kafka: error reading {key}: {err.str()}")
        finally:
            self.consumer.unassign()
        return ends


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Driver methods keep one consumer; ``read`` runs on executors."""

    def __init__(self, options: dict[str, str]):
        self.options = KafkaOptions.parse(options)
        self._broker: KafkaBroker | None = None
        self._available_now_end: dict[str, dict[int, int]] | None = None

    # The reader is pickled to executors: the driver's consumer must not travel.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_broker"] = None
        return state

    @property
    def broker(self) -> KafkaBroker:
        if self._broker is None:
            self._broker = KafkaBroker(self.options)
        return self._broker

    # --- offsets (driver) --------------------------------------------------------------------------

    def initialOffset(self) -> Offsets:
        parts = self.broker.partitions()
        earliest, ends = self.broker.bounds(parts)
        spec = self.options.starting_offsets
        chosen: dict[str, dict[int, int]] = {}
        if spec in ("earliest", "latest"):
            chosen = earliest if spec == "earliest" else ends
        else:
            given = json.loads(spec)
            for topic, plist in parts.items():
                chosen[topic] = {}
                for p in plist:
                    want = int(given.get(topic, {}).get(str(p), EARLIEST))
                    if want == EARLIEST:
                        want = earliest[topic][p]
                    elif want == LATEST:
                        want = ends[topic][p]
                    chosen[topic][p] = want
        log.info("kafka source starts at %s", _sorted(chosen))
        return _sorted(chosen)

    def getDefaultReadLimit(self) -> ReadLimit:
        from pyspark.sql.streaming.datasource import ReadAllAvailable

        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # availableNow means "what is there now": freeze the end so a busy producer cannot keep us running.
        _, self._available_now_end = self.broker.bounds(self.broker.partitions())
        log.info("kafka source: availableNow target %s", _sorted(self._available_now_end))

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = _as_ints(start)
        parts = self.broker.partitions()
        freezing = self._available_now_end is None and self.options.ending_offsets == "latest"
        earliest, ends = self.broker.bounds(parts, exact=freezing)  # a drain's target must be the true end
        for topic, p in self.broker.approximate:  # a lower bound: no progress on it this time, never data loss
            ends[topic][p] = max(ends[topic][p], begin.get(topic, {}).get(p, ends[topic][p]))
        if freezing:
            self._available_now_end = ends
            log.info("kafka source: reading up to %s (endingOffsets=latest)", _sorted(ends))
        if self._available_now_end is not None:
            ends = {t: {p: min(e, self._available_now_end.get(t, {}).get(p, e)) for p, e in pe.items()}
                    for t, pe in ends.items()}
        self._check_data_loss(begin, earliest, ends)
        # Where the checkpoint is past the end (tolerated data loss), reading restarts from the earliest.
        effective = {t: {p: _effective_start(begin.get(t, {}).get(p), earliest[t][p], e) for p, e in pe.items()}
                     for t, pe in ends.items()}
        if isinstance(limit, ReadMaxRows):
            ends = _cap(effective, ends, limit.max_rows)
        return _sorted(ends)

    def reportLatestOffset(self) -> Offsets | None:
        _, ends = self.broker.bounds(self.broker.partitions(), exact=False)  # reported only
        return _sorted(ends)

    def _check_data_loss(self, begin: dict[str, dict[int, int]], earliest: dict[str, dict[int, int]],
                         ends: dict[str, dict[int, int]]) -> None:
        problems = []
        for topic, plist in begin.items():
            for p, offset in plist.items():
                if topic not in ends or p not in ends[topic]:
                    problems.append(f"{topic} partition {p}: the partition no longer exists "
                                    f"(checkpoint expects offset {offset})")
                elif offset > ends[topic][p]:
                    problems.append(f"{topic} partition {p}: the checkpoint expects offset {offset} but the "
                                    f"partition ends at {ends[topic][p]} (topic recreated or broker restarted)")
                elif offset < earliest[topic][p]:
                    problems.append(f"{topic} partition {p}: offsets {offset}..{earliest[topic][p] - 1} were "
                                    "deleted before they were read (retention)")
        if not problems:
            return
        message = "data loss in Kafka: " + "; ".join(problems) + "; " + DATA_LOSS_HINT
        if self.options.fail_on_data_loss:
            raise KafkaDataLoss(message)
        log.warning("%s (failOnDataLoss=false: continuing)", message)

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaReadTask]:
        begin, stop = _as_ints(start), _as_ints(end)
        earliest: dict[str, dict[int, int]] | None = None
        out = []
        for topic, plist in stop.items():
            for p, until in plist.items():
                first = begin.get(topic, {}).get(p)
                if first is None or first > until or (earliest and first < earliest[topic][p]):
                    # New partition, or tolerated loss: read what the partition still has.
                    if earliest is None:
                        earliest, _ = self.broker.bounds(self.broker.partitions())
                    first = _effective_start(first, earliest.get(topic, {}).get(p, 0), until)
                if until > first:
                    out.append(KafkaPartitionRange(topic, p, first, until))
        if self.options.max_tasks is not None:
            return pack_ranges(out, self.options.max_tasks, self.options.min_task_rows)
        return [KafkaReadTask([r]) for r in out]

    # --- data (executors) ----------------------------------------------------------------------------

    def read(self, partition: KafkaReadTask) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        fault_point("kafka.read")
        yield from read_ranges(self.options, partition.ranges)

    def commit(self, end: Offsets) -> None:
        pass  # offsets live in Spark's checkpoint; nothing to commit to Kafka

    def stop(self) -> None:
        if self._broker is not None:
            self._broker.close()
            self._broker = None


def _effective_start(first: int | None, earliest: int, end: int) -> int:
    if first is None or first > end or first < earliest:
        return earliest
    return first


def _cap(begin: dict[str, dict[int, int]], ends: dict[str, dict[int, int]], max_rows: int) -> dict[str, dict[int, int]]:
    """Spread ``max_rows`` over the partitions in proportion to their backlog (like Spark's Kafka source)."""
    backlog = {(t, p): max(0, e - begin[t][p]) for t, pe in ends.items() for p, e in pe.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return ends
    capped = {t: dict(pe) for t, pe in ends.items()}
    for (t, p), lag in backlog.items():
        share = (lag * max_rows) // total
        capped[t][p] = begin[t][p] + share
    # Hand rounding leftovers to the largest backlogs so a batch reads exactly max_rows.
    leftover = max_rows - sum(capped[t][p] - begin[t][p] for (t, p) in backlog)
    for (t, p), lag in sorted(backlog.items(), key=lambda kv: -kv[1]):
        if leftover <= 0:
            break
        room = begin[t][p] + lag - capped[t][p]
        take = min(room, leftover)
        capped[t][p] += take
        leftover -= take
    return capped


def read_ranges(options: KafkaOptions, ranges: list[KafkaPartitionRange]) -> Iterator[pa.RecordBatch]:
    """The records of ``ranges`` as Arrow record batches, read by one consumer.

    A partition that appears in several ranges (two pieces of one long range) is read in turn, one range per pass:
    a consumer holds one position per partition.
    """
    todo = [r for r in ranges if r.end > r.start]
    while todo:
        seen: set[tuple[str, int]] = set()
        now, later = [], []
        for r in todo:
            (later if (r.topic, r.partition) in seen else now).append(r)
            seen.add((r.topic, r.partition))
        yield from _read_pass(options, now)
        todo = later


def _read_pass(options: KafkaOptions, ranges: list[KafkaPartitionRange]) -> Iterator[pa.RecordBatch]:
    """One consumer over ranges of distinct partitions, until each reaches its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    by_key = {(r.topic, r.partition): r for r in ranges}
    next_offset = {key: r.start for key, r in by_key.items()}
    open_keys = set(by_key)
    consumer = Consumer(options.consumer_config())
    consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
    cols: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
    last_progress = time.monotonic()

    def close(key: tuple[str, int]) -> None:
        open_keys.discard(key)
        consumer.pause([TopicPartition(key[0], key[1])])  # no more fetching past the range's end

    try:
        while open_keys:
            wanted = sum(by_key[k].end - next_offset[k] for k in open_keys)
            msgs = consumer.consume(num_messages=max(1, min(options.read_batch_rows, wanted)), timeout=0.1)
            if not msgs and time.monotonic() - last_progress > options.poll_timeout_s:
                stuck = ", ".join(f"{t}/{p} at offset {next_offset[(t, p)]} (expected up to {by_key[(t, p)].end})"
                                  for t, p in sorted(open_keys))
                raise RuntimeError(f"nightjar_kafka: no records for {options.poll_timeout_s:.0f}s from {stuck}")
            for msg in msgs:
                key = (msg.topic(), msg.partition())
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"nightjar_kafka: error reading {key[0]}/{key[1]}: {err.str()}")
                part = by_key.get(key)
                if part is None or key not in open_keys:
                    continue
                if err is not None:  # end of partition
                    if part.end > msg.offset() >= next_offset[key]:
                        _short_read(options, part, msg.offset())
                        close(key)
                    elif msg.offset() >= part.end:
                        close(key)  # the range's last offsets held no record (a gap at the end): it is complete
                    continue
                offset = msg.offset()
                if offset < next_offset[key] or offset >= part.end:
                    continue
                ts_type, ts = msg.timestamp()
                headers = msg.headers()
                cols["key"].append(msg.key())
                cols["value"].append(msg.value())
                cols["topic"].append(part.topic)
                cols["partition"].append(part.partition)
                cols["offset"].append(offset)
                cols["timestamp"].append(ts * 1000 if ts_type and ts >= 0 else None)
                cols["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else None)
                next_offset[key] = offset + 1
                last_progress = time.monotonic()
                if next_offset[key] >= part.end:
                    close(key)
            if len(cols["offset"]) >= options.read_batch_rows:
                yield _to_batch(cols)
                cols = {name: [] for name in ARROW_SCHEMA.names}
        if cols["offset"]:
            yield _to_batch(cols)
    finally:
        consumer.close()


def _short_read(options: KafkaOptions, part: KafkaPartitionRange, eof: int) -> None:
    message = (f"data loss in Kafka: {part.topic} partition {part.partition} ended at offset {eof} while this "
               f"micro-batch expected records up to {part.end}; {DATA_LOSS_HINT}")
    if options.fail_on_data_loss:
        raise KafkaDataLoss(message)
    log.warning(message)


def _to_batch(cols: dict[str, list[Any]]) -> pa.RecordBatch:
    arrays = []
    for field in ARROW_SCHEMA:
        values = cols[field.name]
        if field.name == "timestamp":
            arrays.append(pa.array(values, type=pa.int64()).cast(field.type))
        else:
            arrays.append(pa.array(values, type=field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("nightjar_kafka")``: see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(dict(self.options))


def read_kafka(spark: SparkSession, settings: Settings, topics: tuple[str, ...] = RAW_TOPICS,
               starting_offsets: str = "earliest", drain: bool = False) -> DataFrame:
    """``topics`` as a streaming DataFrame, with the client settings, data-loss policy and batch cap of
    ``settings`` (registers the source with ``spark`` first; registering again is harmless). With ``drain``, only
    what the topics hold when the query starts is read (``endingOffsets=latest``)."""
    spark.dataSource.register(KafkaDataSource)
    reader = (
        spark.readStream.format(SOURCE_NAME)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", str(settings.fail_on_data_loss).lower())
        .option("fetchWaitMaxMs", str(settings.kafka.fetch_wait_max_ms))
        # Few, full tasks: a task's fixed cost is paid per task, not per record (see the module doc).
        .option("maxTasks", str(spark.sparkContext.defaultParallelism))
    )
    for key, value in settings.kafka_config().items():
        reader = reader.option(f"kafka.{key}", value)
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    if drain:
        reader = reader.option("endingOffsets", "latest")
    return reader.load()
