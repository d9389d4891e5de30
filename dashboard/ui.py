"""Helpers the dashboard's pages share: the lake, the analyst's identity, query parameters, links between pages."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from core.config import ENV_DASHBOARD_REFRESH_S, settings_from_env
from dashboard.identity import SOURCE_OIDC, Identity
from dashboard.identity import current as identity_of_session

REFRESH_S = float(os.environ.get(ENV_DASHBOARD_REFRESH_S, "5"))
# The time filters' choices (alert queue on last_seen, entity pages on @timestamp); None: no bound.
TIME_WINDOWS = {"all": None, "1h": dt.timedelta(hours=1), "24h": dt.timedelta(days=1), "7d": dt.timedelta(days=7),
                "30d": dt.timedelta(days=30)}
# url_path of each page (st.Page): deep links are /<path>?<query parameters>
PAGE_ALERTS, PAGE_ALERT, PAGE_HUNT, PAGE_ENTITY, PAGE_COVERAGE, PAGE_PIPELINE, PAGE_RULE_LAB = (
    "alerts", "alert", "hunt", "entity", "coverage", "pipeline", "rules")
PAGES: dict[str, st.Page] = {}  # filled by app.py


def lake() -> Path:
    return settings_from_env().lake


def lake_missing() -> bool:
    path = lake()
    if not path.is_dir():
        st.warning(f"The lake {path} does not exist yet: start the pipeline (`nightjar run`).")
        return True
    return False


def url(page: str, **params: object) -> str:
    """A relative link to ``page`` with query parameters (for LinkColumn cells and markdown)."""
    clean = {k: v for k, v in params.items() if v is not None and v != ""}
    path = "./" if page == PAGE_ALERTS else f"./{page}"  # the default page lives at the root
    return path + (f"?{urlencode(clean, doseq=True)}" if clean else "")


def entity_url(entity_type: str, value: str) -> str:
    return url(PAGE_ENTITY, type=entity_type, value=value)


def alert_url(alert_id: str) -> str:
    return url(PAGE_ALERT, alert_id=alert_id)


def qp_list(name: str) -> list[str]:
    return [v for v in st.query_params.get_all(name) if v]


def qp_str(name: str, default: str = "") -> str:
    value = st.query_params.get(name)
    return value if value else default


def set_qp(**values: object) -> None:
    """Write the page's state into the URL (so it can be bookmarked and shared); empty values are removed."""
    for name, value in values.items():
        if value is None or value == "" or value == []:
            if name in st.query_params:
                del st.query_params[name]
        elif isinstance(value, list | tuple):
            st.query_params[name] = [str(v) for v in value]
        else:
            st.query_params[name] = str(value)


def identity() -> Identity:
    """This session's analyst identity: a login proxy's header, Streamlit's login, or the local user on a loopback-only
    dashboard (see :mod:`dashboard.identity`); never a name typed into the page."""
    return identity_of_session()


def analyst() -> str:
    """The analyst's name for this session ('' when there is no identity: triage is disabled)."""
    return identity().name


def no_analyst_warning() -> None:
    """Say why triage is disabled (call only when :func:`analyst` is '')."""
    st.warning(f"Triage is disabled: {identity().problem}.")


def identity_box() -> None:
    """The sidebar's "who am I": the name and where it comes from, or why there is none (and a login button)."""
    who = identity()
    with st.sidebar:
        if who.name:
            st.text(f"Analyst: {who.name}")  # plain text: a header's value is not markdown
            st.caption(f"From the {who.source}; recorded with every triage action.")
            if who.source == SOURCE_OIDC:
                st.button("Log out", on_click=st.logout, key="identity_logout")
        else:
            st.caption(f"No analyst identity: {who.problem}.")
            if who.needs_login:
                st.button("Log in", on_click=st.login, type="primary", key="identity_login")


def csv_bytes(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False).encode("utf-8")


def show_table(df: pd.DataFrame, key: str, empty: str, **kwargs) -> None:
    if df is None or df.empty:
        st.info(empty)
    else:
        st.dataframe(df, hide_index=True, width="stretch", key=key, **kwargs)
