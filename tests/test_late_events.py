"""Captures recorded years apart replayed into one lake: no event is lost to a watermark where it matters, and what
the windowed rules leave out as late is said in ``pipeline_progress`` and the log (#40).

A windowed rule's state moves with event time: once a run has seen 2024, events stamped 2019 are older than its
watermark and the aggregation leaves them out (Spark's ``numRowsDroppedByWatermark``, which counts the partial
aggregates that reach the state, not events). The events table and the single-event rules still take every one.
"""

from __future__ import annotations

import json
import logging

import pytest

from core.config import RAW_TOPICS, TABLE_ALERTS, TABLE_EVENTS, TABLE_PIPELINE_PROGRESS, TOPIC_RAW_WINDOWS
from core.lake import late_for_windowed_rules, row_count, table_dataset
from core.triggers import Trigger
from ingest.embedded_broker import EmbeddedBroker, ensure_topics, free_port
from nightjar.cli import main
from nightjar.pipeline import run_pipeline


def failed_logons(day: str, n: int, source: str) -> list[str]:
    return [json.dumps({"SourceName": "Microsoft-Windows-Security-Auditing", "EventID": 4625, "Channel": "Security",
                        "Hostname": "dc-1", "TimeCreated": f"{day} 10:00:{i:02d}.000", "TargetUserName": "administrator",
                        "IpAddress": source, "LogonType": 3}) for i in range(n)]


def log_cleared(day: str) -> str:
    return json.dumps({"SourceName": "Microsoft-Windows-Eventlog", "EventID": 1102, "Channel": "Security",
                       "Hostname": "dc-1", "TimeCreated": f"{day} 10:03:05.751", "Message": "The audit log was cleared."})


def send(bootstrap: str, lines: list[str]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for line in lines:
        producer.produce(TOPIC_RAW_WINDOWS, value=line.encode())
    assert producer.flush(30) == 0


@pytest.mark.e2e
def test_an_older_capture_after_a_newer_one_is_counted_as_late_by_the_windowed_rules(spark, settings, caplog,
                                                                                      capsys):
    with EmbeddedBroker(port=free_port()) as broker:
        settings = settings.with_(bootstrap=broker.bootstrap)
        ensure_topics(settings, RAW_TOPICS, partitions=2)
        send(broker.bootstrap, failed_logons("2024-05-01", 25, "198.51.100.7"))
        run_pipeline(settings, Trigger(available_now=True))
        older = failed_logons("2019-05-01", 25, "203.0.113.9") + [log_cleared("2019-05-01")]
        send(broker.bootstrap, older)
        with caplog.at_level(logging.INFO, logger="nightjar.progress_recorder"):
            run_pipeline(settings, Trigger(available_now=True))

    assert row_count(settings.lake, TABLE_EVENTS) == 51  # nothing lost on the way in
    alerts = table_dataset(settings.lake, TABLE_ALERTS).to_table(
        columns=["rule_id", "entity", "first_seen"]).to_pylist()
    brute = [(a["entity"]["value"], a["first_seen"].year) for a in alerts if a["rule_id"] == "windows_brute_force"]
    assert brute == [("198.51.100.7", 2024)]  # the 2019 burst came after the watermark had passed it
    cleared = [a["first_seen"].year for a in alerts if a["rule_id"] == "windows_audit_log_cleared"]
    assert cleared == [2019]  # a single-event rule sees every event, however old

    progress = table_dataset(settings.lake, TABLE_PIPELINE_PROGRESS).to_table(
        columns=["query_name", "num_input_rows", "late_rows"]).to_pylist()
    late = {p["num_input_rows"]: p["late_rows"] for p in progress if p["query_name"] == "windowed" and p["num_input_rows"]}
    # Spark counts what reaches the aggregation's state: partial aggregates (per group and window), not events
    assert late[25] == 0 and 1 <= late[26] <= 26, late  # run 1: all on time; run 2: the 2019 events left out
    assert late_for_windowed_rules(settings.lake) == late[26]
    capsys.readouterr()
    assert main(["tables", "--lake", str(settings.lake)]) == 0
    assert f"{late[26]} late row(s) left out of the windowed rules" in capsys.readouterr().out
    said = [r.getMessage() for r in caplog.records if "late rows left out (older than the watermark)" in r.getMessage()]
    assert said and said[0].startswith("windowed batch"), said
