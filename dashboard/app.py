"""The Nightjar dashboard page (run by Streamlit: ``nightjar dashboard``).

Reads the lake named by ``NIGHTJAR_LAKE`` through :mod:`dashboard.queries` (deltalake + DuckDB, read only)
and refreshes itself every few seconds, so a running pipeline's figures move without a reload.
"""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from dashboard.queries import latest_progress, progress_history, table_overview
from nightjar.config import ENV_DASHBOARD_REFRESH_S, settings_from_env

REFRESH_S = float(os.environ.get(ENV_DASHBOARD_REFRESH_S, "5"))

st.set_page_config(page_title="Nightjar", page_icon="🌙", layout="wide")
lake: Path = settings_from_env().lake

st.title("Nightjar")
st.caption(f"Lake: `{lake.resolve()}` · refreshes every {REFRESH_S:.0f} s")


@st.fragment(run_every=REFRESH_S)
def overview() -> None:
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


overview()
