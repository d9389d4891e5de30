"""alerts/backtest.py (and the time arguments it reads with core.durations.parse_time) on a rule's own sample events: the alert it raises, the same id whenever it runs, the time window
and the time arguments. The stream-vs-backtest parity over a generated attack run is end to end
(tests/test_detections.py); the sample run here parses, enriches and backtests in Spark (248 s at load 20-30), so it
is slow too, and the time arguments' check keeps the module in the quick tier."""

from __future__ import annotations

import datetime as dt

import pytest

from alerts.backtest import backtest
from alerts.detection_input import events_schema
from alerts.rule_loader import BUILTIN_RULES, load_rules
from alerts.rules_test import expand, sample_events
from core.durations import parse_time as _time
from core.errors import UserError


@pytest.fixture(scope="module")
def brute_force(spark):
    rules, errors = load_rules([BUILTIN_RULES / "ssh_brute_force.yml"], events_schema(spark))
    assert errors == [] and [r.rule_id for r in rules] == ["ssh_brute_force"]
    return rules[0]


@pytest.mark.slow
def test_a_rule_in_batch_raises_its_alert_with_the_same_id_on_every_run_and_only_within_the_window(spark,
                                                                                                  brute_force):
    # 20 failed logins from one address at 10:00:01 on 2026-03-09 (the rule's positive samples)
    events, unparsed = sample_events(spark, expand(brute_force.samples.positive), brute_force.samples.reference)
    assert unparsed == []
    [alert] = backtest(spark, events, [brute_force], detected_at=dt.datetime(2026, 3, 9, 12))
    assert (alert["rule_id"], alert["entity"]["value"], alert["event_count"], alert["revision"]) == \
        ("ssh_brute_force", "61.177.172.220", 20, 1)

    # Run again later over a window around the events: the same id (rule, entity and window make it, not the run).
    ten, ten_past_one = dt.datetime(2026, 3, 9, 10), dt.datetime(2026, 3, 9, 10, 1)
    within = backtest(spark, events, [brute_force], ten, ten_past_one, detected_at=dt.datetime(2026, 3, 10))
    assert [a["alert_id"] for a in within] == [alert["alert_id"]]
    assert backtest(spark, events, [brute_force], start=ten_past_one) == []


def test_time_arguments_are_iso_8601_read_as_utc_and_anything_else_is_a_usage_error() -> None:
    assert _time(None, "--from") is None
    assert _time("2026-03-09T10:00:00Z", "--from") == dt.datetime(2026, 3, 9, 10)
    assert _time("2026-03-09T12:00:00+02:00", "--to") == dt.datetime(2026, 3, 9, 10)
    assert _time("2026-03-09T10:00:00", "--to") == dt.datetime(2026, 3, 9, 10)  # no offset: already UTC
    with pytest.raises(UserError, match="--to 'yesterday' is not an ISO 8601 time") as caught:
        _time("yesterday", "--to")
    assert caught.value.exit_code == 2
