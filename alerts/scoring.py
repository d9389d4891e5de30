"""``nightjar score``: detection quality of the ``alerts`` table against the generator's ``ground_truth``.

Matching: an alert matches an incident when their entities are equal (type and value) and the alert's
``[first_seen, last_seen]`` overlaps the incident's ``[start, end]`` widened by :data:`SLACK` (a correlation's
window may start before the first injected event, and a suppressed alert keeps growing after it).

Per scenario (the incidents whose ``expected_rule_id`` is the rule R):
- **recall** = incidents matched by at least one alert of R / incidents;
- **precision** = alerts of R that match *some* attack incident / alerts of R (an alert on a real attacker by a
  neighbouring rule — a brute-force alert for a brute force that then succeeded, or a new-country alert on the
  account that brute force took over (the incident's ``user_name``) — is not a false positive);
- **latency** = for each detected incident, the first revision of its earliest alert: ``detected_at`` (the
  micro-batch that published it) minus ``last_seen`` of that revision — the event time of the event that made
  the rule fire. Meaningful for live runs (event time ≈ wall time); for replayed history, and for events stamped
  after their detection (never a negative latency), it is not reported.
Hard negatives (``ground_truth_negatives``): an alert of a rule in their ``must_not_fire`` list on their entity is
counted and listed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar
# score`'s arguments, and --help or a bad argument must not wait for pyarrow (nightjar/cli.py).
from alerts.alert_builder import naive_utc
from core.config import TABLE_ALERTS, TABLE_GROUND_TRUTH, TABLE_GROUND_TRUTH_NEGATIVES, Settings
from core.errors import UserError

SLACK = dt.timedelta(minutes=5)
LIVE_LAG = dt.timedelta(hours=1)  # alerts detected more than this after last_seen: a replay, latency not meaningful


@dataclass
class ScenarioScore:
    scenario: str
    rule_id: str
    incidents: int = 0
    detected: int = 0
    alerts: int = 0
    true_alerts: int = 0
    latencies_s: list[float] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.detected / self.incidents if self.incidents else float("nan")

    @property
    def precision(self) -> float:
        return self.true_alerts / self.alerts if self.alerts else float("nan")


def _overlaps(alert: dict, inc: dict) -> bool:
    return (naive_utc(alert["first_seen"]) <= naive_utc(inc["end"]) + SLACK
            and naive_utc(alert["last_seen"]) >= naive_utc(inc["start"]) - SLACK)


def _same_entity(alert: dict, inc: dict) -> bool:
    return (alert["entity"]["type"], alert["entity"]["value"]) == (inc["entity"]["type"], inc["entity"]["value"])


def _involved(alert: dict, inc: dict) -> bool:
    """The alert is about the incident: its entity, or the account the attack used (a brute force's victim
    logging in from the attacker's country is the same attack seen from the user's side)."""
    return _same_entity(alert, inc) or (alert["entity"]["type"] == "user" and alert["entity"]["value"]
                                         == inc.get("user_name"))


def score(alert_rows: list[dict], incidents: list[dict], negatives: list[dict]) -> tuple[list[ScenarioScore], dict]:
    """Per-scenario scores and a summary (hard negatives that alerted, alerts of rules no scenario expects)."""
    first: dict[str, dict] = {}
    newest: dict[str, dict] = {}
    for a in alert_rows:
        aid = a["alert_id"]
        if aid not in first or a["revision"] < first[aid]["revision"]:
            first[aid] = a
        if aid not in newest or a["revision"] > newest[aid]["revision"]:
            newest[aid] = a
    alerts = list(newest.values())
    attacks = [i for i in incidents if i.get("is_attack", True)]
    by_rule: dict[str, ScenarioScore] = {}
    for inc in attacks:
        s = by_rule.setdefault(inc["expected_rule_id"], ScenarioScore(inc["scenario"], inc["expected_rule_id"]))
        s.incidents += 1
        hits = [a for a in alerts if a["rule_id"] == s.rule_id and _same_entity(a, inc) and _overlaps(a, inc)]
        if hits:
            s.detected += 1
            earliest = min(hits, key=lambda a: naive_utc(first[a["alert_id"]]["detected_at"]))
            rev1 = first[earliest["alert_id"]]
            lag = naive_utc(rev1["detected_at"]) - naive_utc(rev1["last_seen"])
            # A negative lag means the events were stamped after they were detected (a clock ahead, or a
            # generator run into the future): there is no latency to report, as for replays of old history.
            if dt.timedelta(0) <= lag <= LIVE_LAG:
                s.latencies_s.append(lag.total_seconds())
    for s in by_rule.values():
        mine = [a for a in alerts if a["rule_id"] == s.rule_id]
        s.alerts = len(mine)
        s.true_alerts = sum(1 for a in mine if any(_involved(a, i) and _overlaps(a, i) for i in attacks))
    negative_hits = []
    for neg in negatives:
        banned = {r.strip() for r in (neg.get("must_not_fire") or "").split(",") if r.strip()}
        for a in alerts:
            if a["rule_id"] in banned and _same_entity(a, neg) and _overlaps(a, neg):
                negative_hits.append({"scenario": neg["scenario"], "rule_id": a["rule_id"],
                                      "entity": a["entity"]["value"], "alert_id": a["alert_id"]})
    expected = set(by_rule)
    other: dict[str, int] = {}
    for a in alerts:
        if a["rule_id"] not in expected:
            other[a["rule_id"]] = other.get(a["rule_id"], 0) + 1
    summary = {"hard_negatives": len(negatives), "hard_negative_alerts": negative_hits,
               "alerts_total": len(alerts), "alerts_of_other_rules": other}
    return sorted(by_rule.values(), key=lambda s: s.scenario), summary


def _read(lake: Path, name: str) -> list[dict]:
    from core.lake import table_dataset

    if not (lake / name / "_delta_log").is_dir():
        return []
    return table_dataset(lake, name).to_table().to_pylist()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    parser.add_argument("--table", default=TABLE_ALERTS, help="alerts table to score (e.g. backtest_alerts)")


def _fmt(x: float) -> str:
    return "  n/a" if x != x else f"{x:5.2f}"  # NaN check without math


def run(args: argparse.Namespace, settings: Settings) -> int:
    incidents = _read(settings.lake, TABLE_GROUND_TRUTH)
    if not incidents:
        raise UserError(f"no ground_truth table under {settings.lake}: generate with --lake {settings.lake} first")
    alerts = _read(settings.lake, args.table)
    for a in alerts:  # backtest_alerts has one row per alert (its newest revision)
        a.setdefault("revision", 1)
    negatives = _read(settings.lake, TABLE_GROUND_TRUTH_NEGATIVES)
    scores, summary = score(alerts, incidents, negatives)
    if args.json:
        print(json.dumps({"scenarios": [{**s.__dict__, "recall": s.recall, "precision": s.precision}
                                        for s in scores], **summary}, default=str))
        return 0
    print(f"{'scenario':<26} {'incidents':>9} {'detected':>8} {'recall':>6} {'alerts':>6} {'precision':>9} "
          f"{'latency p50/max (s)':>20}")
    for s in scores:
        lat = (f"{statistics.median(s.latencies_s):.1f} / {max(s.latencies_s):.1f}" if s.latencies_s else "n/a")
        print(f"{s.scenario:<26} {s.incidents:>9} {s.detected:>8} {_fmt(s.recall):>6} {s.alerts:>6} "
              f"{_fmt(s.precision):>9} {lat:>20}")
    hits = summary["hard_negative_alerts"]
    print(f"hard negatives: {summary['hard_negatives']}, alerted: {len(hits)}")
    for h in hits:
        print(f"  {h['scenario']}: {h['rule_id']} on {h['entity']} ({h['alert_id']})")
    if summary["alerts_of_other_rules"]:
        print("alerts of rules no scenario expects: " + ", ".join(f"{k} {v}" for k, v in
                                                                  sorted(summary["alerts_of_other_rules"].items())))
    return 0
