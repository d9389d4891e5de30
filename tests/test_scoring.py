"""nightjar score: recall, precision, latency and hard negatives from alerts and ground truth rows."""

from __future__ import annotations

import datetime as dt

from alerts.scoring import score

T0 = dt.datetime(2026, 3, 9, 10, 0)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def incident(scenario: str, value: str, start: float, end: float, etype: str = "ip") -> dict:
    return {"incident_id": f"{scenario}-{value}", "scenario": scenario, "expected_rule_id": scenario,
            "entity": {"type": etype, "value": value}, "start": at(start), "end": at(end), "is_attack": True}


def alert(rule: str, value: str, first: float, last: float, detected: float, revision: int = 1,
          aid: str | None = None, etype: str = "ip") -> dict:
    return {"alert_id": aid or f"{rule}-{value}-{first}", "revision": revision, "rule_id": rule,
            "entity": {"type": etype, "value": value}, "first_seen": at(first), "last_seen": at(last),
            "detected_at": at(detected)}


def test_recall_precision_and_latency_per_scenario():
    incidents = [incident("ssh_brute_force", "1.1.1.1", 0, 5), incident("ssh_brute_force", "2.2.2.2", 30, 35),
                 incident("dns_dga", "10.0.0.5", 10, 12)]
    alerts = [
        alert("ssh_brute_force", "1.1.1.1", 1, 3, 3.5, aid="a1"),
        alert("ssh_brute_force", "1.1.1.1", 1, 5, 6, revision=2, aid="a1"),  # update of a1: one alert
        alert("ssh_brute_force", "9.9.9.9", 40, 41, 41.2, aid="fp"),  # no incident: a false positive
        alert("dns_dga", "10.0.0.5", 11, 11.5, 11.75, aid="d1"),
        alert("dns_dga", "10.0.0.5", 80, 81, 81.1, aid="d-late"),  # same entity, far outside the incident
    ]
    scores, summary = score(alerts, incidents, [])
    by = {s.scenario: s for s in scores}
    bf = by["ssh_brute_force"]
    assert (bf.incidents, bf.detected, bf.alerts, bf.true_alerts) == (2, 1, 2, 1)
    assert bf.recall == 0.5 and bf.precision == 0.5
    assert bf.latencies_s == [30.0]  # revision 1: detected 3.5 min, last_seen 3 min
    dga = by["dns_dga"]
    assert (dga.recall, dga.precision) == (1.0, 0.5)
    assert dga.latencies_s == [15.0]
    assert summary["alerts_total"] == 4 and summary["hard_negative_alerts"] == []


def test_hard_negatives_that_alert_are_listed_and_other_rules_counted():
    neg = {"scenario": "mistype_3", "entity": {"type": "ip", "value": "10.10.0.20"}, "start": at(0), "end": at(1),
           "must_not_fire": "ssh_brute_force", "is_attack": False}
    alerts = [alert("ssh_brute_force", "10.10.0.20", 0, 1, 2, aid="x"), alert("weird_rule", "1.2.3.4", 0, 0, 1)]
    scores, summary = score(alerts, [incident("ssh_brute_force", "1.1.1.1", 0, 5)], [neg])
    assert [h["alert_id"] for h in summary["hard_negative_alerts"]] == ["x"]
    assert summary["alerts_of_other_rules"] == {"weird_rule": 1}
    assert scores[0].precision == 0.0 and scores[0].recall == 0.0


def test_replayed_history_reports_no_latency():
    alerts = [alert("dns_dga", "10.0.0.5", 11, 11.5, 60 * 24 * 30)]  # detected a month later: a backfill
    scores, _ = score(alerts, [incident("dns_dga", "10.0.0.5", 10, 12)], [])
    assert scores[0].recall == 1.0 and scores[0].latencies_s == []


def test_an_alert_on_the_account_an_attack_took_over_is_not_a_false_positive():
    inc = {**incident("ssh_brute_force_success", "61.177.175.143", 0, 8), "user_name": "jallen"}
    alerts = [alert("ssh_brute_force_success", "61.177.175.143", 1, 6, 6.5),
              alert("new_country_login", "jallen", 6, 6, 6.2, etype="user"),
              alert("new_country_login", "jperez", 6, 6, 6.2, etype="user")]
    nc = {**incident("new_country_login", "jperez", 5, 7, etype="user"), "user_name": "jperez"}
    scores, _ = score(alerts, [inc, nc], [])
    by = {s.scenario: s for s in scores}
    assert by["new_country_login"].precision == 1.0 and by["new_country_login"].alerts == 2
    assert by["ssh_brute_force_success"].recall == 1.0
