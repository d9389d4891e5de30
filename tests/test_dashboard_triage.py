"""Triage audit trail and the hunt sandbox: pure functions on real Delta tables, no browser."""

from __future__ import annotations

import datetime as dt
import re
import threading
from pathlib import Path

import pytest
from deltalake import DeltaTable

from core.errors import UserError
from dashboard import hunt, triage
from dashboard.lakedb import TABLE_ALERT_TRIAGE, TABLE_SAVED_HUNTS

T0 = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


def _at(minutes: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


# --- triage -------------------------------------------------------------------------------------------------------

def test_status_is_the_newest_action_and_comments_do_not_change_it(lake: Path) -> None:
    triage.record(lake, triage.Action("a1", "ack", "alice", at=_at(0)))
    assert triage.status_of(lake, "a1") == "acknowledged"
    triage.record(lake, triage.Action("a1", "assign", "alice", assignee="bob", at=_at(1)))
    triage.record(lake, triage.Action("a1", "comment", "bob", reason="looking at the bastion logs", at=_at(2)))
    assert triage.status_of(lake, "a1") == "assigned"
    triage.record(lake, triage.Action("a1", "close_false_positive", "bob", reason="authorized pentest", at=_at(3)))
    assert triage.status_of(lake, "a1") == "closed: false positive"
    triage.record(lake, triage.Action("a1", "reopen", "carol", reason="pentest ended yesterday", at=_at(4)))
    assert triage.status_of(lake, "a1") == "reopened"
    assert triage.status_of(lake, "never-touched") == "new"

    hist = triage.history(lake, "a1")
    assert hist["action"].tolist() == ["ack", "assign", "comment", "close_false_positive", "reopen"]
    assert hist["analyst"].tolist() == ["alice", "alice", "bob", "bob", "carol"]
    assert hist["reason"].tolist()[3] == "authorized pentest"
    st = triage.statuses(lake).set_index("alert_id")
    assert st.loc["a1", "assignee"] == "bob" and st.loc["a1", "triage_actions"] == 5


def test_table_is_append_only_with_the_contract_columns(lake: Path) -> None:
    triage.record(lake, [triage.Action(f"a{i}", "ack", "alice") for i in range(3)])  # a bulk action: one commit
    triage.record(lake, triage.Action("a0", "close_benign", "alice", reason="backup job"))
    table = DeltaTable(str(lake / TABLE_ALERT_TRIAGE))
    assert table.schema().to_arrow().names == ["alert_id", "action", "analyst", "reason", "assignee", "at"]
    assert table.version() == 1
    ops = [h["operation"] for h in table.history()]
    assert set(ops) <= {"CREATE TABLE", "WRITE"} and all(
        h.get("operationParameters", {}).get("mode", "Append") in ("Append", "ErrorIfExists") for h in table.history())


@pytest.mark.parametrize(("action", "kwargs", "message"), [
    ("close_false_positive", {}, "needs a reason"),
    ("close_true_positive", {"reason": "   "}, "needs a reason"),
    ("reopen", {}, "needs a reason"),
    ("comment", {}, "comment needs its text"),
    ("assign", {}, "assignee"),
    ("delete", {}, "unknown action"),
])
def test_invalid_actions_are_refused_and_nothing_is_written(lake: Path, action: str, kwargs: dict,
                                                             message: str) -> None:
    with pytest.raises(UserError, match=message):
        triage.record(lake, triage.Action("a1", action, "alice", **kwargs))
    with pytest.raises(UserError, match="analyst"):
        triage.record(lake, triage.Action("a1", "ack", "  "))
    assert not (lake / TABLE_ALERT_TRIAGE).exists()


def test_concurrent_analysts_lose_no_action(lake: Path) -> None:
    """Eight analysts act at the same moment, each five times (the first ones racing to create the table): every
    action is in the table exactly once."""
    analysts, per = 8, 5
    barrier = threading.Barrier(analysts)
    errors: list[BaseException] = []

    def analyst(n: int) -> None:
        try:
            barrier.wait()
            for k in range(per):
                triage.record(lake, triage.Action(f"alert-{k}", "comment", f"analyst-{n}", reason=f"note {n}/{k}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=analyst, args=(n,)) for n in range(analysts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    rows = DeltaTable(str(lake / TABLE_ALERT_TRIAGE)).to_pyarrow_dataset().to_table().to_pylist()
    assert sorted(r["reason"] for r in rows) == sorted(f"note {n}/{k}" for n in range(analysts) for k in range(per))
    assert DeltaTable(str(lake / TABLE_ALERT_TRIAGE)).version() == analysts * per - 1


# --- hunt ---------------------------------------------------------------------------------------------------------

@pytest.fixture
def hunt_lake(lake: Path) -> Path:
    triage.record(lake, [triage.Action(f"a{i}", "ack", "alice", at=_at(i)) for i in range(250)])
    return lake


@pytest.mark.parametrize(("sql", "reason"), [
    ("SELECT * FROM read_csv('/etc/passwd')", "read_csv() reads files"),
    ("select * from read_text ( '/etc/passwd' )", "read_text() reads files"),
    ("SELECT * FROM '/etc/passwd'", "file path"),
    ("SELECT * FROM alert_triage JOIN '/etc/passwd' ON true", "file path"),
    ("COPY alert_triage TO '/tmp/out.csv'", "COPY is not allowed"),
    ("ATTACH '/tmp/other.db' AS other", "ATTACH is not allowed"),
    ("INSTALL httpfs", "INSTALL is not allowed"),
    ("LOAD httpfs", "LOAD is not allowed"),
    ("SET enable_external_access = true", "SET is not allowed"),
    ("SELECT 1; SELECT 2", "one statement at a time"),
    ("-- hide it\nCOPY (SELECT 1) TO '/tmp/x.csv'", "COPY is not allowed"),
    ("", "empty"),
])
def test_forbidden_queries_are_refused_with_one_line(hunt_lake: Path, sql: str, reason: str) -> None:
    with pytest.raises(hunt.HuntRefused, match=re.escape(reason)) as info:
        hunt.run_hunt(hunt_lake, sql)
    assert "\n" not in str(info.value)


def test_the_sandbox_itself_blocks_files_even_past_the_checks(hunt_lake: Path) -> None:
    """The word check is for readable reasons; DuckDB's locked configuration is what enforces the sandbox."""
    with hunt.sandbox(hunt_lake) as con:
        for sql in ("SELECT * FROM read_csv('/etc/passwd')", "SELECT * FROM glob('/etc/*')",
                    "COPY (SELECT 1) TO '/tmp/nightjar-hunt-escape.csv'"):
            with pytest.raises(Exception, match="(?i)permission|disabled"):
                con.execute(sql).fetchall()
        with pytest.raises(Exception, match="(?i)locked"):
            con.execute("SET enable_external_access = true")
    assert not Path("/tmp/nightjar-hunt-escape.csv").exists()


def test_strings_that_merely_mention_keywords_are_fine(hunt_lake: Path) -> None:
    res = hunt.run_hunt(hunt_lake, "SELECT count(*) AS n FROM alert_triage WHERE reason IS NULL OR reason = 'copy'")
    assert res.rows["n"].tolist() == [250]


def test_hunt_rows_are_capped_and_paged(hunt_lake: Path) -> None:
    res = hunt.run_hunt(hunt_lake, 'SELECT alert_id FROM alert_triage ORDER BY "at"', max_rows=120)
    assert res.truncated and len(res.rows) == 120
    assert hunt.page_count(len(res.rows), 50) == 3
    assert hunt.page(res.rows, 3, 50)["alert_id"].tolist() == [f"a{i}" for i in range(100, 120)]
    full = hunt.run_hunt(hunt_lake, "FROM alert_triage")
    assert not full.truncated and len(full.rows) == 250


def test_a_result_over_the_byte_cap_is_cut_and_reading_stops_there(hunt_lake: Path) -> None:
    """Eight 3-MB values under a 10-MB cap: the three rows that fit are kept and the notice names the limit. The
    query would fail at its 150,000th row: the fetch stopped long before reading it."""
    sql = """SELECT i, CASE WHEN i = 150000 THEN error('read past the byte cap')
                            WHEN i < 8 THEN repeat('x', 3000000) ELSE 'y' END AS s
             FROM range(200000) t(i)"""
    res = hunt.run_hunt(hunt_lake, sql, max_bytes=10_000_000)
    assert res.cut == "bytes" and res.truncated
    assert res.rows["i"].tolist() == [0, 1, 2] and (res.rows["s"].str.len() == 3_000_000).all()
    assert res.notice.startswith("Cut at 9.54 MiB (the hunt result limit, NIGHTJAR_HUNT_MAX_BYTES): the first 3 row(s)")
    assert "fewer or shorter columns" in res.notice
    with pytest.raises(hunt.HuntRefused, match="read past the byte cap"):  # the same query, read to its end
        hunt.run_hunt(hunt_lake, sql, max_rows=1_000_000, max_bytes=2**40)


def test_a_single_value_over_the_byte_cap_gives_no_rows_and_the_notice(hunt_lake: Path) -> None:
    res = hunt.run_hunt(hunt_lake, "SELECT repeat('x', 2000000) AS s", max_bytes=1_000_000)
    assert res.cut == "bytes" and res.rows.empty and list(res.rows.columns) == ["s"]
    assert "the first 0 row(s) fit" in res.notice


def test_the_byte_cap_keeps_exactly_the_rows_that_fit(hunt_lake: Path) -> None:
    """Wide rows, several batches: the rows kept are a prefix whose Arrow size is within the cap, one more is not."""
    import pyarrow as pa

    sql = "SELECT alert_id, repeat(alert_id, 500) AS pad, \"at\" FROM alert_triage ORDER BY \"at\""
    whole = hunt.run_hunt(hunt_lake, sql)
    assert not whole.truncated and len(whole.rows) == 250
    table = pa.Table.from_pandas(whole.rows, preserve_index=False)
    cap = 200_000
    res = hunt.run_hunt(hunt_lake, sql, max_bytes=cap)
    n = len(res.rows)
    assert res.cut == "bytes" and 0 < n < 250
    assert res.rows["alert_id"].tolist() == whole.rows["alert_id"].tolist()[:n]
    assert table.slice(0, n + 1).nbytes > table.slice(0, n).nbytes  # sanity: rows have a size
    rows_cut = hunt.run_hunt(hunt_lake, sql, max_rows=10, max_bytes=cap)
    assert rows_cut.cut == "rows" and len(rows_cut.rows) == 10 and "Cut at 10 rows" in rows_cut.notice


@pytest.mark.parametrize("bad", ["lots", "0", "-5", "64MB"])
def test_a_bad_hunt_byte_cap_names_the_variable(bad: str) -> None:
    from core.config import ENV_HUNT_MAX_BYTES, settings_from_env

    with pytest.raises(UserError, match=f"{ENV_HUNT_MAX_BYTES} '{bad}' must be a whole number of bytes"):
        settings_from_env({ENV_HUNT_MAX_BYTES: bad})
    assert settings_from_env({ENV_HUNT_MAX_BYTES: "1_000_000"}).hunt_max_bytes == 1_000_000
    assert settings_from_env({}).hunt_max_bytes == 64 * 2**20


def test_a_long_query_is_interrupted(hunt_lake: Path) -> None:
    with pytest.raises(hunt.HuntTimeout, match="longer than 0.5 s"):
        hunt.run_hunt(hunt_lake, "SELECT count(*) FROM range(1000000000000) a", timeout_s=0.5)


def test_saved_hunts_ship_defaults_and_keep_new_ones(lake: Path) -> None:
    assert [h.name for h in hunt.saved_hunts(lake)] == [h.name for h in hunt.SHIPPED_HUNTS]
    hunt.save_hunt(lake, hunt.SavedHunt("mine", "SELECT 42 AS answer", "test", "alice"))
    names = [h.name for h in hunt.saved_hunts(lake)]
    assert "mine" in names and set(h.name for h in hunt.SHIPPED_HUNTS) <= set(names)
    assert (lake / TABLE_SAVED_HUNTS / "_delta_log").is_dir()
    hunt.save_hunt(lake, hunt.SavedHunt("mine", "SELECT 43 AS answer"))  # a new version replaces it
    assert next(h.sql for h in hunt.saved_hunts(lake) if h.name == "mine") == "SELECT 43 AS answer"
    hunt.save_hunt(lake, hunt.SavedHunt("mine", ""), deleted=True)
    assert "mine" not in [h.name for h in hunt.saved_hunts(lake)]
    with pytest.raises(hunt.HuntRefused, match="COPY"):
        hunt.save_hunt(lake, hunt.SavedHunt("bad", "COPY x TO '/tmp/y'"))


# --- the analyst's identity (dashboard/identity.py) ----------------------------------------------------------------

def _nobody() -> str:
    raise AssertionError("the OS user must not be asked")


def test_identity_from_the_configured_proxy_header_only() -> None:
    from dashboard.identity import resolve

    headers = {"X-Forwarded-User": "  mallory.analyst ", "X-Remote-User": "eve"}
    who = resolve(headers, header_name="X-Forwarded-User", loopback=True, local_name="local", os_user=_nobody)
    assert (who.name, who.source) == ("mallory.analyst", "proxy header X-Forwarded-User")
    # not configured: a header is never trusted, whatever the client sends
    assert resolve(headers, loopback=False, os_user=_nobody).name == ""
    assert resolve(headers, loopback=True, local_name="local").name == "local"
    # configured but missing: no identity (no fallback to the local user), and the reason
    none = resolve({"X-Remote-User": "eve"}, header_name="X-Forwarded-User", loopback=True, os_user=_nobody)
    assert none.name == "" and "no X-Forwarded-User header" in none.problem


def test_identity_from_the_oidc_login() -> None:
    from dashboard.identity import resolve

    user = {"is_logged_in": True, "email": "ana@example.org", "name": "Ana", "sub": "123"}
    assert resolve({}, oidc=True, oidc_user=user, loopback=True, os_user=_nobody).name == "ana@example.org"
    assert resolve({}, oidc=True, oidc_user={"is_logged_in": True, "sub": "123"}).name == "123"
    out = resolve({}, oidc=True, oidc_user={"is_logged_in": False}, loopback=True, os_user=_nobody)
    assert out.name == "" and out.needs_login
    # the proxy header first; OIDC when the header is missing
    assert resolve({"X-Forwarded-User": "bob"}, header_name="X-Forwarded-User", oidc=True, oidc_user=user).name == "bob"
    assert resolve({}, header_name="X-Forwarded-User", oidc=True, oidc_user=user).name == "ana@example.org"


def test_local_identity_on_loopback_only() -> None:
    from dashboard.identity import NO_LOGIN_BEYOND_LOOPBACK, is_loopback, resolve

    assert resolve({}, loopback=True, os_user=lambda: "osuser").label() == "osuser (local user, loopback only)"
    assert resolve({}, loopback=True, local_name=" carol ", os_user=_nobody).name == "carol"
    beyond = resolve({}, loopback=False, local_name="carol", os_user=_nobody)
    assert beyond.name == "" and beyond.problem == NO_LOGIN_BEYOND_LOOPBACK
    assert [is_loopback(a) for a in ("127.0.0.1", "127.0.1.1", "::1", "localhost", "0.0.0.0", "", "10.0.0.5",
                                     "dashboard.example.org")] == [True, True, True, True, False, False, False, False]


@pytest.mark.parametrize("bad", ["X Forwarded User", "X-User:", "-x"])
def test_a_bad_user_header_setting_names_the_variable(bad: str) -> None:
    from core.config import ENV_DASHBOARD_USER_HEADER, settings_from_env

    with pytest.raises(UserError, match=f"{ENV_DASHBOARD_USER_HEADER} .* is not an HTTP header name"):
        settings_from_env({ENV_DASHBOARD_USER_HEADER: bad})
    assert settings_from_env({ENV_DASHBOARD_USER_HEADER: " X-Forwarded-User "}).dashboard_user_header == \
        "X-Forwarded-User"


# --- hunt over events (contract v2): typed per-dataset views and field names through the resolver -----------------

EVENT_LINES = (
    b'{"_path":"conn","ts":1521911720.865716,"uid":"CAbc1","id.orig_h":"10.47.1.100","id.orig_p":41772,'
    b'"id.resp_h":"10.0.0.100","id.resp_p":443,"proto":"tcp","service":"ssl,http","duration":1.5,"orig_bytes":100,'
    b'"resp_bytes":2000,"conn_state":"SF","local_orig":true,"missed_bytes":0,"history":"ShADadFf","orig_pkts":5,'
    b'"resp_pkts":7,"tunnel_parents":[]}',
    b"<38>Mar  9 10:00:00 bastion sshd[1234]: Accepted password for alice from 10.0.0.7 port 61000 ssh2",
    b"<38>Mar  9 10:00:05 bastion sshd[1234]: Accepted publickey for bob from 10.0.0.8 port 61001 ssh2: "
    b"ED25519 SHA256:abc",
)


@pytest.fixture
def events_lake(lake: Path) -> Path:
    """An ``events`` table of real parsed events (the registry's parser, contract v2 columns), written with deltalake."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from ingest.events_contract import to_arrow
    from ingest.sources.record_parser import parse_record

    events = [parse_record(raw, topic="t", partition=0, offset=i, ingested_us=1_700_000_000_000_000).event
              for i, raw in enumerate(EVENT_LINES)]
    assert all(events)
    write_deltalake(str(lake / "events"), pa.Table.from_struct_array(to_arrow(events)))
    return lake


def test_hunt_offers_a_typed_view_per_dataset_with_the_sources_own_names(events_lake: Path) -> None:
    conn = hunt.run_hunt(events_lake, 'SELECT uid, conn_state, history, duration, orig_pkts, "id.orig_h", '
                                      '"id.resp_p" FROM zeek_conn').rows
    assert conn.to_dict("records") == [{"uid": "CAbc1", "conn_state": "SF", "history": "ShADadFf", "duration": 1.5,
                                        "orig_pkts": 5, "id.orig_h": "10.47.1.100", "id.resp_p": 443}]
    auth = hunt.run_hunt(events_lake, 'SELECT "user.name" AS u, "system.auth.ssh.method" AS m, '
                                      '"system.auth.ssh.key_type" AS k FROM system_auth ORDER BY u').rows
    assert auth.to_dict("records") == [{"u": "alice", "m": "password", "k": None},
                                       {"u": "bob", "m": "publickey", "k": "ED25519"}]
    # every dataset of the registry has its view, empty where the lake has none of its events
    assert set(hunt.dataset_views()) >= {"zeek_conn", "zeek_dns", "system_auth", "dhcpd", "windows_security"}
    assert hunt.run_hunt(events_lake, "SELECT count(*) AS n FROM zeek_dns").rows["n"].tolist() == [0]


def test_field_names_resolve_to_duckdb_expressions_as_the_rules_read_them(events_lake: Path) -> None:
    state = hunt.field_sql("conn_state", ["zeek.conn"])
    assert "detail" in state
    rows = hunt.run_hunt(events_lake, f"SELECT {state} AS s FROM events WHERE {state} IS NOT NULL").rows
    assert rows["s"].tolist() == ["SF"]
    user = hunt.field_sql("User", ["system.auth"])  # Sigma's taxonomy name -> the core column
    assert user == '"user"."name"'
    assert sorted(hunt.run_hunt(events_lake, f"SELECT {user} AS u FROM events WHERE u IS NOT NULL").rows["u"]) == [
        "alice", "bob"]
    with pytest.raises(hunt.HuntRefused, match="unknown field 'no_such_field'"):
        hunt.field_sql("no_such_field", ["system.auth"])  # a closed field list (Zeek keeps unknown keys)
