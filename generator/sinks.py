"""Where generated lines go: the raw Kafka topics, or log files (``syslog.log``, ``zeek.log``)."""

from __future__ import annotations

from pathlib import Path

from core.config import TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK, Settings
from core.errors import UserError
from ingest.embedded_broker import check_reachable, ensure_topics

SYSLOG_FILE = "syslog.log"
ZEEK_FILE = "zeek.log"
TOPICS = (TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK)


class FileSink:
    """One file per topic, one line per record, written in simulated-time order."""

    def __init__(self, out: Path) -> None:
        try:
            out.mkdir(parents=True, exist_ok=True)
            self.files = [open(out / SYSLOG_FILE, "w", encoding="utf-8", newline="\n", buffering=1 << 20),
                          open(out / ZEEK_FILE, "w", encoding="utf-8", newline="\n", buffering=1 << 20)]
        except OSError as exc:
            raise UserError(f"cannot write to --out {out}: {exc.strerror}") from exc
        self.writers = [f.write for f in self.files]

    def send(self, topic: int, key: str, line: str) -> None:
        self.writers[topic](line + "\n")

    def poll(self) -> None:
        pass

    def close(self) -> int:
        for f in self.files:
            f.close()
        return 0


class KafkaSink:
    """confluent-kafka producer to the raw topics, keyed by emitting host / originating address."""

    def __init__(self, settings: Settings) -> None:
        from confluent_kafka import Producer

        check_reachable(settings)
        ensure_topics(settings, TOPICS)
        self.failures: list[str] = []
        self.failed = 0
        self.sent = 0
        self.settings = settings
        self.producer = Producer(settings.kafka_config() | {
            "linger.ms": 20, "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576, "batch.num.messages": 10_000, "compression.type": "lz4",
            # Only failures call back into Python: a callback per delivered record halves the produce rate.
            "delivery.report.only.error": True, "on_delivery": self._on_delivery})
        self._produce = self.producer.produce

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self.failed += 1
            if len(self.failures) < 3:
                self.failures.append(err.str())

    def send(self, topic: int, key: str, line: str) -> None:
        while True:
            try:
                self._produce(TOPICS[topic], line, key)
                break
            except BufferError:
                self.producer.poll(0.05)
        self.sent += 1

    def poll(self) -> None:
        self.producer.poll(0)

    def close(self) -> int:
        remaining = self.producer.flush(60)
        if remaining or self.failed:
            raise UserError(f"{self.failed + remaining} of {self.sent} records were not delivered to "
                            f"{self.settings.bootstrap_servers}: {self.failures[0] if self.failures else 'flush timed out'}")
        return self.sent
