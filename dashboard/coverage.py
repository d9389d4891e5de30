"""Coverage and health: the ATT&CK techniques the enabled rules cover, what each rule produced, how its query is.

Rule metadata comes from :mod:`dashboard.rules_catalog` (the rule files, no Spark); alert figures from the
``alerts`` table (current revision per alert) and ``alert_triage``; query health from the ``pipeline_progress``
rows the pipeline records per rule (``query_name`` ``rule:<id>``; the newest row per ``rule_id`` is current).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from core.config import TABLE_ALERTS, TABLE_PIPELINE_PROGRESS
from core.lake import table_dataset
from dashboard.alerts_data import CURRENT_ALERTS_SQL
from dashboard.lakedb import TABLE_ALERT_TRIAGE, has_table, query
from dashboard.rules_catalog import RuleInfo, load_catalog
from dashboard.triage import TRIAGE_SCHEMA

HEALTH_COLUMNS = ["rule_id", "status", "error", "last_batch_at", "last_alert_at", "recorded_at"]
STATS_COLUMNS = ["rule_id", "alerts", "days", "alerts_per_day", "closed", "false_positive", "false_positive_share",
                 "last_fired"]


def attack_matrix(rules: list[RuleInfo]) -> pd.DataFrame:
    """One row per (tactic, technique) covered by an enabled rule: ``tactic, technique, rules``."""
    rows: dict[tuple[str, str], list[str]] = {}
    for r in rules:
        if not r.enabled:
            continue
        for tactic in r.tactics or ("(no tactic)",):
            for tech in r.tags:
                rows.setdefault((tactic, tech), []).append(r.rule_id)
    return pd.DataFrame([{"tactic": t, "technique": k, "rules": ", ".join(sorted(v))} for (t, k), v in
                         sorted(rows.items())], columns=["tactic", "technique", "rules"])


def rule_stats(lake: Path) -> pd.DataFrame:
    """Per rule: alerts, the days between its first and last alert, alerts per day, how many were closed and
    the share of those closed as false positive, and when it last fired (detected_at)."""
    if not has_table(lake, TABLE_ALERTS):
        return pd.DataFrame(columns=STATS_COLUMNS)
    return query(lake, [TABLE_ALERTS, TABLE_ALERT_TRIAGE], f"""
        SELECT rule_id, count(*) AS alerts,
               greatest(1, date_diff('day', min(first_seen)::DATE, max(first_seen)::DATE) + 1) AS days,
               round(count(*) / greatest(1, date_diff('day', min(first_seen)::DATE, max(first_seen)::DATE) + 1), 2)
                   AS alerts_per_day,
               count(*) FILTER (WHERE starts_with(status, 'closed')) AS closed,
               count(*) FILTER (WHERE status = 'closed: false positive') AS false_positive,
               CASE WHEN count(*) FILTER (WHERE starts_with(status, 'closed')) > 0
                    THEN round(count(*) FILTER (WHERE status = 'closed: false positive')
                               / count(*) FILTER (WHERE starts_with(status, 'closed')), 3) END AS false_positive_share,
               max(detected_at) AS last_fired
        FROM ({CURRENT_ALERTS_SQL}) GROUP BY rule_id ORDER BY rule_id""", empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})


def daily_alerts(lake: Path) -> pd.DataFrame:
    """Alerts per rule and day (of first_seen)."""
    if not has_table(lake, TABLE_ALERTS):
        return pd.DataFrame(columns=["day", "rule_id", "alerts"])
    return query(lake, [TABLE_ALERTS, TABLE_ALERT_TRIAGE], f"""
        SELECT first_seen::DATE AS day, rule_id, count(*) AS alerts FROM ({CURRENT_ALERTS_SQL})
        GROUP BY ALL ORDER BY day, rule_id""", empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})


def query_health(lake: Path) -> pd.DataFrame:
    """The newest health row of each rule's query (``pipeline_progress`` rows whose query_name is ``rule:…``)."""
    if not has_table(lake, TABLE_PIPELINE_PROGRESS):
        return pd.DataFrame(columns=HEALTH_COLUMNS)

    names = set(table_dataset(lake, TABLE_PIPELINE_PROGRESS).schema.names)
    if not {"rule_id", "status"} <= names:  # a pipeline that records no rule health yet
        return pd.DataFrame(columns=HEALTH_COLUMNS)
    opt = {c: (c if c in names else f"NULL AS {c}") for c in ("error", "last_batch_at", "last_alert_at")}
    return query(lake, [TABLE_PIPELINE_PROGRESS], f"""
        SELECT rule_id, status, {opt['error']}, {opt['last_batch_at']}, {opt['last_alert_at']},
               "timestamp" AS recorded_at
        FROM pipeline_progress
        WHERE starts_with(query_name, 'rule:') AND rule_id IS NOT NULL
        QUALIFY row_number() OVER (PARTITION BY rule_id ORDER BY "timestamp" DESC, batch_id DESC) = 1
        ORDER BY rule_id""")


def coverage_table(lake: Path, rules: list[RuleInfo] | None = None) -> pd.DataFrame:
    """One row per rule of the pack: metadata, alert figures and query health together."""
    rules = load_catalog() if rules is None else rules
    meta = pd.DataFrame([{"rule_id": r.rule_id, "title": r.title, "level": r.level, "kind": r.kind,
                          "enabled": r.enabled, "techniques": ", ".join(r.tags), "file": r.source.name}
                         for r in rules], columns=["rule_id", "title", "level", "kind", "enabled", "techniques", "file"])
    stats = rule_stats(lake)
    health = query_health(lake)[["rule_id", "status", "error", "last_batch_at"]]
    out = meta.merge(stats, on="rule_id", how="outer").merge(health, on="rule_id", how="left")
    out["alerts"] = pd.to_numeric(out["alerts"], errors="coerce").fillna(0).astype(int)
    return out.sort_values(["alerts", "rule_id"], ascending=[False, True]).reset_index(drop=True)
