"""The pipeline's promises under trouble: a rule query that fails at run time comes back without losing an alert
(and tells the SOC it was down); a drained run (--available-now) writes every event, whatever the micro-batch
split — also the events that waited for a DHCP lease that never came."""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from pathlib import Path

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
from core.triggers import Trigger
from ingest.embedded_broker import EmbeddedBroker, ensure_topics, free_port
from nightjar.pipeline import run_pipeline

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


def run_flaky_rule(own_broker, tmp_path, **settings_changes) -> tuple[Path, list[dict], list[str]]:
    """A drain over 40 connections from 5 sources with the flaky rule (its windowed query fails once, on its first
    batch); returns the lake, the alerts table's rows and the flaky rule's own alerts' sources."""
    lake, rules = tmp_path / "lake", tmp_path / "rules"
    rules.mkdir()
    attempts = tmp_path / "attempts"
    (rules / "flaky.py").write_text(FLAKY_RULE.format(attempts=str(attempts)))
    settings = Settings(bootstrap=own_broker.bootstrap, lake=lake, shuffle_partitions=2, rules=(rules,),
                        builtin_rules=False, **settings_changes)
    ensure_topics(settings, RAW_TOPICS, partitions=4)
    sources = [f"198.51.100.{i}" for i in range(1, 6)]
    send(own_broker.bootstrap, [conn(T0 + i, f"C{i}", sources[i % 5], "10.10.8.20", 22) for i in range(40)])

    run_pipeline(settings, Trigger(available_now=True))

    assert attempts.read_text() == "2"  # the rule really failed (whole batch, then alone) before it ran
    alerts = table_dataset(lake, TABLE_ALERTS).to_table().to_pylist()
    mine = [a for a in alerts if a["rule_id"] == "flaky_conns"]
    assert sorted(a["entity"]["value"] for a in mine) == sorted(sources)  # one per source: none lost, none twice
    assert all(a["event_count"] == 8 for a in mine)
    return lake, alerts, sources


@pytest.mark.e2e
def test_a_rule_that_fails_at_run_time_restarts_from_its_checkpoint_and_loses_no_alert(spark, own_broker, tmp_path,
                                                                                      caplog):
    """The query fails once and is running again long before the grace is over: a transient. No health alert cries
    wolf; pipeline_progress and the log keep the record. (10 min: far beyond a restart even on a loaded machine.)"""
    caplog.set_level(logging.WARNING, logger="nightjar.pipeline")
    lake, alerts, _ = run_flaky_rule(own_broker, tmp_path, health_grace_s=600.0)

    assert [a for a in alerts if a["rule_id"] == "nightjar.rule_health"] == []
    transient = [r.getMessage() for r in caplog.records if "a transient within the 10 min grace" in r.getMessage()]
    assert [m.split()[1] for m in transient] == ["flaky_conns"], transient
    # The rule's health went from restarting (with the failure) back to running.
    rows = table_dataset(lake, TABLE_PIPELINE_PROGRESS).to_table().to_pylist()
    failures = [r["error"] for r in rows if r["rule_id"] == "flaky_conns" and r["status"] == "restarting"]
    assert failures and all(failures), rows
    states = [r["status"] for r in sorted(rows, key=lambda r: r["timestamp"]) if r["rule_id"] == "flaky_conns"]
    assert "restarting" in states and states[-1] == "running", states
    # `nightjar rules list` reads the same rows: the rule is running again, with its last batch and alert.
    from alerts.detection_stream import read_rule_health

    health_now = read_rule_health(lake)["flaky_conns"]
    assert health_now["status"] == "running" and health_now["error"] is None
    assert health_now["last_batch_at"] is not None and health_now["last_alert_at"] is not None


@pytest.mark.e2e
def test_a_rule_down_past_its_grace_raises_one_health_alert_and_closes_it_when_it_runs_again(spark, own_broker,
                                                                                             tmp_path):
    """With a grace shorter than the restart's 1 s backoff the same failure is an outage: one health alert naming the
    rule and how long it was down, then its next revision saying it recovered (same alert_id)."""
    _, alerts, _ = run_flaky_rule(own_broker, tmp_path, health_grace_s=0.5)

    health = sorted((a for a in alerts if a["rule_id"] == "nightjar.rule_health"), key=lambda a: a["revision"])
    assert [(a["entity"]["type"], a["entity"]["value"], a["revision"]) for a in health] == [
        ("rule", "flaky_conns", 1), ("rule", "flaky_conns", 2)]
    raised, closed = health
    assert raised["alert_id"] == closed["alert_id"]
    assert "rule flaky_conns has been down for " in raised["summary"] and "Last error:" in raised["summary"]
    assert "rule flaky_conns is running again after " in closed["summary"]
    assert closed["window_start"] == raised["window_start"] and closed["last_seen"] >= raised["last_seen"]


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
    import shutil

    from alerts.detection_stream import HEALTH_RULE

    ensure_topics(settings, [TOPIC_ALERTS])
    sup = health_only_supervisor(settings.with_(health_grace_s=0.0))  # every failure is an outage at once
    table = settings.table_path(TABLE_ALERTS)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text("not a Delta table: writes into it fail")  # a real failure of the table write
    sup.health.track(["dns_dga"], "windowed")
    sup.health.failed(["dns_dga"], "Python worker failed to connect back")
    assert len(sup._health_pending) == 1 and not table.is_dir()
    assert sup.flush_health_alerts() is False  # still failing: still pending
    table.unlink()
    assert sup.flush_health_alerts() is True and sup._health_pending == []
    rows = table_dataset(settings.lake, TABLE_ALERTS).to_table().to_pylist()
    assert [(r["rule_id"], r["entity"]["value"], r["revision"]) for r in rows] == [(HEALTH_RULE.rule_id, "dns_dga", 1)]
    assert sup.flush_health_alerts() is True  # nothing left, nothing written twice
    assert row_count(settings.lake, TABLE_ALERTS) == 1
    shutil.rmtree(table)


def health_only_supervisor(settings: Settings):
    """A Supervisor with only its rule-health path (a real RuleHealth; no Spark session, no queries)."""
    from alerts.detection_stream import RuleHealth
    from nightjar.pipeline import Supervisor

    sup = object.__new__(Supervisor)
    sup.settings = settings
    sup._health_batch, sup._health_pending, sup._health_warned, sup._outages = None, [], set(), {}
    sup._health_lock = threading.RLock()
    sup.health = RuleHealth()
    sup.health.on_failure = sup._health_alerts
    return sup


def test_a_transient_within_the_grace_publishes_nothing_and_an_outage_is_raised_then_closed(settings, broker):
    """Rule by rule: down and back within the grace is no alert; down for good (disabled) is one alert at once, and
    its recovery the next revision of the same alert; a later outage of the same rule is a new alert."""
    from alerts.detection_stream import HEALTH_RULE

    ensure_topics(settings, [TOPIC_ALERTS])
    sup = health_only_supervisor(settings)  # the default grace: 2 min, far longer than this test
    sup.health.track(["dns_dga", "ssh_brute_force"], "windowed")
    sup.health.failed(["dns_dga", "ssh_brute_force"], "Python worker failed to connect back")
    sup.check_outages()
    assert set(sup._outages) == {"dns_dga", "ssh_brute_force"} and sup._health_pending == []
    sup.health.batch_done("windowed", ["dns_dga", "ssh_brute_force"], dt.datetime.now(dt.UTC).replace(tzinfo=None))
    sup.check_outages()
    assert sup._outages == {} and sup._health_pending == []
    assert not settings.table_path(TABLE_ALERTS).exists()  # nothing published for the transient

    for _ in range(3):  # its own evaluation fails three times in a row: disabled, down for good at once
        sup.health.fault("dns_dga", "division by zero")
    assert sup.health.get("dns_dga").status == "disabled"
    sup.health.track(["dns_dga"], "windowed")  # its file changed: loaded again ...
    sup.health.batch_done("windowed", ["dns_dga"], dt.datetime.now(dt.UTC).replace(tzinfo=None))  # ... and it ran
    sup.check_outages()
    sup.health.failed(["dns_dga"], "Python worker failed to connect back")  # a new outage, past a zero grace
    sup.settings = settings.with_(health_grace_s=0.0)
    sup.check_outages()
    sup.health.batch_done("windowed", ["dns_dga"], dt.datetime.now(dt.UTC).replace(tzinfo=None))
    sup.check_outages()

    rows = sorted(table_dataset(settings.lake, TABLE_ALERTS).to_table().to_pylist(),
                  key=lambda r: (r["window_start"], r["revision"]))
    assert [(r["rule_id"], r["entity"]["value"], r["revision"]) for r in rows] == [
        (HEALTH_RULE.rule_id, "dns_dga", 1), (HEALTH_RULE.rule_id, "dns_dga", 2),
        (HEALTH_RULE.rule_id, "dns_dga", 1), (HEALTH_RULE.rule_id, "dns_dga", 2)]
    assert rows[0]["alert_id"] == rows[1]["alert_id"] != rows[2]["alert_id"] == rows[3]["alert_id"]
    assert "disabled until its file changes" in rows[0]["summary"] and "division by zero" in rows[0]["summary"]
    assert "is running again after" in rows[1]["summary"]
    assert "has been down for" in rows[2]["summary"] and "connect back" in rows[2]["summary"]


def test_the_grace_is_a_setting_with_one_duration_syntax():
    from core.config import DEFAULT_HEALTH_GRACE_S, settings_from_env
    from core.errors import UserError

    assert settings_from_env(environ={}).health_grace_s == DEFAULT_HEALTH_GRACE_S == 120.0
    assert settings_from_env(environ={"NIGHTJAR_HEALTH_GRACE": "5m"}).health_grace_s == 300.0
    assert settings_from_env(environ={"NIGHTJAR_HEALTH_GRACE": "0"}).health_grace_s == 0.0
    for bad in ("soon", "-5s"):
        with pytest.raises(UserError, match="NIGHTJAR_HEALTH_GRACE") as err:
            settings_from_env(environ={"NIGHTJAR_HEALTH_GRACE": bad})
        assert err.value.exit_code == 2


def test_a_health_alert_left_open_by_a_stopped_run_is_closed_by_the_next_run_once_the_rule_runs(settings, broker):
    from alerts.detection_stream import HEALTH_RULE

    ensure_topics(settings, [TOPIC_ALERTS])
    first = health_only_supervisor(settings.with_(health_grace_s=0.0))
    first.health.track(["dns_dga"], "windowed")
    first.health.failed(["dns_dga"], "Python worker failed to connect back")  # raised; then the run stops
    second = health_only_supervisor(settings)
    second.carry_open_outages()
    second.health.track(["dns_dga"], "windowed")
    second.check_outages()  # tracked, no batch completed in this run yet: still open
    assert second._health_pending == [] and row_count(settings.lake, TABLE_ALERTS) == 1
    second.health.batch_done("windowed", ["dns_dga"], dt.datetime.now(dt.UTC).replace(tzinfo=None))
    second.check_outages()
    rows = sorted(table_dataset(settings.lake, TABLE_ALERTS).to_table().to_pylist(), key=lambda r: r["revision"])
    assert [(r["rule_id"], r["entity"]["value"], r["revision"]) for r in rows] == [
        (HEALTH_RULE.rule_id, "dns_dga", 1), (HEALTH_RULE.rule_id, "dns_dga", 2)]
    assert rows[0]["alert_id"] == rows[1]["alert_id"] and "is running again after" in rows[1]["summary"]
    third = health_only_supervisor(settings)
    third.carry_open_outages()
    assert third._outages == {}  # closed: nothing to carry


def test_a_query_that_used_up_its_restarts_raises_its_rules_health_alerts_at_once(settings, broker):
    """--max-restarts failures in a row end the run: its rules will not come back, so no grace is waited for."""
    from core.errors import UserError
    from nightjar.pipeline import Managed

    ensure_topics(settings, [TOPIC_ALERTS])
    sup = health_only_supervisor(settings)  # the default grace: 2 min
    sup.health.track(["ssh_login_success_after_failures"], "ingest")
    ingest = Managed("ingest", start=lambda: None, rules=lambda: ["ssh_login_success_after_failures"], max_restarts=0)
    with pytest.raises(UserError, match="failed 1 times in a row"):
        sup._failed(ingest, "Python worker failed to connect back")
    rows = table_dataset(settings.lake, TABLE_ALERTS).to_table().to_pylist()
    assert [(r["entity"]["value"], r["revision"]) for r in rows] == [("ssh_login_success_after_failures", 1)]
    assert "its query ingest failed 1 times in a row and the run stops" in rows[0]["summary"]
