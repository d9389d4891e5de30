"""Process trees for an alert's detail page: for each evidence event that names a process, that process's
ancestors and children, from the process-creation events of ``events`` on the same host (no Streamlit).

Process creations are Sysmon event 1 (``windows.sysmon_operational``) and Security 4688 (``windows.security``).
A parent is matched to its child by Sysmon's ``ProcessGuid`` / ``ParentProcessGuid`` when both events carry one
(unique per process, so pid reuse cannot confuse it); otherwise by pid on the same host and time order: the
parent is the most recent creation of the child's parent pid at or before the child's time, because Windows
reuses pids. A child is a creation whose parent is the process, after the process started and, matched by pid,
before that pid's next creation (a new process). Every query is bounded by the evidence hosts and the alert's
window widened by ``before`` / ``after``, so the scan skips the lake's other files by their ``@timestamp``
statistics; an ancestor created before that window is shown from its child's ``process.parent.*`` fields.

Fields are read through the field resolver (``ingest/field_resolver.py``), never by hand-written detail lookups.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from core.config import TABLE_EVENTS
from dashboard.lakedb import has_table, query
from ingest.field_resolver import duckdb_sql, resolve

SYSMON_DATASET = "windows.sysmon_operational"  # the windows source's dataset of the Sysmon channel
SECURITY_DATASET = "windows.security"
CREATION_CODES = {SYSMON_DATASET: "1", SECURITY_DATASET: "4688"}
# The same process logged by Sysmon 1 and by 4688: same pid and image, record times this close.
SAME_PROCESS_WITHIN = dt.timedelta(seconds=5)


@dataclass(frozen=True)
class ProcessNode:
    """One process of a tree. ``event_id`` is its creation event, or for the evidence process the evidence event
    when no creation is in the window; None for an ancestor known only from its child's ``process.parent.*``."""

    depth: int  # 0 for the tree's root
    relation: str  # "ancestor", "evidence" or "child"
    time: dt.datetime | None  # the creation (or evidence) event's @timestamp
    pid: int | None
    executable: str | None
    name: str | None
    command_line: str | None
    user: str | None  # DOMAIN\name when the event has a domain
    event_id: str | None
    guid: str | None = None  # Sysmon ProcessGuid, lower case

    @property
    def evidence(self) -> bool:
        return self.relation == "evidence"


@dataclass(frozen=True)
class ProcessTree:
    """The tree around one evidence process: ancestors root first, the evidence process, its children by time."""

    host: str
    evidence_event_id: str
    nodes: tuple[ProcessNode, ...]
    children_truncated: bool = False  # more children than the cap

    @property
    def evidence_node(self) -> ProcessNode:
        return next(n for n in self.nodes if n.evidence)


def _col(name: str, datasets: tuple[str, ...] | None = None) -> str:
    return duckdb_sql(resolve(name, datasets))


def _columns_sql() -> str:
    sysmon = (SYSMON_DATASET,)
    cols = {
        "ts": _col("@timestamp"), "event_id": _col("event.id"), "dataset": _col("event.dataset"),
        "code": _col("event.code"), "host": f"lower({_col('host.name')})", "pid": _col("process.pid"),
        "executable": _col("process.executable"), "name": _col("process.name"),
        "command_line": _col("process.command_line"), "ppid": _col("process.parent.pid"),
        "parent_executable": _col("process.parent.executable"), "parent_name": _col("process.parent.name"),
        "parent_command_line": _col("process.parent.command_line"),
        "guid": f"lower({_col('ProcessGuid', sysmon)})", "parent_guid": f"lower({_col('ParentProcessGuid', sysmon)})",
        "user_name": _col("user.name"), "user_domain": _col("user.domain"),
    }
    return ", ".join(f"{expr} AS {alias}" for alias, expr in cols.items())


def _is_creation_sql() -> str:
    dataset, code = _col("event.dataset"), _col("event.code")
    return "(" + " OR ".join(f"({dataset} = '{d}' AND {code} = '{c}')" for d, c in CREATION_CODES.items()) + ")"


def _records(df: pd.DataFrame) -> list[dict]:
    rows = df.astype(object).where(df.notna(), None).to_dict("records")
    for r in rows:
        r["ts"] = _ts(r["ts"]) if r["ts"] is not None else None
        r["pid"] = int(r["pid"]) if r["pid"] is not None else None
        r["ppid"] = int(r["ppid"]) if r["ppid"] is not None else None
        r["creation"] = CREATION_CODES.get(r["dataset"]) == r["code"]
    return rows


def _ts(value) -> dt.datetime:
    ts = pd.Timestamp(value)
    return (ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")).to_pydatetime()


def _same_process(a: dict, b: dict) -> bool:
    """Two creation events of one process (Sysmon 1 and 4688 of it), or one event."""
    if a["event_id"] == b["event_id"]:
        return True
    if a["guid"] and b["guid"]:
        return a["guid"] == b["guid"]
    return (a["pid"] is not None and a["pid"] == b["pid"]
            and (a["executable"] or "").lower() == (b["executable"] or "").lower()
            and abs(a["ts"] - b["ts"]) <= SAME_PROCESS_WITHIN)


def _prefer_sysmon(found: dict, creations: list[dict]) -> dict:
    """``found``, or its Sysmon twin when only that carries the GUIDs that match further up and down."""
    if found["guid"]:
        return found
    twins = [c for c in creations if c["guid"] and c["host"] == found["host"] and _same_process(c, found)]
    return twins[0] if twins else found


def _latest_by_pid(pid: int | None, host: str, at: dt.datetime, creations: list[dict]) -> dict | None:
    """The most recent creation of ``pid`` on ``host`` at or before ``at`` (pids are reused: the earlier ones
    were other processes)."""
    if pid is None:
        return None
    found = [c for c in creations if c["host"] == host and c["pid"] == pid and c["ts"] <= at]
    return _prefer_sysmon(max(found, key=lambda c: c["ts"]), creations) if found else None


def _creation_of(ev: dict, creations: list[dict]) -> dict | None:
    """The creation event of the process an event names: itself, by its ProcessGuid, else by pid and time."""
    if ev["creation"]:
        return _prefer_sysmon(ev, creations)
    if ev["guid"]:
        by_guid = [c for c in creations if c["host"] == ev["host"] and c["guid"] == ev["guid"]]
        if by_guid:
            return by_guid[0]
    return _latest_by_pid(ev["pid"], ev["host"], ev["ts"], creations)


def _parent_of(child: dict, creations: list[dict]) -> dict | None:
    """The creation event of ``child``'s parent: by ParentProcessGuid when both sides carry GUIDs, else by pid."""
    if child["parent_guid"]:
        by_guid = [c for c in creations if c["host"] == child["host"] and c["guid"] == child["parent_guid"]]
        if by_guid:
            return by_guid[0]
    found = _latest_by_pid(child["ppid"], child["host"], child["ts"], creations)
    if found is not None and child["parent_guid"] and found["guid"]:
        return None  # both carry GUIDs and they differ: that creation is another process with the same pid
    return found


def _children_of(proc: dict, creations: list[dict], until: dt.datetime) -> list[dict]:
    """Creations whose parent is ``proc``, oldest first, one per process (a Sysmon 1 preferred to its 4688)."""
    start = proc["ts"]
    # Matched by pid, a child must come before the pid's next creation: from then on the pid is another process.
    reused = [c["ts"] for c in creations if c["host"] == proc["host"] and proc["pid"] is not None
              and c["pid"] == proc["pid"] and c["ts"] > start and not _same_process(c, proc)]
    pid_until = min([until, *reused])
    out: list[dict] = []
    for c in sorted(creations, key=lambda c: (c["ts"], c["guid"] is None)):
        if c["host"] != proc["host"] or _same_process(c, proc):
            continue
        if proc["guid"] and c["parent_guid"]:
            match = c["parent_guid"] == proc["guid"]
        else:
            match = proc["pid"] is not None and c["ppid"] == proc["pid"] and start <= c["ts"] <= pid_until
        if match and not any(_same_process(c, o) for o in out):
            out.append(c)
    return out


def _user(r: dict) -> str | None:
    if not r.get("user_name"):
        return None
    return f"{r['user_domain']}\\{r['user_name']}" if r.get("user_domain") else r["user_name"]


def _node(r: dict, depth: int, relation: str) -> ProcessNode:
    return ProcessNode(depth=depth, relation=relation, time=r["ts"], pid=r["pid"], executable=r["executable"],
                       name=r["name"], command_line=r["command_line"], user=_user(r), event_id=r["event_id"],
                       guid=r["guid"])


def _parent_fields_node(child: dict) -> ProcessNode | None:
    """The parent as its child's event describes it, when its own creation is not in the window."""
    if child["ppid"] is None and not child["parent_executable"]:
        return None
    return ProcessNode(depth=0, relation="ancestor", time=None, pid=child["ppid"],
                       executable=child["parent_executable"], name=child["parent_name"],
                       command_line=child["parent_command_line"], user=None, event_id=None, guid=child["parent_guid"])


def _tree(ev: dict, creations: list[dict], until: dt.datetime, max_depth: int, max_children: int) -> ProcessTree:
    proc = _creation_of(ev, creations) or ev  # no creation in the window: the evidence event's own process fields
    ancestors: list[ProcessNode] = []
    seen = {proc["event_id"]}
    child = proc
    while len(ancestors) < max_depth:
        parent = _parent_of(child, creations)
        if parent is None or parent["event_id"] in seen:
            extra = _parent_fields_node(child) if parent is None else None
            if extra is not None:
                ancestors.append(extra)
            break
        seen.add(parent["event_id"])
        ancestors.append(_node(parent, 0, "ancestor"))
        child = parent
    ancestors.reverse()
    ancestors = [replace(a, depth=i) for i, a in enumerate(ancestors)]
    depth = len(ancestors)
    children = _children_of(proc, creations, until) if proc["creation"] else []
    nodes = [*ancestors, _node(proc, depth, "evidence"),
             *(_node(c, depth + 1, "child") for c in children[:max_children])]
    return ProcessTree(host=ev["host"], evidence_event_id=ev["event_id"], nodes=tuple(nodes),
                       children_truncated=len(children) > max_children)


def process_trees(lake: Path, alert: dict, before: dt.timedelta = dt.timedelta(hours=1),
                  after: dt.timedelta = dt.timedelta(hours=1), max_depth: int = 8, max_children: int = 50,
                  max_trees: int = 10, max_creations: int = 50_000) -> list[ProcessTree]:
    """One tree per distinct process among the alert's evidence events that name one (``process.pid`` or
    Sysmon's ``ProcessGuid``), in evidence time order; [] when none does.

    Creation events are read on the evidence hosts within [first_seen - before, last_seen + after]; children
    are looked for up to the end of that window, ``max_children`` at most per tree."""
    ids = list(alert.get("evidence") or [])
    if not ids or not has_table(lake, TABLE_EVENTS):
        return []
    lo, hi = _ts(alert["first_seen"]) - before, _ts(alert["last_seen"]) + after
    cols, ts = _columns_sql(), _col("@timestamp")
    evidence = _records(query(lake, [TABLE_EVENTS], f"""
        SELECT {cols} FROM events
        WHERE list_contains($ids, {_col('event.id')}) AND {ts} BETWEEN $lo AND $hi
        ORDER BY ts, event_id""", {"ids": ids, "lo": lo, "hi": hi}))
    evidence = [e for e in evidence if e["host"] and (e["pid"] is not None or e["guid"])]
    if not evidence:
        return []
    hosts = sorted({e["host"] for e in evidence})
    creations = _records(query(lake, [TABLE_EVENTS], f"""
        SELECT {cols} FROM events
        WHERE list_contains($hosts, lower({_col('host.name')})) AND {ts} BETWEEN $lo AND $hi AND {_is_creation_sql()}
        ORDER BY ts, event_id LIMIT {int(max_creations)}""", {"hosts": hosts, "lo": lo, "hi": hi}))
    trees: list[ProcessTree] = []
    shown: list[dict] = []
    for ev in evidence:
        proc = _creation_of(ev, creations) or ev
        if any(_same_process(proc, s) for s in shown):
            continue  # several evidence events of one process: one tree
        shown.append(proc)
        trees.append(_tree(ev, creations, hi, max_depth, max_children))
        if len(trees) >= max_trees:
            break
    return trees
