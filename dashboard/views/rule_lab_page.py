"""Rule lab (``?rule_id=…``): edit a rule file, check it, try it on the lake, backtest it, save it for the pipeline.

Checking and trying run here (pySigma + the pipeline's compiler + DuckDB, no Spark). The backtest and the save's
validation run the pipeline's own commands in a child process (``nightjar backtest`` / ``nightjar rules list``,
see :mod:`dashboard.rule_deploy`), so what the lab says about a rule is what the pipeline will do with it.
"""

from __future__ import annotations

import datetime as dt

import streamlit as st

from core.config import settings_from_env
from dashboard import rule_deploy, rule_lab
from dashboard.rules_catalog import load_catalog, rule_paths
from dashboard.ui import lake, lake_missing, qp_str, set_qp, show_table


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
    target_dir = rule_deploy.rules_directory(settings_from_env().rules)
    st.caption(f"{info.title} · {info.kind} · level {info.level} · file `{info.source.name}` · "
               f"rules directory `{target_dir}` (the pipeline re-reads it: run it with `--rules` on the same one)")
    if info.source.suffix == ".py":
        st.info("A Python rule: check it with `nightjar rules test` (its samples run through Spark).")
        st.code(info.source_text, language="python")
        return
    if st.session_state.get("lab_loaded") != rid:
        st.session_state["lab_text"] = info.source_text
        # Empty, not the rule's own file name: a name typed into a pre-filled box was appended to it (and saved as
        # sudo_non_admin.yml.hidden.yml). The placeholder names the file to type to replace it.
        st.session_state["lab_file"] = ""
        st.session_state["lab_loaded"] = rid
        st.session_state.pop("lab_backtest", None)
    text = st.text_area("Rule file (Sigma YAML)", key="lab_text", height=360)
    if st.button("Check and try on the lake", type="primary", key="lab_check"):
        _check(text)
    st.divider()
    _backtest(text, info.source.name)
    st.divider()
    _save(text, target_dir, info.source.name)


def _check(text: str) -> None:
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
            st.caption("A correlation: its windows need Spark — the backtest below replays it over the lake.")


def _progress(slot, what: str):
    def show(elapsed: float, line: str) -> None:
        slot.caption(f"{what}… {elapsed:.0f} s" + (f" · {line[-160:]}" if line else ""))

    return show


def _backtest(text: str, loaded_name: str) -> None:
    st.subheader("Backtest")
    period = rule_deploy.events_period(lake())
    if period is None:
        st.info("The lake has no events yet: nothing to backtest on.")
        return
    first, last = period[0].date(), period[1].date()
    c1, c2, c3 = st.columns([1, 1, 2])
    start = c1.date_input("From (UTC)", value=first, key="lab_from")
    end = c2.date_input("To (UTC, inclusive)", value=last, key="lab_to")
    c3.caption(f"Events in the lake: {period[0]:%Y-%m-%d %H:%M} to {period[1]:%Y-%m-%d %H:%M} UTC. The backtest runs "
               "`nightjar backtest` (the pipeline's compiled rules on Spark, in batch) over the period.")
    if st.button("Backtest over the period", key="lab_run_backtest"):
        if start > end:
            st.error("From must not be after To.")
            return
        t0 = dt.datetime.combine(start, dt.time())
        t1 = dt.datetime.combine(end, dt.time()) + dt.timedelta(days=1)
        typed = (st.session_state.get("lab_file") or "").strip()
        file_name = loaded_name if rule_deploy.check_file_name(typed) else typed  # the save box may hold anything
        slot = st.empty()
        with st.spinner("Backtesting (a Spark driver starts first)…"):
            res = rule_deploy.backtest_rule_text(lake(), text, file_name,
                                                 t0, t1, rule_paths(), progress=_progress(slot, "running"))
        slot.empty()
        st.session_state["lab_backtest"] = (res, t0, t1)
    if "lab_backtest" not in st.session_state:
        return
    res, t0, t1 = st.session_state["lab_backtest"]
    if not res.ok:
        st.error(f"Backtest refused: {res.problem}")
        return
    past = res.past
    fp, closed, n_past = (int(past[c].sum()) for c in ("false_positive", "closed", "past_alerts"))
    st.success(f"{len(res.alerts)} alert(s) the rule would have raised from {t0:%Y-%m-%d} to {t1:%Y-%m-%d} "
               f"(backtest {res.seconds:.0f} s). Its past alerts in the period: {n_past}, {closed} closed by "
               f"analysts, {fp} closed as false positive.")
    show_table(past, "lab_past", "No rule in the file.")
    show_table(res.alerts, "lab_backtest_alerts", "No alert in the period.")


def _save(text: str, target_dir, loaded_name: str) -> None:
    st.subheader("Save into the rules directory")
    c1, c2 = st.columns([2, 1])
    name = c1.text_input("File name", key="lab_file", placeholder=f"new_rule.yml, or {loaded_name} to replace it")
    overwrite = c2.checkbox("Overwrite the existing file", key="lab_overwrite",
                            help="Needed to replace a file already in the rules directory (a pack file included).")
    st.caption(f"Saved to `{target_dir}` after the rule loader accepts it (`nightjar rules list` over the directory "
               "with the file in place); the running pipeline re-reads changed rule files.")
    if not st.button("Validate and save", key="lab_save"):
        return
    slot = st.empty()
    with st.spinner("Validating with the rule loader…"):
        res = rule_deploy.save_rule(text, target_dir, name.strip(), overwrite=overwrite,
                                    progress=_progress(slot, "validating"))
    slot.empty()
    if res.path is not None:
        st.success(f"Saved {res.path} ({res.seconds:.0f} s): the pipeline loads it at its next rule check.")
    elif res.exists:
        st.warning(f"Not saved: {res.problem}.")
    else:
        st.error(f"Refused: {res.problem}")
