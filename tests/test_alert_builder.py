"""The alert builder: suppression per (rule, entity), deterministic ids, one revision per update, no no-op revisions."""

from __future__ import annotations

import datetime as dt

from alerts.alert_builder import AlertBuilder, RuleMeta
from alerts.alert_schema import MAX_EVIDENCE, alert_id

T0 = dt.datetime(2026, 3, 9, 10, 0, 0)
NOW = dt.datetime(2026, 3, 9, 12, 0, 0)
RULES = {
    "ssh_failed": RuleMeta("ssh_failed", "Failed SSH login", "low", ("attack.t1110",), suppress_s=600, count_merge="sum"),
    "brute": RuleMeta("brute", "SSH brute force", "high", ("attack.t1110.001",), suppress_s=600, count_merge="max"),
}


def cand(rule: str, ip: str, start_s: float, end_s: float | None = None, count: int = 1,
         evidence: list[str] | None = None) -> dict:
    end_s = start_s if end_s is None else end_s
    return {
        "rule_id": rule, "entity": {"type": "ip", "value": ip},
        "window_start": T0 + dt.timedelta(seconds=start_s), "window_end": T0 + dt.timedelta(seconds=end_s),
        "first_seen": T0 + dt.timedelta(seconds=start_s), "last_seen": T0 + dt.timedelta(seconds=end_s),
        "event_count": count, "evidence": evidence if evidence is not None else [f"{rule}-{ip}-{start_s}"],
        "host_name": "bastion-01", "user_name": None, "detail": None,
    }


def test_single_event_candidates_within_the_suppression_span_make_one_alert_that_counts_them():
    b = AlertBuilder(RULES)
    out = b.add([cand("ssh_failed", "1.2.3.4", s) for s in (0, 30, 599)], NOW)
    assert len(out) == 1
    a = out[0]
    assert a["revision"] == 1 and a["event_count"] == 3
    assert a["alert_id"] == alert_id("ssh_failed", "ip", "1.2.3.4", T0)
    assert a["first_seen"] == T0 and a["last_seen"] == T0 + dt.timedelta(seconds=599)
    assert a["severity"] == "low" and a["tags"] == ["attack.t1110"] and a["detected_at"] == NOW
    assert "1.2.3.4" in a["summary"] and "3 events" in a["summary"]
    # the next batch adds one event: revision 2 of the same alert
    out2 = b.add([cand("ssh_failed", "1.2.3.4", 100)], NOW)
    assert [(x["alert_id"], x["revision"], x["event_count"]) for x in out2] == [(a["alert_id"], 2, 4)]


def test_after_the_span_the_same_entity_alerts_again_and_other_entities_are_separate():
    b = AlertBuilder(RULES)
    out = b.add([cand("ssh_failed", "1.2.3.4", 0), cand("ssh_failed", "1.2.3.4", 600),
                 cand("ssh_failed", "5.6.7.8", 10)], NOW)
    ids = {(x["entity"]["value"], x["first_seen"]) for x in out}
    assert ids == {("1.2.3.4", T0), ("1.2.3.4", T0 + dt.timedelta(seconds=600)),
                   ("5.6.7.8", T0 + dt.timedelta(seconds=10))}
    assert len({x["alert_id"] for x in out}) == 3


def test_overlapping_correlation_windows_keep_the_largest_count_and_repeats_emit_nothing():
    b = AlertBuilder(RULES)
    first = b.add([cand("brute", "9.9.9.9", 0, 240, count=20, evidence=["e1", "e2"]),
                   cand("brute", "9.9.9.9", 60, 290, count=25, evidence=["e2", "e3"])], NOW)
    assert len(first) == 1 and first[0]["event_count"] == 25 and first[0]["evidence"] == ["e1", "e2", "e3"]
    assert first[0]["window_end"] == T0 + dt.timedelta(seconds=290)
    # the same window again (a replayed update-mode row): no new revision
    assert b.add([cand("brute", "9.9.9.9", 60, 290, count=25, evidence=["e2", "e3"])], NOW) == []
    # growth: revision 2
    grown = b.add([cand("brute", "9.9.9.9", 60, 300, count=31, evidence=["e4"])], NOW)
    assert [(x["revision"], x["event_count"]) for x in grown] == [(2, 31)]


def test_a_replayed_single_event_is_not_counted_twice():
    b = AlertBuilder(RULES)
    b.add([cand("ssh_failed", "1.2.3.4", 0, evidence=["x1"])], NOW)
    assert b.add([cand("ssh_failed", "1.2.3.4", 0, evidence=["x1"])], NOW) == []


def test_evidence_is_capped_and_state_survives_a_restart():
    b = AlertBuilder(RULES)
    out = b.add([cand("ssh_failed", "1.2.3.4", s) for s in range(30)], NOW)
    assert len(out[0]["evidence"]) == MAX_EVIDENCE and out[0]["event_count"] == 30
    restarted = AlertBuilder(RULES, open_alerts=out)  # e.g. read back from the alerts table
    again = restarted.add([cand("ssh_failed", "1.2.3.4", 45)], NOW)
    assert [(x["alert_id"], x["revision"], x["event_count"]) for x in again] == [(out[0]["alert_id"], 2, 31)]


def test_one_batch_or_one_candidate_per_batch_gives_the_same_alerts():
    cands = [cand("ssh_failed", "1.2.3.4", s) for s in (0, 300, 700, 900, 1400)]
    whole = AlertBuilder(RULES).add(cands[::-1], NOW)  # order within a batch does not matter
    b = AlertBuilder(RULES)
    newest: dict[str, dict] = {}
    for c in cands:
        for a in b.add([c], NOW):
            newest[a["alert_id"]] = a
    # 0 and 300 share the alert started at 0; 700 starts a new one (>= 600 after 0) that 900 joins; 1400 is new
    assert sorted((a["first_seen"], a["event_count"]) for a in whole) == [
        (T0, 2), (T0 + dt.timedelta(seconds=700), 2), (T0 + dt.timedelta(seconds=1400), 1)]
    assert {a["alert_id"]: a["event_count"] for a in whole} == {k: v["event_count"] for k, v in newest.items()}
