"""Candidates -> alert revisions: suppression, deterministic ids, updates of growing alerts, summaries.

Rules emit *candidates* (``alert_schema.CANDIDATE_SCHEMA``): a single-event rule one per matching event, a
correlation one per (entity, window) each time the window's aggregate changes. Many candidates therefore
describe the same incident (overlapping sliding windows, a window that keeps growing, the next failed login of
a brute force). The builder folds them into alerts:

- **Suppression.** Per (rule, entity) at most one alert per suppression span (``RuleMeta.suppress_s``, event
  time): a candidate that starts within ``suppress_s`` of an open alert's ``window_start`` joins that alert
  instead of raising a new one. A candidate after the span raises a new alert.
- **Ids.** ``alert_id`` = hash(rule, entity, window_start of the alert's first candidate), so the same input
  gives the same ids in the stream and in a backtest.
- **Updates, not duplicates.** Joining a candidate that adds events makes a new *revision* of the alert (same
  ``alert_id``, ``revision`` + 1, larger ``event_count`` / ``last_seen`` / evidence); a candidate that adds
  nothing emits nothing. At most one revision per alert per call (= per micro-batch).
- **Expiry.** An alert stays open (in memory) only while a candidate could still join it: once the event-time
  clock (the newest ``last_seen`` seen) is past ``window_start + suppress_s`` by more than ``lateness_s`` (longer
  than any rule's window plus the detection watermark), it is dropped, so memory is bounded by the alerts of
  the last span, not by every alert ever raised. Expiry runs after each call, so one call's result never
  depends on it (a backtest folds its whole history in one call).
- **Counts.** Single-event candidates add up (each carries a new event); candidates of a correlation overlap
  (sliding windows count the same events), so the alert keeps the largest window's count
  (``RuleMeta.count_merge`` = ``"sum"`` or ``"max"``).

Pure Python on plain dicts: candidate batches are small (a handful of rows per micro-batch) and this is the one
place where order matters, so it runs on the driver and is tested without Spark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from alerts.alert_schema import MAX_EVIDENCE, alert_id

DEFAULT_SUPPRESS_S = 3600.0
# How far behind the newest event time a candidate may still start: the longest rule window (1 h in the rule pack)
# plus the detection watermark (10 min), with room to spare. An alert is kept this long after its span ends.
DEFAULT_LATENESS_S = 2 * 3600.0


@dataclass(frozen=True)
class RuleMeta:
    """What the builder needs to know of a rule."""

    rule_id: str
    name: str
    severity: str
    tags: tuple[str, ...] = ()
    suppress_s: float = DEFAULT_SUPPRESS_S
    count_merge: str = "sum"  # "sum" (single-event rules) or "max" (overlapping correlation windows)


AlertKey = tuple[str, str, str]  # (rule_id, entity type, entity value)


def key_of(row: dict) -> AlertKey:
    return (row["rule_id"], row["entity"]["type"], row["entity"]["value"])


def naive_utc(ts: dt.datetime) -> dt.datetime:
    """Compare timestamps whatever their origin (Spark gives naive UTC, Delta/duckdb aware UTC)."""
    return ts.astimezone(dt.UTC).replace(tzinfo=None) if ts.tzinfo is not None else ts


def _fmt(ts: dt.datetime) -> str:
    return naive_utc(ts).strftime("%Y-%m-%d %H:%M:%S")


def summarize(rule: RuleMeta, alert: dict) -> str:
    """One human sentence for the SOC."""
    entity = alert["entity"]
    where = []
    if alert.get("host_name"):
        where.append(f"host {alert['host_name']}")
    if alert.get("user_name") and entity["type"] != "user":
        where.append(f"user {alert['user_name']}")
    n = alert["event_count"]
    span = f"{_fmt(alert['first_seen'])} to {_fmt(alert['last_seen'])} UTC"
    detail = f" ({alert['detail']})" if alert.get("detail") else ""
    context = f" involving {', '.join(where)}" if where else ""
    return (f"{rule.name}: {entity['type']} {entity['value']}{context}, {n} event{'s' if n != 1 else ''}{detail}, "
            f"{span}.")


class AlertBuilder:
    """Folds candidates into alert revisions; holds the newest revision of every open alert.

    ``open_alerts`` seeds the state (the newest revision per (rule, entity), e.g. read back from the ``alerts``
    table when a streaming query restarts), so suppression and updates continue across restarts.
    """

    def __init__(self, rules: dict[str, RuleMeta], open_alerts: Iterable[dict] = (),
                 lateness_s: float = DEFAULT_LATENESS_S) -> None:
        self.rules = rules
        self.lateness = dt.timedelta(seconds=lateness_s)
        self.clock: dt.datetime | None = None  # the newest event time seen (naive UTC)
        self.open: dict[AlertKey, dict] = {}
        for a in open_alerts:
            k = key_of(a)
            self._advance(a["last_seen"])
            if k not in self.open or naive_utc(a["window_start"]) >= naive_utc(self.open[k]["window_start"]):
                self.open[k] = dict(a)
        self.expire()

    def _advance(self, ts: dt.datetime) -> None:
        ts = naive_utc(ts)
        if self.clock is None or ts > self.clock:
            self.clock = ts

    def expire(self) -> int:
        """Drop the open alerts no candidate can join any more (see the module docstring); returns how many."""
        if self.clock is None:
            return 0
        horizon = self.clock - self.lateness
        gone = []
        for k, alert in self.open.items():
            rule = self.rules.get(alert["rule_id"])
            span = dt.timedelta(seconds=rule.suppress_s if rule else DEFAULT_SUPPRESS_S)
            if naive_utc(alert["window_start"]) + span < horizon:
                gone.append(k)
        for k in gone:
            del self.open[k]
        return len(gone)

    def add(self, candidates: Iterable[dict], detected_at: dt.datetime) -> list[dict]:
        """The revisions raised or updated by ``candidates`` (one per touched alert), in a stable order."""
        touched: dict[str, dict] = {}
        order = sorted(candidates, key=lambda c: (c["rule_id"], c["entity"]["type"], c["entity"]["value"],
                                                  naive_utc(c["first_seen"]), naive_utc(c["window_start"]),
                                                  naive_utc(c["last_seen"]), -int(c["event_count"])))
        for cand in order:
            rule = self.rules.get(cand["rule_id"])
            if rule is None:
                raise KeyError(f"candidate of unknown rule {cand['rule_id']!r}")
            k = key_of(cand)
            cur = self.open.get(k)
            if cur is not None and self._joins(cur, cand, rule):
                merged = self._merge(cur, cand, rule)
                if merged is None:
                    continue
            else:
                merged = self._new(cand, rule)
            if merged["alert_id"] in touched:
                merged["revision"] = touched[merged["alert_id"]]["revision"]
            elif cur is not None and cur["alert_id"] == merged["alert_id"]:
                merged["revision"] = cur["revision"] + 1
            merged["detected_at"] = detected_at
            merged["summary"] = summarize(rule, merged)
            self.open[k] = merged
            touched[merged["alert_id"]] = merged
        for cand in order:
            self._advance(cand["last_seen"])
        self.expire()
        return [self._public(a) for a in touched.values()]

    @staticmethod
    def _joins(cur: dict, cand: dict, rule: RuleMeta) -> bool:
        start = naive_utc(cur["window_start"])
        span = dt.timedelta(seconds=rule.suppress_s)
        return start - span <= naive_utc(cand["first_seen"]) < start + span

    @staticmethod
    def _new(cand: dict, rule: RuleMeta) -> dict:
        alert = {
            "alert_id": alert_id(rule.rule_id, cand["entity"]["type"], cand["entity"]["value"], cand["window_start"]),
            "revision": 1,
            "rule_id": rule.rule_id,
            "rule_name": rule.name,
            "severity": rule.severity,
            "tags": list(rule.tags),
            "entity": dict(cand["entity"]),
            "host_name": cand.get("host_name"),
            "user_name": cand.get("user_name"),
            "window_start": cand["window_start"],
            "window_end": cand["window_end"],
            "first_seen": cand["first_seen"],
            "last_seen": cand["last_seen"],
            "event_count": int(cand["event_count"]),
            "evidence": list(cand["evidence"])[:MAX_EVIDENCE],
            "detail": cand.get("detail"),
        }
        return alert

    @staticmethod
    def _merge(cur: dict, cand: dict, rule: RuleMeta) -> dict | None:
        evidence = list(cur["evidence"])
        fresh = [e for e in cand["evidence"] if e not in evidence]
        if rule.count_merge == "sum":
            if not fresh and cand["evidence"]:
                return None  # every event of this candidate is already counted (a replayed or repeated match)
            count = cur["event_count"] + int(cand["event_count"])
        else:
            count = max(cur["event_count"], int(cand["event_count"]))
        first = min(naive_utc(cur["first_seen"]), naive_utc(cand["first_seen"]))
        last = max(naive_utc(cur["last_seen"]), naive_utc(cand["last_seen"]))
        if count == cur["event_count"] and last == naive_utc(cur["last_seen"]) and first == naive_utc(cur["first_seen"]):
            return None  # nothing new: no revision
        merged = dict(cur)
        merged.update(
            event_count=count,
            first_seen=first,
            last_seen=last,
            window_end=max(naive_utc(cur["window_end"]), naive_utc(cand["window_end"])),
            evidence=(evidence + fresh)[:MAX_EVIDENCE],
            host_name=cur.get("host_name") or cand.get("host_name"),
            user_name=cur.get("user_name") or cand.get("user_name"),
            detail=cand.get("detail") if count == int(cand["event_count"]) else cur.get("detail"),
        )
        return merged

    @staticmethod
    def _public(alert: dict) -> dict:
        """The revision as published: ALERT_SCHEMA fields only (``detail`` lives on in the summary)."""
        out = {k: v for k, v in alert.items() if k != "detail"}
        for f in ("window_start", "window_end", "first_seen", "last_seen", "detected_at"):
            out[f] = naive_utc(out[f])
        return out
