"""Sigma correlation rules compiled to windowed aggregations: thresholds, timespans, group-by, each correlation
type, evidence, compile errors, and the same candidates from a real file stream (update mode, watermark) as
from the batch path."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest
from pyspark.sql.types import (
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from sigma.collection import SigmaCollection
from sigma.correlations import SigmaCorrelationRule

from alerts.alert_schema import CANDIDATE_SCHEMA, MAX_EVIDENCE
from alerts.correlation_compiler import (
    CorrelationCompileError,
    compile_correlation,
    correlation_rule,
    correlation_watermark_column,
    describe,
    update_mode_safe,
    window_durations,
)
from alerts.sigma_compiler import resolve_field


def _struct(**fields) -> StructType:
    return StructType([StructField(name, dtype) for name, dtype in fields.items()])


# The real events schema's shape (ECS nested structs), reduced to the columns these rules read.
SCHEMA = StructType([
    StructField("@timestamp", TimestampType()),
    StructField("_event_time", TimestampType()),
    StructField("event", _struct(id=StringType(), action=StringType(), outcome=StringType())),
    StructField("source", _struct(ip=StringType())),
    StructField("destination", _struct(ip=StringType(), port=LongType())),
    StructField("user", _struct(name=StringType())),
    StructField("host", _struct(name=StringType())),
    StructField("network", _struct(bytes=LongType())),
])

PREDICATES = {
    "ssh_failed": "event.action = 'ssh_login' AND event.outcome = 'failure'",
    "ssh_success": "event.action = 'ssh_login' AND event.outcome = 'success'",
    "sudo": "event.action = 'sudo'",
    "conn": "event.action = 'connection'",
}

BASE_RULES = """
title: SSH login failed
name: ssh_failed
status: test
logsource: {product: linux, service: sshd}
detection:
  selection: {event.action: ssh_login, event.outcome: failure}
  condition: selection
---
title: SSH login succeeded
name: ssh_success
status: test
logsource: {product: linux, service: sshd}
detection:
  selection: {event.action: ssh_login, event.outcome: success}
  condition: selection
---
title: sudo
name: sudo
status: test
logsource: {product: linux, service: sudo}
detection:
  selection: {event.action: sudo}
  condition: selection
---
title: Connection
id: 5a1e0c3e-2f0b-4a47-9d0e-6f1c1e7b3a10
name: conn
status: test
logsource: {product: zeek, service: conn}
detection:
  selection: {event.action: connection}
  condition: selection
"""

T0 = dt.datetime(2024, 3, 9, 10, 0, 0, tzinfo=dt.UTC)
_ids = iter(range(10**9))


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def naive(t: dt.datetime) -> dt.datetime:
    """How PySpark hands back a timestamp: naive, in the Python process's local zone."""
    return t.astimezone().replace(tzinfo=None)


def ev(t: float, action: str = "ssh_login", outcome: str | None = "failure", ip: str | None = "10.0.0.1",
       user: str | None = "root", host: str | None = "bastion", nbytes: int | None = None,
       dst: str | None = None, event_id: str | None = None, event_time: float | None = None) -> dict:
    """One event at T0 + t seconds (``_event_time`` = ``@timestamp`` unless given)."""
    return {
        "@timestamp": at(t).isoformat(),
        "_event_time": at(t if event_time is None else event_time).isoformat(),
        "event": {"id": event_id or f"ev{next(_ids):06d}", "action": action, "outcome": outcome},
        "source": {"ip": ip},
        "destination": {"ip": dst, "port": None},
        "user": {"name": user},
        "host": {"name": host},
        "network": {"bytes": nbytes},
    }


def write_events(directory: Path, name: str, events: list[dict], mtime: float | None = None) -> Path:
    """JSON lines, the same file both the batch reader and the file stream read."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    if mtime is not None:  # the file source takes files in modification-time order
        os.utime(path, (mtime, mtime))
    return path


def load(correlation_yaml: str) -> SigmaCorrelationRule:
    """The correlation rule of a real multi-document Sigma YAML (base rules + correlation), references resolved."""
    collection = SigmaCollection.from_yaml(BASE_RULES + "---\n" + correlation_yaml)
    collection.resolve_rule_references()
    (corr,) = [r for r in collection.rules if isinstance(r, SigmaCorrelationRule)]
    return corr


def correlation(name: str, ctype: str, rules: list[str], condition: str | None, group_by: list[str],
                timespan: str = "5m") -> SigmaCorrelationRule:
    lines = [f"title: {name}", f"name: {name}", "status: test", "level: high", "correlation:",
             f"  type: {ctype}", f"  rules: [{', '.join(rules)}]", f"  group-by: [{', '.join(group_by)}]",
             f"  timespan: {timespan}"]
    if condition is not None:
        lines.append(f"  condition: {condition}")
    return load("\n".join(lines) + "\n")


def run_batch(spark, tmp_path: Path, rule, events: list[dict]) -> list[dict]:
    directory = tmp_path / f"batch{next(_ids)}"
    write_events(directory, "events.json", events)
    out = rule(spark.read.schema(SCHEMA).json(str(directory)))
    assert out.schema == CANDIDATE_SCHEMA
    return [r.asDict(recursive=True) for r in out.collect()]


def entities(candidates: list[dict]) -> set[str]:
    return {c["entity"]["value"] for c in candidates}


BRUTEFORCE = correlation("ssh_bruteforce", "event_count", ["ssh_failed"], "{gte: 20}", ["source.ip"])


def test_event_count_fires_at_20_not_19_and_group_by_separates_entities(spark, tmp_path):
    rule = compile_correlation(BRUTEFORCE, PREDICATES, "ip")
    events = ([ev(i, ip="10.0.0.1", user=f"u{i}") for i in range(20)]
              + [ev(i, ip="10.0.0.2") for i in range(19)]
              + [ev(30, ip="10.0.0.2", outcome="success")]  # not a failure: does not count
              + [ev(i, ip=None) for i in range(25)])  # no group-by value: ignored
    candidates = run_batch(spark, tmp_path, rule, events)

    assert entities(candidates) == {"10.0.0.1"}
    # 20 events within 19 s: every 5-minute window sliding by 1 minute that holds all of them, i.e. 5 windows.
    assert len(candidates) == 5
    starts = sorted(c["window_start"] for c in candidates)
    assert starts == [naive(T0 - dt.timedelta(minutes=m)) for m in (4, 3, 2, 1, 0)]
    for c in candidates:
        assert c["rule_id"] == "ssh_bruteforce"
        assert c["entity"] == {"type": "ip", "value": "10.0.0.1"}
        assert c["window_end"] - c["window_start"] == dt.timedelta(minutes=5)
        assert (c["first_seen"], c["last_seen"]) == (naive(at(0)), naive(at(19)))
        assert c["event_count"] == 20 and c["detail"] == "20 events"
        assert c["host_name"] == "bastion" and c["user_name"] == "u0"  # of the earliest event


def test_timespan_guarantee_inside_t_minus_slide_and_never_beyond_t(spark, tmp_path):
    rule = compile_correlation(BRUTEFORCE, PREDICATES, "ip")
    assert window_durations(BRUTEFORCE) == ("300 seconds", "60 seconds")
    span_inside = 240  # T - s: detected wherever the windows fall
    span_outside = 301  # first and last more than T apart: never in one window
    events = ([ev(17 + span_inside * i / 19, ip="10.0.0.1") for i in range(20)]
              + [ev(17 + span_outside * i / 19, ip="10.0.0.2") for i in range(20)])
    candidates = run_batch(spark, tmp_path, rule, events)
    assert entities(candidates) == {"10.0.0.1"}
    assert {(c["first_seen"], c["last_seen"]) for c in candidates} == {(naive(at(17)), naive(at(257)))}

    # A 10-second burst across a 5-minute boundary: tumbling windows split it, sliding windows do not.
    burst = [ev(295 + i * 0.5, ip="10.0.0.3") for i in range(20)]
    tumbling = compile_correlation(BRUTEFORCE, PREDICATES, "ip", slide_fraction=1)
    assert run_batch(spark, tmp_path, tumbling, burst) == []
    assert entities(run_batch(spark, tmp_path, rule, burst)) == {"10.0.0.3"}


def test_evidence_is_at_most_20_ids_in_time_order(spark, tmp_path):
    rule = compile_correlation(BRUTEFORCE, PREDICATES, "ip", slide_fraction=1)
    # ids descend while time ascends, and the input is not in time order
    events = [ev(i, event_id=f"id{99 - i:02d}") for i in range(25)]
    events = events[10:] + events[:10]
    (candidate,) = run_batch(spark, tmp_path, rule, events)
    assert candidate["event_count"] == 25
    assert len(candidate["evidence"]) == MAX_EVIDENCE
    assert candidate["evidence"] == [f"id{99 - i:02d}" for i in range(20)]


def test_value_count_password_spraying_10_distinct_users_not_9(spark, tmp_path):
    corr = correlation("ssh_spraying", "value_count", ["ssh_failed"], "{gte: 10, field: user.name}",
                       ["source.ip"])
    rule = compile_correlation(corr, PREDICATES, "ip")
    events = ([ev(i, ip="10.0.0.1", user=f"user{i % 10}") for i in range(20)]  # 10 users, 20 attempts
              + [ev(i, ip="10.0.0.2", user=f"user{i % 9}") for i in range(40)]  # 9 users, 40 attempts
              + [ev(50, ip="10.0.0.2", user=None)])  # no user: not a distinct value
    candidates = run_batch(spark, tmp_path, rule, events)
    assert entities(candidates) == {"10.0.0.1"}
    assert {(c["event_count"], c["detail"]) for c in candidates} == {(20, "10 distinct user.name")}


def test_value_sum_of_bytes_over_threshold(spark, tmp_path):
    corr = correlation("exfil_volume", "value_sum", ["conn"], "{gt: 1000000, field: network.bytes}",
                       ["source.ip"])
    rule = compile_correlation(corr, PREDICATES, "ip", slide_fraction=1)
    events = ([ev(i, action="connection", outcome=None, ip="10.0.0.1", nbytes=400_000) for i in range(3)]
              + [ev(i, action="connection", outcome=None, ip="10.0.0.2", nbytes=500_000) for i in range(2)]
              + [ev(5, action="connection", outcome=None, ip="10.0.0.2", nbytes=None)])
    (candidate,) = run_batch(spark, tmp_path, rule, events)
    assert candidate["entity"]["value"] == "10.0.0.1"
    assert candidate["detail"] == "sum network.bytes 1200000"


def test_value_avg_median_percentile(spark, tmp_path):
    events = ([ev(i, action="connection", outcome=None, ip="10.0.0.1", nbytes=b)
               for i, b in enumerate([100, 200, 300, 400, 10_000])]
              + [ev(i, action="connection", outcome=None, ip="10.0.0.2", nbytes=50) for i in range(5)])
    cases = {
        "value_avg": ("{gt: 2000, field: network.bytes}", "avg network.bytes 2200"),
        "value_median": ("{gte: 300, field: network.bytes}", "median network.bytes 300"),
        "value_percentile": ("{gte: 10000, field: network.bytes, percentile: 95}", "p95 network.bytes 10000"),
    }
    for ctype, (condition, detail) in cases.items():
        corr = correlation(f"conn_{ctype}", ctype, ["conn"], condition, ["source.ip"])
        assert not update_mode_safe(corr)
        (candidate,) = run_batch(spark, tmp_path, compile_correlation(corr, PREDICATES, "ip", slide_fraction=1),
                                 events)
        assert (candidate["entity"]["value"], candidate["detail"]) == ("10.0.0.1", detail)


def test_temporal_every_rule_in_the_window_in_any_order(spark, tmp_path):
    corr = correlation("ssh_fail_and_success", "temporal", ["ssh_failed", "ssh_success"], None, ["source.ip"])
    rule = compile_correlation(corr, PREDICATES, "ip", slide_fraction=1)
    events = [ev(10, ip="10.0.0.1"), ev(20, ip="10.0.0.1", outcome="success"),
              ev(10, ip="10.0.0.2", outcome="success"), ev(20, ip="10.0.0.2"),
              ev(10, ip="10.0.0.3"), ev(20, ip="10.0.0.3"),  # failures only
              ev(10, ip="10.0.0.4"), ev(400, ip="10.0.0.4", outcome="success")]  # not within one window
    candidates = run_batch(spark, tmp_path, rule, events)
    assert entities(candidates) == {"10.0.0.1", "10.0.0.2"}
    assert {c["detail"] for c in candidates} == {"ssh_failed and ssh_success"}
    assert all(c["event_count"] == 2 and len(c["evidence"]) == 2 for c in candidates)


def test_temporal_extended_condition(spark, tmp_path):
    corr = correlation("fail_and_sudo_or_success", "temporal", ["ssh_failed", "ssh_success", "sudo"],
                       "ssh_failed and (ssh_success or sudo)", ["source.ip"])
    rule = compile_correlation(corr, PREDICATES, "ip", slide_fraction=1)
    events = [ev(1, ip="10.0.0.1"), ev(2, ip="10.0.0.1", action="sudo", outcome=None),
              ev(1, ip="10.0.0.2", outcome="success"), ev(2, ip="10.0.0.2", action="sudo", outcome=None)]
    candidates = run_batch(spark, tmp_path, rule, events)
    assert entities(candidates) == {"10.0.0.1"}
    assert candidates[0]["detail"] == "ssh_failed and sudo"


def test_temporal_ordered_a_then_b_fires_b_then_a_does_not(spark, tmp_path):
    corr = correlation("ssh_success_after_failures", "temporal_ordered", ["ssh_failed", "ssh_success"], None,
                       ["source.ip"])
    rule = compile_correlation(corr, PREDICATES, "ip", slide_fraction=1)
    events = ([ev(i, ip="10.0.0.1") for i in range(30)] + [ev(40, ip="10.0.0.1", outcome="success",
                                                                 event_id="the-success")]
              + [ev(10, ip="10.0.0.2", outcome="success"), ev(20, ip="10.0.0.2")]
              + [ev(10, ip="10.0.0.3", outcome="success"), ev(10, ip="10.0.0.3")])  # same instant: not ordered
    (candidate,) = run_batch(spark, tmp_path, rule, events)
    assert candidate["entity"]["value"] == "10.0.0.1"
    assert candidate["detail"] == "ssh_failed then ssh_success"
    assert candidate["event_count"] == 31
    # evidence: the earliest failures and the success that proves the order, in time order
    assert len(candidate["evidence"]) == MAX_EVIDENCE and candidate["evidence"][-1] == "the-success"


def test_temporal_ordered_three_rules_needs_one_chain(spark, tmp_path):
    corr = correlation("fail_success_sudo", "temporal_ordered", ["ssh_failed", "ssh_success", "sudo"], None,
                       ["source.ip"])
    rule = compile_correlation(corr, PREDICATES, "ip", slide_fraction=1)
    sudo = {"action": "sudo", "outcome": None}
    events = [ev(1, ip="10.0.0.1"), ev(3, ip="10.0.0.1", outcome="success"), ev(5, ip="10.0.0.1", **sudo),
              # every pair is ordered somewhere (1 < 10, 0 < 5) but no success lies between failure and sudo
              ev(1, ip="10.0.0.2"), ev(0, ip="10.0.0.2", outcome="success"),
              ev(10, ip="10.0.0.2", outcome="success"), ev(5, ip="10.0.0.2", **sudo)]
    candidates = run_batch(spark, tmp_path, rule, events)
    assert entities(candidates) == {"10.0.0.1"}
    assert candidates[0]["detail"] == "ssh_failed then ssh_success then sudo"


def test_group_by_alias_and_second_group_field(spark, tmp_path):
    corr = load("""
title: Failure then connection back to the same address
name: fail_then_conn_back
status: test
correlation:
  type: temporal
  rules: [ssh_failed, conn]
  group-by: [ip, host.name]
  aliases:
    ip: {ssh_failed: source.ip, conn: destination.ip}
  timespan: 5m
""")
    rule = compile_correlation(corr, PREDICATES, "ip", slide_fraction=1)
    conn = {"action": "connection", "outcome": None}
    events = [ev(1, ip="10.0.0.1"), ev(2, ip="192.168.1.5", dst="10.0.0.1", **conn),
              ev(1, ip="10.0.0.2"), ev(2, ip="10.0.0.2", dst="10.0.0.9", **conn),
              ev(1, ip="10.0.0.3", host="a"), ev(2, ip="192.168.1.5", dst="10.0.0.3", host="b", **conn)]
    (candidate,) = run_batch(spark, tmp_path, rule, events)
    assert candidate["entity"] == {"type": "ip", "value": "10.0.0.1"}
    assert candidate["detail"] == "ssh_failed and conn (host.name=bastion)"


def test_batch_without_event_time_windows_on_timestamp(spark, tmp_path):
    rule = compile_correlation(BRUTEFORCE, PREDICATES, "ip", slide_fraction=1)
    directory = tmp_path / "no_event_time"
    write_events(directory, "e.json", [ev(i, event_time=i + 3600) for i in range(20)])
    events = spark.read.schema(SCHEMA).json(str(directory)).drop("_event_time")
    (candidate,) = rule(events).collect()
    assert candidate.window_start == naive(T0)


def test_compile_errors_name_the_rule_and_the_problem(spark, tmp_path):
    with pytest.raises(CorrelationCompileError, match=r"ssh_bruteforce: unknown referenced rule 'ssh_failed'"):
        compile_correlation(BRUTEFORCE, {"ssh_success": "true"}, "ip")
    by_id = {"5a1e0c3e-2f0b-4a47-9d0e-6f1c1e7b3a10": "event.action = 'connection'"}  # found by id too
    compile_correlation(correlation("c", "event_count", ["conn"], "{gte: 1}", ["source.ip"]), by_id, "ip")

    # a correlation over another correlation
    collection = SigmaCollection.from_yaml(BASE_RULES + """---
title: Bruteforce
name: bruteforce
correlation: {type: event_count, rules: [ssh_failed], group-by: [source.ip], timespan: 5m, condition: {gte: 5}}
---
title: Many bruteforcing hosts
name: many_bruteforcers
correlation: {type: value_count, rules: [bruteforce], group-by: [host.name], timespan: 1h,
              condition: {gte: 3, field: source.ip}}
""")
    collection.resolve_rule_references()
    chained = collection["many_bruteforcers"]
    with pytest.raises(CorrelationCompileError, match=r"many_bruteforcers: .*chained correlations"):
        compile_correlation(chained, {**PREDICATES, "bruteforce": "true"}, "host")

    absent = correlation("absent_success", "temporal", ["ssh_failed", "ssh_success"],
                         "ssh_failed and not ssh_success", ["source.ip"])
    with pytest.raises(CorrelationCompileError, match=r"absent_success: 'not'"):
        compile_correlation(absent, PREDICATES, "ip")
    partial = correlation("partial_order", "temporal_ordered", ["ssh_failed", "ssh_success", "sudo"],
                          "{gte: 2}", ["source.ip"])
    with pytest.raises(CorrelationCompileError, match=r"partial_order: temporal_ordered needs all 3"):
        compile_correlation(partial, PREDICATES, "ip")
    ungrouped = load("title: Global\nname: global_count\ncorrelation: {type: event_count, rules: [ssh_failed], "
                     "timespan: 5m, condition: {gte: 5}}\n")
    with pytest.raises(CorrelationCompileError, match=r"global_count: has no group-by"):
        compile_correlation(ungrouped, PREDICATES, "ip")
    with pytest.raises(CorrelationCompileError, match=r"ssh_bruteforce: entity field 'user.name'"):
        compile_correlation(BRUTEFORCE, PREDICATES, "user", entity_field="user.name")
    with pytest.raises(CorrelationCompileError, match=r"ssh_bruteforce: entity type 'ipaddr'"):
        compile_correlation(BRUTEFORCE, PREDICATES, "ipaddr")

    # problems only the events can show: a field the rule reads is not there, a predicate does not resolve
    events = spark.read.schema(SCHEMA).json(str(write_events(tmp_path / "e", "e.json", [ev(0)])))
    missing = correlation("unique_ports", "value_count", ["conn"], "{gte: 3, field: destination.service}",
                          ["source.ip"])
    with pytest.raises(CorrelationCompileError, match=r"unique_ports: unknown field 'destination.service'"):
        compile_correlation(missing, PREDICATES, "ip")(events)
    with pytest.raises(CorrelationCompileError, match=r"ssh_bruteforce: a base-rule predicate"):
        compile_correlation(BRUTEFORCE, {"ssh_failed": "process.name = 'sshd'"}, "ip")(events)
    with pytest.raises(CorrelationCompileError, match=r"ssh_bruteforce: a base-rule predicate"):
        compile_correlation(BRUTEFORCE, {"ssh_failed": "event.action = "}, "ip")(events)
    stream = spark.readStream.schema(SCHEMA).json(str(tmp_path / "e")).drop("_event_time")
    with pytest.raises(CorrelationCompileError, match=r"ssh_bruteforce: a streaming input needs"):
        compile_correlation(BRUTEFORCE, PREDICATES, "ip")(stream)


# Events with the contract's event.dataset and detail (a source's own fields as text), for resolver cases.
DETAIL_SCHEMA = StructType([
    *[f for f in SCHEMA.fields if f.name != "event"],
    StructField("event", _struct(id=StringType(), action=StringType(), outcome=StringType(), dataset=StringType())),
    StructField("detail", MapType(StringType(), StringType())),
])


def test_group_by_resolves_like_a_detection_within_the_base_rules_datasets(spark, tmp_path):
    # Sysmon names its own User field (DOMAIN\\name, a detail key); elsewhere User is Sigma's user.name.
    corr = correlation("many_by_user", "event_count", ["conn"], "{gte: 2}", ["User"])
    sysmon = ("windows.sysmon_operational",)
    events = []
    for i in range(2):
        for dataset, name in (("windows.sysmon_operational", "CORP\\mallory"), ("system.auth", "ignored")):
            e = ev(i, action="connection", outcome=None, user="alice")
            e["event"]["dataset"] = dataset
            e["detail"] = {"User": name}
            events.append(e)
    directory = write_events(tmp_path / "detail", "e.json", events).parent
    frame = spark.read.schema(DETAIL_SCHEMA).json(str(directory))
    scoped = compile_correlation(corr, {"conn": "event.action = 'connection' AND event.dataset = "
                                                "'windows.sysmon_operational'"}, "user", datasets=sysmon)
    assert entities([r.asDict(recursive=True) for r in scoped(frame).collect()]) == {"CORP\\mallory"}
    # the group-by reads exactly what a detection on the same name over the same datasets reads
    assert resolve_field(None, "User", DETAIL_SCHEMA, sysmon).sql == "`detail`['User']"
    # over every dataset, each event's own meaning: Sysmon's User there, user.name for sshd's events
    unscoped = compile_correlation(corr, {"conn": "event.action = 'connection'"}, "user")
    assert entities([r.asDict(recursive=True) for r in unscoped(frame).collect()]) == {"CORP\\mallory", "alice"}


def test_group_by_field_no_source_defines_is_refused(spark, tmp_path):
    events = spark.read.schema(DETAIL_SCHEMA).json(str(write_events(tmp_path / "e", "e.json", [ev(0)])))
    corr = correlation("typo", "event_count", ["conn"], "{gte: 2}", ["sourceip"])
    with pytest.raises(CorrelationCompileError, match=r"typo: unknown field 'sourceip'.*did you mean 'source.ip'"):
        compile_correlation(corr, PREDICATES, "ip")(events)


def test_describe_and_helpers():
    assert describe(BRUTEFORCE) == ("ssh_bruteforce: event_count of [ssh_failed] by source.ip within 5m: "
                                    "count >= 20")
    ordered = correlation("o", "temporal_ordered", ["ssh_failed", "ssh_success"], None, ["source.ip"])
    assert describe(ordered) == "o: temporal_ordered of [ssh_failed then ssh_success] by source.ip within 5m: " \
                                "rules matched >= 2"
    assert update_mode_safe(BRUTEFORCE) and update_mode_safe(ordered)
    assert not update_mode_safe(correlation("few", "event_count", ["ssh_failed"], "{lt: 3}", ["source.ip"]))
    assert correlation_watermark_column() == "_event_time"
    assert window_durations(BRUTEFORCE, 7) == ("300 seconds", "42857142 microseconds")


# ------------------------------------------------------------------------------------------- streaming


def run_stream(spark, tmp_path: Path, rule, source: Path, upstream_watermark: str | None = None,
               mode: str = "update") -> list[tuple[int, dict]]:
    """Run ``rule`` over the files in ``source`` as a real stream: one file per micro-batch, update mode."""
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    if upstream_watermark:  # like the pipeline's deduplication: the rule must keep it, not redefine it
        stream = stream.withWatermark("_event_time", upstream_watermark)
    candidates = rule(stream)
    assert candidates.isStreaming and candidates.schema == CANDIDATE_SCHEMA
    emitted: list[tuple[int, dict]] = []

    def collect(batch, batch_id: int) -> None:
        emitted.extend((batch_id, r.asDict(recursive=True)) for r in batch.collect())

    query = (candidates.writeStream.outputMode(mode).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / f"checkpoint{next(_ids)}"))
             .foreachBatch(collect).start())
    query.awaitTermination()
    assert query.exception() is None
    return emitted


def final(emitted: list[tuple[int, dict]]) -> list[dict]:
    """The last candidate update-mode emitted for each (entity, window): the window's final state."""
    last: dict[tuple, tuple[int, dict]] = {}
    for batch_id, c in emitted:
        key = (c["rule_id"], c["entity"]["value"], c["window_start"])
        if key not in last or last[key][0] <= batch_id:
            last[key] = (batch_id, c)
    return sorted((c for _, c in last.values()), key=lambda c: (c["entity"]["value"], c["window_start"]))


def _sorted(candidates: list[dict]) -> list[dict]:
    return sorted(candidates, key=lambda c: (c["entity"]["value"], c["window_start"]))


STREAM_CASES = {
    "event_count": (BRUTEFORCE, lambda i, ip: ev(i * 7, ip=ip, user=f"u{i % 3}")),
    "value_count": (correlation("ssh_spraying", "value_count", ["ssh_failed"], "{gte: 10, field: user.name}",
                                ["source.ip"]),
                    lambda i, ip: ev(i * 7, ip=ip, user=f"user{i % 12}")),
    "temporal_ordered": (correlation("ssh_success_after_failures", "temporal_ordered",
                                     ["ssh_failed", "ssh_success"], None, ["source.ip"]),
                         lambda i, ip: ev(i * 7, ip=ip, outcome="success" if i % 11 == 10 else "failure")),
}


@pytest.mark.parametrize("case", sorted(STREAM_CASES))
def test_stream_gives_the_batch_candidates(spark, tmp_path, case):
    corr, make = STREAM_CASES[case]
    rule = compile_correlation(corr, PREDICATES, "ip")
    # Three files, one micro-batch each; windows keep growing across batches, so update mode re-emits them.
    source = tmp_path / "source"
    files = [[make(i, ip) for ip in ("10.0.0.1", "10.0.0.2") for i in range(start, start + 14)
              if not (ip == "10.0.0.2" and i % 2)]
             for start in (0, 14, 28)]
    for n, events in enumerate(files):
        write_events(source, f"part{n}.json", events, mtime=1_700_000_000 + n)

    emitted = run_stream(spark, tmp_path, rule, source, upstream_watermark="15 minutes" if case == "event_count"
                         else None)
    assert len({batch_id for batch_id, _ in emitted}) >= 2  # candidates came in more than one micro-batch
    batch = _sorted([r.asDict(recursive=True) for r in rule(spark.read.schema(SCHEMA).json(str(source))).collect()])
    assert batch, "the data must make the rule fire"
    assert final(emitted) == batch


def test_stream_late_event_within_watermark_counts_beyond_it_is_dropped(spark, tmp_path):
    rule = compile_correlation(BRUTEFORCE, PREDICATES, "ip", watermark="10 minutes")
    source = tmp_path / "source"
    # batch 0: 19 failures from .1 at 30:00-30:18 -> watermark afterwards 20:18
    write_events(source, "0.json", [ev(1800 + i, ip="10.0.0.1") for i in range(19)], mtime=1_700_000_000)
    # batch 1: the 20th failure from .1, 2 minutes late: within the watermark, so it counts
    write_events(source, "1.json", [ev(1680, ip="10.0.0.1", event_id="late-but-counted")], mtime=1_700_000_001)
    # batch 2: a burst from .2 25 minutes late: every window it falls in ended before the watermark, so Spark
    # drops it (Spark drops by the watermark of the previous batch, hence a batch in between)
    write_events(source, "2.json", [ev(300 + i, ip="10.0.0.2") for i in range(20)], mtime=1_700_000_002)

    emitted = run_stream(spark, tmp_path, rule, source)
    streamed = final(emitted)
    assert entities(streamed) == {"10.0.0.1"}
    assert all(c["event_count"] == 20 and "late-but-counted" in c["evidence"] for c in streamed)
    assert {batch_id for batch_id, _ in emitted} == {1}  # 19 were not enough; the late 20th made it fire
    batch = [r.asDict(recursive=True) for r in rule(spark.read.schema(SCHEMA).json(str(source))).collect()]
    assert entities(batch) == {"10.0.0.1", "10.0.0.2"}  # the batch path has no watermark to drop by
    assert _sorted([c for c in batch if c["entity"]["value"] == "10.0.0.1"]) == streamed


def test_non_monotone_condition_is_final_only_in_append_mode(spark, tmp_path):
    corr = correlation("quiet_source", "event_count", ["ssh_failed"], "{lt: 3}", ["source.ip"])
    assert not update_mode_safe(corr)
    rule = compile_correlation(corr, PREDICATES, "ip", slide_fraction=1)
    source = tmp_path / "source"
    write_events(source, "0.json", [ev(10, ip="10.0.0.1"), ev(20, ip="10.0.0.1"), ev(10, ip="10.0.0.2")],
                 mtime=1_700_000_000)
    # .1's third event arrives in the next batch, with one an hour later that moves the watermark on
    write_events(source, "1.json", [ev(25, ip="10.0.0.1"), ev(3600, ip="10.0.0.9")], mtime=1_700_000_001)

    appended = [c for _, c in run_stream(spark, tmp_path, rule, source, mode="append")]
    assert [(c["entity"]["value"], c["event_count"]) for c in appended] == [("10.0.0.2", 1)]  # final windows
    updated = {(c["entity"]["value"], c["event_count"]) for _, c in run_stream(spark, tmp_path, rule, source)}
    assert ("10.0.0.1", 2) in updated  # update mode judged .1's window before its third event came


def test_every_rule_finish_of_a_micro_batch_reads_the_batch_computed_once(spark, tmp_path):
    """The windowed query's ``foreachBatch`` reads its batch once per present rule (a union of finishes). Kept with
    ``persist()``, Spark served only the union's first branch from the cache and recomputed the whole micro-batch
    (source, explode, stateful aggregation) for every other rule; :func:`materialized` stores it once. Checked
    behaviourally: each finish job runs a single stage (a recomputed branch adds the aggregation's shuffle stages),
    and the candidates are the batch path's."""
    from alerts.window_aggregator import aggregate, finish, run_windowed
    from core.spark_session import materialized, release

    rules = [correlation_rule(corr, PREDICATES, "ip", SCHEMA, key=name)
             for name, (corr, _make) in sorted(STREAM_CASES.items())]
    source = tmp_path / "source"
    for n, start in enumerate((0, 14, 28)):
        events = [make(i, ip) for _name, (_c, make) in sorted(STREAM_CASES.items())
                  for ip in ("10.0.0.1", "10.0.0.2") for i in range(start, start + 14)]
        write_events(source, f"part{n}.json", events, mtime=1_700_000_000 + n)
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(source))
    stream = stream.withWatermark("_event_time", "10 minutes")
    sc = spark.sparkContext
    stages: list[int] = []
    emitted: list[tuple[int, dict]] = []

    def write(df, batch_id: int) -> None:
        batch = materialized(df)
        try:
            group = f"finish-{batch_id}"
            sc.setJobGroup(group, "the finish of every windowed rule")
            try:
                rows = finish(batch, rules).collect()
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            tracker = sc.statusTracker()
            stages.extend(len(tracker.getJobInfo(j).stageIds) for j in tracker.getJobIdsForGroup(group))
            emitted.extend((batch_id, r.asDict(recursive=True)) for r in rows)
        finally:
            release(batch)

    query = (aggregate(stream, rules).writeStream.outputMode("update").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).foreachBatch(write).start())
    query.awaitTermination()
    assert query.exception() is None
    assert stages and set(stages) == {1}, stages  # one stage per finish job: nothing recomputed

    def key(c: dict) -> tuple:
        return c["rule_id"], c["entity"]["value"], c["window_start"], c["event_count"], tuple(c["evidence"])

    newest: dict[tuple, tuple[int, dict]] = {}
    for batch_id, c in emitted:
        k = key(c)[:3]
        if k not in newest or newest[k][0] <= batch_id:
            newest[k] = (batch_id, c)
    streamed = sorted(key(c) for _, c in newest.values())
    batch_rows = run_windowed(spark.read.schema(SCHEMA).json(str(source)), rules).collect()
    assert streamed == sorted(key(r.asDict(recursive=True)) for r in batch_rows)
    assert {k[0] for k in streamed} == {"ssh_bruteforce", "ssh_spraying", "ssh_success_after_failures"}
