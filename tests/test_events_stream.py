"""The batch path (files -> parse_bronze) and the streaming path (Kafka -> `nightjar run --query ingest` ->
Delta) give identical events and quarantine rows for the same input lines: every line of the source registry's
golden fixtures (ingest/sources/*/fixtures), plus records that only decoding refuses."""

from __future__ import annotations

import json
import signal

import pytest
from confluent_kafka import Producer

from core.config import (
    RAW_TOPICS,
    TABLE_EVENTS,
    TABLE_QUARANTINE,
    TOPIC_RAW_SYSLOG,
    TOPIC_RAW_ZEEK,
    Settings,
)
from core.lake import table_dataset
from ingest.embedded_broker import EmbeddedBroker, ensure_topics, free_port
from ingest.sources import FIXTURES, sources
from ingest.sources.record_parser import parse_record


def _fixture_lines() -> list[bytes]:
    """Every line of every golden fixture, except those whose @timestamp is, by design, the record's arrival time
    (an RFC 5424 line without a time: the two paths read the records at different moments)."""
    out = []
    for s in sources():
        for log in sorted((s.folder / FIXTURES).glob("*.log")):
            for raw in log.read_bytes().split(b"\n"):
                # With a record time, as in the stream: a line with no timestamp of its own then parses, and is tagged.
                parsed = parse_record(raw, topic="t", partition=0, offset=0, timestamp_us=1, ingested_us=1)
                if raw and "syslog_timestamp_missing" not in ((parsed.event or {}).get("tags") or []):
                    out.append(raw)
    return out


RAW = [*_fixture_lines(), b"", "\ufeff<13>Mar  9 10:00:00 h app: with BOM".encode(), b"\xc3\x28 invalid utf-8",
       b"x" * 70_000]
# Fields that name where and when a record was read, not what it says.
COORDINATE_FIELDS = {"id", "ingested", "created"}


def normalized(row: dict) -> str:
    event = {k: v for k, v in row["event"].items() if k not in COORDINATE_FIELDS}
    return json.dumps({**row, "event": event}, sort_keys=True, default=str)


@pytest.fixture
def own_broker():
    with EmbeddedBroker(port=free_port()) as b:
        yield b


def test_batch_and_stream_give_identical_rows(spark, own_broker, tmp_path):
    from enrich.dhcp_sessions import attribute_batch, events_from, quarantine_from
    from enrich.reference_data import ReferenceCache
    from enrich.static_joins import enrich_static
    from ingest.arrow_parse import parse_bronze
    from ingest.file_source import read_files
    from nightjar import cli

    lake = tmp_path / "lake"
    settings = Settings(bootstrap=own_broker.bootstrap, lake=lake, shuffle_partitions=2)
    ensure_topics(settings, RAW_TOPICS, partitions=2)
    producer = Producer({"bootstrap.servers": own_broker.bootstrap, "linger.ms": 5, "message.max.bytes": 2_000_000})
    syslog_file, zeek_file = tmp_path / "syslog.log", tmp_path / "zeek.log"
    with syslog_file.open("wb") as s, zeek_file.open("wb") as z:
        for i, raw in enumerate(RAW):
            zeek = raw.lstrip().startswith((b"{", b"["))
            producer.produce(TOPIC_RAW_ZEEK if zeek else TOPIC_RAW_SYSLOG, value=raw, partition=i % 2)
            (z if zeek else s).write(raw + b"\n")
    assert producer.flush(30) == 0

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = cli.main(["run", "--available-now", "--query", "ingest", "--bootstrap", own_broker.bootstrap,
                         "--lake", str(lake), "--create"])
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert code == 0

    stream_events = table_dataset(lake, TABLE_EVENTS).to_table().to_pylist()
    stream_bad = table_dataset(lake, TABLE_QUARANTINE).to_table().to_pylist()
    # The batch path: the same parse, attribution and reference-table joins as the stream.
    unified = attribute_batch(parse_bronze(read_files(spark, [syslog_file, zeek_file])), []).cache()
    try:
        batch_events = enrich_static(events_from(unified), ReferenceCache(lake).current()).toArrow().to_pylist()
        batch_bad = quarantine_from(unified).toArrow().to_pylist()
    finally:
        unified.unpersist()

    # Count in = events + quarantine, on both paths.
    assert len(stream_events) + len(stream_bad) == len(RAW) == len(batch_events) + len(batch_bad)
    assert len(stream_events) == len(batch_events) > 300
    assert sorted(map(normalized, stream_events)) == sorted(map(normalized, batch_events))

    def bad(rows):
        return sorted((r["value"], r["parser"], r["error"]) for r in rows)

    assert bad(stream_bad) == bad(batch_bad)
    assert {r["error"].split(":")[0] for r in stream_bad} >= {"invalid UTF-8", "oversized record",
                                                              "empty record (blank line)"}
    # Stream rows carry their Kafka coordinates: distinct ids, all from the raw topics.
    assert len({r["event"]["id"] for r in stream_events}) == len(stream_events)
    assert {r["topic"] for r in stream_bad} <= set(RAW_TOPICS)
    bom = next(r for r in stream_events if r["message"] == "with BOM")
    assert bom["process"]["name"] == "app" and bom["event"]["original"].startswith("<13>Mar")
