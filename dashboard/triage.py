"""Triage: the analysts' actions on alerts, as an append-only audit trail in the Delta table ``alert_triage``.

One row per action (the contract in docs/dashboard.md): ``alert_id``, ``action`` (one of :data:`ACTIONS`),
``analyst``, ``reason``, ``assignee``, ``at`` (UTC). Rows are only ever appended, with deltalake's
``write_deltalake(mode="append")``; nothing is updated or deleted, so the table is the history.

An alert's *status* is its newest action other than a comment (a comment adds to the history without changing
where the alert stands); no action at all means ``new``. Its *assignee* is the one named by its newest ``assign``.

Two analysts acting at the same moment both commit: Delta's optimistic concurrency makes the second writer of a
version fail with a commit conflict, and :func:`record` retries it on the new version (appends never conflict
logically). The pipeline never writes this table; the dashboard never writes the pipeline's tables.

Pure functions over a lake directory, no Streamlit: the pages and the tests call them alike.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from core.errors import UserError
from dashboard.lakedb import TABLE_ALERT_TRIAGE, query

log = logging.getLogger(__name__)

ACTIONS: tuple[str, ...] = (
    "ack", "assign", "close_true_positive", "close_false_positive", "close_benign", "reopen", "comment")
CLOSE_ACTIONS: tuple[str, ...] = ("close_true_positive", "close_false_positive", "close_benign")
# Actions whose reason is required: a closure must say why, a reopen why it was wrong, a comment is its text.
REASON_REQUIRED: tuple[str, ...] = (*CLOSE_ACTIONS, "reopen", "comment")
# status shown for each newest action (comments do not change the status)
STATUS_OF_ACTION: dict[str, str] = {
    "ack": "acknowledged",
    "assign": "assigned",
    "close_true_positive": "closed: true positive",
    "close_false_positive": "closed: false positive",
    "close_benign": "closed: benign",
    "reopen": "reopened",
}
STATUSES: tuple[str, ...] = ("new", *STATUS_OF_ACTION.values())
OPEN_STATUSES: tuple[str, ...] = ("new", "acknowledged", "assigned", "reopened")

TRIAGE_SCHEMA = pa.schema([
    ("alert_id", pa.string()),
    ("action", pa.string()),
    ("analyst", pa.string()),
    ("reason", pa.string()),
    ("assignee", pa.string()),
    ("at", pa.timestamp("us", tz="UTC")),
])
MAX_ATTEMPTS = 30


@dataclass(frozen=True)
class Action:
    alert_id: str
    action: str
    analyst: str
    reason: str | None = None
    assignee: str | None = None
    at: dt.datetime | None = None


def validate(a: Action) -> Action:
    """``a`` checked and normalized (stripped text, UTC time); :class:`UserError` naming what is wrong."""
    alert_id = (a.alert_id or "").strip()
    analyst = (a.analyst or "").strip()
    reason = (a.reason or "").strip() or None
    assignee = (a.assignee or "").strip() or None
    if not alert_id:
        raise UserError("an action needs the alert_id it applies to")
    if a.action not in ACTIONS:
        raise UserError(f"unknown action {a.action!r}; one of {', '.join(ACTIONS)}")
    if not analyst:
        raise UserError("the analyst's name is required for every action")
    if a.action in REASON_REQUIRED and not reason:
        what = "a comment needs its text" if a.action == "comment" else f"{a.action} needs a reason"
        raise UserError(what)
    if a.action == "assign" and not assignee:
        raise UserError("assign needs the assignee's name")
    at = a.at or dt.datetime.now(dt.UTC)
    if at.tzinfo is None:
        at = at.replace(tzinfo=dt.UTC)
    return Action(alert_id, a.action, analyst, reason, assignee, at.astimezone(dt.UTC))


def _is_conflict(exc: Exception) -> bool:
    from deltalake.exceptions import CommitFailedError, DeltaError

    if isinstance(exc, CommitFailedError):
        return True
    text = str(exc).lower()
    # two first writers racing to create the table, or a version taken by another writer meanwhile
    return isinstance(exc, DeltaError) and any(
        w in text for w in ("conflict", "already exists", "version", "concurrent", "transaction"))


def append_rows(path: Path, table: pa.Table, max_attempts: int = MAX_ATTEMPTS) -> int:
    """Append ``table`` to the Delta table at ``path`` (created on first use), retrying commit conflicts with a
    jittered backoff; returns the attempts it took. Other errors are raised at once."""
    from deltalake import write_deltalake

    for attempt in range(1, max_attempts + 1):
        try:
            write_deltalake(str(path), table, mode="append")
            return attempt
        except Exception as exc:
            if attempt == max_attempts or not _is_conflict(exc):
                raise
            log.info("commit to %s conflicted (attempt %d): retrying: %s", path.name, attempt, exc)
            time.sleep(min(1.0, 0.02 * 2 ** min(attempt, 6)) * random.uniform(0.5, 1.5))
    raise AssertionError("unreachable")


def record(lake: Path, actions: Action | list[Action]) -> list[Action]:
    """Append one or more actions (a bulk action is one commit); returns them as stored."""
    items = [validate(a) for a in ([actions] if isinstance(actions, Action) else actions)]
    if not items:
        return []
    rows = pa.Table.from_pylist([{"alert_id": a.alert_id, "action": a.action, "analyst": a.analyst,
                                  "reason": a.reason, "assignee": a.assignee, "at": a.at} for a in items],
                                schema=TRIAGE_SCHEMA)
    lake.mkdir(parents=True, exist_ok=True)
    append_rows(lake / TABLE_ALERT_TRIAGE, rows)
    return items


def history(lake: Path, alert_id: str) -> pd.DataFrame:
    """Every action on ``alert_id``, oldest first."""
    return query(lake, [TABLE_ALERT_TRIAGE],
                 'SELECT "at", action, analyst, reason, assignee FROM alert_triage WHERE alert_id = $id ORDER BY "at"',
                 {"id": alert_id}, empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})


# SQL of one row per triaged alert: status (newest non-comment action), assignee, last action time, count.
# Used inside larger queries (the alert queue) that register ``alert_triage``.
STATUS_SQL = """
    SELECT alert_id,
           CASE arg_max(action, "at") FILTER (WHERE action <> 'comment')
               {cases}
               ELSE 'new' END AS status,
           arg_max(assignee, "at") FILTER (WHERE action = 'assign') AS assignee,
           max("at") AS triaged_at,
           count(*) AS triage_actions
    FROM alert_triage GROUP BY alert_id
""".replace("{cases}", "\n               ".join(f"WHEN '{a}' THEN '{s}'" for a, s in STATUS_OF_ACTION.items()))


def statuses(lake: Path, alert_ids: list[str] | None = None) -> pd.DataFrame:
    """``alert_id, status, assignee, triaged_at, triage_actions`` of each alert with at least one action."""
    sql = f"SELECT * FROM ({STATUS_SQL})"
    params: dict = {}
    if alert_ids is not None:
        sql += " WHERE list_contains($ids, alert_id)"
        params["ids"] = list(alert_ids)
    return query(lake, [TABLE_ALERT_TRIAGE], sql, params, empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})


def status_of(lake: Path, alert_id: str) -> str:
    found = statuses(lake, [alert_id])
    return str(found["status"].iloc[0]) if len(found) else "new"
