"""The built-in rule pack: every rule's inline samples pass, every generator scenario has its rule, and a broken
rule file is reported (file, rule, problem) while the others still load."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from alerts.rule_loader import BUILTIN_RULES, load_rules


@pytest.fixture(scope="module")
def schema(spark):
    from alerts.detection_input import events_schema

    return events_schema(spark)


@pytest.fixture(scope="module")
def pack(schema):
    rules, errors = load_rules([BUILTIN_RULES], schema)
    assert errors == [], [str(e) for e in errors]
    return {r.rule_id: r for r in rules}


def test_every_generator_scenario_has_a_rule_with_attack_tags_and_samples(pack):
    from generator.scenarios import ATTACKS, SCENARIOS

    expected = {SCENARIOS[name].rule_id for name in ATTACKS}
    missing = expected - set(pack)
    assert not missing, f"scenarios without a rule: {sorted(missing)}"
    for rid in expected:
        rule = pack[rid]
        assert rule.meta.tags and all(t.startswith("T") for t in rule.meta.tags), rid
        assert rule.meta.severity in ("low", "medium", "high", "critical")
        assert rule.samples.positive and rule.samples.negative, rid


@pytest.mark.slow
def test_every_rule_passes_its_samples(spark, pack):
    from alerts.rules_test import check_rules

    failures = {}
    rules = [rule for _, rule in sorted(pack.items())]
    for rule, res in zip(rules, check_rules(spark, rules), strict=True):
        assert res.rule_id == rule.rule_id
        if not res.passed:
            failures[rule.rule_id] = res.problems
        else:
            assert res.positives >= 1 and res.negatives == 0
    assert not failures, failures


def _write(dir_: Path, name: str, text: str) -> Path:
    p = dir_ / name
    p.write_text(textwrap.dedent(text), encoding="utf-8")
    return p


GOOD = """\
    title: Failed SSH password
    id: 11111111-1111-4111-8111-111111111111
    name: good_rule
    status: test
    logsource: {product: linux, service: sshd}
    detection:
      sel: {event.action: ssh_login, event.outcome: failure}
      condition: sel
    level: low
    tags: [attack.t1110]
    nightjar: {entity: {type: ip, field: source.ip}}
    """


def test_broken_rules_are_reported_with_file_rule_and_problem_and_the_rest_load(schema, tmp_path):
    _write(tmp_path, "good.yml", GOOD)
    _write(tmp_path, "syntax.yml", "title: [unclosed\n  detection: {\n")
    _write(tmp_path, "unknown_field.yml", GOOD.replace("good_rule", "bad_field")
           .replace("11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222")
           .replace("event.outcome", "no.such_field"))
    _write(tmp_path, "dangling.yml", """\
        title: Correlation on nothing
        id: 33333333-3333-4333-8333-333333333333
        name: dangling
        correlation: {type: event_count, rules: [not_a_rule], group-by: [source.ip], timespan: 5m,
                      condition: {gte: 3}}
        level: high
        """)
    _write(tmp_path, "bad_level.yml", GOOD.replace("good_rule", "bad_level").replace("level: low", "level: urgent")
           .replace("11111111-1111-4111-8111-111111111111", "44444444-4444-4444-8444-444444444444"))
    rules, errors = load_rules([tmp_path], schema)
    assert [r.rule_id for r in rules] == ["good_rule"]
    messages = {Path(e.file).name: str(e) for e in errors}
    assert set(messages) == {"syntax.yml", "unknown_field.yml", "dangling.yml", "bad_level.yml"}, messages
    assert "no.such_field" in messages["unknown_field.yml"] and "bad_field" in messages["unknown_field.yml"]
    assert "not_a_rule" in messages["dangling.yml"] and "'dangling'" in messages["dangling.yml"]
    assert "level" in messages["bad_level.yml"] or "urgent" in messages["bad_level.yml"]
    for e in errors:
        assert str(tmp_path) in str(e)  # every message names the file


def test_disabled_rule_is_not_loaded_and_tags_become_attack_ids(schema, tmp_path):
    _write(tmp_path, "good.yml", GOOD)
    _write(tmp_path, "off.yml", GOOD.replace("good_rule", "off_rule")
           .replace("11111111-1111-4111-8111-111111111111", "55555555-5555-4555-8555-555555555555")
           .replace("nightjar: {entity:", "nightjar: {enabled: false, entity:"))
    rules, errors = load_rules([tmp_path], schema)
    assert errors == [] and [r.rule_id for r in rules] == ["good_rule"]
    assert rules[0].meta.tags == ("T1110",) and rules[0].kind == "sigma" and not rules[0].stateful


def _variant(name: str, uuid_digit: str) -> str:
    return GOOD.replace("good_rule", name).replace("11111111-1111-4111-8111-111111111111",
                                                   "-".join(uuid_digit * n for n in (8, 4, 4, 4, 12)))


def test_fields_resolve_per_logsource_and_unknown_ones_name_file_rule_and_field(schema, tmp_path):
    # sshd's own field (a detail key of system.auth) resolves for an sshd rule; the entity too
    _write(tmp_path, "method.yml", _variant("by_method", "6").replace(
        "event.outcome: failure}", "event.outcome: failure, system.auth.ssh.method: password}"))
    _write(tmp_path, "typo_entity.yml", _variant("typo_entity", "7").replace("field: source.ip", "field: sorce.ip"))
    _write(tmp_path, "nowhere.yml", _variant("nowhere", "8").replace("{product: linux, service: sshd}",
                                                                    "{product: linux, category: process_creation}"))
    _write(tmp_path, "group_typo.yml", textwrap.dedent(_variant("group_base", "9")) + textwrap.dedent("""\
        ---
        title: Many by a typo
        id: 99999999-9999-4999-8999-999999999990
        name: group_typo
        correlation: {type: event_count, rules: [group_base], group-by: [sourceip], timespan: 5m, condition: {gte: 3}}
        level: high
        """))
    rules, errors = load_rules([tmp_path], schema)
    assert [r.rule_id for r in rules] == ["by_method"], [str(e) for e in errors]
    messages = {Path(e.file).name: str(e) for e in errors}
    assert set(messages) == {"typo_entity.yml", "nowhere.yml", "group_typo.yml"}, messages
    assert "rule 'typo_entity'" in messages["typo_entity.yml"] and "unknown field 'sorce.ip'" in messages[
        "typo_entity.yml"]
    assert "rule 'nowhere'" in messages["nowhere.yml"] and "not applicable: logsource" in messages["nowhere.yml"]
    assert "rule 'group_typo'" in messages["group_typo.yml"] and "unknown field 'sourceip'" in messages[
        "group_typo.yml"]
    for e in errors:
        assert str(tmp_path) in str(e)


@pytest.mark.slow
def test_windows_new_admin_account_groups_on_the_sid_the_old_wide_field_held(spark, pack):
    """user.target.id was a column of the wide contract; in v2 it is a key of detail for windows.security. The
    correlation still groups the creation and the admin-group event on the new account's SID."""
    from alerts.rules_test import expand, sample_events

    rule = pack["windows_new_admin_account"]
    events, bad = sample_events(spark, expand(rule.samples.positive), rule.samples.reference)
    assert bad == []
    candidates = [r.asDict(recursive=True) for r in rule.detect(events).collect()]  # one per sliding window
    assert candidates
    assert {(c["entity"]["type"], c["entity"]["value"]) for c in candidates} == {
        ("user", "S-1-5-21-3623811015-3361044348-30300820-1190")}
    assert {c["detail"] for c in candidates} == {"windows_user_created and windows_admin_group_member_added"}


def test_windows_new_admin_account_fires_on_windows_json_events_too(spark, pack):
    """The same correlation over Security events as JSON (NXLog flat keys, the `windows` source), not only over the
    syslog rendering: the creation names the account by TargetSid, the group change by MemberSid, and both land as
    user.target.id. Another member's SID in the group change raises nothing."""
    from alerts.rules_test import sample_events

    fixture = Path(__file__).resolve().parent.parent / "ingest/sources/windows/fixtures/security-account-management.log"
    # dated before the samples' ingestion time (rules_test.SAMPLE_INGESTED): detection leaves future-dated events out
    created, added = (line.replace("2026-03-14T", "2026-03-09T") for line in fixture.read_text().splitlines()[:2])
    assert '"EventID":4720' in created and '"EventID":4732' in added
    rule = pack["windows_new_admin_account"]
    sid = "S-1-5-21-1111-2222-3333-1201"
    events, bad = sample_events(spark, [created, added], rule.samples.reference)
    assert bad == []
    candidates = [r.asDict(recursive=True) for r in rule.detect(events).collect()]
    assert {(c["entity"]["type"], c["entity"]["value"]) for c in candidates} == {("user", sid)}
    other = added.replace(f'"MemberSid":"{sid}"', '"MemberSid":"S-1-5-21-1111-2222-3333-1999"')
    events, bad = sample_events(spark, [created, other], rule.samples.reference)
    assert bad == [] and rule.detect(events).count() == 0


def test_a_sample_that_detection_leaves_out_is_reported_not_passed(spark, schema, tmp_path):
    """A negative sample dated after the samples' ingestion time never reaches the rule (detection leaves future-dated
    events out), so it would pass while testing nothing: the harness names the line and why."""
    from alerts.rules_test import check_rules

    failed = "<38>Mar  9 10:00:00 web-01 sshd[411]: Failed password for root from 203.0.113.9 port 40000 ssh2"
    later = failed.replace("Mar  9 10:00:00", "Mar  9 18:00:00")  # after rules_test.SAMPLE_INGESTED (12:00)
    body = GOOD.replace("nightjar: {entity: {type: ip, field: source.ip}}",
                        "nightjar:\n      entity: {type: ip, field: source.ip}\n      samples:\n"
                        f"        positive: ['{failed}']\n        negative: ['{later}']")
    path = _write(tmp_path, "sample_times.yml", body)
    rules, errors = load_rules([path], schema)
    assert errors == [], [str(e) for e in errors]
    [res] = list(check_rules(spark, rules))
    assert res.positives == 1
    assert any(p.startswith("negative sample line 1 is dated 2026-03-09 18:00:00") and "future-dated" in p
               for p in res.problems), res.problems
    assert not res.passed
