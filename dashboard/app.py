"""The Nightjar dashboard (run by Streamlit: ``nightjar dashboard``): a multipage app over the lake.

Pages (``st.navigation``; each deep-linkable with query parameters):

* ``/`` (``/alerts`` is the same page) — the live alert queue: filters, grouping, volume chart, bulk triage, CSV export;
* ``/alert?alert_id=…`` — one alert: rule, revisions, evidence events with raw lines, entity context, triage;
* ``/hunt?q=…`` — read-only, sandboxed SQL over every table, saved hunts;
* ``/entity?type=host&value=…`` — a host / user / IP: timeline, DHCP history, logins, peers and ports;
* ``/coverage`` — ATT&CK coverage of the rule pack, per-rule figures, rule query health;
* ``/rules?rule_id=…`` — rule lab: a rule file checked as it is edited, its selections tried on the lake;
* ``/pipeline`` — tables, streaming progress, DHCP leases.

Reads the lake named by ``NIGHTJAR_LAKE`` (deltalake -> Arrow -> DuckDB, never Spark). The only tables it writes are
its own: ``alert_triage`` and ``saved_hunts``.
"""

from __future__ import annotations

import streamlit as st

from dashboard import ui
from dashboard.views import (
    alert_page,
    alerts_page,
    coverage_page,
    entity_page,
    hunt_page,
    pipeline_page,
    rule_lab_page,
)

st.set_page_config(page_title="Nightjar", page_icon=":material/nightlight:", layout="wide")

ui.PAGES.update({
    ui.PAGE_ALERTS: st.Page(alerts_page.page, title="Alerts", icon=":material/notifications_active:", url_path=ui.PAGE_ALERTS, default=True),
    ui.PAGE_ALERT: st.Page(alert_page.page, title="Alert detail", icon=":material/search:", url_path=ui.PAGE_ALERT),
    ui.PAGE_HUNT: st.Page(hunt_page.page, title="Hunt", icon=":material/manage_search:", url_path=ui.PAGE_HUNT),
    ui.PAGE_ENTITY: st.Page(entity_page.page, title="Entities", icon=":material/computer:", url_path=ui.PAGE_ENTITY),
    ui.PAGE_COVERAGE: st.Page(coverage_page.page, title="Coverage and health", icon=":material/shield:", url_path=ui.PAGE_COVERAGE),
    ui.PAGE_PIPELINE: st.Page(pipeline_page.page, title="Pipeline", icon=":material/settings:", url_path=ui.PAGE_PIPELINE),
    ui.PAGE_RULE_LAB: st.Page(rule_lab_page.page, title="Rule lab", icon=":material/science:", url_path=ui.PAGE_RULE_LAB),
})
nav = st.navigation({
    "Triage": [ui.PAGES[ui.PAGE_ALERTS], ui.PAGES[ui.PAGE_ALERT]],
    "Investigate": [ui.PAGES[ui.PAGE_HUNT], ui.PAGES[ui.PAGE_ENTITY]],
    "Operations": [ui.PAGES[ui.PAGE_COVERAGE], ui.PAGES[ui.PAGE_RULE_LAB], ui.PAGES[ui.PAGE_PIPELINE]],
})
ui.identity_box()
st.sidebar.caption(f"Lake: `{ui.lake()}`")
nav.run()
