"""Detection end to end: generator -> Kafka -> events -> rules -> alerts on Kafka and in Delta; stream vs
backtest parity; rule files changed (and broken) while the pipeline runs."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from alerts.rule_loader import BUILTIN_RULES
from core.config import TABLE_ALERTS, TOPIC_ALERTS, Settings
from core.lake import table_dataset
from core.triggers import QUERY_DETECT, QUERY_INGEST, Trigger
from generator.scenarios import ATTACKS
from ingest.embedded_broker import EmbeddedBroker, free_port
from nightjar.pipeline import run_pipeline

REPO = Path(__file__).resolve().parent.parent
START = "2026-03-09T09:00:00Z"

# Generator -> Kafka -> pipeline -> alerts, several times over: minutes, not in the quick tier.
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def broker_for_detections():
    with EmbeddedBroker(port=free_port()) as b:
        yield b


def generate(bootstrap: str, lake: Path, events: int, seed: int = 7, *extra: str) -> None:
    subprocess.run([sys.executable, "-m", "nightjar.cli", "generate", "--events", str(events), "--seed", str(seed),
                    "--bootstrap", bootstrap, "--lake", str(lake), "--start", START, "--quiet", *extra],
                   cwd=REPO, check=True, capture_output=True, timeout=300)


def alert_messages(bootstrap: str) -> list[tuple[str, dict]]:
    """Every message on the alerts topic: (key, decoded value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{time.time_ns()}", "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.wait.max.ms": 25})
    meta = c.list_topics(TOPIC_ALERTS, timeout=10)
    parts = list(meta.topics[TOPIC_ALERTS].partitions)
    c.assign([TopicPartition(TOPIC_ALERTS, p, 0) for p in parts])
    out, eof = [], set()
    deadline = time.monotonic() + 30
    while len(eof) < len(parts) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            eof.add(m.partition())
            continue
        out.append((m.key().decode(), json.loads(m.value())))
    c.close()
    return out


def newest_alerts(lake: Path) -> dict[str, dict]:
    newest: dict[str, dict] = {}
    for r in table_dataset(lake, TABLE_ALERTS).to_table().to_pylist():
        if r["alert_id"] not in newest or r["revision"] > newest[r["alert_id"]]["revision"]:
            newest[r["alert_id"]] = r
    return newest


# 40,000 events through the whole pipeline: 685 s at load average 17 on the shared 2-core machine (over the 600 s
# default), so this test gets more room; it still fails on a hung pipeline.
@pytest.mark.timeout(1800)
def test_generated_attacks_are_alerted_on_kafka_and_delta_and_the_backtest_raises_the_same_ids(
        spark, broker_for_detections, tmp_path):
    from alerts.backtest import backtest, read_events
    from alerts.detection_input import events_schema
    from alerts.rule_loader import load_rules
    from alerts.scoring import score

    lake = tmp_path / "lake"
    bootstrap = broker_for_detections.bootstrap
    generate(bootstrap, lake, 40_000)
    settings = Settings(bootstrap=bootstrap, lake=lake, shuffle_partitions=2)
    run_pipeline(settings, Trigger(available_now=True), [QUERY_INGEST, QUERY_DETECT])

    stream = newest_alerts(lake)
    # Every scenario of the run is detected by its rule, nothing fires on the hard negatives, few false alarms.
    incidents = table_dataset(lake, "ground_truth").to_table().to_pylist()
    negatives = table_dataset(lake, "ground_truth_negatives").to_table().to_pylist()
    rows = table_dataset(lake, TABLE_ALERTS).to_table().to_pylist()
    scores, summary = score(rows, incidents, negatives)
    # every attack scenario ran (Windows brute force and spraying through the EvntSLog agent's 4625s included)
    assert {s.scenario for s in scores} == set(ATTACKS)
    for s in scores:
        assert s.recall == 1.0, (s.scenario, s.detected, s.incidents)
        assert s.precision >= 0.9, (s.scenario, s.alerts, s.true_alerts)
    assert summary["hard_negative_alerts"] == []

    # Kafka holds the same alerts: key = alert_id, and one content per (alert_id, revision).
    messages = alert_messages(bootstrap)
    assert all(key == value["alert_id"] for key, value in messages)
    by_revision: dict[tuple, str] = {}
    for _, value in messages:
        text = json.dumps(value, sort_keys=True)
        assert by_revision.setdefault((value["alert_id"], value["revision"]), text) == text
    assert {v["alert_id"] for _, v in messages} == set(stream)
    assert len(by_revision) == len(rows)  # every Delta revision was published, none twice in Delta

    # The same compiled rules in batch over the same events raise the same alerts.
    rules, errors = load_rules([BUILTIN_RULES], events_schema(spark))
    assert errors == []
    batch = {a["alert_id"]: a for a in backtest(spark, read_events(spark, lake), rules)}
    assert set(batch) == set(stream)
    assert {k: v["event_count"] for k, v in batch.items()} == {k: v["event_count"] for k, v in stream.items()}
    # ... and the pipeline's second run over the same input publishes nothing new.
    run_pipeline(settings, Trigger(available_now=True), [QUERY_INGEST, QUERY_DETECT])
    assert len(table_dataset(lake, TABLE_ALERTS).to_table()) == len(rows)


BROKEN = """\
title: Broken rule
id: 99999999-9999-4999-8999-999999999999
name: broken_rule
logsource: {product: linux}
detection:
  sel: {no.such.field: 1}
  condition: sel
level: high
nightjar: {entity: {type: ip, field: source.ip}}
"""


@pytest.mark.timeout(2400)
def test_rule_files_added_changed_and_broken_while_the_pipeline_runs(spark, broker_for_detections, tmp_path,
                                                                     caplog):
    lake = tmp_path / "lake"
    rules = tmp_path / "rules"
    rules.mkdir()
    bootstrap = broker_for_detections.bootstrap
    generate(bootstrap, lake, 20_000, 11, "--scenarios", "sudo_non_admin,dns_dga")
    settings = Settings(bootstrap=bootstrap, lake=lake, shuffle_partitions=2, rules=(rules,), builtin_rules=False)
    shutil.copy(BUILTIN_RULES / "sudo_non_admin.yml", rules)
    (rules / "broken.yml").write_text(BROKEN)

    stop = threading.Event()
    failure: list[BaseException] = []

    def pipeline() -> None:
        try:
            run_pipeline(settings, Trigger(interval="1 second"), [QUERY_INGEST, QUERY_DETECT], stop)
        except BaseException as exc:  # reported by the assertion below
            failure.append(exc)

    def rule_ids() -> set[str]:
        try:
            return {a["rule_id"] for a in newest_alerts(lake).values()}
        except Exception:
            return set()

    def wait_for(pred, timeout: float = 600) -> bool:  # generous: a 20k-record first batch took 176 s at load 14
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not failure:
            if pred():
                return True
            time.sleep(1)
        return False

    caplog.set_level(logging.INFO)
    worker = threading.Thread(target=pipeline, daemon=True)
    worker.start()
    try:
        assert wait_for(lambda: "sudo_non_admin" in rule_ids()), failure
        # the broken file is named with its problem, and did not stop the good rule
        assert any("broken.yml" in r.getMessage() and "no.such.field" in r.getMessage() for r in caplog.records)
        # a correlation rule dropped into the directory is picked up without a restart
        shutil.copy(BUILTIN_RULES / "dns_tunnelling.yml", rules)
        assert wait_for(lambda: "dns_dga" in rule_ids()), failure
        assert worker.is_alive()
    finally:
        stop.set()
        worker.join(120)
    assert not failure, failure
