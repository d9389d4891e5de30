"""Hunt: ad-hoc read-only SQL over the lake (``?q=<sql>`` or ``?hunt=<saved name>``), saved hunts, CSV export."""

from __future__ import annotations

import streamlit as st

from core.config import settings_from_env
from core.lake import list_tables, table_dataset
from dashboard import hunt
from dashboard.ui import analyst, csv_bytes, lake, lake_missing, qp_str, set_qp

PAGE_SIZE = 100


def _schema_help() -> None:
    with st.expander("Tables and columns"):
        tables = list_tables(lake())
        for name in tables:
            fields = table_dataset(lake(), name).schema
            st.markdown(f"**{name}**: " + ", ".join(f"`{f.name}`" for f in fields))
        st.caption('Nested ECS columns: `"source".ip`, `"event".original`, `"@timestamp"` (quote names DuckDB '
                   "reserves, such as user, group, source). A source's own fields are in `detail`, a map of text.")
        if "events" in tables:
            views = hunt.dataset_views()
            st.markdown("**Typed views of `events`, one per source dataset**, with the source's own field names "
                        '(`SELECT conn_state, count(*) FROM zeek_conn GROUP BY ALL`; quote dotted names: '
                        '`"system.auth.ssh.method"`): ' + ", ".join(f"`{v}`" for v in views))
    with st.expander("Find a field"):
        c1, c2 = st.columns([2, 3])
        name = c1.text_input("Field (ECS, a source's own, or Sigma's name)", key="hunt_field")
        datasets = c2.multiselect("In datasets (all when empty)", sorted(hunt.dataset_views().values()),
                                  key="hunt_field_datasets")
        if name.strip():
            try:
                st.code(hunt.field_sql(name, datasets), language="sql")
                st.caption("An expression over `events`, as the rules read the field (docs/fields.md).")
            except hunt.HuntRefused as exc:
                st.error(str(exc))


def page() -> None:
    st.title("Hunt")
    if lake_missing():
        return
    saved = hunt.saved_hunts(lake())
    names = [h.name for h in saved]
    max_bytes = settings_from_env().hunt_max_bytes
    st.caption("Read-only SQL (DuckDB) over the lake's tables: one SELECT; no files, no extensions, "
               f"{hunt.DEFAULT_TIMEOUT_S:g} s, {hunt.DEFAULT_MAX_ROWS:,} rows and {hunt.size_text(max_bytes)} at most.")
    chosen_name = qp_str("hunt")
    c1, c2 = st.columns([3, 1])
    pick = c1.selectbox("Saved hunts", ["(none)", *names],
                        index=(names.index(chosen_name) + 1) if chosen_name in names else 0, key="hunt_pick")
    if pick != "(none)" and st.session_state.get("hunt_loaded") != pick:
        st.session_state["hunt_sql"] = next(h.sql for h in saved if h.name == pick)
        st.session_state["hunt_loaded"] = pick
    if pick != "(none)":
        c2.caption(next(h.description for h in saved if h.name == pick))
    if "hunt_sql" not in st.session_state:
        st.session_state["hunt_sql"] = qp_str("q", "SELECT rule_id, count(*) AS alerts FROM alerts GROUP BY ALL")
    sql = st.text_area("SQL", key="hunt_sql", height=180)
    run = st.button("Run", type="primary", key="hunt_run")
    set_qp(hunt=None if pick == "(none)" else pick, q=None if pick != "(none)" else sql.strip())
    _schema_help()

    if run:
        try:
            st.session_state["hunt_result"] = hunt.run_hunt(lake(), sql, max_bytes=max_bytes)
            st.session_state["hunt_error"] = None
            st.session_state["hunt_page"] = 1
        except (hunt.HuntRefused, hunt.HuntTimeout) as exc:
            st.session_state["hunt_result"] = None
            st.session_state["hunt_error"] = str(exc)
    if st.session_state.get("hunt_error"):
        st.error(f"Refused: {st.session_state['hunt_error']}")
    result: hunt.HuntResult | None = st.session_state.get("hunt_result")
    if result is not None:
        rows = len(result.rows)
        pages = hunt.page_count(rows, PAGE_SIZE)
        st.markdown(f"**{rows:,} row(s)** in {result.seconds:.2f} s")
        if result.truncated:
            st.warning(result.notice)
        number = st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, step=1, key="hunt_page")
        st.dataframe(hunt.page(result.rows, number, PAGE_SIZE), hide_index=True, width="stretch", key="hunt_rows")
        st.download_button("Download CSV", csv_bytes(result.rows), file_name="nightjar-hunt.csv", mime="text/csv",
                           key="hunt_csv", on_click="ignore")

    with st.expander("Save this hunt"):
        with st.form("save_hunt", clear_on_submit=True):
            name = st.text_input("Name", key="save_name")
            desc = st.text_input("Description", key="save_desc")
            ok = st.form_submit_button("Save")
        if ok:
            try:
                hunt.save_hunt(lake(), hunt.SavedHunt(name, sql, desc, analyst() or "anonymous"))
                st.success(f"Saved {name!r}")
            except hunt.HuntRefused as exc:
                st.error(str(exc))
