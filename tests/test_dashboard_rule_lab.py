"""Rule lab: rule files checked without Spark, and their predicates in DuckDB's spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

from alerts.rule_loader import BUILTIN_RULES
from dashboard.rule_lab import check_rule_text, to_duckdb


@pytest.mark.parametrize("path", sorted(BUILTIN_RULES.glob("*.yml")), ids=lambda p: p.name)
def test_the_rule_pack_checks_clean(path: Path) -> None:
    reports = check_rule_text(path.read_text(encoding="utf-8"), compile_predicates=False)
    assert reports and all(not r.problems for r in reports), [(r.name, r.problems) for r in reports]
    assert any(r.alerts for r in reports)


def test_single_event_rules_compile_to_the_pipelines_predicate() -> None:
    """Against the events contract's columns (no lake), scoped to the logsource's datasets as the loader does."""
    reports = {r.name: r for r in check_rule_text((BUILTIN_RULES / "ssh_brute_force.yml").read_text())}
    assert reports["ssh_failed_password"].predicate.startswith(
        "coalesce((`event`.`dataset` IN ('system.auth') AND (lower(`event`.`dataset`)")
    assert reports["ssh_brute_force"].predicate is None and reports["ssh_brute_force"].alerts
    enriched = check_rule_text((BUILTIN_RULES / "ioc_match.yml").read_text())[0]  # enrichment is in the contract
    assert not enriched.problems and enriched.predicate == "coalesce(`threat`.`indicator`.`value` IS NOT NULL, false)"
    admin = {r.name: r for r in check_rule_text((BUILTIN_RULES / "windows_new_admin_account.yml").read_text())}
    assert not any(r.problems for r in admin.values()), {n: r.problems for n, r in admin.items()}
    nowhere = check_rule_text("""title: Linux process
name: linux_proc
logsource: {product: linux, category: process_creation}
detection: {sel: {CommandLine|contains: wget}, condition: sel}
level: high
nightjar: {entity: {type: host, field: host.name}}
""")[0]
    assert nowhere.predicate is None and "not applicable: logsource" in nowhere.problems[0]


def test_problems_are_named_per_rule() -> None:
    assert "not valid YAML" in check_rule_text("title: x\n  bad: [")[0].problems[0]
    corr = check_rule_text("""title: T
name: corr
correlation: {type: event_count, rules: [no_such_rule], group-by: [source.ip], timespan: 5m, condition: {gte: 3}}
level: high
""")
    assert corr[0].problems == ["references unknown rule(s) no_such_rule"]
    lonely = check_rule_text("""title: Lonely
name: lonely
logsource: {product: linux}
detection: {sel: {event.action: x}, condition: sel}
level: high
""")
    # no nightjar.entity: the loader infers the host (a stock SigmaHQ rule loads as it is)
    assert lonely[0].problems == [] and lonely[0].entity == "host: host.name (inferred)" and lonely[0].alerts
    wrong_level = check_rule_text("""title: W
name: w
logsource: {product: linux}
detection: {sel: {event.action: x}, condition: sel}
level: severe
nightjar: {entity: {type: ip, field: source.ip}}
""")
    assert any("level 'severe'" in p for p in wrong_level[0].problems)


def duckdb_matches(predicate: str, rows: list[tuple[str, str, str | None, dict[str, str]]]) -> list[bool]:
    """``predicate`` (Spark SQL) run by DuckDB over events of (dataset, code, process.command_line, detail)."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE events (event STRUCT(dataset VARCHAR, code VARCHAR), "
                "process STRUCT(command_line VARCHAR), detail MAP(VARCHAR, VARCHAR), n INTEGER)")
    for n, (dataset, code, cmd, detail) in enumerate(rows):
        con.execute("INSERT INTO events VALUES ({'dataset': ?, 'code': ?}, {'command_line': ?}, MAP(?, ?), ?)",
                    [dataset, code, cmd, list(detail), list(detail.values()), n])
    hits = {r[0] for r in con.execute(f"SELECT n FROM events WHERE {to_duckdb(predicate)}").fetchall()}
    return [n in hits for n in range(len(rows))]


def test_spark_sql_predicates_run_in_duckdb() -> None:
    # Sigma's |re|i over a field that resolves per dataset (a CASE), with quotes and backslashes in the pattern,
    # beside a |endswith on a detail field: what the rule lab's "try on the lake" runs.
    rule = r"""title: EventLog start type
name: lab_eventlog_start
logsource: {product: windows, category: process_creation}
detection:
  selection: {CommandLine|re|i: '\\Services\\EventLog[''"]?\s.*/d\s+4'}
  condition: selection
level: high
"""
    rep = check_rule_text(rule)[0]
    assert rep.problems == [] and "RLIKE '(?iu)" in rep.predicate and "CASE WHEN" in rep.predicate
    cmd = r'reg add "HKLM\SYSTEM\CurrentControlSet\Services\EventLog" /v Start /t REG_DWORD /d 4 /f'
    other = r'reg add "HKLM\SYSTEM\CurrentControlSet\Services\Spooler" /v Start /t REG_DWORD /d 4 /f'
    assert duckdb_matches(rep.predicate, [
        ("windows.sysmon_operational", "1", cmd, {}),  # Sysmon 1: the core command line
        ("windows.security", "4688", None, {"CommandLine": cmd.upper()}),  # 4688: its own field, any case
        ("windows.sysmon_operational", "1", other, {}),
        ("windows.security", "4624", None, {"CommandLine": cmd}),  # outside the logsource
    ]) == [True, True, False, False]
    spark = r"coalesce((lower(`event`.`dataset`) = lower('zeek.dns') AND `detail`['query'] RLIKE '^[a-z0-9]{32,}\\.'), false)"
    assert duckdb_matches(spark, [("zeek.dns", "", None, {"query": "a" * 40 + ".example.org"}),
                                  ("zeek.dns", "", None, {"query": "www.example.org"})]) == [True, False]


# --- saving into the rules directory (dashboard/rule_deploy.py) ------------------------------------------------------

LAB_RULE = """title: Failed password from one address
name: lab_failed_password
logsource: {product: linux, service: sshd}
detection:
  selection: {event.dataset: system.auth, event.outcome: failure, source.ip: 203.0.113.9}
  condition: selection
level: medium
nightjar: {entity: {type: ip, field: source.ip}}
"""


def test_a_correlation_backtests_with_the_base_rules_it_references_from_other_files() -> None:
    from dashboard.rule_deploy import referenced_documents, rule_ids

    corr = """title: Many failures
name: lab_many_failures
correlation: {type: event_count, rules: [ssh_failed_password], group-by: [source.ip], timespan: 5m,
              condition: {gte: 5}}
level: high
"""
    assert rule_ids(corr) == ["lab_many_failures"]
    refs = referenced_documents(corr, [BUILTIN_RULES])
    assert [d["name"] for d in refs] == ["ssh_failed_password"]  # the base rule only, not its file's correlation
    own = (BUILTIN_RULES / "ssh_brute_force.yml").read_text()
    assert referenced_documents(own, [BUILTIN_RULES]) == []  # defined in the file itself


def test_save_refuses_bad_names_and_existing_files_without_writing(tmp_path: Path) -> None:
    from dashboard.rule_deploy import save_rule

    for bad in ("../escape.yml", "sub/dir.yml", "rule.txt", ".hidden.yml", ""):
        res = save_rule(LAB_RULE, tmp_path, bad)
        assert res.path is None and "not a rule file name" in res.problem, bad
    existing = tmp_path / "ssh_brute_force.yml"
    existing.write_text("keep me")
    res = save_rule(LAB_RULE, tmp_path, "ssh_brute_force.yml")
    assert res.exists and res.path is None and "confirm the overwrite" in res.problem
    assert existing.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ssh_brute_force.yml"]


def test_atomic_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    from dashboard.rule_deploy import write_atomically

    target = tmp_path / "r.yml"
    target.write_text("old")
    write_atomically(target, LAB_RULE)
    assert target.read_text() == LAB_RULE
    assert [p.name for p in tmp_path.iterdir()] == ["r.yml"]


def test_a_saved_rule_file_has_the_rule_packs_mode(tmp_path: Path) -> None:
    """0644 like alerts/rule_pack/*.yml (the temporary file it is renamed from is created 0600): a pipeline that runs
    as another user reads it. A file that was owner-only before the overwrite gets the pack's mode too."""
    import stat

    from dashboard.rule_deploy import write_atomically

    new = tmp_path / "new.yml"
    write_atomically(new, LAB_RULE)
    old = tmp_path / "old.yml"
    old.write_text("old")
    old.chmod(0o600)
    write_atomically(old, LAB_RULE)
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in tmp_path.iterdir()} == {
        "new.yml": "0o644", "old.yml": "0o644"}


@pytest.mark.slow
def test_save_validates_with_the_rule_loader_then_the_pipeline_loads_the_file(tmp_path: Path, spark) -> None:
    """A valid rule is written and the pipeline's RuleSet loads it; an invalid one (and a duplicate of a rule id
    already in the directory) is refused with the loader's message and no file appears."""
    import shutil

    from alerts.detection_stream import RuleSet
    from dashboard.rule_deploy import save_rule

    rules = tmp_path / "rules"
    shutil.copytree(BUILTIN_RULES, rules, ignore=shutil.ignore_patterns("__pycache__"))
    before = sorted(p.name for p in rules.iterdir())
    broken = LAB_RULE.replace("condition: selection", "condition: selection and nothing_here")
    res = save_rule(broken, rules, "lab_broken.yml")
    assert res.path is None and res.problem.startswith("lab_broken.yml: rule 'lab_failed_password':"), res.problem
    assert "\n" not in res.problem and "nightjar-rule-save" not in res.problem  # one line, the file's own name
    dup = (BUILTIN_RULES / "sudo_non_admin.yml").read_text()
    res = save_rule(dup, rules, "sudo_copy.yml")
    assert res.path is None and res.problem == ("sudo_copy.yml: rule 'sudo_non_admin' is already defined in "
                                                "sudo_non_admin.yml: rename it (name and id) or edit that file")
    assert sorted(p.name for p in rules.iterdir()) == before  # nothing written

    ruleset = RuleSet(spark, [rules])
    ruleset.reload()
    res = save_rule(LAB_RULE, rules, "lab_failed_password.yml")
    assert res.path == rules / "lab_failed_password.yml" and not res.problem
    assert ruleset.reload()  # the running pipeline's check sees the new file
    single, _, _ = ruleset.current()
    assert "lab_failed_password" in {r.rule_id for r in single} and not ruleset.errors


@pytest.mark.slow
def test_a_backtest_of_a_rule_the_loader_refuses_gives_the_loaders_message(tmp_path: Path) -> None:
    import datetime as dt

    from dashboard.rule_deploy import backtest_rule_text

    broken = LAB_RULE.replace("condition: selection", "condition: selection and nothing_here")
    res = backtest_rule_text(tmp_path / "lake", broken, "lab.yml", dt.datetime(2026, 1, 1), dt.datetime(2026, 1, 2),
                             [BUILTIN_RULES])
    assert not res.ok and res.alerts.empty
    assert res.problem.startswith("lab.yml: rule 'lab_failed_password':") and "\n" not in res.problem, res.problem
    assert "nightjar-rule-lab" not in res.problem  # the temporary directory is not shown


def test_backtest_alert_times_with_and_without_fractions_both_parse(tmp_path):
    """`nightjar backtest --json` writes ISO times with microseconds only when they are not zero; pandas guessed the
    format from the first row and the rule lab page crashed on the second (seen in CI)."""
    from dashboard.rule_deploy import _alert_frame

    def row(i: int, first: str, last: str) -> dict:
        return {"alert_id": f"a{i}", "rule_id": "r", "entity": {"type": "ip", "value": "10.0.0.1"},
                "first_seen": first, "last_seen": last}

    df = _alert_frame([row(1, "2026-11-24T10:21:59.250000Z", "2026-11-24T10:22:00.500000Z"),
                       row(2, "2026-11-24T10:22:01Z", "2026-11-24T10:22:03Z")], tmp_path)
    assert [t.isoformat() for t in df["first_seen"]] == ["2026-11-24T10:21:59.250000", "2026-11-24T10:22:01"]
    assert str(df["last_seen"].iloc[1]) == "2026-11-24 10:22:03"
