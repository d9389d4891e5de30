"""``nightjar alerts tail``: read the alerts topic the way the SOC receives it, one line per alert revision.

A plain Kafka consumer of ``nightjar.alerts`` (nothing Nightjar-internal: if this command can read an alert,
so can any SOC tool). It assigns partitions itself and commits no offsets, so watching alerts never moves a
consumer group's position. Each revision is printed as one line::

    2024-05-01 10:03:12Z  HIGH      NEW        ssh_bruteforce  ip=203.0.113.9  42 events  [3f2a9c1e]  42 failed ...
    2024-05-01 10:04:12Z  HIGH      UPDATE r2  ssh_bruteforce  ip=203.0.113.9  97 events  [3f2a9c1e]  97 failed ...

``UPDATE rN`` marks a later revision of an alert already raised (same id in brackets: the first 8 digits of
``alert_id``). ``--json`` prints each message value unchanged instead. A message that is not an alert (not
JSON, or missing fields) gives a warning line on stderr and is skipped. Ctrl-C stops it with exit code 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import signal
import sys
import time
import uuid
from typing import Any

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar
# alerts`'s arguments, and --help or a bad argument must not wait for pyspark (nightjar/cli.py).
from core.config import TOPIC_ALERTS, Settings
from core.errors import UserError
from ingest.embedded_broker import check_reachable, list_topics

log = logging.getLogger(__name__)

SEVERITY_ORDER = {"low": 0, "medium": 1, "high": 2, "critical": 3}
_COLORS = {"low": "\033[36m", "medium": "\033[33m", "high": "\033[31m", "critical": "\033[1;97;41m"}
_RESET = "\033[0m"
POLL_S = 0.2  # short polls: Ctrl-C, --timeout and --max are noticed within this


# --- `nightjar alerts` ------------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    tail = actions.add_parser("tail", help="print alerts from the alerts topic as they arrive",
                              description="Print alerts from the alerts topic, one line per alert revision.")
    _common_options(tail)
    tail.add_argument("--topic", default=TOPIC_ALERTS, help=f"topic to read (default {TOPIC_ALERTS})")
    tail.add_argument("--from-beginning", action="store_true",
                      help="start at the oldest alert on the topic (default: only alerts arriving from now)")
    tail.add_argument("--follow", action=argparse.BooleanOptionalAction, default=True,
                      help="keep waiting for new alerts (default); --no-follow exits at the end of the topic")
    tail.add_argument("--max", type=int, metavar="N", help="exit after printing N alerts")
    tail.add_argument("--timeout", type=float, metavar="S", help="exit after S seconds")
    tail.add_argument("--min-severity", choices=tuple(SEVERITY_ORDER), default="low",
                      help="print only alerts at least this severe (default low: all)")
    tail.add_argument("--json", action="store_true", help="print each message's JSON value unchanged")
    tail.add_argument("--color", action=argparse.BooleanOptionalAction, default=None,
                      help="colour severities (default: when stdout is a terminal and NO_COLOR is unset)")


def _common_options(parser: argparse.ArgumentParser) -> None:
    """Accept the common options after the action too (``nightjar alerts tail --bootstrap B``).

    SUPPRESS as default: a value given before the action (``nightjar alerts --bootstrap B tail``) is not
    overwritten by this sub-parser's default.
    """
    parser.add_argument("--bootstrap", metavar="HOST:PORT", default=argparse.SUPPRESS,
                        help="Kafka bootstrap servers (env NIGHTJAR_BOOTSTRAP; default 127.0.0.1:9092)")
    parser.add_argument("--lake", metavar="DIR", default=argparse.SUPPRESS, help="lake directory (unused here)")
    parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log at DEBUG")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.action == "tail":
        try:
            return tail(args, settings)
        except KeyboardInterrupt:  # Ctrl-C before the read loop (connecting): still a clean stop
            return 0
    raise UserError(f"unknown action {args.action!r}: use `nightjar alerts tail`", exit_code=2)


# --- formatting ---------------------------------------------------------------------------------------

def format_alert(alert: dict[str, Any], color: bool = False) -> str:
    """One human line for an alert revision (timestamps already parsed by ``alert_from_json``)."""
    severity = str(alert["severity"])
    sev = f"{severity.upper():<8}"
    if color and severity in _COLORS:
        sev = f"{_COLORS[severity]}{sev}{_RESET}"
    revision = int(alert.get("revision") or 1)
    marker = "NEW" if revision <= 1 else f"UPDATE r{revision}"
    entity = alert.get("entity") or {}
    parts = [
        _short_time(alert["detected_at"]),
        sev,
        f"{marker:<10}",
        str(alert["rule_id"]),
        f"{entity.get('type')}={entity.get('value')}",
        f"{alert['event_count']} event{'s' if alert['event_count'] != 1 else ''}",
    ]
    # Host and user add context only when the entity is not already that host or user.
    if alert.get("host_name") and not (entity.get("type") == "host" and entity.get("value") == alert["host_name"]):
        parts.append(f"host={alert['host_name']}")
    if alert.get("user_name") and not (entity.get("type") == "user" and entity.get("value") == alert["user_name"]):
        parts.append(f"user={alert['user_name']}")
    parts.append(f"[{str(alert['alert_id'])[:8]}]")
    parts.append(str(alert["summary"]))
    return "  ".join(parts)


def _short_time(ts: dt.datetime) -> str:
    return ts.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


# --- the consumer -------------------------------------------------------------------------------------

def tail(args: argparse.Namespace, settings: Settings) -> int:
    from confluent_kafka import Consumer

    if args.max is not None and args.max < 1:
        raise UserError(f"--max {args.max}: give a number of alerts >= 1", exit_code=2)
    if args.timeout is not None and args.timeout <= 0:
        raise UserError(f"--timeout {args.timeout:g}: give a number of seconds > 0", exit_code=2)
    check_reachable(settings)
    partitions = list_topics(settings).get(args.topic)
    if not partitions:
        raise UserError(f"topic {args.topic} does not exist at {settings.bootstrap_servers}: no alert was "
                        "published there yet; start the pipeline (`nightjar run`) or pass --topic")
    consumer = Consumer(settings.kafka_config() | {
        # A private group id: nothing is committed (assign, no auto-commit), so no group is disturbed.
        "group.id": f"nightjar-alerts-tail-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        # Tansu waits the full fetch.wait.max.ms at a partition's end (docs/architecture.md, decision 3): keep it short.
        "fetch.wait.max.ms": settings.kafka.fetch_wait_max_ms,
        "log.connection.close": False,
    })
    stop = {"now": False}

    def on_term(_signum: int, _frame: object) -> None:
        stop["now"] = True

    previous_term = signal.signal(signal.SIGTERM, on_term)
    try:
        printed, bad = _read(consumer, partitions, args, settings, stop)
        log.debug("alerts tail: %d alerts printed, %d bad messages skipped", printed, bad)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a follower is meant to stop: a clean exit, not an error
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        consumer.close()
    return 0


def _read(consumer: Any, partitions: int, args: argparse.Namespace, settings: Settings,
          stop: dict[str, bool]) -> tuple[int, int]:
    """The read loop; returns (alerts printed, bad messages skipped)."""
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

    from alerts.alert_sink import alert_from_json

    deadline = time.monotonic() + args.timeout if args.timeout else None
    color = args.color if args.color is not None else (sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    min_rank = SEVERITY_ORDER[args.min_severity]
    assignment = []
    for p in range(partitions):
        if args.from_beginning:
            assignment.append(TopicPartition(args.topic, p, OFFSET_BEGINNING))
        else:
            # "From now": start one before the end the broker reports, because Tansu reports the start of the
            # last record batch + 1, not the true end (docs/architecture.md, decision 3); _skip_to_end reads up to the
            # true end.
            low, high = consumer.get_watermark_offsets(TopicPartition(args.topic, p),
                                                       timeout=settings.kafka.metadata_timeout_s)
            assignment.append(TopicPartition(args.topic, p, max(low, high - 1)))
    consumer.assign(assignment)
    pending = [] if args.from_beginning else _skip_to_end(consumer, partitions, settings.kafka.metadata_timeout_s)
    # Partitions known to be at their end (--no-follow stops when all are); "from now" starts there, except
    # partitions with messages that arrived while skipping.
    at_end = set() if args.from_beginning else set(range(partitions)) - {m.partition() for m in pending}
    if args.follow:
        start = "the beginning" if args.from_beginning else "now"
        print(f"nightjar alerts tail: reading {args.topic} at {settings.bootstrap_servers} from {start} "
              "(Ctrl-C to stop)", file=sys.stderr, flush=True)
    printed = bad = 0
    while not stop["now"]:
        if deadline is not None and time.monotonic() >= deadline:
            break
        if not args.follow and not pending and len(at_end) == partitions:
            break
        msg = pending.pop(0) if pending else consumer.poll(POLL_S)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            if err.fatal():
                raise UserError(f"reading {args.topic} at {settings.bootstrap_servers} failed: {err.str()}")
            log.warning("reading %s: %s", args.topic, err.str())
            continue
        at_end.discard(msg.partition())
        value = msg.value() or b""
        try:
            alert = alert_from_json(value)
        except ValueError as exc:
            bad += 1
            print(f"warning: {args.topic} partition {msg.partition()} offset {msg.offset()}: skipped a message "
                  f"that is not an alert: {exc}: {_preview(value)}", file=sys.stderr, flush=True)
            continue
        if SEVERITY_ORDER.get(str(alert["severity"]), 0) < min_rank:
            continue
        print(value.decode("utf-8", errors="replace") if args.json else format_alert(alert, color), flush=True)
        printed += 1
        if args.max is not None and printed >= args.max:
            break
    return printed, bad


def _skip_to_end(consumer: Any, partitions: int, timeout_s: float) -> list[Any]:
    """Read past the messages already on the topic (up to each partition's end-of-partition event).

    Returns the messages that arrived meanwhile on partitions already at their end: those are new.
    """
    from confluent_kafka import KafkaError

    waiting = set(range(partitions))
    kept: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        msg = consumer.poll(POLL_S)
        if msg is None:
            continue
        err = msg.error()
        if err is not None and err.code() == KafkaError._PARTITION_EOF:
            waiting.discard(msg.partition())
        elif err is None and msg.partition() not in waiting:
            kept.append(msg)
    if waiting:
        log.warning("partitions %s did not report their end within %.0fs: older alerts may be printed",
                    sorted(waiting), timeout_s)
    return kept


def _preview(value: bytes, limit: int = 80) -> str:
    text = value.decode("utf-8", errors="replace")
    return repr(text if len(text) <= limit else text[:limit] + "…")
