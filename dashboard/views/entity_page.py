"""Entity page (``?type=host|user|ip|domain|mac&value=…``): context, timeline of events and alerts, DHCP history,
logins and their countries, top peers and ports; ``&time=1h|24h|7d|30d|all`` bounds the events shown (24h)."""

from __future__ import annotations

import datetime as dt

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import entities
from dashboard.alerts_data import entity_context, entity_events
from dashboard.ui import TIME_WINDOWS, alert_url, entity_url, lake, lake_missing, qp_str, set_qp, show_table

# What an entity page shows first: the last 24 hours of events (as SIEMs open); the URL (?time=7d|30d|all) widens it.
DEFAULT_WINDOW = "24h"


def page() -> None:
    st.title("Entity")
    if lake_missing():
        return
    c1, c2, c3 = st.columns([1, 3, 1])
    types = list(entities.ENTITY_TYPES)
    etype = c1.selectbox("Type", types, index=types.index(qp_str("type", "host")) if qp_str("type", "host") in types
                         else 0, key="entity_type")
    value = c2.text_input("Value", value=qp_str("value"), key="entity_value",
                          placeholder="ws-0008, alice, 10.10.0.23, evil.example, 00:0c:29:aa:0b:01").strip()
    windows = list(TIME_WINDOWS)
    window = c3.selectbox("Time", windows, index=windows.index(qp_str("time", DEFAULT_WINDOW))
                          if qp_str("time", DEFAULT_WINDOW) in windows else windows.index(DEFAULT_WINDOW),
                          key="entity_time", help="Events within this window (alerts and DHCP history: all).")
    set_qp(type=etype, value=value, time=None if window == DEFAULT_WINDOW else window)
    # a bounded window lets every events query skip the older files (time-ordered files, Delta statistics)
    since = dt.datetime.now(dt.UTC) - TIME_WINDOWS[window] if TIME_WINDOWS[window] else None
    if not value:
        st.info("Choose an entity (or follow a link from an alert).")
        return
    st.header(f"{etype} {value}")

    ctx = entity_context(lake(), etype, value)
    for table, df in ctx.items():
        if len(df) and table != "dhcp_sessions":  # the DHCP history has its own section below
            st.markdown(f"**{table}**")
            st.dataframe(df, hide_index=True, width="stretch", key=f"ectx_{table}")
            if table == "assets" and etype == "host" and df["ip"].notna().any():
                ip = df["ip"].dropna().iloc[0]
                st.markdown(f"Static address: [ip {ip}]({entity_url('ip', ip)})")

    st.subheader("Timeline")
    timeline = entities.event_timeline(lake(), etype, value, since=since)
    alerts = entities.entity_alerts(lake(), etype, value)
    if timeline.empty:
        st.caption("No event about this entity.")
    else:
        timeline["end"] = timeline["bucket"] + pd.Timedelta(hours=1)
        chart = alt.Chart(timeline).mark_bar().encode(
            x=alt.X("bucket:T", title="hour (UTC)"), x2="end:T", y=alt.Y("sum(events):Q", title="events"),
            color=alt.Color("dataset:N"), tooltip=["bucket:T", "dataset:N", "sum(events):Q"])
        if len(alerts):
            rules = alt.Chart(alerts).mark_rule(color="red", strokeWidth=2).encode(
                x="first_seen:T", tooltip=["rule_id:N", "severity:N", "first_seen:T"])
            chart = chart + rules
        st.altair_chart(chart.properties(height=200), width="stretch")
        st.caption("Bars: events per hour by source; red lines: alerts.")
    st.markdown(f"**Alerts ({len(alerts)})**")
    if len(alerts):
        alerts.insert(0, "open", [alert_url(a) for a in alerts["alert_id"]])
        st.dataframe(alerts, hide_index=True, width="stretch", key="entity_alerts",
                     column_config={"open": st.column_config.LinkColumn("detail", display_text="open")})
    with st.expander("Events (newest 500)"):
        show_table(entity_events(lake(), etype, value, since=since, limit=500, newest_first=True), "entity_events", "No events.")

    if etype in ("ip", "host", "mac"):
        st.subheader("DHCP history (IP ↔ MAC ↔ host)")
        show_table(entities.dhcp_history(lake(), etype, value), "dhcp_history",
                   "No DHCP session recorded for this entity.")

    st.subheader("Logins")
    countries = entities.login_countries(lake(), etype, value, since=since)
    if countries.empty:
        st.caption("No SSH login involving this entity.")
    else:
        c1, c2 = st.columns([1, 2])
        c1.dataframe(countries, hide_index=True, width="stretch", key="login_countries")
        c2.dataframe(entities.logins(lake(), etype, value, since=since), hide_index=True, width="stretch", key="logins")

    if etype in ("ip", "host", "mac"):
        st.subheader("Top peers and ports")
        ptype, pvalue = etype, value
        assets = ctx.get("assets")
        if etype == "host" and assets is not None and assets["ip"].notna().any() \
                and entities.top_peers(lake(), etype, value, since=since).empty:
            # a server with a static address: Zeek names it by IP only
            ptype, pvalue = "ip", assets["ip"].dropna().iloc[0]
            st.caption(f"Connections of its static address {pvalue}")
        c1, c2 = st.columns(2)
        with c1:
            peers = entities.top_peers(lake(), ptype, pvalue, since=since)
            if len(peers):
                peers.insert(0, "page", [entity_url("ip", p) for p in peers["peer"]])
            show_table(peers, "top_peers", "No connection recorded.",
                       column_config={"page": st.column_config.LinkColumn("peer page", display_text="open")})
        with c2:
            show_table(entities.top_ports(lake(), ptype, pvalue, since=since), "top_ports", "No connection recorded.")
