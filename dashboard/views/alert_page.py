"""Alert detail (``?alert_id=…``): the rule, every revision, the evidence events with their raw lines, the
entity's context, related alerts, and triage with its history."""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from core.errors import UserError
from dashboard import triage
from dashboard.alerts_data import (
    current_alert,
    entity_context,
    entity_events,
    event_iocs,
    evidence_events,
    related_alerts,
    revisions,
)
from dashboard.process_tree import ProcessNode, process_trees
from dashboard.rules_catalog import rule_by_id
from dashboard.ui import (
    alert_url,
    analyst,
    entity_url,
    lake,
    lake_missing,
    no_analyst_warning,
    qp_str,
    set_qp,
    show_table,
)

ACTION_LABELS = {"acknowledge": "ack", "assign": "assign", "close: true positive": "close_true_positive",
                 "close: false positive": "close_false_positive", "close: benign": "close_benign",
                 "reopen": "reopen", "comment": "comment"}


def _links(alert: dict) -> str:
    ent = alert["entity"]
    parts = [f"[{ent['type']} {ent['value']}]({entity_url(ent['type'], ent['value'])})"]
    if alert.get("host_name"):
        parts.append(f"[host {alert['host_name']}]({entity_url('host', alert['host_name'])})")
    if alert.get("user_name"):
        parts.append(f"[user {alert['user_name']}]({entity_url('user', alert['user_name'])})")
    return " · ".join(parts)


def _rule(alert: dict) -> None:
    info = rule_by_id(alert["rule_id"])
    st.subheader("Rule")
    if info is None:
        st.info(f"Rule {alert['rule_id']} is not in the rule pack any more (alert raised as {alert['rule_name']!r}).")
        return
    st.markdown(f"**{info.title}** (`{info.rule_id}`, {info.kind}, level **{info.level}**)")
    st.write(info.description or "—")
    st.markdown("ATT&CK: " + (", ".join(
        f"[{t}](https://attack.mitre.org/techniques/{t.replace('.', '/')}/)" for t in info.tags) or "—")
        + (f" · tactics: {', '.join(info.tactics)}" if info.tactics else ""))
    with st.expander(f"Rule source: {info.source.name}"):
        st.code(info.source_text, language="python" if info.source.suffix == ".py" else "yaml")


def _context(alert: dict) -> None:
    ent = alert["entity"]
    st.subheader("Entity context")
    st.markdown(_links(alert))
    targets = [(ent["type"], ent["value"])]
    if alert.get("host_name") and ent["type"] != "host":
        targets.append(("host", alert["host_name"]))
    if alert.get("user_name") and ent["type"] != "user":
        targets.append(("user", alert["user_name"]))
    any_shown = False
    for etype, value in targets:
        ctx = entity_context(lake(), etype, value, pd.Timestamp(alert["first_seen"]).to_pydatetime())
        for table, df in ctx.items():
            if df.empty:
                continue
            any_shown = True
            label = {"assets": "Asset (owner, criticality)", "users": "User", "dhcp_sessions": "DHCP leases",
                     "iocs": "Threat intelligence"}.get(table, table)
            st.markdown(f"**{label}** of {etype} `{value}`")
            if table == "dhcp_sessions":
                holder = df[df["held_at_alert"]]
                if len(holder):
                    h = holder.iloc[0]
                    st.markdown(f"At the alert's time `{h['ip']}` was leased to **{h['hostname'] or 'unknown host'}** "
                                f"(`{h['mac']}`)")
            st.dataframe(df, hide_index=True, width="stretch", key=f"ctx_{etype}_{table}")
    if not any_shown:
        st.caption("No asset, user, lease or indicator on record for this entity.")


CMD_SHOWN = 120  # characters of a command line on the tree; the full text is in the expander below it


def _code(text: str) -> str:
    """``text`` as a Markdown code span, whatever backticks it holds (PowerShell escapes with them)."""
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def _process_line(n: ProcessNode) -> str:
    """Two Markdown lines for a node, indented by its depth: what it is (name, pid, time, user), then its image and
    command line (cut at ``CMD_SHOWN`` characters)."""
    pad = "\u2003" * (3 * n.depth)
    name = n.name or (n.executable or "?").rsplit("\\", 1)[-1]
    head = [f"**{_code(name)}**", f"pid {n.pid if n.pid is not None else '?'}",
            f"{n.time:%Y-%m-%d %H:%M:%S}" if n.time else "started before the window"]
    if n.user:
        head.append(_code(n.user))
    if n.evidence:
        head.append(":orange-badge[evidence]")
    elif n.event_id is None:
        head.append(":gray[(from its child's event)]")
    body = []
    if n.executable:
        body.append(_code(n.executable))
    if n.command_line:
        cmd = " ".join(n.command_line.split())
        body.append(_code(cmd if len(cmd) <= CMD_SHOWN else cmd[:CMD_SHOWN] + " …"))
    line = pad + ("└─ " if n.depth else "") + " · ".join(head)
    return line + (f"  \n{pad}\u2003\u2003" + " ".join(body) if body else "")


def _process_tree(alert: dict) -> None:
    """Parent → child around each evidence process, the evidence process marked; nothing at all when no evidence
    event names a process (no empty section)."""
    trees = process_trees(lake(), alert)
    if not trees:
        return
    st.subheader("Process tree")
    st.caption("Process creations (Sysmon 1, Security 4688) on the evidence host within the alert's window ±1 h: "
               "parents matched by Sysmon ProcessGuid, else by pid and time (the parent's newest creation before "
               "the child). Time, pid, user, image, command line.")
    for tree in trees:
        if len(trees) > 1:
            st.markdown(f"**{tree.host}** · evidence `{tree.evidence_event_id}`")
        st.markdown("  \n".join(_process_line(n) for n in tree.nodes))
        if tree.children_truncated:
            st.caption(f"Only the first {sum(n.relation == 'child' for n in tree.nodes)} children are shown.")
        long = [n for n in tree.nodes if n.command_line and len(" ".join(n.command_line.split())) > CMD_SHOWN]
        if long:
            with st.expander(f"Full command lines ({len(long)})"):
                for n in long:
                    st.markdown(f"{_code(n.name or '?')} pid {n.pid if n.pid is not None else '?'}")
                    st.code(n.command_line, language="text", wrap_lines=True)


def _triage(alert_id: str) -> None:
    st.subheader("Triage")
    status = triage.status_of(lake(), alert_id)
    st.markdown(f"Status: **{status}**")
    if not analyst():
        no_analyst_warning()
    with st.form("triage", clear_on_submit=True):
        c1, c2 = st.columns(2)
        label = c1.selectbox("Action", list(ACTION_LABELS), key="t_action")
        assignee = c2.text_input("Assignee (assign)", key="t_assignee")
        reason = st.text_input("Reason (required to close, reopen, comment)", key="t_reason")
        submitted = st.form_submit_button("Record", disabled=not analyst())
    if submitted:
        try:
            triage.record(lake(), triage.Action(alert_id, ACTION_LABELS[label], analyst(), reason, assignee))
        except UserError as exc:
            st.error(str(exc))
        else:
            st.session_state["triage_flash"] = f"Recorded: {label} by {analyst()}"
            st.rerun()  # the status and history above and below show the new action
    if st.session_state.get("triage_flash"):
        st.success(st.session_state.pop("triage_flash"))
    st.markdown("**History**")
    show_table(triage.history(lake(), alert_id), "triage_history", "No triage action yet.")


def page() -> None:
    st.title("Alert detail")
    if lake_missing():
        return
    alert_id = st.text_input("alert_id", value=qp_str("alert_id"), key="detail_alert_id").strip()
    set_qp(alert_id=alert_id)
    if not alert_id:
        st.info("Open an alert from the queue, or paste its alert_id.")
        return
    alert = current_alert(lake(), alert_id)
    if alert is None:
        st.error(f"No alert {alert_id} in the lake.")
        return
    st.markdown(f"### {alert['severity'].upper()} · {alert['rule_name']}")
    st.write(alert["summary"])
    cols = st.columns(4)
    cols[0].metric("Events", f"{alert['event_count']:,}")
    cols[1].metric("Revision", alert["revision"])
    cols[2].metric("Status", triage.status_of(lake(), alert_id))
    cols[3].metric("Entity", f"{alert['entity']['type']}")
    st.caption(f"First seen {pd.Timestamp(alert['first_seen']):%Y-%m-%d %H:%M:%S} · last seen "
               f"{pd.Timestamp(alert['last_seen']):%Y-%m-%d %H:%M:%S} · window "
               f"{pd.Timestamp(alert['window_start']):%H:%M:%S}–{pd.Timestamp(alert['window_end']):%H:%M:%S} · "
               f"detected {pd.Timestamp(alert['detected_at']):%Y-%m-%d %H:%M:%S} (UTC) · tags "
               f"{', '.join(alert['tags']) or '—'} · alert_id `{alert_id}`")
    st.markdown(_links(alert))

    left, right = st.columns([3, 2])
    with left:
        st.subheader("Evidence")
        ev = evidence_events(lake(), alert)
        st.caption(f"{len(ev)} of the alert's {len(alert['evidence'])} evidence event id(s) found in `events`; "
                   "raw lines as received:")
        show_table(ev, "evidence", "None of the evidence events is in the events table.",
                   column_config={"original": st.column_config.TextColumn("raw line (event.original)", width="large")})
        if len(ev):
            st.code("\n".join(ev["original"].dropna().astype(str).tolist()), language="text")
        iocs = event_iocs(ev, lake())
        if len(iocs):
            st.markdown("**Indicators matched by the evidence**")
            st.dataframe(iocs, hide_index=True, width="stretch", key="evidence_iocs")
        with st.expander("All events of the entity in the alert's window"):
            ent = alert["entity"]
            window = entity_events(lake(), ent["type"], ent["value"], pd.Timestamp(alert["window_start"]),
                                   pd.Timestamp(alert["window_end"]))
            show_table(window, "window_events", "No event of this entity in the window.")
        st.subheader("Revisions")
        revs = revisions(lake(), alert_id)
        revs = revs.assign(entity=revs["entity"].map(lambda e: f"{e['type']}:{e['value']}"))
        st.dataframe(revs, hide_index=True, width="stretch", key="revisions")
    with right:
        _triage(alert_id)
        _rule(alert)
    _process_tree(alert)
    _context(alert)
    st.subheader("Related alerts (same entity, ±24 h)")
    rel = related_alerts(lake(), alert)
    if rel.empty:
        st.caption("None.")
    else:
        rel.insert(0, "open", [alert_url(a) for a in rel["alert_id"]])
        st.dataframe(rel, hide_index=True, width="stretch", key="related",
                     column_config={"open": st.column_config.LinkColumn("detail", display_text="open")})
