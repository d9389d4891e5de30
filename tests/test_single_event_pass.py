"""alerts/single_event_pass.py: many single-event rules in a few passes give exactly the candidates of each rule's
own ``detect`` — on the built-in pack's samples, in passes small enough to split scopes across passes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from alerts.detection_input import events_schema
from alerts.rule_loader import BUILTIN_RULES, load_rules
from alerts.rules_test import expand, sample_events
from alerts.single_event_pass import INTERPRETED_ABOVE, collect_candidates, matches
from core.spark_session import session_conf

EXTRA_RULES = """
title: Any Windows Security event of user alice
id: 5b0c0f7e-0000-4000-8000-000000000001
logsource: {product: windows, service: security}
detection:
  selection: {TargetUserName: alice}
  condition: selection
level: low
---
title: An sshd failure from a documentation network
id: 5b0c0f7e-0000-4000-8000-000000000002
logsource: {product: linux, service: sshd}
detection:
  selection: {source.ip|cidr: 203.0.113.0/24}
  condition: selection
level: low
"""


def _key(row) -> tuple:
    d = row if isinstance(row, dict) else row.asDict(recursive=True)
    return (d["rule_id"], d["entity"]["type"], d["entity"]["value"], d["window_start"], tuple(d["evidence"]),
            d["host_name"], d["user_name"])


@pytest.fixture(scope="module")
def rules_and_events(spark, tmp_path_factory):
    extra = tmp_path_factory.mktemp("extra") / "extra.yml"
    extra.write_text(EXTRA_RULES)
    rules, errors = load_rules([BUILTIN_RULES, extra], events_schema(spark))
    assert errors == []
    single = [r for r in rules if not r.stateful]
    lines = [line for r in rules for line in expand(r.samples.positive) + expand(r.samples.negative)]
    reference: dict[str, list[dict]] = {}  # every rule's reference rows (users, IOCs), so that its samples fire
    for r in rules:
        for table, rows in r.samples.reference.items():
            reference.setdefault(table, []).extend(rows)
    events, unparsed = sample_events(spark, lines, reference)
    assert unparsed == []
    return single, events.cache()


def test_the_passes_give_each_rules_own_candidates(rules_and_events) -> None:
    single, events = rules_and_events
    assert len(single) >= 5 and all(r.match is not None for r in single)
    assert len({r.match.scope for r in single}) >= 3  # several logsources: several scopes
    expected = Counter(_key(row) for r in single for row in r.detect(events).collect())
    assert len({k[0] for k in expected}) >= 3  # the samples make most rules fire: the comparison means something
    for per_pass in (1, 2, 60):  # scopes split over passes, and every rule of a scope in one pass
        assert Counter(map(_key, collect_candidates(events, single, rules_per_pass=per_pass))) == expected, per_pass
    # A SigmaHQ-sized set runs interpreted: the same answer without generated code
    many = single * (INTERPRETED_ABOVE // len(single) + 1)
    with session_conf(events.sparkSession, {"spark.sql.codegen.factoryMode": "CODEGEN_ONLY"}):
        assert Counter(map(_key, collect_candidates(events, many))) == \
            Counter({k: n * (INTERPRETED_ABOVE // len(single) + 1) for k, n in expected.items()})
        assert events.sparkSession.conf.get("spark.sql.codegen.factoryMode") == "CODEGEN_ONLY"  # restored after


def test_no_rule_no_candidates(rules_and_events) -> None:
    _, events = rules_and_events
    assert matches(events, []) is None and collect_candidates(events, []) == []


def test_the_pass_size_keeps_a_sigmahq_sized_rule_set_plannable(spark, rules_and_events, tmp_path: Path) -> None:
    # 300 rules of one scope: 5 passes of 60, planned and run interpreted over the samples
    _, events = rules_and_events
    rules_file = tmp_path / "many.yml"
    rules_file.write_text("\n---\n".join(
        f"title: process {i}\nid: 5b0c0f7e-0000-4000-8000-{i:012d}\nlogsource: {{category: process_creation, "
        f"product: windows}}\ndetection:\n  selection:\n    CommandLine|contains: ['evil{i}.exe', ' -enc{i} ']\n"
        f"    Image|endswith: '\\\\tool{i}.exe'\n  condition: selection\nlevel: low" for i in range(300)))
    rules, errors = load_rules([rules_file], events_schema(spark))
    assert errors == [] and len(rules) == 300
    assert collect_candidates(events, rules) == []  # interpreted (300 rules); none of those tools is in the samples
