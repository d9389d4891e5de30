"""alerts/detection_stream.RuleHealth: what reaches pipeline_progress — changes and alerts at once, every rule's
state periodically, and no more than HEALTH_ROWS_PER_S rows a second on average however many rules there are."""

from __future__ import annotations

import datetime as dt

from alerts.detection_stream import HEALTH_ROWS_PER_S, STATUS_RESTARTING, RuleHealth

AT = dt.datetime(2026, 12, 7, 10, 0)


def health_with(n: int, report_s: float = 30.0) -> tuple[RuleHealth, list[list[dict]]]:
    writes: list[list[dict]] = []
    health = RuleHealth(sink=writes.append, report_s=report_s)
    health.track([f"r{i}" for i in range(n)], "ingest")
    return health, writes


def test_a_small_pack_reports_every_rule_each_report_interval() -> None:
    health, writes = health_with(20)
    health.batch_done("ingest", [f"r{i}" for i in range(20)], AT)  # the first report is due at once
    assert [len(w) for w in writes] == [20]
    health.batch_done("ingest", [f"r{i}" for i in range(20)], AT, alerted=["r3"])
    assert [r["rule_id"] for r in writes[-1]] == ["r3"]  # not due: only the rule that alerted
    health._last_report -= 31  # 31 s later
    health.report_if_due()
    assert len(writes[-1]) == 20


def test_thousands_of_rules_are_reported_at_most_two_rows_a_second() -> None:
    n = 2400
    health, writes = health_with(n)
    health.batch_done("ingest", [f"r{i}" for i in range(n)], AT)
    assert [len(w) for w in writes] == [n]
    health._last_report -= 600  # ten minutes on: due for 20 rules, not for 2,400
    health.report_if_due()
    health.batch_done("ingest", [f"r{i}" for i in range(n)], AT)
    assert [len(w) for w in writes] == [n]
    health._last_report -= n / HEALTH_ROWS_PER_S - 600 + 1
    health.report_if_due()
    assert [len(w) for w in writes] == [n, n]
    # a rule added while running (its file saved) is written after its first batch, not 20 minutes later
    health.track(["new_rule"], "ingest")
    health.batch_done("ingest", [f"r{i}" for i in range(n)] + ["new_rule"], AT)
    assert [r["rule_id"] for r in writes[-1]] == ["new_rule"]
    # a failure is written at once, whatever the interval
    health.failed(["r7"], "boom")
    assert [(r["rule_id"], r["status"]) for r in writes[-1]] == [("r7", STATUS_RESTARTING)]
    health.report()  # the end of a run: everything, now
    assert len(writes[-1]) == n + 1
