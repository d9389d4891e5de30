"""The analyst pages against a lake produced by the real pipeline.

One module-scoped lake: ``nightjar generate`` (a few labelled attacks) to the session's real broker, then
``nightjar run --available-now`` (Kafka -> bronze/events/dhcp_sessions -> detections -> alerts). The query
functions are checked against the generator's ground truth, then every page is driven in a real Streamlit server
with headless Chromium. Each page's screenshot goes to the test's temp dir, or, with
``NIGHTJAR_SCREENSHOTS=docs/images``, refreshes the ones the README and docs/dashboard.md show.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import Settings
from core.lake import table_dataset
from dashboard import coverage, entities, hunt, triage
from dashboard.alerts_data import (
    AlertFilter,
    alert_queue,
    alert_volume,
    current_alert,
    entity_context,
    evidence_events,
    related_alerts,
    revisions,
)
from dashboard.rules_catalog import load_catalog
from tests.test_dashboard import _chrome, _wait_for_text, _wait_for_text_cells, serve_dashboard

SCREENSHOTS_ENV = "NIGHTJAR_SCREENSHOTS"  # a directory: write the pages' screenshots there (docs/images to refresh)
SCENARIOS = {"ssh_brute_force", "sudo_non_admin", "ioc_match", "new_country_login", "port_scan_vertical"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pipeline_lake(broker, tmp_path_factory) -> Path:
    from nightjar.benchmarks.bench_dashboard import build_lake

    lake = tmp_path_factory.mktemp("pipeline") / "lake"
    build_lake(lake, broker.bootstrap, events=4000, seed=7, scenarios=",".join(sorted(SCENARIOS)))
    return lake


@pytest.fixture(scope="module")
def truth(pipeline_lake: Path) -> dict[str, dict]:
    """Ground-truth incident per scenario (the generator wrote them)."""
    rows = table_dataset(pipeline_lake, "ground_truth").to_table().to_pylist()
    return {r["scenario"]: r for r in rows}


def _alert_for(lake: Path, truth: dict, scenario: str) -> dict:
    inc = truth[scenario]
    queue = alert_queue(lake, AlertFilter(rules=(inc["expected_rule_id"],)))
    hits = queue[(queue["entity_type"] == inc["entity"]["type"]) & (queue["entity_value"] == inc["entity"]["value"])]
    assert len(hits), f"no {inc['expected_rule_id']} alert on {inc['entity']} in the queue:\n{queue}"
    return current_alert(lake, hits["alert_id"].iloc[0])


# --- the queries on the real lake ----------------------------------------------------------------------------------

def test_generated_attacks_are_in_the_queue_with_their_evidence(pipeline_lake: Path, truth: dict) -> None:
    assert SCENARIOS <= set(truth)
    queue = alert_queue(pipeline_lake)
    assert queue["alert_id"].is_unique  # one row per alert: its current revision
    assert (queue["status"] == "new").all()
    assert queue["detected_at"].is_monotonic_decreasing
    brute = _alert_for(pipeline_lake, truth, "ssh_brute_force")
    attacker = truth["ssh_brute_force"]["entity"]["value"]
    ev = evidence_events(pipeline_lake, brute)
    assert sorted(ev["event_id"]) == sorted(brute["evidence"])  # every evidence id resolved to its event
    assert (ev["source_ip"] == attacker).all()
    assert ev["original"].str.contains(f"Failed password for .* from {attacker.replace('.', '[.]')}").all()
    assert len(revisions(pipeline_lake, brute["alert_id"])) >= 1

    only_sudo = alert_queue(pipeline_lake, AlertFilter(rules=("sudo_non_admin",)))
    assert set(only_sudo["rule_id"]) == {"sudo_non_admin"}
    assert alert_queue(pipeline_lake, AlertFilter(entity=attacker))["entity_value"].eq(attacker).any()
    vol = alert_volume(pipeline_lake)
    assert vol["alerts"].sum() == len(queue)


def test_entity_context_names_the_lease_holder_and_the_indicators(pipeline_lake: Path, truth: dict) -> None:
    ioc = _alert_for(pipeline_lake, truth, "ioc_match")
    host = truth["ioc_match"]["host_name"]
    ctx = entity_context(pipeline_lake, ioc["entity"]["type"], ioc["entity"]["value"], ioc["first_seen"])
    holder = ctx["dhcp_sessions"][ctx["dhcp_sessions"]["held_at_alert"]]
    assert holder["hostname"].tolist()[:1] == [host]  # the DHCP lease holder when the alert fired
    ev = evidence_events(pipeline_lake, ioc)
    assert ev["ioc"].notna().any()
    assert not entity_context(pipeline_lake, "host", host)["assets"].empty  # owner and criticality from assets

    sudo = _alert_for(pipeline_lake, truth, "sudo_non_admin")
    user = entity_context(pipeline_lake, "user", sudo["entity"]["value"])["users"]
    assert user["is_admin"].tolist() == [False]
    assert related_alerts(pipeline_lake, sudo).query("alert_id == @sudo['alert_id']").empty


def test_entity_pages_data(pipeline_lake: Path, truth: dict) -> None:
    inc = truth["new_country_login"]
    user = inc["entity"]["value"]
    countries = entities.login_countries(pipeline_lake, "user", user)
    foreign = json.loads(inc["details"])["country"]
    assert foreign in set(countries.query("outcome == 'success'")["country"])  # the scenario's foreign login
    assert "new_country_login" in set(entities.entity_alerts(pipeline_lake, "user", user)["rule_id"])
    ioc_ip = truth["ioc_match"]["entity"]["value"]
    history = entities.dhcp_history(pipeline_lake, "ip", ioc_ip)
    assert truth["ioc_match"]["host_name"] in set(history["hostname"])
    assert entities.top_peers(pipeline_lake, "ip", ioc_ip)["connections"].sum() > 0
    assert entities.event_timeline(pipeline_lake, "ip", ioc_ip)["events"].sum() > 0
    # the entity page's time window: events before `since` are left out (and their files skipped)
    everything = entities.top_ports(pipeline_lake, "ip", ioc_ip)
    assert entities.top_ports(pipeline_lake, "ip", ioc_ip, since=dt.datetime(2000, 1, 1)).equals(everything)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    assert entities.top_ports(pipeline_lake, "ip", ioc_ip, since=later).empty
    assert entities.event_timeline(pipeline_lake, "ip", ioc_ip, since=later).empty
    assert entities.login_countries(pipeline_lake, "user", user, since=later).empty


def test_coverage_and_health(pipeline_lake: Path) -> None:
    table = coverage.coverage_table(pipeline_lake).set_index("rule_id")
    for rule in ("ssh_brute_force", "sudo_non_admin", "port_scan_vertical"):
        assert table.loc[rule, "alerts"] >= 1 and str(table.loc[rule, "last_fired"]) not in ("NaT", "nan")
    assert table.loc["dns_dga", "alerts"] == 0  # enabled, covered, did not fire
    matrix = coverage.attack_matrix(load_catalog())
    assert "T1110.001" in set(matrix["technique"])
    health = coverage.query_health(pipeline_lake)
    if len(health):  # the pipeline records rule health
        assert health["rule_id"].is_unique


def test_hunt_over_the_real_lake(pipeline_lake: Path, truth: dict) -> None:
    res = hunt.run_hunt(pipeline_lake, hunt.SHIPPED_HUNTS[0].sql)
    assert truth["ssh_brute_force"]["entity"]["value"] in set(res.rows["source_ip"])
    for h in hunt.SHIPPED_HUNTS:
        hunt.run_hunt(pipeline_lake, h.sql)  # every shipped hunt runs on the real schema
    # The typed per-dataset views: the brute force's failed SSH logins by the source's own field names.
    attacker = truth["ssh_brute_force"]["entity"]["value"]
    auth = hunt.run_hunt(pipeline_lake, f"""
        SELECT "system.auth.ssh.method" AS method, count(*) AS n FROM system_auth
        WHERE "source.ip" = '{attacker}' AND "event.outcome" = 'failure' GROUP BY ALL""").rows
    assert auth["n"].sum() > 0 and set(auth["method"]) <= {"password", "publickey", "keyboard-interactive", None}
    per_dataset = hunt.run_hunt(pipeline_lake, 'SELECT "event".dataset AS d, count(*) AS n FROM events '
                                               "GROUP BY ALL").rows
    for dataset, n in zip(per_dataset["d"], per_dataset["n"], strict=True):
        view = next(v for v, d in hunt.dataset_views().items() if d == dataset)
        assert hunt.run_hunt(pipeline_lake, f'SELECT count(*) AS n FROM "{view}"').rows["n"].tolist() == [n]


# --- the pages in a browser ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def served(pipeline_lake: Path, rules_dir: Path, tmp_path_factory) -> Iterator[str]:
    with serve_dashboard(Settings(lake=pipeline_lake, rules=(rules_dir,), analyst="alice"),
                         tmp_path_factory.mktemp("dash") / "dashboard.log") as url:
        yield url


@pytest.fixture(scope="module")
def driver(served: str, tmp_path_factory):
    d = _chrome()
    d.set_window_size(1600, 1700)  # tall enough for each page's screenshot
    wanted = os.environ.get(SCREENSHOTS_ENV)
    d.screenshots = (Path(wanted), True) if wanted else (tmp_path_factory.mktemp("screenshots"), False)
    yield d
    d.quit()


def _screenshot(driver, name: str) -> None:
    """A screenshot of the page for the docs (when asked) or for a failure's post-mortem (a temp dir): no
    assertion looks at it."""
    directory, for_docs = driver.screenshots
    if for_docs:
        time.sleep(1.0)  # let charts finish drawing: only pictures for the docs need that
    directory.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(directory / f"dashboard-{name}.png"))


def _cells(driver, predicate, timeout: float = 60.0) -> list[str]:
    return _wait_for_text_cells(driver, predicate, timeout)


def _click_button(driver, label: str) -> None:
    buttons = [b for b in driver.find_elements("css selector", "button") if b.text.strip() == label]
    assert buttons, f"no button {label!r}"
    buttons[0].click()


def _choose(driver, label: str, option: str) -> None:
    boxes = [b for b in driver.find_elements("css selector", "[data-testid=stSelectbox]") if label in b.text]
    assert boxes, f"no select box {label!r}"
    boxes[0].click()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = [o for o in driver.find_elements("css selector", "[role=option]") if o.text.strip() == option]
        if found:
            found[0].click()
            return
        time.sleep(0.2)
    raise AssertionError(f"option {option!r} never appeared")


@pytest.mark.browser
def test_alerts_page_lists_the_attack_and_filters_by_url(served: str, driver, pipeline_lake: Path,
                                                         truth: dict) -> None:
    attacker = truth["ssh_brute_force"]["entity"]["value"]
    brute = _alert_for(pipeline_lake, truth, "ssh_brute_force")
    driver.get(served + "/")
    _wait_for_text(driver, lambda t: "Alert volume by severity" in t and "Alerts shown" in t)
    cells = _cells(driver, lambda cs: attacker in cs and "ssh_brute_force" in cs)
    assert brute["alert_id"] in cells and "sudo_non_admin" in cells
    _screenshot(driver, "alerts")

    driver.get(served + "/?rule=sudo_non_admin&group=rule")  # a deep link: the filter comes from the URL
    cells = _cells(driver, lambda cs: "sudo_non_admin" in cs and attacker not in cs and "ssh_brute_force" not in cs)
    text = _wait_for_text(driver, lambda t: "Grouped by rule" in t)
    assert "Alerts shown\n1" in text


@pytest.mark.browser
def test_alert_detail_shows_evidence_and_a_false_positive_closure_survives_a_reload(
        served: str, driver, pipeline_lake: Path, truth: dict) -> None:
    brute = _alert_for(pipeline_lake, truth, "ssh_brute_force")
    first_line = evidence_events(pipeline_lake, brute)["original"].iloc[0]
    url = f"{served}/alert?alert_id={brute['alert_id']}"
    driver.get(url)
    text = _wait_for_text(driver, lambda t: "Evidence" in t and first_line in t and "Twenty or more failed" in t)
    assert "T1110.001" in text and "Status\nnew" in text
    _screenshot(driver, "alert-detail")

    _wait_for_text(driver, lambda t: "Analyst: alice" in t)  # the configured local identity (loopback, no proxy)
    _choose(driver, "Action", "close: false positive")
    reason = driver.find_element("css selector", "input[aria-label='Reason (required to close, reopen, comment)']")
    reason.send_keys("authorized red-team exercise")
    _click_button(driver, "Record")
    _wait_for_text(driver, lambda t: "Recorded: close: false positive by alice" in t)

    driver.get(url)  # a new session: what is shown comes from the lake
    text = _wait_for_text(driver, lambda t: "Status\nclosed: false positive" in t)
    cells = _cells(driver, lambda cs: "close_false_positive" in cs)
    assert "authorized red-team exercise" in cells and "alice" in cells
    assert triage.history(pipeline_lake, brute["alert_id"])["action"].tolist() == ["close_false_positive"]
    driver.get(served + "/?status=closed%3A+false+positive")
    _cells(driver, lambda cs: brute["alert_id"] in cs and "closed: false positive" in cs)


@pytest.mark.browser
def test_hunt_page_runs_a_query_and_refuses_a_forbidden_one(served: str, driver, truth: dict) -> None:
    from urllib.parse import quote

    attacker = truth["ssh_brute_force"]["entity"]["value"]
    sql = ('SELECT "source".ip AS source_ip, count(*) AS failures FROM events '
           "WHERE \"event\".outcome = 'failure' GROUP BY ALL ORDER BY failures DESC")
    driver.get(f"{served}/hunt?q={quote(sql)}")
    _wait_for_text(driver, lambda t: "Saved hunts" in t and "Run" in t)
    _click_button(driver, "Run")
    _wait_for_text(driver, lambda t: "row(s) in" in t)
    _cells(driver, lambda cs: attacker in cs)
    _screenshot(driver, "hunt")

    for bad, why in (("SELECT * FROM read_csv('/etc/passwd')", "read_csv() reads files"),
                     ("COPY events TO '/tmp/nightjar-stolen.csv'", "COPY is not allowed"),
                     ("ATTACH '/tmp/x.db' AS x", "ATTACH is not allowed")):
        driver.get(f"{served}/hunt?q={quote(bad)}")
        _wait_for_text(driver, lambda t: "Saved hunts" in t)
        _click_button(driver, "Run")
        _wait_for_text(driver, lambda t, why=why: f"Refused: {why}" in t)
    assert not Path("/tmp/nightjar-stolen.csv").exists()


@pytest.mark.browser
def test_entity_page_shows_logins_and_alerts(served: str, driver, truth: dict) -> None:
    user = truth["new_country_login"]["entity"]["value"]
    foreign = json.loads(truth["new_country_login"]["details"])["country"]
    driver.get(f"{served}/entity?type=user&value={user}")
    _wait_for_text(driver, lambda t: "Logins" in t and "Timeline" in t)
    _cells(driver, lambda cs: foreign in cs and "new_country_login" in cs)
    ip = truth["ioc_match"]["entity"]["value"]
    driver.get(f"{served}/entity?type=ip&value={ip}")
    _wait_for_text(driver, lambda t: "DHCP history" in t and "Top peers and ports" in t)
    _cells(driver, lambda cs: truth["ioc_match"]["host_name"] in cs)
    _screenshot(driver, "entity")


@pytest.mark.browser
def test_coverage_and_pipeline_pages(served: str, driver) -> None:
    driver.get(f"{served}/coverage")
    text = _wait_for_text(driver, lambda t: "ATT&CK matrix" in t and "T1110.001" in t and "Rule query health" in t)
    assert "Credential Access" in text
    _cells(driver, lambda cs: "ssh_brute_force" in cs and "dns_dga" in cs)
    _screenshot(driver, "coverage")
    driver.get(f"{served}/pipeline")
    _wait_for_text(driver, lambda t: "Tables" in t and "DHCP leases" in t)
    _cells(driver, lambda cs: "events" in cs and "alerts" in cs)
    _screenshot(driver, "pipeline")



def test_rule_lab_compiles_the_pack_against_the_real_events_schema(pipeline_lake: Path, truth: dict) -> None:
    from alerts.rule_loader import BUILTIN_RULES
    from dashboard.rule_lab import check_rule_text, events_schema, try_on_lake

    schema = events_schema(pipeline_lake)
    reports = {}
    for path in sorted(BUILTIN_RULES.glob("*.yml")):
        for r in check_rule_text(path.read_text(encoding="utf-8"), schema):
            assert not r.problems, (path.name, r.name, r.problems)
            reports[r.name] = r
    tried = try_on_lake(pipeline_lake, reports["ssh_failed_password"].predicate)
    assert tried.matches >= truth["ssh_brute_force"]["event_count"] * 0.2  # the attack's failed passwords
    assert tried.sample["original"].str.contains("Failed password").all()
    assert try_on_lake(pipeline_lake, reports["ioc_match"].predicate).matches >= 1  # enriched fields too
    assert try_on_lake(pipeline_lake, reports["dns_long_label_query"].predicate).matches is not None  # RLIKE


@pytest.mark.browser
def test_rule_lab_page_checks_a_rule_and_tries_it_on_the_lake(served: str, driver) -> None:
    driver.get(f"{served}/rules?rule_id=ssh_brute_force")
    _wait_for_text(driver, lambda t: "Check and try on the lake" in t and "ssh_failed_password" in t)
    _click_button(driver, "Check and try on the lake")
    # the sections below the check (backtest, save) are still on the page: wait for the whole report
    _wait_for_text(driver, lambda t: "2 rule(s) in the file, 0 with problems" in t and "Matches" in t
                   and "ssh_brute_force (correlation, alerts)" in t)
    _cells(driver, lambda cs: any("Failed password" in c for c in cs))
    _screenshot(driver, "rule-lab")

def _type_rule(driver, text: str) -> None:
    """Replace the rule editor's text and apply it (Ctrl+Enter, as an analyst would)."""
    from selenium.webdriver.common.keys import Keys

    area = driver.find_element("css selector", "textarea[aria-label='Rule file (Sigma YAML)']")
    area.click()
    area.send_keys(Keys.CONTROL, "a")
    area.send_keys(Keys.DELETE)
    area.send_keys(text)
    area.send_keys(Keys.CONTROL, Keys.ENTER)
    time.sleep(1.0)


def _set_input(driver, label: str, value: str) -> None:
    from selenium.webdriver.common.keys import Keys

    box = driver.find_element("css selector", f"input[aria-label='{label}']")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    box.send_keys(value, Keys.ENTER)
    time.sleep(1.0)


BACKTEST_TIMEOUT = 600.0  # a Spark driver starts in the backtest's child process; the machine is shared


@pytest.mark.browser
def test_rule_lab_backtests_a_correlation_with_the_analysts_verdicts(served: str, driver, pipeline_lake: Path,
                                                                     truth: dict) -> None:
    """The pack's ssh_brute_force correlation, backtested over the lake's whole period: the attack's alert is listed
    with the same alert_id the stream raised, and an analyst's false-positive closure of it is counted and shown."""
    from dashboard.rule_deploy import events_period, past_verdicts

    brute = _alert_for(pipeline_lake, truth, "ssh_brute_force")
    if triage.status_of(pipeline_lake, brute["alert_id"]) != "closed: false positive":
        triage.record(pipeline_lake, triage.Action(brute["alert_id"], "close_false_positive", "carol",
                                                   reason="lab: known scanner"))
    driver.get(f"{served}/rules?rule_id=ssh_brute_force")
    _wait_for_text(driver, lambda t: "Backtest over the period" in t and "ssh_failed_password" in t)
    _click_button(driver, "Backtest over the period")
    text = _wait_for_text(driver, lambda t: "the rule would have raised" in t or "Backtest refused" in t,
                          timeout=BACKTEST_TIMEOUT)
    assert "Backtest refused" not in text, text[-1500:]
    cells = _cells(driver, lambda cs: brute["alert_id"] in cs)
    assert truth["ssh_brute_force"]["entity"]["value"] in cells and "closed: false positive" in cells
    first, last = events_period(pipeline_lake)
    past = past_verdicts(pipeline_lake, ["ssh_brute_force"], first.replace(hour=0, minute=0, second=0),
                         last.replace(hour=0, minute=0, second=0) + dt.timedelta(days=1))
    fp = int(past["false_positive"].iloc[0])
    assert fp >= 1 and f"Its past alerts in the period: {int(past['past_alerts'].iloc[0])}," in text
    assert f"{fp} closed as false positive" in text
    _screenshot(driver, "rule-lab-backtest")


@pytest.mark.browser
def test_rule_lab_backtests_and_saves_a_new_rule_and_refuses_an_invalid_one(
        served: str, driver, pipeline_lake: Path, rules_dir: Path, truth: dict, spark) -> None:
    """A new single-event rule typed in the browser: its backtest lists the attack's address, save writes it into
    the rules directory and the pipeline's RuleSet loads it; a broken rule is refused with the loader's message and
    no file appears; an existing pack file is not replaced without the overwrite confirmation."""
    from alerts.detection_stream import RuleSet

    attacker = truth["ssh_brute_force"]["entity"]["value"]
    rule = (f"title: Failed password from {attacker}\nname: lab_attacker_failures\n"
            "logsource: {product: linux, service: sshd}\ndetection:\n"
            f"  selection: {{event.dataset: system.auth, event.outcome: failure, source.ip: {attacker}}}\n"
            "  condition: selection\nlevel: medium\nnightjar: {entity: {type: ip, field: source.ip}}\n")
    driver.get(f"{served}/rules?rule_id=sudo_non_admin")
    _wait_for_text(driver, lambda t: "Validate and save" in t)
    _type_rule(driver, rule)
    _click_button(driver, "Backtest over the period")
    text = _wait_for_text(driver, lambda t: "the rule would have raised" in t or "Backtest refused" in t,
                          timeout=BACKTEST_TIMEOUT)
    assert "Backtest refused" not in text, text[-1500:]
    _cells(driver, lambda cs: "lab_attacker_failures" in cs and attacker in cs)

    ruleset = RuleSet(spark, [rules_dir])
    ruleset.reload()
    assert "lab_attacker_failures" not in {r.rule_id for r in ruleset.current()[0]}
    _set_input(driver, "File name", "sudo_non_admin.yml")  # a pack file: not replaced without confirmation
    _click_button(driver, "Validate and save")
    _wait_for_text(driver, lambda t: "Not saved:" in t and "confirm the overwrite" in t)
    assert "lab_attacker" not in (rules_dir / "sudo_non_admin.yml").read_text()

    _set_input(driver, "File name", "lab_attacker.yml")
    _click_button(driver, "Validate and save")
    _wait_for_text(driver, lambda t: "Saved " in t and "lab_attacker.yml" in t, timeout=BACKTEST_TIMEOUT)
    assert (rules_dir / "lab_attacker.yml").read_text().strip() == rule.strip()
    assert ruleset.reload()  # what the running pipeline does when a rule file changes
    assert "lab_attacker_failures" in {r.rule_id for r in ruleset.current()[0]} and not ruleset.errors

    _type_rule(driver, rule.replace("lab_attacker_failures", "lab_broken").replace("condition: selection",
                                                                                 "condition: selection and missing"))
    _set_input(driver, "File name", "lab_broken.yml")
    _click_button(driver, "Validate and save")
    text = _wait_for_text(driver, lambda t: "Refused:" in t, timeout=BACKTEST_TIMEOUT)
    line = next(ln for ln in text.splitlines() if ln.startswith("Refused:"))
    assert line.startswith("Refused: lab_broken.yml: rule 'lab_broken':"), line
    assert not (rules_dir / "lab_broken.yml").exists()
    assert sorted(p.name for p in rules_dir.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def _volume_line(text: str) -> tuple[int, int] | None:
    """(alerts, rules) from the Alerts page's volume caption, None while it is not shown."""
    import re

    m = re.search(r"Alert volume: ([0-9,]+) alert\(s\) from ([0-9]+) rule\(s\)", text)
    return (int(m[1].replace(",", "")), int(m[2])) if m else None


@pytest.mark.browser
def test_bulk_action_follows_the_selected_alert_ids_when_new_alerts_shift_the_rows(
        served: str, driver, pipeline_lake: Path) -> None:
    """Tick two rows, let a new alert arrive at the top of the queue (every row moves down one), then apply a bulk
    acknowledge: exactly the two alerts ticked are acknowledged, not the rows now at those positions. The volume
    charts above the queue follow the new alert too, without a reload."""
    import datetime as dt

    import pyarrow as pa
    from deltalake import write_deltalake
    from selenium.webdriver.common.action_chains import ActionChains

    driver.get(served + "/")
    cells = _cells(driver, lambda cs: "ssh_brute_force" in cs)

    def shown_ids() -> list[str]:
        return [c.get_attribute("textContent").split("=")[-1]
                for c in driver.find_elements("css selector", "[role=gridcell][aria-colindex='1']")]

    ids = shown_ids()
    assert len(ids) >= 4 and ids[0] in " ".join(cells)
    volume = _volume_line(_wait_for_text(driver, lambda t: _volume_line(t) is not None))
    assert volume == (len(alert_queue(pipeline_lake)), alert_queue(pipeline_lake)["rule_id"].nunique())
    canvas = max(driver.find_elements("css selector", "canvas"), key=lambda c: c.size["height"])
    w, h = canvas.size["width"], canvas.size["height"]
    for i in (1, 3):  # the checkbox column; 35-px header and rows
        ActionChains(driver).move_to_element_with_offset(canvas, 16 - w // 2, 35 + 35 * i + 17 - h // 2).click().perform()
        time.sleep(1.0)
    chosen = {ids[1], ids[3]}
    text = _wait_for_text(driver, lambda t: "Bulk action on 2 selected alert(s)" in t)
    assert all(a in text for a in chosen)

    newest = table_dataset(pipeline_lake, "alerts").to_table().slice(0, 1)
    newest = newest.set_column(newest.schema.get_field_index("alert_id"), "alert_id", pa.array(["f" * 32]))
    at = newest.schema.get_field_index("detected_at")
    newest = newest.set_column(at, "detected_at", pa.array([dt.datetime.now(dt.UTC)], newest.schema.field(at).type))
    write_deltalake(str(pipeline_lake / "alerts"), newest, mode="append")
    _cells(driver, lambda cs: "f" * 32 in cs)  # the queue refreshed itself: the new alert is on top
    assert shown_ids()[0] == "f" * 32
    # ... and so did the volume charts (they used to be drawn once per page load)
    _wait_for_text(driver, lambda t: _volume_line(t) == (volume[0] + 1, volume[1]))
    _wait_for_text(driver, lambda t: "Bulk action on 2 selected alert(s)" in t)

    _click_button(driver, "Apply")
    _wait_for_text(driver, lambda t: "Bulk action on 0 selected alert(s)" in t)
    acked = triage.statuses(pipeline_lake).query("status == 'acknowledged'")
    assert set(acked["alert_id"]) == chosen


def test_bench_history_is_time_shifted_copies_in_time_ordered_files(pipeline_lake: Path, tmp_path: Path) -> None:
    """`bench dashboard --events N` beyond the pipeline's events: copies of them moved back in time, new ids, in
    files of narrow time ranges — so a window from the pipeline's first event reads what it read before."""
    import shutil

    import pyarrow as pa
    from deltalake import DeltaTable

    from core.lake import row_count
    from nightjar.benchmarks.bench_dashboard import add_bulk_events

    lake = tmp_path / "lake"
    shutil.copytree(pipeline_lake, lake)
    have = row_count(lake, "events")
    user = alert_queue(lake).query("rule_id == 'new_country_login'")["entity_value"].iloc[0]
    from dashboard.rule_deploy import events_period

    since = events_period(lake)[0].replace(tzinfo=dt.UTC)  # the pipeline's first event
    before = entities.login_countries(lake, "user", user, since=since)
    assert len(before)
    figures = add_bulk_events(lake, have * 4, parsed=0, rows_per_file=have, log=lambda m: None)
    assert figures["copies"] == 3 and figures["added"] == have * 3 and row_count(lake, "events") == have * 4
    events = table_dataset(lake, "events").to_table(columns=["@timestamp", "event"])
    ids = pa.compute.struct_field(events.column("event"), "id")
    assert pa.compute.count_distinct(ids).as_py() == have * 4  # every copy has its own event ids
    actions = pa.table(DeltaTable(str(lake / "events")).get_add_actions(flatten=True)).to_pylist()
    first = min(a["min.@timestamp"] for a in actions)
    copies = [a for a in actions if a["max.@timestamp"] < first + dt.timedelta(hours=figures["span_h"] * 3)]
    assert len(copies) == 3  # one file per copy here, each within its own span, all before the pipeline's events
    assert entities.login_countries(lake, "user", user, since=since).equals(before)
