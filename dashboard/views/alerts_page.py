"""Alerts: the live queue with filters, grouping, volume chart, bulk triage and CSV export.

Filters live in the URL (``?severity=high&rule=ssh_brute_force&status=new&assignee=…&entity=…&time=24h&group=rule``)
so a view can be bookmarked and shared. The queue refreshes itself in a fragment. Selected alerts are kept as
alert ids (never row positions): the table's selection is translated to ids with the id list the analyst saw.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import altair as alt
import pandas as pd
import streamlit as st

from core.errors import UserError
from dashboard import triage
from dashboard.alerts_data import (
    SEVERITY_RANK,
    UNASSIGNED,
    AlertFilter,
    alert_queue,
    alert_volume,
    filter_options,
)
from dashboard.ui import (
    REFRESH_S,
    TIME_WINDOWS,
    alert_url,
    analyst,
    csv_bytes,
    entity_url,
    lake,
    lake_missing,
    no_analyst_warning,
    qp_list,
    qp_str,
    set_qp,
)

SEVERITIES = ["critical", "high", "medium", "low"]
GROUPS = ["none", "rule", "entity"]
SEVERITY_COLORS = alt.Scale(domain=SEVERITIES, range=["#7b1fa2", "#d32f2f", "#f57c00", "#1976d2"])
BULK_ACTIONS = {"acknowledge": "ack", "assign": "assign", "close: true positive": "close_true_positive",
                "close: false positive": "close_false_positive", "close: benign": "close_benign",
                "reopen": "reopen", "comment": "comment"}


def _filters() -> AlertFilter:
    opts = filter_options(lake())
    cols = st.columns([2, 2, 2, 2, 2, 1, 1])
    severities = cols[0].multiselect("Severity", SEVERITIES, default=[s for s in qp_list("severity") if s in SEVERITIES],
                                     key="f_severity")
    rule_choices = sorted(set(opts["rules"]) | set(qp_list("rule")))
    rules = cols[1].multiselect("Rule", rule_choices, default=qp_list("rule"), key="f_rule")
    statuses = cols[2].multiselect("Status", list(triage.STATUSES),
                                   default=[s for s in qp_list("status") if s in triage.STATUSES], key="f_status")
    assignee_choices = [UNASSIGNED, *sorted(set(opts["assignees"]) | (set(qp_list("assignee")) - {UNASSIGNED}))]
    assignees = cols[3].multiselect("Assignee", assignee_choices, default=qp_list("assignee"), key="f_assignee")
    entity = cols[4].text_input("Entity, host or user", value=qp_str("entity"), key="f_entity",
                                placeholder="10.10.0.23, ws-0008, alice")
    window = cols[5].selectbox("Time", list(TIME_WINDOWS), index=list(TIME_WINDOWS).index(qp_str("time", "all"))
                               if qp_str("time", "all") in TIME_WINDOWS else 0, key="f_time")
    group = cols[6].selectbox("Group by", GROUPS, index=GROUPS.index(qp_str("group", "none"))
                              if qp_str("group", "none") in GROUPS else 0, key="f_group")
    set_qp(severity=severities, rule=rules, status=statuses, assignee=assignees, entity=entity.strip(),
           time=None if window == "all" else window, group=None if group == "none" else group)
    since = dt.datetime.now(dt.UTC) - TIME_WINDOWS[window] if TIME_WINDOWS[window] else None
    return AlertFilter(tuple(severities), tuple(rules), tuple(statuses), tuple(assignees), entity.strip() or None,
                       since)


def _grouped(queue: pd.DataFrame, by: str) -> pd.DataFrame:
    keys = ["rule_id", "rule_name"] if by == "rule" else ["entity_type", "entity_value"]
    g = queue.assign(rank=queue["severity"].map(SEVERITY_RANK).fillna(0),
                     open=queue["status"].isin(triage.OPEN_STATUSES))
    out = g.groupby(keys, dropna=False).agg(alerts=("alert_id", "count"), open=("open", "sum"),
                                            top_rank=("rank", "max"), events=("event_count", "sum"),
                                            last_seen=("last_seen", "max"), newest=("detected_at", "max"))
    inv = {v: k for k, v in SEVERITY_RANK.items()}
    out["top_severity"] = out.pop("top_rank").map(inv)
    out = out.reset_index().sort_values(["alerts", "newest"], ascending=[False, False])
    if by == "entity":
        out.insert(0, "page", [entity_url(t, v) for t, v in zip(out["entity_type"], out["entity_value"], strict=True)])
    return out


def _volume_chart(f: AlertFilter) -> None:
    vol = alert_volume(lake(), f)
    if vol.empty:
        return
    # The charts are canvases: this line says in text what they show (and lets a reader, or a test, see them move).
    st.caption(f"Alert volume: {int(vol['alerts'].sum()):,} alert(s) from {vol['rule_id'].nunique()} rule(s), "
               f"{vol['bucket'].min():%Y-%m-%d %H:00} to {vol['bucket'].max():%Y-%m-%d %H:00} UTC")
    c1, c2 = st.columns(2)
    by_sev = alt.Chart(vol).mark_bar().encode(
        x=alt.X("utcyearmonthdatehours(bucket):O", title="hour (UTC)"), y=alt.Y("sum(alerts):Q", title="alerts"),
        color=alt.Color("severity:N", scale=SEVERITY_COLORS), tooltip=["bucket:T", "severity:N", "sum(alerts):Q"])
    by_rule = alt.Chart(vol).mark_bar().encode(
        x=alt.X("utcyearmonthdatehours(bucket):O", title="hour (UTC)"), y=alt.Y("sum(alerts):Q", title="alerts"),
        color=alt.Color("rule_id:N", title="rule"), tooltip=["bucket:T", "rule_id:N", "sum(alerts):Q"])
    c1.markdown("**Alert volume by severity**")
    c1.altair_chart(by_sev.properties(height=180), width="stretch")
    c2.markdown("**Alert volume by rule**")
    c2.altair_chart(by_rule.properties(height=180), width="stretch")


def _remember_selection(key: str) -> None:
    """Selection callback: the table's selected rows -> alert ids, with the ids in the order the analyst saw."""
    shown: list[str] = st.session_state.get("queue_shown", {}).get(key, [])
    rows = st.session_state[key].selection.rows
    st.session_state["selected_ids"] = [shown[r] for r in rows if 0 <= r < len(shown)]


def _bulk_actions(queue: pd.DataFrame) -> None:
    selected = [a for a in st.session_state.get("selected_ids", []) if a in set(queue["alert_id"])]
    with st.expander(f"Bulk action on {len(selected)} selected alert(s)", expanded=bool(selected)):
        if not selected:
            st.caption("Select rows in the queue (checkbox at the left of a row) to act on them.")
            return
        st.caption("Selected: " + ", ".join(f"`{a}`" for a in selected[:20]) + (" …" if len(selected) > 20 else ""))
        with st.form("bulk", clear_on_submit=True):
            c1, c2, c3 = st.columns([2, 2, 4])
            label = c1.selectbox("Action", list(BULK_ACTIONS), key="bulk_action")
            assignee = c2.text_input("Assignee (assign)", key="bulk_assignee")
            reason = c3.text_input("Reason (required to close, reopen, comment)", key="bulk_reason")
            submitted = st.form_submit_button("Apply", disabled=not analyst())
        if not analyst():
            no_analyst_warning()
        if submitted:
            try:
                triage.record(lake(), [triage.Action(a, BULK_ACTIONS[label], analyst(), reason, assignee)
                                       for a in selected])
            except UserError as exc:
                st.error(str(exc))
            else:
                st.session_state["selected_ids"] = []
                st.success(f"{label}: {len(selected)} alert(s)")
                st.rerun()


def _queue(f: AlertFilter, group: str) -> None:
    queue = alert_queue(lake(), f)
    total = len(queue)
    open_n = int(queue["status"].isin(triage.OPEN_STATUSES).sum()) if total else 0
    m = st.columns(5)
    m[0].metric("Alerts shown", f"{total:,}")
    m[1].metric("Open", f"{open_n:,}")
    for col, sev in zip(m[2:], ["critical", "high", "medium"], strict=True):
        col.metric(sev.capitalize(), f"{int((queue['severity'] == sev).sum()) if total else 0:,}")
    if queue.empty:
        st.info("No alert matches these filters." if f != AlertFilter() else "No alerts yet.")
        return
    if group != "none":
        st.markdown(f"**Grouped by {group}**")
        grouped = _grouped(queue, group)
        cfg = {"page": st.column_config.LinkColumn("entity page", display_text="open")} if group == "entity" else {}
        st.dataframe(grouped, hide_index=True, width="stretch", key=f"grouped_{group}", column_config=cfg)
    view = queue.copy()
    view.insert(0, "open", [alert_url(a) for a in view["alert_id"]])
    ids = view["alert_id"].tolist()
    key = "queue_" + hashlib.sha1("|".join(ids).encode()).hexdigest()[:12]  # a new table when the rows change
    st.session_state.setdefault("queue_shown", {})[key] = ids
    selected = set(st.session_state.get("selected_ids", []))
    order = ["open", "severity", "status", "rule_id", "entity_value", "alert_id", "assignee", "host_name",
             "user_name", "event_count", "last_seen", "summary", "entity_type", "rule_name", "first_seen",
             "detected_at", "revision"]
    st.dataframe(
        view, hide_index=True, width="stretch", key=key, on_select=lambda: _remember_selection(key),
        column_order=order,
        selection_mode="multi-row",
        selection_default={"selection": {"rows": [i for i, a in enumerate(ids) if a in selected], "columns": []}},
        column_config={
            "open": st.column_config.LinkColumn("detail", display_text="open"),
            "alert_id": st.column_config.TextColumn("alert_id", width="small"),
            "summary": st.column_config.TextColumn("summary", width="large"),
        })
    st.download_button("Download CSV of these alerts", csv_bytes(queue), file_name="nightjar-alerts.csv",
                       mime="text/csv", key="queue_csv", on_click="ignore")
    _bulk_actions(queue)


def page() -> None:
    st.title("Alerts")
    if lake_missing():
        return
    f = _filters()
    group = qp_str("group", "none")
    # Both live parts refresh themselves: a chart drawn once per page load went stale while the queue moved on.
    st.fragment(run_every=REFRESH_S)(_volume_chart)(f)

    @st.fragment(run_every=REFRESH_S)
    def live() -> None:
        st.caption(f"Live queue · newest first · refreshes every {REFRESH_S:g} s · "
                   f"{dt.datetime.now(dt.UTC):%H:%M:%S} UTC")
        _queue(f, group)

    live()
