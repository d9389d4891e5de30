"""The pipeline's promises under trouble: a rule query that fails at run time comes back without losing an alert
(and tells the SOC it was down); a drained run (--available-now) writes every event, whatever the micro-batch
split — also the events that waited for a DHCP lease that never came."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import write_deltalake

from core.config import (
    RAW_TOPICS,
    TABLE_ALERTS,
    TABLE_EVENTS,
    TABLE_NETWORKS,
    TABLE_PIPELINE_PROGRESS,
    TOPIC_ALERTS,
    TOPIC_RAW_ZEEK,
    Settings,
)
from core.lake import row_count, table_dataset
from ingest.embedded_broker import EmbeddedBroker, ensure_topics, free_port
from nightjar.pipeline import Trigger, run_pipeline

T0 = 1_773_050_000.0  # 2026-03-09 10:33:20 UTC


@pytest.fixture
def own_broker():
    with EmbeddedBroker(port=free_port()) as b:
        yield b


def conn(ts: float, uid: str, src: str, dst: str, port: int) -> bytes:
    return json.dumps({"_path": "conn", "ts": ts, "uid": uid, "id.orig_h": src, "id.orig_p": 40000,
                       "id.resp_h": dst, "id.resp_p": port, "proto": "tcp", "conn_state": "REJ",
                       "local_orig": True, "local_resp": True}).encode()


def send(bootstrap: str, records: list[bytes], partitions: int = 4) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i, raw in enumerate(records):
        producer.produce(TOPIC_RAW_ZEEK, raw, partition=i % partitions)
    assert producer.flush(30) == 0


def dhcp_zone(lake) -> None:
    """The scanner's network is DHCP-managed: its events wait for a lease (that never comes)."""
    write_deltalake(str(lake / TABLE_NETWORKS), pa.table({
        "cidr": ["10.10.0.0/22", "10.10.8.0/24"], "zone": ["workstations", "servers"], "site": ["hq", "hq"],
        "country": ["US", "US"], "internal": [True, True], "dhcp": [True, False]}), mode="overwrite")


FLAKY_RULE = '''
from pathlib import Path

from pyspark.sql import functions as F

from alerts.python_rules import Windowed, python_rule
from alerts.window_aggregator import candidates

ATTEMPTS = {attempts!r}
SAMPLE = ('{{"_path": "conn", "ts": 1773050000.0, "uid": "S1", "id.orig_h": "198.51.100.1", "id.orig_p": 40000, '
          '"id.resp_h": "10.10.8.20", "id.resp_p": 22, "proto": "tcp", "conn_state": "REJ"}}')
NEGATIVE = ('{{"_path": "dns", "ts": 1773050000.0, "uid": "D1", "id.orig_h": "10.10.8.20", "id.orig_p": 5353, '
            '"id.resp_h": "10.10.8.2", "id.resp_p": 53, "proto": "udp", "query": "example.org"}}')


def _flaky(n):
    # The first two evaluations kill their Python worker, as the OS killing it for memory would.
    import os
    from pathlib import Path

    marker = Path(ATTEMPTS)
    done = int(marker.read_text()) if marker.exists() else 0
    if done < 2:
        marker.write_text(str(done + 1))
        os._exit(1)
    return True


@python_rule(id="flaky_conns", name="Connections (flaky evaluation)", severity="low", tags=[], entity_type="ip",
             samples={{"positive": [SAMPLE], "negative": [NEGATIVE]}}, windowed=True)
def rule() -> Windowed:
    flaky = F.udf(_flaky, "boolean")
    return Windowed(window="10 minutes", where=F.col("event.dataset") == "zeek.conn",
                    group_by=(F.col("source.ip"),),
                    finish=lambda agg: candidates(agg.where(flaky(F.col("n"))), "flaky_conns", "ip", 0,
                                                  condition=F.lit(True), detail=None))
'''


@pytest.mark.e2e
def test_a_rule_that_fails_at_run_time_restarts_from_its_checkpoint_and_loses_no_alert(spark, own_broker, tmp_path):
    lake, rules = tmp_path / "lake", tmp_path / "rules"
    rules.mkdir()
    attempts = tmp_path / "attempts"
    (rules / "flaky.py").write_text(FLAKY_RULE.format(attempts=str(attempts)))
    settings = Settings(bootstrap=own_broker.bootstrap, lake=lake, shuffle_partitions=2, rules=(rules,))
    ensure_topics(settings, RAW_TOPICS, partitions=4)
    sources = [f"198.51.100.{i}" for i in range(1, 6)]
    send(own_broker.bootstrap, [conn(T0 + i, f"C{i}", sources[i % 5], "10.10.8.20", 22) for i in range(40)])

    run_pipeline(settings, Trigger(available_now=True))

    assert attempts.read_text() == "2"  # the rule really failed twice before it ran
    alerts = table_dataset(lake, TABLE_ALERTS).to_table().to_pylist()
    mine = [a for a in alerts if a["rule_id"] == "flaky_conns"]
    assert sorted(a["entity"]["value"] for a in mine) == sorted(sources)  # one per source: none lost, none twice
    assert all(a["event_count"] == 8 for a in mine)
    # The SOC was told that coverage dropped, with the rule in the entity.
    health = [a for a in alerts if a["rule_id"] == "nightjar.rule_health"]
    assert {(a["entity"]["type"], a["entity"]["value"]) for a in health} == {("rule", "flaky_conns")}
    # ... and the rule's health went from restarting back to running.
    rows = table_dataset(lake, TABLE_PIPELINE_PROGRESS).to_table().to_pylist()
    states = [r["status"] for r in sorted(rows, key=lambda r: r["timestamp"]) if r["rule_id"] == "flaky_conns"]
    assert "restarting" in states and states[-1] == "running", states
    # `nightjar rules list` reads the same rows: the rule is running again, with its last batch and alert.
    from alerts.detection_stream import read_rule_health

    health_now = read_rule_health(lake)["flaky_conns"]
    assert health_now["status"] == "running" and health_now["error"] is None
    assert health_now["last_batch_at"] is not None and health_now["last_alert_at"] is not None


@pytest.mark.e2e
@pytest.mark.parametrize("max_offsets", [20, 1_000])  # 20: 4 batches, the scan split across them
def test_a_drain_writes_every_event_and_alerts_on_a_scan_by_a_host_without_a_lease(spark, own_broker, tmp_path,
                                                                                   max_offsets):
    """A vertical scan by 10.10.1.77 (in a DHCP zone, no lease ever logged) and later filler, replayed alone: every
    record reaches events (none stays waiting for its lease) and the port scan alert fires, for any batch split."""
    lake = tmp_path / "lake"
    dhcp_zone(lake)
    settings = Settings(bootstrap=own_broker.bootstrap, lake=lake, shuffle_partitions=2,
                        max_offsets_per_trigger=max_offsets)
    ensure_topics(settings, RAW_TOPICS, partitions=2)
    scan = [conn(T0 + i * 0.5, f"CS{i}", "10.10.1.77", "10.10.8.20", 1000 + i) for i in range(60)]
    filler = [conn(T0 + 400 + i, f"CF{i}", "10.10.8.30", "10.10.8.20", 443) for i in range(20)]
    send(own_broker.bootstrap, scan + filler, partitions=2)

    run_pipeline(settings, Trigger(available_now=True))

    assert row_count(lake, TABLE_EVENTS) == len(scan) + len(filler)
    events = table_dataset(lake, TABLE_EVENTS).to_table(columns=["host"]).to_pylist()
    assert all(e["host"] is None or e["host"]["name"] is None for e in events)  # released unattributed
    scans = [a for a in table_dataset(lake, TABLE_ALERTS).to_table().to_pylist()
             if a["rule_id"] == "port_scan_vertical"]
    assert [(a["entity"]["value"], a["event_count"]) for a in scans] == [("10.10.1.77", 60)]


def test_a_batch_interrupted_by_the_stop_is_one_info_line_and_a_real_failure_stays_an_error():
    import logging

    from nightjar.pipeline import InterruptedBatchFilter

    def record(exc: BaseException) -> logging.LogRecord:
        return logging.LogRecord("py4j.clientserver", logging.ERROR, __file__, 1,
                                 "There was an exception while executing the Python Proxy on the Python Side.", (),
                                 (type(exc), exc, None))

    interrupted = RuntimeError("An error occurred while calling o68781.collectToPython.\n: "
                               "java.lang.InterruptedException\n\tat java.base/java.util.concurrent.CompletableFuture")
    f = InterruptedBatchFilter()
    before = record(interrupted)
    assert f.filter(before) and before.levelno == logging.ERROR and before.exc_info  # not stopping: a failure
    f.stopping.set()
    after = record(interrupted)
    assert f.filter(after)
    assert after.levelno == logging.INFO and after.exc_info is None and "replays it" in after.getMessage()
    other = record(RuntimeError("java.lang.OutOfMemoryError: Java heap space"))
    assert f.filter(other) and other.levelno == logging.ERROR and other.exc_info  # a real error stays an error
    gone = record(ConnectionRefusedError(111, "Connection refused"))  # the JVM's SIGTERM hook stopped it first
    assert f.filter(gone) and gone.levelno == logging.INFO and "replays it" in gone.getMessage()
    # The batch's failure as short_batch_errors reports it when Spark's own shutdown hook cut its job (seen at the end
    # of `nightjar demo`): the JVM call, no cause. Before the stop the same line stays an error.
    from core.errors import MicroBatchError

    cut = MicroBatchError("An error occurred while calling o75191.localCheckpoint.")
    bare = record(cut)
    assert f.filter(bare) and bare.levelno == logging.INFO and "replays it" in bare.getMessage()
    f.stopping.clear()
    running = record(cut)
    assert f.filter(running) and running.levelno == logging.ERROR and running.exc_info


def test_a_batch_the_stop_interrupts_is_no_rule_failure_and_raises_no_health_alert():
    """Seen in a live run stopped while the windowed query's batch ran: the cancelled job failed the batch, and all 14
    windowed rules published 'Detection rule stopped working' health alerts to the SOC on an ordinary stop."""
    from alerts.detection_stream import STATUS_RESTARTING, STATUS_RUNNING, RuleHealth

    published: list[list[str]] = []
    health = RuleHealth()
    health.on_failure = lambda ids, error, at: published.append(ids)
    health.track(["ssh_brute_force", "dns_dga"], "windowed")
    health.stopping.set()
    health.failed(["ssh_brute_force", "dns_dga"], "An error occurred while calling o34600.collectToPython.")
    assert published == [] and health.get("ssh_brute_force").status == STATUS_RUNNING
    running = RuleHealth()  # the same failure while the pipeline runs is a rule failure
    running.on_failure = lambda ids, error, at: published.append(ids)
    running.track(["ssh_brute_force"], "windowed")
    running.failed(["ssh_brute_force"], "An error occurred while calling o34600.collectToPython.")
    assert published == [["ssh_brute_force"]] and running.get("ssh_brute_force").status == STATUS_RESTARTING


def test_a_jvm_call_cut_by_the_stop_is_one_info_line_and_before_the_stop_stays_an_error():
    import logging

    from nightjar.pipeline import InterruptedBatchFilter

    def record() -> logging.LogRecord:
        exc = ConnectionResetError("Error while sending or receiving")
        return logging.LogRecord("root", logging.ERROR, __file__, 1, "Exception while sending command.", (),
                                 (type(exc), exc, None))

    f = InterruptedBatchFilter()
    before = record()
    assert f.filter(before) and before.levelno == logging.ERROR and before.exc_info  # a live run: a failure
    f.stopping.set()
    after = record()
    assert f.filter(after)
    assert after.levelno == logging.INFO and after.exc_info is None
    assert after.getMessage() == "a call into the JVM was cut by the stop (py4j: Error while sending or receiving)"


def test_a_health_alert_the_alerts_table_could_not_take_is_retried_until_it_lands_once(settings, broker) -> None:
    """The lake's disk full while Kafka works (seen in the chaos test): the health alert reached the topic but not
    the table. It stays pending and is written by a later poll, once, with the content the topic carries."""
    import datetime as dt
    import shutil
    import threading

    from alerts.detection_stream import HEALTH_RULE
    from nightjar.pipeline import Supervisor

    ensure_topics(settings, [TOPIC_ALERTS])
    sup = object.__new__(Supervisor)  # only the health-alert path: no Spark session, no queries
    sup.settings = settings
    sup._health_folder, sup._health_batch, sup._health_pending, sup._health_warned = None, None, [], set()
    sup._health_lock = threading.RLock()
    table = settings.table_path(TABLE_ALERTS)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text("not a Delta table: writes into it fail")  # a real failure of the table write
    at = dt.datetime(2026, 3, 9, 10, 40)
    sup._health_alerts(["dns_dga"], "Python worker failed to connect back", at)
    assert len(sup._health_pending) == 1 and not table.is_dir()
    assert sup.flush_health_alerts() is False  # still failing: still pending
    table.unlink()
    assert sup.flush_health_alerts() is True and sup._health_pending == []
    rows = table_dataset(settings.lake, TABLE_ALERTS).to_table().to_pylist()
    assert [(r["rule_id"], r["entity"]["value"], r["revision"]) for r in rows] == [(HEALTH_RULE.rule_id, "dns_dga", 1)]
    assert sup.flush_health_alerts() is True  # nothing left, nothing written twice
    assert row_count(settings.lake, TABLE_ALERTS) == 1
    shutil.rmtree(table)
