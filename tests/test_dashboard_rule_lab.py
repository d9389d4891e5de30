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
    """Against the ECS schema (no lake): rules over parsed fields compile; enriched fields need a lake's schema
    (test_dashboard_pages.py compiles the whole pack against a real events table)."""
    reports = {r.name: r for r in check_rule_text((BUILTIN_RULES / "ssh_brute_force.yml").read_text())}
    assert reports["ssh_failed_password"].predicate.startswith("coalesce((lower(`event`.`dataset`)")
    assert reports["ssh_brute_force"].predicate is None and reports["ssh_brute_force"].alerts
    enriched = check_rule_text((BUILTIN_RULES / "ioc_match.yml").read_text())[0]
    assert "threat.indicator.value" in enriched.problems[0]


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
    assert "alerts on nothing" in lonely[0].problems[0]
    wrong_level = check_rule_text("""title: W
name: w
logsource: {product: linux}
detection: {sel: {event.action: x}, condition: sel}
level: severe
nightjar: {entity: {type: ip, field: source.ip}}
""")
    assert any("level 'severe'" in p for p in wrong_level[0].problems)


def test_spark_sql_predicates_in_duckdb_spelling() -> None:
    spark = r"coalesce((lower(`event`.`dataset`) = lower('zeek.dns') AND `dns`.`question`.`name` RLIKE '^[a-z0-9]{32,}\\.'), false)"
    assert to_duckdb(spark) == (
        "coalesce((lower(\"event\".\"dataset\") = lower('zeek.dns') AND "
        "regexp_matches(\"dns\".\"question\".\"name\", '^[a-z0-9]{32,}\\.')), false)")
