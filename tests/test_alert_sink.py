"""The alert sink (Kafka at least once + Delta exactly once) and ``nightjar alerts tail``, on a real broker and lake."""

from __future__ import annotations

import datetime as dt
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from alerts.alert_schema import ALERT_SCHEMA, alert_id, alert_id_column
from alerts.alert_sink import AlertDeliveryError, alert_from_json, close_producers, publish_alerts
from core.config import TABLE_ALERTS

NIGHTJAR = Path(sys.executable).parent / "nightjar"
T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.UTC)


def make_alert(rule_id: str = "ssh_bruteforce", entity: tuple[str, str] = ("ip", "203.0.113.9"), revision: int = 1,
               event_count: int = 42, severity: str = "high", window_start: dt.datetime = T0, **extra) -> dict:
    alert = {
        "alert_id": alert_id(rule_id, entity[0], entity[1], window_start),
        "revision": revision,
        "rule_id": rule_id,
        "rule_name": rule_id.replace("_", " ").title(),
        "severity": severity,
        "tags": ["attack.t1110"],
        "entity": {"type": entity[0], "value": entity[1]},
        "host_name": "web-01",
        "user_name": None,
        "window_start": window_start,
        "window_end": window_start + dt.timedelta(minutes=5),
        "first_seen": window_start + dt.timedelta(seconds=1, microseconds=123456),
        "last_seen": window_start + dt.timedelta(minutes=3, seconds=10),
        "event_count": event_count,
        "evidence": [f"ev-{i}" for i in range(min(event_count, 20))],
        "detected_at": window_start + dt.timedelta(minutes=3, seconds=12),
        "summary": f"{event_count} failed SSH logins from {entity[1]}",
    }
    alert.update(extra)
    return alert


def three_alerts() -> list[dict]:
    return [
        make_alert(),
        make_alert("sudo_to_root", ("user", "mallory"), severity="critical", event_count=1, user_name="mallory",
                   summary="mallory ran a root shell through sudo"),
        make_alert("dns_tunnel", ("host", "ws-007"), severity="low", event_count=300, host_name="ws-007",
                   summary="ws-007 sent 300 long DNS queries"),
    ]


def consume_all(bootstrap: str, topic: str, timeout: float = 20.0) -> list[tuple[bytes, bytes]]:
    """Every (key, value) on ``topic``, read from the beginning to the end of each partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from core.config import Settings
    from ingest.embedded_broker import list_topics

    partitions = list_topics(Settings(bootstrap=bootstrap)).get(topic, 0)
    if not partitions:
        return []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test", "enable.partition.eof": True,
                         "fetch.wait.max.ms": 25, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out, ended, deadline = [], set(), time.monotonic() + timeout
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"{topic} did not reach its end in {timeout}s"
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error().str()
                ended.add(msg.partition())
                continue
            out.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def delta_rows(lake: Path) -> list[dict]:
    return DeltaTable(str(lake / TABLE_ALERTS)).to_pyarrow_table().to_pylist()


def utc(rows: list[dict]) -> list[dict]:
    """Delta hands back UTC timestamps; make them comparable with the aware datetimes of make_alert."""
    return [{k: (v.astimezone(dt.UTC) if isinstance(v, dt.datetime) else v) for k, v in r.items()} for r in rows]


@pytest.fixture(autouse=True)
def _fresh_producers():
    yield
    close_producers()


def test_publish_puts_one_json_message_per_alert_and_the_rows_in_delta(settings, lake, unique_topic):
    alerts = three_alerts()
    assert publish_alerts(alerts, settings, batch_id=0, app_id="alerts-q", topic=unique_topic) == 3

    messages = consume_all(settings.bootstrap, unique_topic)
    assert len(messages) == 3
    by_key = {key.decode(): value for key, value in messages}
    assert set(by_key) == {a["alert_id"] for a in alerts}
    for alert in alerts:
        raw = json.loads(by_key[alert["alert_id"]])
        assert list(raw) == ALERT_SCHEMA.fieldNames()  # every field, in contract order
        assert raw["entity"] == alert["entity"]
        assert raw["first_seen"] == (alert["first_seen"]).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert all(raw[f].endswith("Z") for f in ("window_start", "window_end", "first_seen", "last_seen",
                                                  "detected_at"))
        assert alert_from_json(by_key[alert["alert_id"]]) == alert  # round trip of every field

    table = DeltaTable(str(lake / TABLE_ALERTS))
    assert table.transaction_version("alerts-q") == 0
    key = lambda r: r["alert_id"]  # noqa: E731
    assert sorted(utc(delta_rows(lake)), key=key) == sorted(alerts, key=key)


def test_a_replayed_batch_publishes_nothing_and_an_update_is_appended(settings, lake, unique_topic):
    alerts = three_alerts()
    publish_alerts(alerts, settings, batch_id=4, app_id="alerts-q", topic=unique_topic)
    version = DeltaTable(str(lake / TABLE_ALERTS)).version()

    # Spark replays batch 4 after a crash that followed the Delta commit: nothing new anywhere.
    assert publish_alerts(alerts, settings, batch_id=4, app_id="alerts-q", topic=unique_topic) == 0
    assert publish_alerts(alerts, settings, batch_id=3, app_id="alerts-q", topic=unique_topic) == 0
    assert len(consume_all(settings.bootstrap, unique_topic)) == 3
    assert DeltaTable(str(lake / TABLE_ALERTS)).version() == version
    assert len(delta_rows(lake)) == 3

    # The brute force keeps going: batch 5 carries revision 2 of the same alert.
    update = make_alert(revision=2, event_count=97, summary="97 failed SSH logins from 203.0.113.9")
    assert update["alert_id"] == alerts[0]["alert_id"]
    assert publish_alerts([update], settings, batch_id=5, app_id="alerts-q", topic=unique_topic) == 1
    rows = delta_rows(lake)
    assert len(rows) == 4
    current = {}
    for row in sorted(rows, key=lambda r: r["revision"]):  # current state = highest revision per alert_id
        current[row["alert_id"]] = row
    assert current[update["alert_id"]]["event_count"] == 97 and len(current) == 3
    on_kafka = [alert_from_json(v) for k, v in consume_all(settings.bootstrap, unique_topic)
                if k.decode() == update["alert_id"]]
    assert [(a["revision"], a["event_count"]) for a in on_kafka] == [(1, 42), (2, 97)]  # one key: in order


def test_spark_dataframe_input_and_alert_id_in_python_equals_spark(spark, settings, lake, unique_topic):
    from pyspark.sql import functions as F

    starts = [
        dt.datetime(2024, 5, 1, 10, 0, 0, 1, tzinfo=dt.UTC),
        dt.datetime(2024, 5, 1, 10, 0, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),  # before the epoch: negative micros
        dt.datetime(2031, 2, 3, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=5))),  # not given in UTC
    ]
    alerts = [make_alert("r1", ("ip", f"10.0.0.{i}"), window_start=ws) for i, ws in enumerate(starts)]
    alerts.append(make_alert("r2", ("user", "Zoë|ü"), window_start=starts[0]))  # non-ASCII, separator inside
    df = spark.createDataFrame(alerts, ALERT_SCHEMA)
    got = df.select("alert_id", alert_id_column(F.col("rule_id"), F.col("entity.type"), F.col("entity.value"),
                                                F.col("window_start")).alias("spark_id")).collect()
    assert [r.spark_id for r in got] == [r.alert_id for r in got] == [a["alert_id"] for a in alerts]

    assert publish_alerts(df, settings, batch_id=0, app_id="alerts-q", topic=unique_topic) == len(alerts)
    published = {alert_from_json(v)["alert_id"]: alert_from_json(v) for _, v in
                 consume_all(settings.bootstrap, unique_topic)}
    for alert in alerts:  # timestamps survive Spark -> Arrow -> JSON to the microsecond
        assert published[alert["alert_id"]] == {**alert, **{k: v.astimezone(dt.UTC) for k, v in alert.items()
                                                            if isinstance(v, dt.datetime)}}


def test_a_failed_delivery_raises_and_writes_nothing_to_delta(settings, lake, unique_topic):
    from ingest.embedded_broker import free_port

    unreachable = settings.with_(bootstrap=f"127.0.0.1:{free_port()}")
    started = time.monotonic()
    with pytest.raises(AlertDeliveryError, match=rf"3 of 3 alerts were not delivered to topic {unique_topic}"):
        publish_alerts(three_alerts(), unreachable, batch_id=0, app_id="alerts-q", topic=unique_topic, timeout_s=2)
    assert time.monotonic() - started < 15
    assert not (lake / TABLE_ALERTS / "_delta_log").exists()
    # The replay, once Kafka is back, publishes the whole batch.
    assert publish_alerts(three_alerts(), settings, batch_id=0, app_id="alerts-q", topic=unique_topic) == 3
    assert len(delta_rows(lake)) == 3


def test_malformed_alerts_are_rejected_before_anything_is_sent(settings, lake, unique_topic):
    with pytest.raises(ValueError, match="severity 'urgent' is not one of"):
        publish_alerts([make_alert(severity="urgent")], settings, 0, "alerts-q", unique_topic)
    bad = make_alert()
    del bad["summary"]
    with pytest.raises(ValueError, match="field 'summary' is missing"):
        publish_alerts([make_alert(rule_id="ok"), bad], settings, 0, "alerts-q", unique_topic)
    assert consume_all(settings.bootstrap, unique_topic) == []
    assert not (lake / TABLE_ALERTS / "_delta_log").exists()


# --- nightjar alerts tail -------------------------------------------------------------------------------

def nightjar(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([str(NIGHTJAR), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def published(settings, unique_topic) -> list[dict]:
    """Three alerts, a revision-2 update of the first, and two messages that are not alerts."""
    from confluent_kafka import Producer

    alerts = three_alerts()
    publish_alerts(alerts, settings, batch_id=0, app_id="alerts-q", topic=unique_topic)
    update = make_alert(revision=2, event_count=97, summary="97 failed SSH logins from 203.0.113.9",
                        detected_at=T0 + dt.timedelta(minutes=4, seconds=12))
    publish_alerts([update], settings, batch_id=1, app_id="alerts-q", topic=unique_topic)
    producer = Producer({"bootstrap.servers": settings.bootstrap})
    producer.produce(unique_topic, key=b"junk", value=b"this is not json {")
    producer.produce(unique_topic, key=b"junk", value=b'{"hello": "world"}')
    assert producer.flush(10) == 0
    return [*alerts, update]


def test_tail_prints_one_line_per_alert_marks_updates_and_warns_on_bad_messages(settings, unique_topic, published):
    result = nightjar("alerts", "tail", "--from-beginning", "--no-follow", "--bootstrap", settings.bootstrap,
                      "--topic", unique_topic)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    aid = published[0]["alert_id"][:8]
    assert (f"2024-05-01 10:03:12Z  HIGH      NEW         ssh_bruteforce  ip=203.0.113.9  42 events  host=web-01  "
            f"[{aid}]  42 failed SSH logins from 203.0.113.9") in lines
    assert (f"2024-05-01 10:04:12Z  HIGH      UPDATE r2   ssh_bruteforce  ip=203.0.113.9  97 events  host=web-01  "
            f"[{aid}]  97 failed SSH logins from 203.0.113.9") in lines
    assert lines.index(next(ln for ln in lines if "NEW" in ln and aid in ln)) < \
        lines.index(next(ln for ln in lines if "UPDATE r2" in ln))
    critical = next(ln for ln in lines if "sudo_to_root" in ln)
    assert "CRITICAL" in critical and "user=mallory" in critical and "1 event " in critical
    host_line = next(ln for ln in lines if "dns_tunnel" in ln)
    assert "host=ws-007  300 events  [" in host_line  # host entity: no repeated host=
    warnings = [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 2 and all("not an alert" in w for w in warnings)
    assert any("not JSON" in w for w in warnings) and any("missing" in w for w in warnings)
    assert "\033[" not in result.stdout  # no colour codes when stdout is not a terminal


def test_tail_filters_by_severity_and_prints_raw_json(settings, unique_topic, published):
    result = nightjar("alerts", "tail", "--from-beginning", "--no-follow", "--min-severity", "high", "--json",
                      "--bootstrap", settings.bootstrap, "--topic", unique_topic)
    assert result.returncode == 0, result.stderr
    got = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((a["rule_id"], a["revision"]) for a in got) == [
        ("ssh_bruteforce", 1), ("ssh_bruteforce", 2), ("sudo_to_root", 1)]
    assert all(alert_from_json(json.dumps(a)) for a in got)


def test_tail_follows_new_alerts_and_stops_cleanly_on_ctrl_c(settings, unique_topic, published):
    proc = subprocess.Popen([str(NIGHTJAR), "alerts", "tail", "--bootstrap", settings.bootstrap, "--topic",
                             unique_topic], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(ln) for ln in proc.stdout], daemon=True).start()
    try:
        banner = proc.stderr.readline()
        assert "from now (Ctrl-C to stop)" in banner, banner
        new = make_alert("port_scan", ("ip", "198.51.100.7"), severity="medium", event_count=500,
                         summary="198.51.100.7 probed 500 ports")
        publish_alerts([new], settings, batch_id=2, app_id="alerts-q", topic=unique_topic)
        line = lines.get(timeout=20)  # only the new alert: the ones already on the topic are not repeated
        assert "MEDIUM" in line and "port_scan" in line and "ip=198.51.100.7" in line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert lines.empty()
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_tail_max_and_timeout_stop_a_follower(settings, unique_topic, published):
    result = nightjar("alerts", "tail", "--from-beginning", "--max", "2", "--bootstrap", settings.bootstrap,
                      "--topic", unique_topic)
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 2
    started = time.monotonic()
    result = nightjar("alerts", "tail", "--timeout", "1.5", "--bootstrap", settings.bootstrap, "--topic",
                      unique_topic)
    assert result.returncode == 0 and result.stdout == ""
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(("args", "message"), [
    (["--max", "0"], "--max 0: give a number of alerts >= 1"),
    (["--min-severity", "urgent"], "argument --min-severity: invalid choice: 'urgent'"),
    (["--timeout", "soon"], "argument --timeout: invalid float value: 'soon'"),
    (["--topic", "no.such.topic"], "topic no.such.topic does not exist"),
])
def test_tail_bad_arguments_give_one_line_and_a_non_zero_exit(settings, args, message):
    result = nightjar("alerts", "tail", "--bootstrap", settings.bootstrap, *args)
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_tail_without_a_broker_or_an_action_gives_one_line(settings):
    from ingest.embedded_broker import free_port

    result = nightjar("alerts", "tail", "--bootstrap", f"127.0.0.1:{free_port()}")
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "cannot reach Kafka" in result.stderr
    result = nightjar("alerts")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "ACTION" in result.stderr
