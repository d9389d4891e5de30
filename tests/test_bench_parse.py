"""``nightjar bench parse``: its batch figures on the test session's Spark, at a size whose answers are known.

The rates themselves are a benchmark's business; here the workload, the quarantine count and the mode the parse is
timed in are checked, so that the benchmark keeps measuring the parse the ingest query runs."""

from __future__ import annotations

import argparse

import pytest

from core.config import Settings
from nightjar.benchmarks.bench_parse import BAD_LINES, PLAN_BATCH_LINES, batch_figures, cost_figures, workload


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"skip_windows": False, "rounds": 1, "events": 300, **kw})


def test_the_workload_mixes_syslog_zeek_and_the_asked_share_of_bad_lines() -> None:
    records = workload(2000, bad_percent=5.0)
    bad = sum(raw in BAD_LINES for _kind, raw in records)
    assert len(records) == 2000 and 60 <= bad <= 140  # 5 % of 2,000, seeded
    assert {kind for kind, _ in records} == {"syslog", "zeek"}


@pytest.mark.bench  # 73 s quiet on 2 cores (three timed parses): on demand, `scripts/test -m bench`
def test_batch_figures_quarantine_exactly_the_bad_lines_and_compare_windows_with_sshd(spark) -> None:
    records = workload(300, bad_percent=10.0)
    bad = sum(raw in BAD_LINES for _kind, raw in records)
    result: dict[str, object] = {}
    lines: list[str] = []
    batch_figures(_args(), Settings(), spark, records, result, lines.append)
    assert bad > 0 and result["batch_quarantined"] == bad
    assert result["batch_events_per_s"] > 0 and result["windows_events_per_s"] > 0 and result["sshd_events_per_s"] > 0
    assert result["windows_to_sshd"] == pytest.approx(result["windows_events_per_s"] / result["sshd_events_per_s"])
    assert lines[0].startswith("parse stage (batch):") and any(line.startswith("Windows / sshd:") for line in lines)


@pytest.mark.bench
def test_cost_figures_report_rate_cpu_and_planning_of_the_v2_parse(spark) -> None:
    records = workload(PLAN_BATCH_LINES, bad_percent=1.0)
    lines: list[str] = []
    out = cost_figures(spark, records, Settings().max_record_bytes, 1, lines.append)
    assert out["events_per_s"] > 0 and out["cpu_us_per_event"] > 0
    # One mapInArrow node: building and planning a micro-batch takes well under a second (the 412-field parse: ~4 s).
    assert 0 < out["build_s"] + out["plan_s"] < 1.0
    assert len(lines) == 1 and lines[0].startswith("parse stage cost:")
