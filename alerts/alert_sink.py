"""Publish alert revisions to the SOC: one JSON message per revision on Kafka, one row in the ``alerts`` table.

Called once per micro-batch (``foreachBatch``) with that batch's alert revisions (:data:`ALERT_SCHEMA` rows).
:func:`publish_alerts` does, in this order:

1. **Skip a replay.** If the ``alerts`` Delta table already records the app transaction ``(app_id, batch_id)``
   (``DeltaTable.transaction_version(app_id) >= batch_id``), this batch was fully published before a crash and
   Spark is replaying it: do nothing.
2. **Kafka.** Produce each revision as one message, key = ``alert_id``, value = the alert as JSON (see
   :func:`alert_to_json`), with an idempotent producer (``enable.idempotence=true``, ``acks=all``), then
   ``flush()`` and check every delivery report. Any failed delivery raises :class:`AlertDeliveryError`, so the
   micro-batch fails, nothing reaches Delta, and Spark replays the batch later.
3. **Delta.** Append the rows to the ``alerts`` table in one commit that also records ``(app_id, batch_id)``.

Guarantees: the ``alerts`` table holds every revision **exactly once**. Kafka gets every revision **at least
once**: a crash between 2 and 3 makes the replayed batch produce the same messages again (same key, same
content: the rows are recomputed from the same offsets, and Spark's ``current_timestamp()`` is fixed per
batch id). The idempotent producer removes the duplicates its own retries would cause (a lost ack), not
those of a replay (a new producer id). Consumers dedupe by ``(alert_id, revision)``, or treat the key as an
upsert key (a compacted topic). Revisions of one alert share a key, hence a partition, and are produced in
revision order, so a consumer sees revision 2 after revision 1.

Alert batches are small (rules fire rarely and suppression merges repeats), so the batch is collected to the
driver as Arrow and produced from there; a batch above :data:`LARGE_BATCH` alerts logs a warning, because it
means a rule fires far too broadly.

Measured on Tansu 0.6 (the embedded broker): it answers InitProducerId (librdkafka acquires a producer id
and produces idempotently), and a Produce retried after a lost response is written once, not twice
(``docs/alerts.md``). A broker without idempotence support makes librdkafka raise a fatal
``_UNSUPPORTED_FEATURE`` error; then the batch is retried once without idempotence (still ``acks=all``), a
warning is logged, and later batches to that broker go the same way (measured by hiding InitProducerId from
Tansu's ApiVersions answer through a proxy).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from alerts.alert_schema import ALERT_SCHEMA, SEVERITIES
from core.config import TABLE_ALERTS, TOPIC_ALERTS, Settings
from core.errors import UserError
from core.fault_points import fault_point
from ingest.delta_sink import arrow_schema, committed_batch, ensure_table

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

ALERT_FIELDS: tuple[str, ...] = tuple(ALERT_SCHEMA.fieldNames())
TIMESTAMP_FIELDS: frozenset[str] = frozenset(f.name for f in ALERT_SCHEMA if f.dataType.typeName() == "timestamp")
REQUIRED_FIELDS: frozenset[str] = frozenset(f.name for f in ALERT_SCHEMA if not f.nullable)
# Above this many alerts in one micro-batch a rule is almost certainly firing on normal traffic.
LARGE_BATCH = 10_000
DEFAULT_DELIVERY_TIMEOUT_S = 30.0


class AlertDeliveryError(UserError):
    """Kafka did not acknowledge every alert of a micro-batch: the batch must fail and be replayed."""


# --- the message format -----------------------------------------------------------------------------

def format_timestamp(ts: dt.datetime) -> str:
    """ISO 8601 UTC with microseconds and ``Z``: fixed width, and exact for Spark's microsecond timestamps."""
    if ts.tzinfo is None:  # Spark and Arrow hand back naive datetimes in the session zone, which is UTC
        ts = ts.replace(tzinfo=dt.UTC)
    return ts.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str) -> dt.datetime:
    """Inverse of :func:`format_timestamp` (accepts any ISO 8601 with an offset or ``Z``)."""
    ts = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if ts.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no UTC offset")
    return ts.astimezone(dt.UTC)


def alert_to_json(alert: Mapping[str, Any]) -> bytes:
    """The Kafka message value of one (normalized) alert revision: all ALERT_SCHEMA fields, in schema order."""
    out: dict[str, Any] = {}
    for name in ALERT_FIELDS:
        value = alert.get(name)
        if name in TIMESTAMP_FIELDS and value is not None:
            value = format_timestamp(value)
        out[name] = value
    # ensure_ascii=False keeps user and host names readable; the bytes are UTF-8.
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode()


def alert_from_json(value: bytes | str) -> dict[str, Any]:
    """Parse a message value back into an alert dict (timestamps as UTC datetimes).

    Raises ``ValueError`` naming the problem when the value is not an alert.
    """
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"JSON {type(data).__name__}, not an object")
    missing = [name for name in REQUIRED_FIELDS if data.get(name) is None]
    if missing:
        raise ValueError(f"not an alert: missing {', '.join(sorted(missing))}")
    entity = data["entity"]
    if not isinstance(entity, dict) or "type" not in entity or "value" not in entity:
        raise ValueError(f"not an alert: entity is {entity!r}, expected {{\"type\": ..., \"value\": ...}}")
    for name in ("revision", "event_count"):
        if not isinstance(data[name], int) or isinstance(data[name], bool):
            raise ValueError(f"not an alert: {name} is {data[name]!r}, expected an integer")
    out = dict(data)
    for name in TIMESTAMP_FIELDS:
        if out.get(name) is not None:
            if not isinstance(out[name], str):
                raise ValueError(f"not an alert: {name} is {out[name]!r}, expected an ISO 8601 string")
            out[name] = parse_timestamp(out[name])
    return out


# --- input forms -------------------------------------------------------------------------------------

def alert_rows(alerts: Any) -> list[dict[str, Any]]:
    """The alerts as validated dicts in ALERT_SCHEMA order, sorted by (alert_id, revision).

    Accepts a Spark DataFrame (collected to the driver as Arrow), a pyarrow Table, a pandas DataFrame, or an
    iterable of dicts / Spark ``Row``s. Columns beyond ALERT_SCHEMA are ignored.
    """
    import pyarrow as pa

    if hasattr(alerts, "toArrow") and hasattr(alerts, "sparkSession"):  # a Spark DataFrame
        missing = [name for name in ALERT_FIELDS if name not in alerts.columns]
        if missing:
            raise ValueError(f"the alerts DataFrame lacks column(s) {', '.join(missing)}: build it with "
                             "alerts.alert_schema.ALERT_SCHEMA")
        records = alerts.select(*ALERT_FIELDS).toArrow().to_pylist()
    elif isinstance(alerts, pa.Table):
        records = alerts.to_pylist()
    elif hasattr(alerts, "to_dict") and hasattr(alerts, "dtypes"):  # pandas, via Arrow for clean types
        records = pa.Table.from_pandas(alerts, preserve_index=False).to_pylist()
    else:
        records = [r.asDict(recursive=True) if hasattr(r, "asDict") else r for r in alerts]
    rows = [_normalize(record, i) for i, record in enumerate(records)]
    rows.sort(key=lambda r: (r["alert_id"], r["revision"]))
    return rows


def _normalize(record: Mapping[str, Any], index: int) -> dict[str, Any]:
    ident = record.get("alert_id") or f"#{index}"
    row: dict[str, Any] = {}
    for name in ALERT_FIELDS:
        value = record.get(name)
        if value is None:
            if name in REQUIRED_FIELDS:
                raise ValueError(f"alert {ident}: field {name!r} is missing or null; every alert needs it "
                                 "(see alerts.alert_schema.ALERT_SCHEMA)")
        elif name in TIMESTAMP_FIELDS:
            if isinstance(value, str):
                value = parse_timestamp(value)
            elif not isinstance(value, dt.datetime):
                raise ValueError(f"alert {ident}: {name} is {type(value).__name__}, expected a datetime")
            elif value.tzinfo is None:
                value = value.replace(tzinfo=dt.UTC)
            value = value.astimezone(dt.UTC)
        elif name == "entity":
            entity = value.asDict() if hasattr(value, "asDict") else value
            if not isinstance(entity, Mapping) or not entity.get("type") or entity.get("value") is None:
                raise ValueError(f"alert {ident}: entity must be {{'type': ..., 'value': ...}}, got {value!r}")
            value = {"type": str(entity["type"]), "value": str(entity["value"])}
        elif name in ("tags", "evidence"):
            value = [str(v) for v in value]
        elif name in ("revision", "event_count"):
            value = int(value)
        else:
            value = str(value)
        row[name] = value
    if row["severity"] not in SEVERITIES:
        raise ValueError(f"alert {ident}: severity {row['severity']!r} is not one of {', '.join(SEVERITIES)}")
    if row["revision"] < 1:
        raise ValueError(f"alert {ident}: revision {row['revision']} must be >= 1")
    return row


# --- Kafka --------------------------------------------------------------------------------------------

# One producer per configuration for the life of the driver: an idempotent producer's first delivery waits
# ~0.5-1 s for its producer id, which per micro-batch would dominate the batch. Only the driver uses these
# (foreachBatch runs there); executors never see them.
_producers: dict[tuple[tuple[str, Any], ...], _CachedProducer] = {}
_producers_lock = threading.Lock()
# Bootstrap addresses whose brokers refused idempotence (see module docstring).
_no_idempotence: set[str] = set()


def producer_config(settings: Settings, timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_S,
                    idempotent: bool = True) -> dict[str, Any]:
    """librdkafka settings of the alert producer. ``NIGHTJAR_KAFKA_*`` overrides win over these defaults."""
    conf: dict[str, Any] = {
        "enable.idempotence": idempotent,
        "acks": "all",
        "linger.ms": 5,
        # A delivery either succeeds or is reported failed within this time; the batch then fails.
        "message.timeout.ms": max(1, int(timeout_s * 1000)),
        # Brokers (Tansu among them) close idle connections; reconnecting is routine, not worth a log line.
        "log.connection.close": False,
    }
    conf.update(settings.kafka_config())
    if not idempotent:
        conf["enable.idempotence"] = False
    return conf


class _CachedProducer:
    """A producer and the client-level errors librdkafka reported for it (fatal ones end its life)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        from confluent_kafka import Producer

        self.errors: list[Any] = []  # KafkaErrors from error_cb: transport failures, fatal idempotence errors
        self.producer = Producer(conf | {"error_cb": self._on_error})

    def _on_error(self, err: Any) -> None:
        log.debug("alert producer: %s", err.str())
        self.errors = [*self.errors[-9:], err]


def _get_producer(conf: dict[str, Any]) -> tuple[tuple[tuple[str, Any], ...], _CachedProducer]:
    key = tuple(sorted((k, str(v)) for k, v in conf.items()))
    with _producers_lock:
        cached = _producers.get(key)
        if cached is None:
            cached = _producers[key] = _CachedProducer(conf)
        return key, cached


def _discard_producer(key: tuple[tuple[str, Any], ...]) -> None:
    """Forget a producer after a failure: an idempotent producer may be in a fatal state; start clean."""
    with _producers_lock:
        cached = _producers.pop(key, None)
    if cached is not None:
        try:
            cached.producer.purge()
            cached.producer.flush(0)
        except Exception as exc:  # a producer in a fatal state raises that state again; it is dropped anyway
            log.debug("discarding the alert producer: %s", exc)


def _kafka_error_in(exc: BaseException) -> Any:
    """The KafkaError carried by ``exc`` or the exceptions it was raised from (None if there is none)."""
    from confluent_kafka import KafkaError, KafkaException

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args and isinstance(seen.args[0], KafkaError):
            return seen.args[0]
        seen = seen.__cause__ or seen.__context__
    return None


def close_producers() -> None:
    """Flush and forget the cached producers (at pipeline shutdown; tests)."""
    with _producers_lock:
        producers = list(_producers.values())
        _producers.clear()
    for cached in producers:
        cached.producer.flush(5)


def produce_alerts(rows: list[dict[str, Any]], settings: Settings, topic: str = TOPIC_ALERTS,
                   timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_S) -> int:
    """Produce one message per alert revision and wait until Kafka acknowledged every one.

    Returns the number of messages delivered; raises :class:`AlertDeliveryError` if any delivery failed.
    """
    if not rows:
        return 0
    messages = [(row["alert_id"].encode(), alert_to_json(row)) for row in rows]
    idempotent = settings.bootstrap_servers not in _no_idempotence
    try:
        return _produce(messages, settings, topic, timeout_s, idempotent)
    except _IdempotenceUnsupported as exc:
        log.warning("the Kafka cluster at %s does not support idempotent producers (%s): alerts are produced "
                    "without idempotence (acks=all); a retried send may duplicate a message, which consumers "
                    "dedupe by (alert_id, revision)", settings.bootstrap_servers, exc)
        _no_idempotence.add(settings.bootstrap_servers)
        return _produce(messages, settings, topic, timeout_s, idempotent=False)


class _IdempotenceUnsupported(Exception):
    pass


def _produce(messages: list[tuple[bytes, bytes]], settings: Settings, topic: str, timeout_s: float,
             idempotent: bool) -> int:
    from confluent_kafka import KafkaError

    key, cached = _get_producer(producer_config(settings, timeout_s, idempotent))
    producer, cached.errors = cached.producer, []
    errors: list[Any] = []
    delivered = 0

    def on_delivery(err: Any, _msg: Any) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(err)

    try:
        for msg_key, value in messages:
            while True:
                try:
                    producer.produce(topic, value=value, key=msg_key, on_delivery=on_delivery)
                    break
                except BufferError:  # local queue full: let deliveries drain, then retry this message
                    producer.poll(0.1)
        # message.timeout.ms bounds every delivery report; the margin covers the report's own latency.
        left = producer.flush(timeout_s + 10)
    except Exception as exc:
        _discard_producer(key)
        # confluent-kafka raises a fatal client error from flush()/poll() as KafkaException (measured with
        # 2.16: wrapped in a SystemError when a delivery callback runs while it is pending).
        fatal_error = _kafka_error_in(exc)
        if fatal_error is None:
            raise
        if idempotent and fatal_error.code() == KafkaError._UNSUPPORTED_FEATURE:
            raise _IdempotenceUnsupported(fatal_error.str()) from exc
        raise AlertDeliveryError(
            f"the Kafka producer for topic {topic} at {settings.bootstrap_servers} failed: {fatal_error.str()}; "
            "the micro-batch fails and is replayed when it restarts"
        ) from exc
    if left or errors:
        _discard_producer(key)
        fatal = [e for e in cached.errors if e.fatal()]
        # librdkafka raises _UNSUPPORTED_FEATURE as a fatal error when no broker offers InitProducerId; the
        # queued messages are then purged, so their delivery reports do not say why.
        if idempotent and any(e.code() == KafkaError._UNSUPPORTED_FEATURE for e in fatal + errors):
            raise _IdempotenceUnsupported((fatal + errors)[0].str())
        cause = (fatal or errors or cached.errors)
        why = cause[0].str() if cause else f"{left} message(s) still unacknowledged after flush"
        if cached.errors and cause is errors and not errors[0].fatal():
            why += f"; last client error: {cached.errors[-1].str()}"
        raise AlertDeliveryError(
            f"{len(messages) - delivered} of {len(messages)} alerts were not delivered to topic {topic} at "
            f"{settings.bootstrap_servers} ({why}); the micro-batch fails and is replayed when it restarts: "
            "check that the broker is reachable and the topic exists (--bootstrap HOST:PORT)"
        )
    return delivered


# --- Delta --------------------------------------------------------------------------------------------

def alerts_arrow_schema() -> pa.Schema:
    """The ``alerts`` table's Arrow schema (timestamps in UTC, every field nullable as the Delta sink writes)."""
    return arrow_schema(ALERT_SCHEMA)


def write_alert_rows(rows: list[dict[str, Any]], settings: Settings, app_id: str, batch_id: int) -> int:
    """Append ``rows`` to the ``alerts`` table in one commit recording the app transaction ``(app_id, batch_id)``."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    if not rows:
        return 0  # an empty commit per idle batch would only grow the log (as in ingest.delta_sink)
    path = settings.table_path(TABLE_ALERTS)
    schema = alerts_arrow_schema()
    ensure_table(path, schema)
    write_deltalake(
        str(path),
        pa.Table.from_pylist(rows, schema=schema),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, batch_id)]),
    )
    return len(rows)


# --- the micro-batch entry point ----------------------------------------------------------------------

def publish_alerts(alerts: DataFrame | pa.Table | Iterable[Mapping[str, Any]], settings: Settings, batch_id: int,
                   app_id: str, topic: str = TOPIC_ALERTS, *,
                   timeout_s: float = DEFAULT_DELIVERY_TIMEOUT_S) -> int:
    """Publish one micro-batch of alert revisions: Kafka (at least once), then Delta (exactly once).

    ``alerts`` is a Spark DataFrame with :data:`ALERT_SCHEMA` columns (collected to the driver: alert
    batches are small), a pyarrow Table, a pandas DataFrame or a list of dicts. ``app_id`` names the writing
    query (one per query); ``batch_id`` is Spark's micro-batch id. Returns the number of revisions published,
    0 for an empty batch or a replay of a batch already committed. Raises :class:`AlertDeliveryError` when
    Kafka did not acknowledge every message (nothing is written to Delta then) and ``ValueError`` for a
    malformed alert.
    """
    path = settings.table_path(TABLE_ALERTS)
    done = committed_batch(path, app_id)
    if done is not None and batch_id <= done:
        log.info("alerts: batch %d already published by %s (last %d): skipping the replay", batch_id, app_id,
                 done)
        return 0
    started = time.monotonic()
    rows = alert_rows(alerts)
    if not rows:
        return 0
    if len(rows) > LARGE_BATCH:
        log.warning("alerts: batch %d has %d alerts (> %d): a rule fires far too broadly; tune or suppress it",
                    batch_id, len(rows), LARGE_BATCH)
    produce_alerts(rows, settings, topic, timeout_s)
    fault_point("alerts.after_publish")
    write_alert_rows(rows, settings, app_id, batch_id)
    fault_point("alerts.after_commit")
    updates = sum(1 for r in rows if r["revision"] > 1)
    log.info("alerts: batch %d published %d alerts (%d new, %d updates) to %s and the %s table (%.2fs)", batch_id,
             len(rows), len(rows) - updates, updates, topic, TABLE_ALERTS, time.monotonic() - started)
    return len(rows)
