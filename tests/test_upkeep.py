"""Automatic upkeep: compaction during appends loses and doubles nothing; superseded rule checkpoints go; the alert
builder holds only the alerts a candidate can still join."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time

from deltalake import DeltaTable

from alerts.alert_builder import AlertBuilder, RuleMeta
from core.config import TABLE_BRONZE, Settings
from core.lake import table_dataset
from ingest.delta_sink import committed_batch, write_batch
from nightjar.upkeep import Upkeep, stale_rule_checkpoints

BATCHES, ROWS = 24, 50


def test_upkeep_rounds_during_appends_lose_and_double_nothing(spark, lake):
    """The pipeline's own sink (``write_batch``: parquet files first, then one Delta commit with its app transaction)
    appends batch after batch while upkeep rounds run back to back on the same table. A batch whose commit loses a
    race is replayed, as Spark replays a failed micro-batch."""
    path = lake / TABLE_BRONZE
    upkeep = Upkeep(Settings(lake=lake), interval_s=0.0, min_files=4, retention_hours=1, tables=(TABLE_BRONZE,))
    done = threading.Event()
    replays = []

    def appender() -> None:
        try:
            for batch in range(BATCHES):
                df = spark.range(batch * ROWS, (batch + 1) * ROWS).selectExpr("id", "'t' as topic")
                for _attempt in range(5):
                    try:
                        write_batch(df, path, "pipeline", batch)
                        break
                    except Exception as exc:  # noqa: BLE001 - a lost commit race, replayed like a failed batch
                        replays.append(f"{batch}: {exc}"[:200])
                else:
                    raise AssertionError(f"batch {batch} failed five times: {replays[-1]}")
        finally:
            done.set()

    writer = threading.Thread(target=appender)
    writer.start()
    while not done.is_set():
        upkeep.run_once()
        time.sleep(0.05)  # back to back, but leave the writer its share of two shared cores
    writer.join()
    upkeep.run_once()  # and once more over the finished table

    ids = table_dataset(lake, TABLE_BRONZE).to_table(columns=["id"])["id"].to_pylist()
    assert sorted(ids) == list(range(BATCHES * ROWS)), "every row exactly once"
    assert committed_batch(path, "pipeline") == BATCHES - 1
    assert upkeep.stats.rounds >= 3 and upkeep.stats.compactions >= 1, upkeep.stats
    assert len(DeltaTable(str(path)).file_uris()) < 4, "the last round compacted the table"
    assert list((path / "_delta_log").glob("*.checkpoint.parquet")), "a log checkpoint was written"
    print(f"upkeep: {upkeep.stats}, replayed batches: {len(replays)}")


def test_the_upkeep_thread_starts_runs_and_stops(lake, spark):
    path = lake / "alerts"
    for batch in range(3):
        write_batch(spark.range(batch, batch + 1), path, "pipeline", batch)
    upkeep = Upkeep(Settings(lake=lake), interval_s=0.2, min_files=2).start()
    deadline = time.monotonic() + 60
    while upkeep.stats.rounds < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    upkeep.stop()
    assert upkeep.stats.rounds >= 2 and not upkeep._thread.is_alive()
    assert len(DeltaTable(str(path)).file_uris()) == 1


def test_vacuum_never_runs_with_a_retention_that_could_delete_a_batch_in_flight(lake):
    assert Upkeep(Settings(lake=lake), retention_hours=0).retention_hours >= 1


def test_superseded_rule_checkpoints_are_removed_and_the_newest_kept(lake, tmp_path):
    root = lake / "_checkpoints"
    now = time.time()
    for name, age_s in (("ssh_brute_force-aaa", 7200), ("ssh_brute_force-bbb", 5000), ("ssh_brute_force-ccc", 10),
                        ("dns_dga-ddd", 99999), ("new_rule-eee", 30)):
        d = root / "rules" / name / "commits"
        d.mkdir(parents=True)
        (d / "0").write_text("v1")
        for p in (d / "0", d, d.parent):
            os.utime(p, (now - age_s, now - age_s))
    stale = sorted(p.name for p in stale_rule_checkpoints(root, now=now))
    # Two older versions of a changed rule go; the newest of every rule stays, also when it is old (dns_dga).
    assert stale == ["ssh_brute_force-aaa", "ssh_brute_force-bbb"]
    # A just-superseded one stays until it has been idle for the grace period.
    assert [p.name for p in stale_rule_checkpoints(root, now=now, min_age_s=6000)] == ["ssh_brute_force-aaa"]
    Upkeep(Settings(lake=lake)).run_once()
    assert sorted(p.name for p in (root / "rules").iterdir()) == ["dns_dga-ddd", "new_rule-eee", "ssh_brute_force-ccc"]


# --- the alert builder's memory -------------------------------------------------------------------------------------

T0 = dt.datetime(2026, 3, 9, 10, 0, 0)
RULES = {"brute": RuleMeta("brute", "SSH brute force", "high", suppress_s=600, count_merge="max")}


def cand(ip: str, start_s: float, end_s: float | None = None, count: int = 5) -> dict:
    end_s = start_s + 60 if end_s is None else end_s
    return {"rule_id": "brute", "entity": {"type": "ip", "value": ip},
            "window_start": T0 + dt.timedelta(seconds=start_s), "window_end": T0 + dt.timedelta(seconds=end_s),
            "first_seen": T0 + dt.timedelta(seconds=start_s), "last_seen": T0 + dt.timedelta(seconds=end_s),
            "event_count": count, "evidence": [f"{ip}-{start_s}"], "host_name": None, "user_name": None,
            "detail": None}


def test_open_alerts_are_bounded_by_the_suppression_span_not_by_history():
    b = AlertBuilder(RULES, lateness_s=1200)
    held = []
    for step in range(200):  # 200 batches, 5 minutes of event time apart, 3 new attackers each
        b.add([cand(f"10.0.{step}.{i}", step * 300) for i in range(3)], T0)
        held.append(len(b.open))
    # An alert is held for its span (600 s) plus the lateness (1200 s): 6-7 batches of 3 alerts, never all 600.
    assert max(held) <= 3 * 8 and held[-1] == held[-20]


def test_a_late_candidate_within_the_lateness_still_joins_its_alert_and_expiry_comes_after():
    b = AlertBuilder(RULES, lateness_s=1200)
    first = b.add([cand("1.1.1.1", 0)], T0)[0]
    b.add([cand("9.9.9.9", 1700)], T0)  # the event-time clock moves to 1760 s: 1.1.1.1's span + lateness = 1800 s
    late = b.add([cand("1.1.1.1", 300, count=9)], T0)  # within the span of the alert raised at 0
    assert [(a["alert_id"], a["revision"], a["event_count"]) for a in late] == [(first["alert_id"], 2, 9)]
    b.add([cand("9.9.9.9", 1900)], T0)  # clock 1960 s: 1.1.1.1 can no longer be joined
    assert ("brute", "ip", "1.1.1.1") not in b.open and ("brute", "ip", "9.9.9.9") in b.open


def test_one_call_over_a_whole_history_gives_the_same_alerts_as_without_expiry():
    """A backtest folds its history in one call: expiry after the call must not change what it returns."""
    history = [cand("1.1.1.1", s) for s in (0, 200, 5000, 5100)] + [cand("2.2.2.2", s) for s in (100, 9000)]
    expiring = AlertBuilder(RULES, lateness_s=0).add(history, T0)
    keeping = AlertBuilder(RULES, lateness_s=10**9).add(history, T0)
    assert expiring == keeping and len(expiring) == 4
