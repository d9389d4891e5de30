"""Rule lab (``?rule_id=…``): a rule file in an editor, checked as it is edited, its selections tried on the lake.

The edits stay in the browser: deploying a rule is copying the file into the rules directory (the pipeline
re-reads it), after ``nightjar rules test`` and ``nightjar backtest``.
"""

from __future__ import annotations

import streamlit as st

from dashboard import rule_lab
from dashboard.rules_catalog import load_catalog
from dashboard.ui import lake, lake_missing, qp_str, set_qp


def page() -> None:
    st.title("Rule lab")
    if lake_missing():
        return
    rules = load_catalog()
    ids = [r.rule_id for r in rules]
    wanted = qp_str("rule_id", ids[0] if ids else "")
    rid = st.selectbox("Rule", ids, index=ids.index(wanted) if wanted in ids else 0, key="lab_rule")
    set_qp(rule_id=rid)
    info = next(r for r in rules if r.rule_id == rid)
    st.caption(f"{info.title} · {info.kind} · level {info.level} · file `{info.source.name}` "
               "(edits stay here: copy the file into the rules directory to deploy it)")
    if info.source.suffix == ".py":
        st.info("A Python rule: check it with `nightjar rules test` (its samples run through Spark).")
        st.code(info.source_text, language="python")
        return
    if st.session_state.get("lab_loaded") != rid:
        st.session_state["lab_text"] = info.source_text
        st.session_state["lab_loaded"] = rid
    text = st.text_area("Rule file (Sigma YAML)", key="lab_text", height=360)
    if not st.button("Check and try on the lake", type="primary", key="lab_check"):
        return
    reports = rule_lab.check_rule_text(text, rule_lab.events_schema(lake()))
    bad = sum(bool(r.problems) for r in reports)
    (st.error if bad else st.success)(f"{len(reports)} rule(s) in the file, {bad} with problems")
    for n, rep in enumerate(reports):
        head = (f"**{rep.name}** ({rep.kind}{', alerts' if rep.alerts else ''}) · level {rep.level or '—'} · "
                f"{', '.join(rep.tags) or 'no ATT&CK tag'}" + (f" · entity {rep.entity}" if rep.entity else ""))
        st.markdown(head)
        for p in rep.problems:
            st.error(p)
        if rep.predicate:
            st.code(rep.predicate, language="sql")
            tried = rule_lab.try_on_lake(lake(), rep.predicate)
            if tried.matches is None:
                st.warning(tried.note)
            else:
                st.markdown(f"Matches **{tried.matches:,}** event(s) in the lake (newest {len(tried.sample)} below).")
                if len(tried.sample):
                    st.dataframe(tried.sample, hide_index=True, width="stretch", key=f"lab_sample_{n}")
        elif rep.kind == "correlation" and not rep.problems:
            st.caption("A correlation: its windows need Spark — `nightjar backtest` replays it over the lake.")
