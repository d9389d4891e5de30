"""Coverage and health: the ATT&CK matrix of the enabled rules, per-rule alert figures, rule query health."""

from __future__ import annotations

import streamlit as st

from dashboard import coverage
from dashboard.rules_catalog import load_catalog
from dashboard.ui import lake, lake_missing, show_table


def page() -> None:
    st.title("Coverage and health")
    if lake_missing():
        return
    rules = load_catalog()
    enabled = [r for r in rules if r.enabled]
    matrix = coverage.attack_matrix(rules)
    st.caption(f"{len(enabled)} enabled rule(s) of {len(rules)} cover {matrix['technique'].nunique()} ATT&CK "
               f"technique(s) in {matrix['tactic'].nunique()} tactic(s).")

    st.subheader("ATT&CK matrix")
    tactics = list(dict.fromkeys(matrix["tactic"]))
    if tactics:
        for start in range(0, len(tactics), 5):
            cols = st.columns(5)
            for col, tactic in zip(cols, tactics[start:start + 5], strict=False):
                col.markdown(f"**{tactic.replace('_', ' ').title()}**")
                for row in matrix[matrix["tactic"] == tactic].itertuples():
                    col.markdown(f"`{row.technique}` {row.rules}")

    st.subheader("Rules")
    table = coverage.coverage_table(lake(), rules)
    order = ["rule_id", "title", "level", "alerts", "alerts_per_day", "false_positive_share", "last_fired", "status",
             "error", "last_batch_at", "closed", "false_positive", "techniques", "kind", "enabled", "file", "days"]
    st.dataframe(table, hide_index=True, width="stretch", key="coverage_rules", column_order=order,
                 column_config={"false_positive_share": st.column_config.NumberColumn("FP share", format="percent")})

    st.subheader("Alerts per rule and day")
    daily = coverage.daily_alerts(lake())
    if daily.empty:
        st.caption("No alerts yet.")
    else:
        st.bar_chart(daily.assign(day=daily["day"].astype(str)), x="day", y="alerts", color="rule_id", height=220)

    st.subheader("Rule query health")
    health = coverage.query_health(lake())
    failing = health[health["status"].fillna("") != "running"] if len(health) else health
    if len(failing):
        st.error(f"{len(failing)} rule(s) not running: " + ", ".join(failing["rule_id"]))
    show_table(health, "rule_health", "No rule health recorded (the pipeline has not run the detections yet).")
