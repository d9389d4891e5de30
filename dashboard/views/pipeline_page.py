"""Pipeline: the lake's tables, streaming progress and DHCP leases (who has this IP now)."""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from core.errors import UserError
from dashboard.queries import (
    current_leases,
    latest_progress,
    lease_history,
    mac_digits,
    open_lease_count,
    parse_ip,
    progress_history,
    table_overview,
)
from dashboard.ui import REFRESH_S
from dashboard.ui import lake as _lake


@st.fragment(run_every=REFRESH_S)
def overview() -> None:
    lake = _lake()
    if not lake.is_dir():
        st.warning(f"The lake {lake} does not exist yet: start the pipeline (`nightjar run`).")
        return
    tables = table_overview(lake)
    st.subheader("Tables")
    if tables.empty:
        st.info("No tables yet: the pipeline has not committed anything.")
    else:
        st.dataframe(tables, hide_index=True, width="stretch", key="tables")

    st.subheader("Pipeline")
    latest = latest_progress(lake)
    if latest.empty:
        st.info("No streaming progress recorded yet.")
        return
    cols = st.columns(len(latest))
    for col, row in zip(cols, latest.itertuples(), strict=True):
        col.metric(f"{row.query_name}: rows/s", f"{row.processed_rows_per_second:,.0f}",
                   help=f"batch {row.batch_id} at {row.timestamp}")
        col.caption(f"batch {row.batch_id} · {row.num_input_rows:,} rows · {row.batch_duration_ms:,} ms · "
                    f"state rows {row.state_rows:,} · watermark {row.watermark or '—'}")
    st.dataframe(latest, hide_index=True, width="stretch", key="latest_progress")

    history = progress_history(lake, minutes=15)
    if not history.empty:
        st.markdown("**Processed rows/s, last 15 minutes**")
        chart = history.pivot_table(index="timestamp", columns="query_name",
                                    values="processed_rows_per_second", aggfunc="sum")
        st.line_chart(chart)



# Input that can only have been meant as an IP address (digits and dots, or hex and colons but not a MAC).
_IP_LIKE = re.compile(r"^[0-9.]+$|^[0-9a-fA-F:]*:[0-9a-fA-F:.]*$")


def _holder_line(row) -> str:
    host = row.hostname if isinstance(row.hostname, str) and row.hostname else "unknown host"
    until = f", lease until {row.lease_end:%Y-%m-%d %H:%M:%S} UTC" if not pd.isna(row.lease_end) else ""
    return (f"**{row.ip}** is held by **{host}** (`{row.mac}`) since "
            f"{row.lease_start:%Y-%m-%d %H:%M:%S} UTC{until} · {row.state} · source {row.dataset}")


@st.fragment(run_every=REFRESH_S)
def dhcp_leases() -> None:
    st.subheader("DHCP leases")
    query = st.text_input("IP, MAC or hostname", key="dhcp_query",
                          placeholder="10.0.0.5, 00-0C-29-AA-0B-01 or ws-01").strip()
    lake = _lake()
    if not lake.is_dir():
        return
    if not query:
        st.metric("Open leases", f"{open_lease_count(lake):,}")
        newest = current_leases(lake, limit=20)
        if newest.empty:
            st.info("No open DHCP leases recorded.")
        else:
            st.markdown("**Newest 20 open leases**")
            st.dataframe(newest, hide_index=True, width="stretch", key="open_leases")
        return
    try:
        ip = parse_ip(query)
    except UserError as exc:
        ip = None
        if mac_digits(query) is None and _IP_LIKE.match(query):
            st.error(str(exc))
            return
    if ip is None:  # a MAC address or a host name: the leases it holds now
        held = current_leases(lake, mac_or_host=query)
        st.markdown(f"**Open leases of {query}**")
        if held.empty:
            st.info(f"{query} holds no open lease.")
        else:
            st.dataframe(held, hide_index=True, width="stretch", key="leases_of_host")
        return
    st.markdown("**Who has this IP now**")
    holders = current_leases(lake, ip=ip)
    if holders.empty:
        st.info(f"Nobody holds {ip} now.")
    for row in holders.itertuples():
        st.markdown(_holder_line(row))
    st.markdown(f"**Lease history of {ip}**")
    history = lease_history(lake, ip)
    if history.empty:
        st.info(f"No DHCP session recorded for {ip}.")
    else:
        st.dataframe(history, hide_index=True, width="stretch", key="lease_history")


def page() -> None:
    st.title("Pipeline")
    st.caption(f"Lake: `{_lake().resolve()}` · refreshes every {REFRESH_S:g} s")
    overview()
    dhcp_leases()
