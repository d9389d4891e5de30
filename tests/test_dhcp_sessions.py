"""DHCP sessions and host attribution through the real pipeline (Kafka -> events query -> Delta), and the batch
path over the same lines giving the same rows."""

from __future__ import annotations

import datetime as dt
import json
import signal
import threading
import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import write_deltalake

from core.config import (
    RAW_TOPICS,
    TABLE_DHCP_SESSIONS,
    TABLE_EVENTS,
    TABLE_IOCS,
    TABLE_NETWORKS,
    TABLE_QUARANTINE,
    TOPIC_RAW_SYSLOG,
    TOPIC_RAW_ZEEK,
    Settings,
)
from core.lake import is_delta_table, row_count, table_dataset
from ingest.embedded_broker import EmbeddedBroker, ensure_topics, free_port

X = "10.10.0.23"
MAC_A, MAC_B = "aa:aa:aa:00:00:01", "bb:bb:bb:00:00:02"
EVIL = "198.51.100.7"
SERVER = "10.10.8.20"


def at(hhmm: str, sec: float = 0) -> float:
    h, m = map(int, hhmm.split(":"))
    return dt.datetime(2026, 3, 9, h, m, tzinfo=dt.UTC).timestamp() + sec


def zeek(path: str, ts: float, **fields) -> bytes:
    return json.dumps({"_path": path, "ts": ts, **{k.replace("__", "."): v for k, v in fields.items()}}).encode()


def dhcp_ack(ts: float, mac: str, host: str) -> bytes:
    return zeek("dhcp", ts, uids=["D1"], client_addr=X, server_addr="10.10.8.67", mac=mac, host_name=host,
                assigned_addr=X, lease_time=1200.0, msg_types=["REQUEST", "ACK"])


def conn(ts: float, uid: str, dst: str, src: str = X) -> bytes:
    return zeek("conn", ts, uid=uid, id__orig_h=src, id__orig_p=50000, id__resp_h=dst, id__resp_p=443, proto="tcp",
                conn_state="SF", orig_bytes=100, resp_bytes=2000)


def release(ts: float) -> bytes:
    # On the Zeek topic like the ACKs: the DHCP messages' own order is kept (see the note in enrich/lease_book.py
    # on a RELEASE that arrives after the next holder's ACK).
    return zeek("dhcp", ts, uids=["D2"], client_addr=X, mac=MAC_A, msg_types=["RELEASE"])


# Delivery order, two records per micro-batch: the 10:40:30 and 10:41 connections arrive before B's lease
# (they wait for it), the 10:10 connection arrives last, long after A's lease ended.
DELIVERY = [
    dhcp_ack(at("10:00"), MAC_A, "host-a"),
    zeek("dns", at("10:09"), uid="N1", id__orig_h=X, id__orig_p=5353, id__resp_h="10.10.8.53", id__resp_p=53,
         proto="udp", query="Evil.Example", qtype_name="A", rcode_name="NOERROR", answers=[EVIL], TTLs=[60.0]),
    dhcp_ack(at("10:10"), MAC_A, "host-a"),
    release(at("10:30")),
    conn(at("10:40", 30), "C1040", "203.0.113.9"),
    conn(at("10:41"), "C1041", EVIL),
    dhcp_ack(at("10:35"), MAC_B, "host-b"),
    conn(at("10:10", 20), "C1010", EVIL),
]


def seed_reference_tables(lake, iocs: list[tuple[str, str]] = ()) -> None:
    networks = pa.table({"cidr": ["10.10.0.0/22", "10.10.8.0/24", "198.51.100.0/24"],
                         "zone": ["workstations", "servers", "internet"], "site": ["hq", "hq", None],
                         "country": ["US", "US", "NL"], "internal": [True, True, False],
                         "dhcp": [True, False, False]})
    write_deltalake(str(lake / TABLE_NETWORKS), networks, mode="overwrite")
    write_iocs(lake, list(iocs), mode="overwrite")


def write_iocs(lake, iocs: list[tuple[str, str]], mode: str = "append") -> None:
    schema = pa.schema([("indicator", pa.string()), ("type", pa.string()), ("threat", pa.string()),
                        ("source", pa.string()), ("first_seen", pa.timestamp("us", tz="UTC"))])
    rows = [{"indicator": i, "type": t, "threat": "test threat", "source": "tests",
             "first_seen": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)} for i, t in iocs]
    write_deltalake(str(lake / TABLE_IOCS), pa.Table.from_pylist(rows, schema), mode=mode)


@pytest.fixture
def own_broker():
    with EmbeddedBroker(port=free_port()) as b:
        yield b


def produce(bootstrap: str, records: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for raw in records:
        topic = TOPIC_RAW_ZEEK if raw.startswith(b"{") else TOPIC_RAW_SYSLOG
        producer.produce(topic, value=raw, partition=0)
        producer.flush(10)  # one at a time: the delivery order is the test


def run_events(bootstrap: str, lake, *extra: str) -> None:
    from nightjar import cli

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert cli.main(["run", "--available-now", "--query", "ingest", "--bootstrap", bootstrap,
                         "--lake", str(lake), *extra]) == 0
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def by_uid(lake) -> dict[str, dict]:
    rows = table_dataset(lake, TABLE_EVENTS).to_table().to_pylist()
    return {dict(r["detail"])["uid"]: r for r in rows if r["event"]["dataset"] == "zeek.conn"}


@pytest.mark.e2e
def test_lease_reassignment_attributes_out_of_order_events_to_the_holder_at_their_time(spark, own_broker, tmp_path):
    lake = tmp_path / "lake"
    seed_reference_tables(lake)
    settings = Settings(bootstrap=own_broker.bootstrap, lake=lake)
    ensure_topics(settings, RAW_TOPICS, partitions=1)
    produce(own_broker.bootstrap, DELIVERY)
    run_events(own_broker.bootstrap, lake, "--max-offsets-per-trigger", "2")

    assert row_count(lake, TABLE_EVENTS) == len(DELIVERY) and row_count(lake, TABLE_QUARANTINE) == 0
    conns = by_uid(lake)
    assert conns["C1010"]["host"]["name"] == "host-a" and conns["C1010"]["host"]["mac"] == "AA-AA-AA-00-00-01"
    assert conns["C1040"]["host"]["name"] == "host-b" and conns["C1041"]["host"]["mac"] == "BB-BB-BB-00-00-02"
    assert conns["C1040"]["host"]["ip"] == [X]
    # DNS -> connection: the name the client resolved within the window (case-folded), and only then.
    assert conns["C1010"]["destination"]["domain"] == "evil.example"
    assert conns["C1041"]["destination"]["domain"] is None  # resolved 32 minutes earlier
    assert conns["C1040"]["destination"]["domain"] is None

    sessions = table_dataset(lake, TABLE_DHCP_SESSIONS).to_table().to_pylist()
    closed = [s for s in sessions if s["state"] == "closed"]
    assert [(s["mac"], s["end_reason"]) for s in closed] == [("AA-AA-AA-00-00-01", "release")], sessions
    assert closed[0]["lease_end"] == dt.datetime.fromtimestamp(at("10:30"), dt.UTC)
    opened = {s["mac"]: s for s in sessions if s["state"] == "open"}
    assert set(opened) == {"AA-AA-AA-00-00-01", "BB-BB-BB-00-00-02"}
    assert opened["BB-BB-BB-00-00-02"]["lease_start"] == dt.datetime.fromtimestamp(at("10:35"), dt.UTC)
    assert len({s["session_id"] for s in sessions}) == 2

    # The same lines through the batch path give the same rows.
    from enrich.dhcp_sessions import attribute_batch, events_from, sessions_from
    from enrich.reference_data import ReferenceCache
    from enrich.static_joins import enrich_static
    from ingest.arrow_parse import parse_bronze
    from ingest.file_source import lines_dataframe

    unified = attribute_batch(parse_bronze(lines_dataframe(spark, DELIVERY), raw_record=True), ["10.10.0.0/22"]).cache()
    try:
        batch_events = enrich_static(events_from(unified), ReferenceCache(lake).current()).toArrow()
        batch_sessions = sessions_from(unified).toArrow().to_pylist()
    finally:
        unified.unpersist()
    stream_events = table_dataset(lake, TABLE_EVENTS).to_table().to_pylist()
    assert sorted(map(normalized, stream_events)) == sorted(map(normalized, batch_events.to_pylist()))
    # Intermediate rows depend on arrival order (a renewal logged after the release adds nothing); the current
    # state of every session does not.
    assert current(sessions) == current(batch_sessions)


def current(sessions: list[dict]) -> dict[str, tuple]:
    order = {"open": 0, "renewed": 1, "closed": 2}
    latest: dict[str, dict] = {}
    for s in sorted(sessions, key=lambda s: (s["updated_at"], order[s["state"]])):
        latest[s["session_id"]] = s
    return {k: (s["ip"], s["mac"], s["state"], s["end_reason"], s["lease_start"], s["lease_end"])
            for k, s in latest.items()}


def normalized(row: dict) -> str:
    """A row without the fields that say where and when it was read (Kafka vs file coordinates)."""
    event = {k: v for k, v in row["event"].items() if k not in {"id", "ingested", "created"}}
    return json.dumps({**row, "event": event}, sort_keys=True, default=str)


@pytest.mark.e2e
def test_an_indicator_added_while_the_pipeline_runs_is_matched_from_the_next_batch_on(spark, own_broker, tmp_path):
    from core.triggers import Trigger
    from nightjar.pipeline import run_pipeline

    lake = tmp_path / "lake"
    seed_reference_tables(lake)
    settings = Settings(bootstrap=own_broker.bootstrap, lake=lake, shuffle_partitions=2)
    ensure_topics(settings, RAW_TOPICS, partitions=1)
    stop = threading.Event()
    failure: list[BaseException] = []

    def pipeline() -> None:
        try:
            run_pipeline(settings, Trigger(interval="500 milliseconds"), ["ingest"], stop_event=stop)
        except BaseException as exc:  # reported by the test
            failure.append(exc)

    runner = threading.Thread(target=pipeline, daemon=True)
    runner.start()
    try:
        now = time.time()
        # From a server (static address, no DHCP zone): nothing waits for a lease.
        produce(own_broker.bootstrap, [conn(now, "before", EVIL, src=SERVER)])
        wait_for(lambda: "before" in uids(lake), failure)
        write_iocs(lake, [(EVIL, "ip")])
        added = time.monotonic()
        produce(own_broker.bootstrap, [conn(now + 1, "after", EVIL, src=SERVER)])
        wait_for(lambda: "after" in uids(lake), failure)
        tagged_after_s = time.monotonic() - added
    finally:
        stop.set()
        runner.join(120)
    assert not failure, failure
    rows = by_uid(lake)
    assert rows["before"]["threat"] is None  # matched nothing then, and is not re-written
    indicator = rows["after"]["threat"]["indicator"]
    assert indicator["value"] == EVIL and indicator["matched_field"] == "destination.ip"
    assert indicator["description"] == "test threat"
    print(f"IOC added -> first tagged event committed in {tagged_after_s:.1f}s")


def uids(lake) -> set[str]:
    if not is_delta_table(lake / TABLE_EVENTS):
        return set()
    return set(by_uid(lake))


def wait_for(condition, failure: list, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert not failure, failure
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def test_rows_cross_the_operator_unchanged_to_the_microsecond(spark):
    """Events and quarantine rows travel through the operator as JSON: nothing may be lost on the way."""
    from enrich.dhcp_sessions import attribute_batch, events_from, quarantine_from
    from ingest.arrow_parse import events_of, parse_bronze, quarantine_of
    from ingest.file_source import lines_dataframe

    lines = [conn(at("10:00", 0.123456), "U1", EVIL, src="203.0.113.50"),   # no internal address: a bucket key
             conn(at("10:00", 1.000001), "U2", "203.0.113.9", src=SERVER),   # internal, no lease known
             b"\xff\xfe not utf-8", b"garbage line", b'{"_path":"conn","ts":15']
    parsed = parse_bronze(lines_dataframe(spark, lines), raw_record=True).cache()
    try:
        unified = attribute_batch(parsed, ["10.10.0.0/22"])
        assert sorted(map(str, events_from(unified).collect())) == sorted(map(str, events_of(parsed).collect()))
        assert sorted(map(str, quarantine_from(unified).collect())) == \
            sorted(map(str, quarantine_of(parsed).collect()))
        stamps = {r["detail"]["uid"]: r["@timestamp"] for r in events_from(unified).collect()}
        assert stamps["U1"].microsecond == 123456 and stamps["U2"].microsecond == 1
    finally:
        parsed.unpersist()
