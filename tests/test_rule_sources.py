"""alerts/rule_sources.py and the loader's override: ``--rules PATH`` adds rules beside the built-in pack
(ARCHITECTURE.md's contract), a rule with a built-in rule's id replaces it, ``--no-builtin-rules`` runs the given
rules alone, and two rules with one id outside the pack stay an error naming both files."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from alerts.detection_input import events_schema
from alerts.rule_loader import load_rules
from alerts.rule_sources import BUILTIN_RULES, rule_sources
from dashboard.rules_catalog import load_catalog
from nightjar.cli import main

STOCK = """title: Stock rule from a SigmaHQ-style checkout
id: 6c1d3f4e-1111-4a2b-9c3d-000000000001
status: test
tags: [attack.privilege-escalation, attack.t1548.003]
logsource: {product: linux, service: sudo}
detection:
  selection: {user.name: root}
  condition: selection
level: low
"""


def builtin_ids(spark) -> set[str]:
    rules, errors = load_rules([BUILTIN_RULES], events_schema(spark))
    assert not [e for e in errors if not e.not_applicable], errors
    return {r.rule_id for r in rules}


def test_rule_sources_put_the_pack_first_and_never_twice(tmp_path: Path) -> None:
    assert rule_sources() == [BUILTIN_RULES]
    assert rule_sources([tmp_path]) == [BUILTIN_RULES, tmp_path]
    assert rule_sources([tmp_path], builtin=False) == [tmp_path]
    assert rule_sources([BUILTIN_RULES / ".." / "rule_pack", tmp_path]) == [BUILTIN_RULES, tmp_path]
    assert rule_sources([], builtin=False) == []


def test_user_rules_run_beside_the_pack_and_replace_a_built_in_rule_of_their_id(spark, tmp_path: Path,
                                                                                 caplog) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "stock.yml").write_text(STOCK)
    tuned = (BUILTIN_RULES / "sudo_non_admin.yml").read_text().replace("level: medium", "level: low")
    assert tuned != (BUILTIN_RULES / "sudo_non_admin.yml").read_text()
    (mine / "sudo_non_admin.yml").write_text(tuned)
    shutil.copy(BUILTIN_RULES / "ssh_brute_force_success.py", mine / "ssh_success_tuned.py")  # a Python rule's copy

    with caplog.at_level(logging.INFO, logger="alerts.rule_loader"):
        rules, errors = load_rules(rule_sources([mine]), events_schema(spark))
    assert [e for e in errors if not e.not_applicable] == []
    by_id = {r.rule_id: r for r in rules}
    assert len(by_id) == len(rules), "one rule per id"
    assert set(by_id) == builtin_ids(spark) | {"6c1d3f4e-1111-4a2b-9c3d-000000000001"}
    assert by_id["sudo_non_admin"].source == mine / "sudo_non_admin.yml"
    assert by_id["sudo_non_admin"].meta.severity == "low"
    assert by_id["ssh_brute_force_success"].source == mine / "ssh_success_tuned.py"
    assert by_id["ssh_brute_force"].source.parent == BUILTIN_RULES
    replaced = [r.getMessage() for r in caplog.records if "replaced by rules of the same id" in r.getMessage()]
    assert len(replaced) == 1 and "2 built-in rule(s)" in replaced[0] and "sudo_non_admin" in replaced[0]

    only, _ = load_rules(rule_sources([mine], builtin=False), events_schema(spark))
    assert {r.rule_id for r in only} == {"6c1d3f4e-1111-4a2b-9c3d-000000000001", "sudo_non_admin",
                                         "ssh_brute_force_success"}


def test_one_id_in_two_of_the_operators_folders_is_an_error_naming_both(spark, tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stock.yml").write_text(STOCK)
    rules, errors = load_rules(rule_sources([tmp_path / "a", tmp_path / "b"]), events_schema(spark))
    assert [r.rule_id for r in rules].count("6c1d3f4e-1111-4a2b-9c3d-000000000001") == 1
    dup = [str(e) for e in errors if "duplicate" in str(e)]
    assert len(dup) == 1 and str(tmp_path / "a" / "stock.yml") in dup[0] and str(tmp_path / "b" / "stock.yml") in dup[0]


def test_the_coverage_catalog_counts_a_replaced_rule_once(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "sudo_non_admin.yml").write_text((BUILTIN_RULES / "sudo_non_admin.yml").read_text())
    (tmp_path / "stock.yml").write_text(STOCK)
    monkeypatch.setenv("NIGHTJAR_RULES", str(tmp_path))
    catalog = load_catalog()
    ids = [r.rule_id for r in catalog]
    assert len(ids) == len(set(ids))
    assert {r.rule_id: r.source for r in catalog}["sudo_non_admin"] == tmp_path / "sudo_non_admin.yml"
    assert "6c1d3f4e-1111-4a2b-9c3d-000000000001" in ids and "ssh_brute_force" in ids
    monkeypatch.setenv("NIGHTJAR_BUILTIN_RULES", "0")
    assert sorted(r.rule_id for r in load_catalog()) == ["6c1d3f4e-1111-4a2b-9c3d-000000000001", "sudo_non_admin"]


def test_rules_list_runs_the_pack_beside_rules_unless_told_not_to(spark, tmp_path: Path, capsys) -> None:
    (tmp_path / "stock.yml").write_text(STOCK)
    lake = ["--lake", str(tmp_path / "lake")]
    assert main(["rules", "list", "--json", "--rules", str(tmp_path), *lake]) == 0
    listed = {json.loads(line)["rule_id"] for line in capsys.readouterr().out.splitlines() if line.startswith("{")}
    assert listed == builtin_ids(spark) | {"6c1d3f4e-1111-4a2b-9c3d-000000000001"}

    assert main(["rules", "list", "--json", "--rules", str(tmp_path), "--no-builtin-rules", *lake]) == 0
    listed = [json.loads(line)["rule_id"] for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert listed == ["6c1d3f4e-1111-4a2b-9c3d-000000000001"]


@pytest.mark.parametrize("argv, message", [
    (["rules", "list", "--no-builtin-rules"], "--no-builtin-rules needs --rules PATH"),
    (["backtest", "--no-builtin-rules"], "--no-builtin-rules needs --rules PATH"),
    (["run", "--available-now", "--no-builtin-rules"], "--no-builtin-rules needs --rules PATH"),
    (["backtest", "--rules", "/nowhere/rules"], "rules path /nowhere/rules does not exist"),
])
def test_no_rules_at_all_is_one_line_and_exit_2(tmp_path: Path, capsys, argv, message) -> None:
    (tmp_path / "lake").mkdir()
    assert main([*argv, "--lake", str(tmp_path / "lake")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
