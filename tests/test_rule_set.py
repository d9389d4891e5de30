"""alerts.detection_stream.RuleSet with a folder like a SigmaHQ checkout: a rule whose logsource Nightjar does not
parse is neither an ERROR nor a disabled rule in the health table — one INFO line counts them — while a broken rule
still is both."""

from __future__ import annotations

import logging
from pathlib import Path

from alerts.detection_stream import STATUS_DISABLED, RuleSet
from tests.test_rules_check import MACOS_RULE as MACOS

SSHD = """title: An sshd failure
id: 0a6e0a2e-0000-4000-8000-000000000002
logsource: {product: linux, service: sshd}
detection:
  selection: {event.outcome: failure}
  condition: selection
level: low
"""
BROKEN = SSHD.replace("0a6e0a2e-0000-4000-8000-000000000002", "0a6e0a2e-0000-4000-8000-000000000003").replace(
    "condition: selection", "condition: selection and nowhere")


def test_not_applicable_rules_are_counted_once_and_broken_ones_still_reported(spark, tmp_path: Path, caplog) -> None:
    for name, text in {"macos.yml": MACOS, "sshd.yml": SSHD, "broken.yml": BROKEN}.items():
        (tmp_path / name).write_text(text)
    ruleset = RuleSet(spark, [tmp_path])
    with caplog.at_level(logging.INFO, logger="alerts.detection_stream"):
        assert ruleset.reload()
    single, _, _ = ruleset.current()
    assert [r.rule_id for r in single] == ["0a6e0a2e-0000-4000-8000-000000000002"]
    assert sorted(e.not_applicable for e in ruleset.errors) == [False, True]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "broken.yml" in errors[0] and "nowhere" in errors[0]
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert "1 rule(s) not applicable: their logsource is not a log Nightjar parses" in " ".join(infos)
    assert any("1 problem(s)" in m for m in infos)  # the not-applicable rule is not a problem
    health = {e.rule_id: e.status for e in ruleset.health.entries()}
    assert health.get("0a6e0a2e-0000-4000-8000-000000000003") == STATUS_DISABLED
    assert "1b3c9d2e-0000-4000-8000-000000000002" not in health  # the macOS rule
