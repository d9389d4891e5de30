"""``nightjar produce-samples``: a simple producer of realistic raw log lines to the raw topics.

It feeds the demo, the ingest benchmark and the pipeline tests before (and independently of) the real
generator (``nightjar generate``), which simulates a whole organization with labelled attacks. Lines are
built from a few templates of each kind that real daemons write (sshd, sudo, dhcpd as RFC 3164 and
RFC 5424 syslog; Zeek conn and dns as JSON), stamped with the current time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import random
import time
from collections.abc import Iterator

from core.config import RAW_TOPICS, TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK, Settings
from core.errors import UserError
from ingest.embedded_broker import check_reachable, ensure_topics

log = logging.getLogger(__name__)

_USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "root", "admin"]
_HOSTS = [f"ws-{i:03d}" for i in range(1, 21)] + ["db-01", "web-01", "bastion"]


def sample_lines(rng: random.Random, now: dt.datetime) -> Iterator[tuple[str, bytes, bytes]]:
    """Endless (topic, key, value) records; ``key`` is the emitting host, so a host's lines stay ordered."""
    while True:
        host = rng.choice(_HOSTS)
        user = rng.choice(_USERS)
        src = f"10.0.{rng.randrange(1, 8)}.{rng.randrange(2, 250)}"
        ext = f"203.0.113.{rng.randrange(1, 255)}"
        port = rng.randrange(32768, 61000)
        pid = rng.randrange(300, 65000)
        bsd = f"{now:%b} {now.day:2d} {now:%H:%M:%S}"
        iso = now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        mac = ":".join(f"{rng.randrange(256):02x}" for _ in range(6))
        kind = rng.randrange(8)
        if kind == 0:
            line = f"<38>{bsd} {host} sshd[{pid}]: Accepted publickey for {user} from {src} port {port} ssh2: " \
                   f"ED25519 SHA256:{rng.getrandbits(128):032x}"
        elif kind == 1:
            line = f"<38>{bsd} {host} sshd[{pid}]: Failed password for invalid user {user} from {ext} port {port} ssh2"
        elif kind == 2:
            line = f"<86>1 {iso} {host} sudo - - - {user} : TTY=pts/0 ; PWD=/home/{user} ; USER=root ; " \
                   f"COMMAND=/usr/bin/systemctl restart nginx"
        elif kind == 3:
            line = f"<30>{bsd} dhcp-01 dhcpd[{pid}]: DHCPACK on {src} to {mac} ({host}) via eth0"
        elif kind == 4:
            line = f"<30>{bsd} dhcp-01 dhcpd[{pid}]: DHCPDISCOVER from {mac} via eth0"
        elif kind in (5, 6):
            record = {"_path": "conn", "ts": now.timestamp(), "uid": f"C{rng.getrandbits(64):016x}",
                      "id.orig_h": src, "id.orig_p": port, "id.resp_h": ext, "id.resp_p": 443, "proto": "tcp",
                      "service": "ssl", "duration": round(rng.random() * 30, 6), "orig_bytes": rng.randrange(5000),
                      "resp_bytes": rng.randrange(50000), "conn_state": "SF"}
            yield TOPIC_RAW_ZEEK, src.encode(), json.dumps(record, separators=(",", ":")).encode()
            continue
        else:
            record = {"_path": "dns", "ts": now.timestamp(), "uid": f"C{rng.getrandbits(64):016x}",
                      "id.orig_h": src, "id.orig_p": port, "id.resp_h": "10.0.0.53", "id.resp_p": 53,
                      "proto": "udp", "query": f"www.example{rng.randrange(50)}.com", "qtype_name": "A",
                      "rcode_name": "NOERROR", "answers": [ext], "TTLs": [300.0]}
            yield TOPIC_RAW_ZEEK, src.encode(), json.dumps(record, separators=(",", ":")).encode()
            continue
        yield TOPIC_RAW_SYSLOG, host.encode(), line.encode()


def produce_samples(settings: Settings, count: int | None = None, rate: float | None = None, seed: int = 1,
                    stop: object | None = None, report_every_s: float = 10.0) -> int:
    """Send ``count`` records (or until ``stop.is_set()``) at ``rate`` records/s (None = as fast as possible).

    Pacing catches up after a stall instead of drifting. Returns the number of records Kafka acknowledged;
    raises :class:`UserError` if any delivery failed.
    """
    from confluent_kafka import Producer

    check_reachable(settings)
    ensure_topics(settings, RAW_TOPICS)
    failures: list[str] = []
    delivered = 0

    def on_delivery(err, _msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        elif len(failures) < 5:
            failures.append(err.str())

    producer = Producer(settings.kafka_config() | {"linger.ms": 5, "enable.idempotence": False,
                                                   "queue.buffering.max.messages": 500_000})
    rng = random.Random(seed)
    started = last_report = time.monotonic()
    sent = 0
    lines = sample_lines(rng, dt.datetime.now(dt.UTC))
    while count is None or sent < count:
        if stop is not None and stop.is_set():  # type: ignore[attr-defined]
            break
        if sent % 1000 == 0:
            lines = sample_lines(rng, dt.datetime.now(dt.UTC))  # keep timestamps current
        topic, key, value = next(lines)
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        sent += 1
        if rate:
            ahead = sent / rate - (time.monotonic() - started)
            if ahead > 0:
                producer.poll(min(ahead, 0.5))
        elif sent % 10_000 == 0:
            producer.poll(0)
        now = time.monotonic()
        if now - last_report >= report_every_s:
            log.info("produced %d records (%.0f/s)", sent, sent / (now - started))
            last_report = now
    producer.flush(30)
    if failures:
        raise UserError(f"{sent - delivered} of {sent} records were not delivered to "
                        f"{settings.bootstrap_servers}: {failures[0]}")
    log.info("produced %d records in %.1fs", delivered, time.monotonic() - started)
    return delivered


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, default=1000, help="records to send (default 1000; 0 = until Ctrl-C)")
    parser.add_argument("--rate", type=float, help="records per second (default: as fast as possible)")
    parser.add_argument("--seed", type=int, default=1)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.count < 0:
        raise UserError("--count must be 0 (until Ctrl-C) or positive", exit_code=2)
    if args.rate is not None and args.rate <= 0:
        raise UserError("--rate must be positive", exit_code=2)
    n = produce_samples(settings, args.count or None, args.rate, args.seed)
    print(f"delivered {n} records to {', '.join(RAW_TOPICS)} on {settings.bootstrap_servers}")
    return 0
