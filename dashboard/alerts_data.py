"""Alert queue, alert detail and entity context: plain functions over the lake (no Streamlit).

``alerts`` is the pipeline's append-only revision log: an alert's current state is its row with the highest
``revision``. Its triage status comes from the dashboard's ``alert_triage`` table (:mod:`dashboard.triage`).
Events are matched to an alert by its ``evidence`` event ids, and to an entity by the ECS fields that name it
(:func:`entity_predicate`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from core.config import (
    TABLE_ALERTS,
    TABLE_ASSETS,
    TABLE_DHCP_SESSIONS,
    TABLE_EVENTS,
    TABLE_IOCS,
    TABLE_USERS,
)
from dashboard.lakedb import TABLE_ALERT_TRIAGE, connect, has_table, query
from dashboard.queries import CURRENT_DHCP_SESSIONS_SQL
from dashboard.triage import STATUS_SQL, TRIAGE_SCHEMA

QUEUE_COLUMNS = [
    "alert_id", "detected_at", "severity", "status", "assignee", "rule_id", "rule_name", "entity_type",
    "entity_value", "host_name", "user_name", "event_count", "revision", "first_seen", "last_seen", "summary",
]
SEVERITY_RANK = {"critical": 4, "high": 3, "medium": 2, "low": 1}
UNASSIGNED = "(unassigned)"

# Event columns shown wherever events are listed (evidence, entity timelines).
EVENT_COLUMNS_SQL = """
    "@timestamp" AS "timestamp", "event".dataset AS dataset, "event".action AS action, "event".outcome AS outcome,
    coalesce("host".name, "host".hostname) AS host, "user".name AS "user",
    "source".ip AS source_ip, "source".port AS source_port, "source".geo.country_iso_code AS source_country,
    "destination".ip AS destination_ip, "destination".port AS destination_port,
    "threat".indicator.value AS ioc, "event".id AS event_id, "event".original AS original
"""
EVENT_COLUMNS = ["timestamp", "dataset", "action", "outcome", "host", "user", "source_ip", "source_port",
                 "source_country", "destination_ip", "destination_port", "ioc", "event_id", "original"]


def entity_predicate(entity_type: str) -> str:
    """SQL over ``events`` true for the events about the entity ``$value`` of ``entity_type``."""
    return {
        "ip": '("source".ip = $value OR "destination".ip = $value)',
        "user": '("user".name = $value OR "user".effective.name = $value)',
        "host": '(lower("host".name) = lower($value) OR lower("host".hostname) = lower($value) '
                'OR lower("nightjar".asset.host) = lower($value))',
        "domain": '("dns".question.name = $value OR "url".domain = $value OR "destination".domain = $value '
                  'OR "tls".client.server_name = $value)',
        "mac": '(upper("source".mac) = upper($value) OR upper("host".mac) = upper($value))',
    }.get(entity_type, "FALSE")


@dataclass(frozen=True)
class AlertFilter:
    """What the queue shows. Empty tuples and ``None`` mean "any"."""

    severities: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    assignees: tuple[str, ...] = ()  # UNASSIGNED matches alerts nobody is assigned to
    entity: str | None = None  # case-insensitive substring of the entity value, host or user name
    since: dt.datetime | None = None  # on last_seen (event time)
    until: dt.datetime | None = None
    alert_ids: tuple[str, ...] = field(default=())


# Every alert in its current state (newest revision) with its triage status: the one definition the queue, the entity
# pages, coverage and the rule lab select from.
CURRENT_ALERTS_SQL = f"""
    WITH cur AS (
        SELECT * FROM alerts
        QUALIFY row_number() OVER (PARTITION BY alert_id ORDER BY revision DESC, detected_at DESC) = 1
    ), tri AS ({STATUS_SQL})
    SELECT cur.alert_id, cur.detected_at, cur.severity, coalesce(tri.status, 'new') AS status, tri.assignee,
           cur.rule_id, cur.rule_name, cur.entity.type AS entity_type, cur.entity.value AS entity_value,
           cur.host_name, cur.user_name, cur.event_count, cur.revision, cur.first_seen, cur.last_seen, cur.summary
    FROM cur LEFT JOIN tri USING (alert_id)
"""


def _where(f: AlertFilter) -> tuple[str, dict]:
    conds, params = [], {}
    if f.severities:
        conds.append("list_contains($sev, severity)")
        params["sev"] = list(f.severities)
    if f.rules:
        conds.append("list_contains($rules, rule_id)")
        params["rules"] = list(f.rules)
    if f.statuses:
        conds.append("list_contains($statuses, status)")
        params["statuses"] = list(f.statuses)
    if f.assignees:
        names = [a for a in f.assignees if a != UNASSIGNED]
        part = ["list_contains($assignees, assignee)"] if names else []
        if UNASSIGNED in f.assignees:
            part.append("assignee IS NULL")
        conds.append("(" + " OR ".join(part) + ")")
        params["assignees"] = names
    if f.entity and f.entity.strip():
        conds.append("(contains(lower(entity_value), $ent) OR contains(lower(coalesce(host_name, '')), $ent) "
                     "OR contains(lower(coalesce(user_name, '')), $ent))")
        params["ent"] = f.entity.strip().lower()
    if f.since is not None:
        conds.append("last_seen >= $since")
        params["since"] = f.since
    if f.until is not None:
        conds.append("first_seen <= $until")
        params["until"] = f.until
    if f.alert_ids:
        conds.append("list_contains($ids, alert_id)")
        params["ids"] = list(f.alert_ids)
    return (" WHERE " + " AND ".join(conds)) if conds else "", params


def _alert_tables(lake: Path) -> bool:
    return has_table(lake, TABLE_ALERTS)


def alert_queue(lake: Path, f: AlertFilter = AlertFilter(), limit: int | None = None) -> pd.DataFrame:
    """The current revision of each alert that passes ``f``, with its triage status, newest first."""
    if not _alert_tables(lake):
        return pd.DataFrame(columns=QUEUE_COLUMNS)
    where, params = _where(f)
    sql = f"SELECT * FROM ({CURRENT_ALERTS_SQL}){where} ORDER BY detected_at DESC, last_seen DESC, alert_id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    df = query(lake, [TABLE_ALERTS, TABLE_ALERT_TRIAGE], sql, params, empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})
    return df[QUEUE_COLUMNS]


def alert_volume(lake: Path, f: AlertFilter = AlertFilter(), bucket: str = "1 hour") -> pd.DataFrame:
    """Alerts per time bucket (of ``first_seen``), severity and rule, for the alerts ``f`` shows."""
    cols = ["bucket", "severity", "rule_id", "alerts"]
    if not _alert_tables(lake):
        return pd.DataFrame(columns=cols)
    where, params = _where(f)
    sql = f"""SELECT time_bucket(INTERVAL '{bucket}', first_seen) AS bucket, severity, rule_id, count(*) AS alerts
              FROM ({CURRENT_ALERTS_SQL}){where} GROUP BY ALL ORDER BY bucket, severity, rule_id"""
    return query(lake, [TABLE_ALERTS, TABLE_ALERT_TRIAGE], sql, params, empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})


def filter_options(lake: Path) -> dict[str, list[str]]:
    """Values the queue's filters offer: rules and assignees present in the lake."""
    out = {"rules": [], "assignees": []}
    if _alert_tables(lake):
        out["rules"] = query(lake, [TABLE_ALERTS], "SELECT DISTINCT rule_id FROM alerts ORDER BY 1")["rule_id"].tolist()
    if has_table(lake, TABLE_ALERT_TRIAGE):
        out["assignees"] = query(lake, [TABLE_ALERT_TRIAGE], "SELECT DISTINCT assignee FROM alert_triage "
                                 "WHERE assignee IS NOT NULL ORDER BY 1")["assignee"].tolist()
    return out


def revisions(lake: Path, alert_id: str) -> pd.DataFrame:
    """Every revision of ``alert_id``, newest first (all columns of ``alerts``)."""
    if not _alert_tables(lake):
        return pd.DataFrame()
    return query(lake, [TABLE_ALERTS], "SELECT * FROM alerts WHERE alert_id = $id ORDER BY revision DESC, "
                 "detected_at DESC", {"id": alert_id})


def current_alert(lake: Path, alert_id: str) -> dict | None:
    """The alert's current revision as a dict (``entity`` a dict, ``evidence`` a list), or None."""
    revs = revisions(lake, alert_id)
    if revs.empty:
        return None
    row = revs.iloc[0].to_dict()
    row["evidence"] = [str(e) for e in (row.get("evidence") if row.get("evidence") is not None else [])]
    row["tags"] = [str(t) for t in (row.get("tags") if row.get("tags") is not None else [])]
    return row


def evidence_events(lake: Path, alert: dict, limit: int = 500) -> pd.DataFrame:
    """The events the alert names as evidence (by ``event.id``), oldest first."""
    ids = list(alert.get("evidence") or [])
    if not ids or not has_table(lake, TABLE_EVENTS):
        return pd.DataFrame(columns=EVENT_COLUMNS)
    # The evidence lies within [first_seen, last_seen] (event time): bounding "@timestamp" lets the scan skip
    # the files outside it by their statistics. A margin covers rules that stamp on another clock; if some ids
    # are still missing, the whole table is searched.
    sql = f"""SELECT {EVENT_COLUMNS_SQL} FROM events WHERE list_contains($ids, "event".id) {{bound}}
              ORDER BY "@timestamp", "event".id LIMIT {int(limit)}"""
    margin = dt.timedelta(hours=1)
    found = query(lake, [TABLE_EVENTS], sql.format(bound='AND "@timestamp" BETWEEN $lo AND $hi'),
                  {"ids": ids, "lo": _ts(alert["first_seen"]) - margin, "hi": _ts(alert["last_seen"]) + margin})
    if found["event_id"].nunique() >= len(set(ids)):
        return found
    return query(lake, [TABLE_EVENTS], sql.format(bound=""), {"ids": ids})


def entity_events(lake: Path, entity_type: str, value: str, since: dt.datetime | None = None,
                  until: dt.datetime | None = None, limit: int = 500, newest_first: bool = False) -> pd.DataFrame:
    """Events about an entity (:func:`entity_predicate`), optionally within [since, until]."""
    if not has_table(lake, TABLE_EVENTS):
        return pd.DataFrame(columns=EVENT_COLUMNS)
    conds = [entity_predicate(entity_type)]
    params: dict = {"value": value}
    if since is not None:
        conds.append('"@timestamp" >= $since')
        params["since"] = since
    if until is not None:
        conds.append('"@timestamp" <= $until')
        params["until"] = until
    order = "DESC" if newest_first else ""
    sql = f"""SELECT {EVENT_COLUMNS_SQL} FROM events WHERE {' AND '.join(conds)}
              ORDER BY "@timestamp" {order}, "event".id LIMIT {int(limit)}"""
    return query(lake, [TABLE_EVENTS], sql, params)


def related_alerts(lake: Path, alert: dict, hours: float = 24.0) -> pd.DataFrame:
    """Other alerts about the same entity (or naming it as host / user) within ``hours`` of this one."""
    if not _alert_tables(lake):
        return pd.DataFrame(columns=QUEUE_COLUMNS)
    ent = alert["entity"]
    around = dt.timedelta(hours=hours)
    sql = f"""SELECT * FROM ({CURRENT_ALERTS_SQL})
              WHERE alert_id <> $id
                AND ((entity_type = $etype AND entity_value = $value) OR host_name = $value OR user_name = $value
                     OR ($host IS NOT NULL AND (host_name = $host OR entity_value = $host))
                     OR ($user IS NOT NULL AND (user_name = $user OR entity_value = $user)))
                AND last_seen >= $since AND first_seen <= $until
              ORDER BY first_seen DESC"""
    params = {"id": alert["alert_id"], "etype": ent["type"], "value": ent["value"], "host": alert.get("host_name"),
              "user": alert.get("user_name"), "since": _ts(alert["first_seen"]) - around,
              "until": _ts(alert["last_seen"]) + around}
    return query(lake, [TABLE_ALERTS, TABLE_ALERT_TRIAGE], sql, params,
                 empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})[QUEUE_COLUMNS]


def _ts(value) -> dt.datetime:
    ts = pd.Timestamp(value)
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return ts.to_pydatetime()


def entity_context(lake: Path, entity_type: str, value: str, at: dt.datetime | None = None) -> dict[str, pd.DataFrame]:
    """What the reference tables and DHCP sessions say about an entity: ``asset``, ``user``, ``dhcp`` (the
    sessions of the IP / host / MAC, the holder at ``at`` first), ``ioc``."""
    out: dict[str, pd.DataFrame] = {}
    with connect(lake, [TABLE_ASSETS, TABLE_USERS, TABLE_DHCP_SESSIONS, TABLE_IOCS]) as con:
        def run(table: str, sql: str, params: dict) -> None:
            if has_table(lake, table):
                out[table] = con.execute(sql, params).df()

        v = {"value": value}
        if entity_type == "ip":
            run(TABLE_ASSETS, "SELECT * FROM assets WHERE ip = $value", v)
        elif entity_type == "host":
            run(TABLE_ASSETS, "SELECT * FROM assets WHERE lower(host) = lower($value)", v)
        elif entity_type == "mac":
            run(TABLE_ASSETS, "SELECT * FROM assets WHERE upper(mac) = upper($value)", v)
        if entity_type == "user":
            run(TABLE_USERS, "SELECT * FROM users WHERE name = $value", v)
        elif entity_type == "host":
            run(TABLE_USERS, "SELECT * FROM users WHERE lower(workstation) = lower($value)", v)
        if entity_type in ("ip", "host", "mac"):
            col = {"ip": "ip = $value", "host": "lower(hostname) = lower($value)",
                   "mac": "upper(mac) = upper($value)"}[entity_type]
            # one row per session, its newest state; the session holding the address at `at` first
            run(TABLE_DHCP_SESSIONS, f"""
                SELECT session_id, ip, mac, hostname, lease_start, lease_end, end_reason, state, dataset,
                       coalesce($at IS NOT NULL AND lease_start <= $at AND coalesce(lease_end, $at) >= $at, false)
                           AS held_at_alert
                FROM ({CURRENT_DHCP_SESSIONS_SQL})
                WHERE {col}
                ORDER BY held_at_alert DESC, lease_start DESC LIMIT 50""",
                {**v, "at": at, "ip": value if entity_type == "ip" else None})
        if entity_type in ("ip", "domain"):
            run(TABLE_IOCS, "SELECT * FROM iocs WHERE lower(indicator) = lower($value)", v)
    return out


def event_iocs(events: pd.DataFrame, lake: Path) -> pd.DataFrame:
    """The threat-intelligence rows of the indicators the given events matched."""
    if events.empty or "ioc" not in events or not has_table(lake, TABLE_IOCS):
        return pd.DataFrame()
    indicators = sorted({str(i) for i in events["ioc"].dropna()})
    if not indicators:
        return pd.DataFrame()
    return query(lake, [TABLE_IOCS], "SELECT * FROM iocs WHERE list_contains($ind, indicator) ORDER BY indicator",
                 {"ind": indicators})
