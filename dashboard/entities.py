"""Entity pages (host / user / IP / domain / MAC): timeline, DHCP history, logins, peers and ports.

Plain functions over the lake; events are matched by :func:`dashboard.alerts_data.entity_predicate`.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from core.config import TABLE_ALERTS, TABLE_ASSETS, TABLE_DHCP_SESSIONS, TABLE_EVENTS
from dashboard.alerts_data import CURRENT_ALERTS_SQL, QUEUE_COLUMNS, entity_predicate
from dashboard.lakedb import TABLE_ALERT_TRIAGE, has_table, query
from dashboard.queries import CURRENT_DHCP_SESSIONS_SQL
from dashboard.triage import TRIAGE_SCHEMA

ENTITY_TYPES = ("host", "user", "ip", "domain", "mac")
_MAC = "upper(regexp_replace({}, '[^0-9A-Fa-f]', '', 'g'))"


def _since(since: dt.datetime | None) -> str:
    """The time bound of an entity query: on ``@timestamp``, so the scan skips the files before ``since`` by their
    statistics (the events table is written in time order) instead of reading the whole history."""
    return "" if since is None else ' AND "@timestamp" >= $since'


def _params(value: str, since: dt.datetime | None) -> dict:
    return {"value": value} if since is None else {"value": value, "since": since}


def event_timeline(lake: Path, entity_type: str, value: str, bucket: str = "1 hour", since: dt.datetime | None = None) -> pd.DataFrame:
    """Events about the entity per time bucket and dataset."""
    if not has_table(lake, TABLE_EVENTS):
        return pd.DataFrame(columns=["bucket", "dataset", "events"])
    return query(lake, [TABLE_EVENTS], f"""
        SELECT time_bucket(INTERVAL '{bucket}', "@timestamp") AS bucket, "event".dataset AS dataset, count(*) AS events
        FROM events WHERE {entity_predicate(entity_type)}{_since(since)} GROUP BY ALL ORDER BY bucket, dataset""",
                 _params(value, since))


def entity_alerts(lake: Path, entity_type: str, value: str) -> pd.DataFrame:
    """Current revision of every alert about the entity (as its entity, host or user), newest first."""
    if not has_table(lake, TABLE_ALERTS):
        return pd.DataFrame(columns=QUEUE_COLUMNS)
    cond = "(entity_type = $etype AND entity_value = $value)"
    if entity_type == "host":
        cond += " OR lower(host_name) = lower($value)"
    elif entity_type == "user":
        cond += " OR user_name = $value"
    return query(lake, [TABLE_ALERTS, TABLE_ALERT_TRIAGE],
                 f"SELECT * FROM ({CURRENT_ALERTS_SQL}) WHERE {cond} ORDER BY first_seen DESC",
                 {"etype": entity_type, "value": value}, empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})[QUEUE_COLUMNS]


def dhcp_history(lake: Path, entity_type: str, value: str, limit: int = 200) -> pd.DataFrame:
    """IP <-> MAC <-> host over time: every DHCP session of the IP, the host name or the MAC (a host's MAC from
    ``assets`` too), each in its newest state, newest lease first."""
    cols = ["lease_start", "lease_end", "ip", "mac", "hostname", "state", "end_reason", "dataset", "session_id"]
    if entity_type not in ("ip", "host", "mac") or not has_table(lake, TABLE_DHCP_SESSIONS):
        return pd.DataFrame(columns=cols)
    macs = [value] if entity_type == "mac" else []
    if entity_type == "host" and has_table(lake, TABLE_ASSETS):
        macs += query(lake, [TABLE_ASSETS], "SELECT mac FROM assets WHERE lower(host) = lower($v) AND mac IS NOT NULL",
                      {"v": value})["mac"].tolist()
    cond = {"ip": "ip = $value", "host": "lower(hostname) = lower($value)", "mac": "FALSE"}[entity_type]
    cond += f" OR list_contains($macs, {_MAC.format('mac')})"
    params = {"macs": [m.replace(":", "").replace("-", "").replace(".", "").upper() for m in macs],
              "ip": value if entity_type == "ip" else None}
    if entity_type != "mac":  # DuckDB refuses a parameter the SQL does not use (a MAC matches through $macs)
        params["value"] = value
    return query(lake, [TABLE_DHCP_SESSIONS], f"""
        SELECT {', '.join(cols)} FROM ({CURRENT_DHCP_SESSIONS_SQL})
        WHERE {cond}
        ORDER BY lease_start DESC NULLS LAST LIMIT {int(limit)}""", params)


def logins(lake: Path, entity_type: str, value: str, limit: int = 200, since: dt.datetime | None = None) -> pd.DataFrame:
    """SSH logins (accepted and failed) of a user, on a host, or from / to an IP, with their source countries."""
    cols = ["timestamp", "user", "host", "source_ip", "country", "outcome", "action", "original"]
    if not has_table(lake, TABLE_EVENTS):
        return pd.DataFrame(columns=cols)
    return query(lake, [TABLE_EVENTS], f"""
        SELECT "@timestamp" AS "timestamp", "user".name AS "user", coalesce("host".name, "host".hostname) AS host,
               "source".ip AS source_ip, "source".geo.country_iso_code AS country, "event".outcome AS outcome,
               "event".action AS action, "event".original AS original
        FROM events
        WHERE "event".dataset = 'system.auth' AND "event".action IN ('ssh_login', 'ssh_invalid_user')
          AND {entity_predicate(entity_type)}{_since(since)}
        ORDER BY "@timestamp" DESC LIMIT {int(limit)}""", _params(value, since))


def login_countries(lake: Path, entity_type: str, value: str, since: dt.datetime | None = None) -> pd.DataFrame:
    """Logins per source country and outcome, most first (ties by country, outcome: the same order on every read)."""
    if not has_table(lake, TABLE_EVENTS):
        return pd.DataFrame(columns=["country", "outcome", "logins"])
    return query(lake, [TABLE_EVENTS], f"""
        SELECT coalesce("source".geo.country_iso_code, '?') AS country, "event".outcome AS outcome, count(*) AS logins
        FROM events
        WHERE "event".dataset = 'system.auth' AND "event".action IN ('ssh_login', 'ssh_invalid_user')
          AND {entity_predicate(entity_type)}{_since(since)}
        GROUP BY ALL ORDER BY logins DESC, country, outcome""", _params(value, since))


def _side(entity_type: str) -> str:
    """SQL true when the entity is the connection's source side."""
    return {
        "ip": '"source".ip = $value',
        "host": '(lower("host".name) = lower($value) OR lower("nightjar".asset.host) = lower($value))',
        "mac": 'upper("source".mac) = upper($value)',
    }.get(entity_type, "FALSE")


def top_peers(lake: Path, entity_type: str, value: str, limit: int = 20, since: dt.datetime | None = None) -> pd.DataFrame:
    """The addresses the entity talked to most (Zeek connections, either direction), with bytes and ports."""
    cols = ["peer", "direction", "connections", "bytes_out", "bytes_in", "ports", "country"]
    if not has_table(lake, TABLE_EVENTS) or entity_type not in ("ip", "host", "mac"):
        return pd.DataFrame(columns=cols)
    return query(lake, [TABLE_EVENTS], f"""
        SELECT CASE WHEN {_side(entity_type)} THEN "destination".ip ELSE "source".ip END AS peer,
               CASE WHEN {_side(entity_type)} THEN 'to' ELSE 'from' END AS direction,
               count(*) AS connections, sum("source".bytes) AS bytes_out, sum("destination".bytes) AS bytes_in,
               count(DISTINCT "destination".port) AS ports,
               any_value(CASE WHEN {_side(entity_type)} THEN "destination".geo.country_iso_code
                              ELSE "source".geo.country_iso_code END) AS country
        FROM events
        WHERE "event".dataset = 'zeek.conn' AND {entity_predicate(entity_type)}{_since(since)}
        GROUP BY ALL ORDER BY connections DESC, peer LIMIT {int(limit)}""", _params(value, since))


def top_ports(lake: Path, entity_type: str, value: str, limit: int = 20, since: dt.datetime | None = None) -> pd.DataFrame:
    """Destination ports of the entity's connections (as client and as server), with how many peers."""
    cols = ["port", "transport", "direction", "connections", "peers", "failed"]
    if not has_table(lake, TABLE_EVENTS) or entity_type not in ("ip", "host", "mac"):
        return pd.DataFrame(columns=cols)
    return query(lake, [TABLE_EVENTS], f"""
        SELECT "destination".port AS port, "network".transport AS transport,
               CASE WHEN {_side(entity_type)} THEN 'outgoing' ELSE 'incoming' END AS direction,
               count(*) AS connections,
               count(DISTINCT CASE WHEN {_side(entity_type)} THEN "destination".ip ELSE "source".ip END) AS peers,
               count(*) FILTER (WHERE "event".outcome = 'failure') AS failed
        FROM events
        WHERE "event".dataset = 'zeek.conn' AND {entity_predicate(entity_type)}{_since(since)}
        GROUP BY ALL ORDER BY connections DESC, port LIMIT {int(limit)}""", _params(value, since))
