"""What the dashboard shows, as plain functions over the lake (no Streamlit here, so tests call them directly).

Tables are read with deltalake → Arrow datasets and queried with DuckDB, never through Spark: a JVM per page
view would be far too slow (docs/architecture.md, decision 5). Every function returns a pandas DataFrame and
copes with a lake that is empty or still being written.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import duckdb
import pandas as pd

from core.config import TABLE_DHCP_SESSIONS, TABLE_PIPELINE_PROGRESS
from core.errors import UserError
from core.lake import describe_tables, is_delta_table, table_dataset

PROGRESS_COLUMNS = [
    "query_name",
    "batch_id",
    "timestamp",
    "num_input_rows",
    "input_rows_per_second",
    "processed_rows_per_second",
    "batch_duration_ms",
    "watermark",
    "state_rows",
    "state_memory_bytes",
]


def table_overview(lake: Path) -> pd.DataFrame:
    """One row per Delta table in the lake: name, rows, version, last commit (UTC)."""
    infos = describe_tables(lake)
    return pd.DataFrame(
        [{"table": i.name, "rows": i.rows, "version": i.version, "last_commit": i.last_commit} for i in infos],
        columns=["table", "rows", "version", "last_commit"],
    )


def _progress(lake: Path, sql: str, params: list | None = None) -> pd.DataFrame:
    if not is_delta_table(lake / TABLE_PIPELINE_PROGRESS):
        return pd.DataFrame(columns=PROGRESS_COLUMNS)
    progress = table_dataset(lake, TABLE_PIPELINE_PROGRESS)  # noqa: F841 - referenced by name in the SQL
    with duckdb.connect() as con:
        return con.execute(sql, params or []).df()


def latest_progress(lake: Path) -> pd.DataFrame:
    """The most recent progress row of each streaming query (the figures at the top of the page)."""
    cols = ", ".join(PROGRESS_COLUMNS)
    return _progress(
        lake,
        f"""
        SELECT {cols} FROM progress
        WHERE NOT starts_with(query_name, 'rule:')  -- rule-health rows: the coverage page shows them
        QUALIFY row_number() OVER (PARTITION BY query_name ORDER BY timestamp DESC, batch_id DESC) = 1
        ORDER BY query_name
        """,
    )


def progress_history(lake: Path, minutes: float = 15.0) -> pd.DataFrame:
    """Progress rows of the last ``minutes`` (relative to the newest row, so a stopped pipeline still shows
    its last run), oldest first: the rows/s and batch-duration charts."""
    cols = ", ".join(PROGRESS_COLUMNS)
    return _progress(
        lake,
        f"""
        SELECT {cols} FROM progress
        WHERE timestamp >= (SELECT max(timestamp) FROM progress) - to_microseconds(CAST(? * 60e6 AS BIGINT))
          AND NOT starts_with(query_name, 'rule:')
        ORDER BY timestamp, query_name
        """,
        [minutes],
    )


# --- DHCP sessions: who has this IP now ------------------------------------------------------------------------

LEASE_COLUMNS = [
    "ip",
    "mac",
    "hostname",
    "lease_start",
    "lease_end",
    "end_reason",
    "state",
    "updated_at",
    "dataset",
    "session_id",
]

# ``dhcp_sessions`` is an append-only log of state changes; a session's current state is its row with the
# greatest ``updated_at``, and on a tie the later state in a session's life wins (closed > renewed > open).
# ``hostname`` is the newest one the session ever reported: a renewal or close message often carries none.
# ``ip`` and ``mac`` never change within a session (its id is derived from them), so filtering on ``ip``
# before ranking is safe and lets DuckDB push the filter into the Arrow scan. Parameter ``$ip``: one address, or
# NULL for every session. The one home of this query: every page that shows leases selects from it.
CURRENT_DHCP_SESSIONS_SQL = """
    SELECT * EXCLUDE (rn, known_hostname) REPLACE (coalesce(hostname, known_hostname) AS hostname)
    FROM (
        SELECT session_id, ip, mac, hostname, lease_start, lease_end, end_reason, state, updated_at, dataset,
               row_number() OVER newest_first AS rn,
               first_value(hostname IGNORE NULLS) OVER (
                   newest_first ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS known_hostname
        FROM dhcp_sessions
        WHERE $ip IS NULL OR ip = $ip
        WINDOW newest_first AS (
            PARTITION BY session_id
            ORDER BY updated_at DESC,
                     CASE state WHEN 'closed' THEN 2 WHEN 'renewed' THEN 1 ELSE 0 END DESC)
    )
    WHERE rn = 1
"""

_MAC_SEPARATED = re.compile(r"^[0-9a-f]{1,2}([:-])(?:[0-9a-f]{1,2}\1){4}[0-9a-f]{1,2}$", re.IGNORECASE)
_MAC_PLAIN = re.compile(r"^(?:[0-9a-f]{12}|[0-9a-f]{4}\.[0-9a-f]{4}\.[0-9a-f]{4})$", re.IGNORECASE)


def parse_ip(value: str) -> str:
    """``value`` as a canonical IP address string; :class:`UserError` with a readable message if it is not one."""
    text = value.strip() if isinstance(value, str) else ""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise UserError(f"{value!r} is not an IP address (expected e.g. 10.0.0.5 or fe80::1)") from None


def mac_digits(value: str) -> str | None:
    """The 12 upper-case hex digits of a MAC address in any common spelling, or None if ``value`` is not one."""
    text = value.strip()
    if _MAC_SEPARATED.match(text):
        return "".join(octet.zfill(2) for octet in re.split("[:-]", text)).upper()
    if _MAC_PLAIN.match(text):
        return text.replace(".", "").upper()
    return None


def _leases(lake: Path, sql: str, params: dict) -> pd.DataFrame:
    if not is_delta_table(lake / TABLE_DHCP_SESSIONS):
        return pd.DataFrame(columns=LEASE_COLUMNS)
    dhcp_sessions = table_dataset(lake, TABLE_DHCP_SESSIONS)  # noqa: F841 - referenced by name in the SQL
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        return con.execute(sql, params).df()


def current_leases(lake: Path, ip: str | None = None, mac_or_host: str | None = None,
                   limit: int | None = None) -> pd.DataFrame:
    """Sessions whose current state is not ``closed`` (who holds which IP now), newest lease first.

    ``ip`` keeps the sessions of that address; ``mac_or_host`` keeps those of a MAC address (any common
    spelling) or of a host name (case-insensitive; ``ws-01`` also matches ``ws-01.corp.example``).
    """
    params: dict = {"ip": parse_ip(ip) if ip is not None else None, "mac": None, "host": None}
    if mac_or_host is not None and mac_or_host.strip():
        params["mac"] = mac_digits(mac_or_host)
        if params["mac"] is None:
            params["host"] = mac_or_host.strip().lower().rstrip(".")
    cols = ", ".join(LEASE_COLUMNS)
    sql = f"""
        SELECT {cols} FROM ({CURRENT_DHCP_SESSIONS_SQL})
        WHERE state <> 'closed'
          AND ($mac IS NULL OR upper(regexp_replace(mac, '[^0-9A-Fa-f]', '', 'g')) = $mac)
          AND ($host IS NULL OR lower(hostname) = $host OR starts_with(lower(hostname), $host || '.'))
        ORDER BY lease_start DESC NULLS LAST, updated_at DESC, session_id
    """
    if limit is not None:
        sql += " LIMIT $limit"
        params["limit"] = int(limit)
    return _leases(lake, sql, params)


def open_lease_count(lake: Path) -> int:
    """How many sessions are open now (current state not ``closed``)."""
    counted = _leases(lake, f"SELECT count(*) AS n FROM ({CURRENT_DHCP_SESSIONS_SQL}) WHERE state <> 'closed'",
                      {"ip": None})
    return int(counted["n"].iloc[0]) if "n" in counted and len(counted) else 0


def lease_history(lake: Path, ip: str, limit: int = 50) -> pd.DataFrame:
    """Every session the IP ``ip`` has had, each in its current state, newest lease first (at most ``limit``)."""
    cols = ", ".join(LEASE_COLUMNS)
    return _leases(
        lake,
        f"""
        SELECT {cols} FROM ({CURRENT_DHCP_SESSIONS_SQL})
        ORDER BY lease_start DESC NULLS LAST, updated_at DESC, session_id
        LIMIT $limit
        """,
        {"ip": parse_ip(ip), "limit": int(limit)},
    )
