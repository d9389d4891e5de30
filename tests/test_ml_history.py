"""alerts/ml/history.py without a training run: generated log files become the bronze rows the stream would have read
(in Parquet, reused while the logs are unchanged), and the ground truth comes back with its times. The training runs
over two simulated days (tests/test_ml_pipeline.py) are slow; these checks keep the module in the quick tier."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from alerts.ml import history
from ingest.file_source import bronze_table

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]


@pytest.fixture
def logs(tmp_path: Path) -> list[Path]:
    syslog, zeek = tmp_path / "syslog.log", tmp_path / "zeek.log"
    syslog.write_text("".join(f"<38>Mar  9 10:00:{i:02d} web-1 sshd[{i}]: Failed password for root from 10.0.0.{i} "
                              f"port 22 ssh2\n" for i in range(5)))
    zeek.write_text('{"_path": "conn", "uid": "C1"}\n{"_path": "dns", "uid": "C2"}\n{"_path": "conn", "uid": "C3"}')
    return [syslog, zeek]


def _rows(directory: Path) -> list[dict]:
    return pq.read_table(directory).select(COLUMNS).sort_by([("partition", "ascending"),
                                                             ("offset", "ascending")]).to_pylist()


def test_the_parquet_copy_holds_the_same_bronze_rows_as_the_file_source(logs: list[Path], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "ROWS_PER_FILE", 2)  # several Parquet files per log, as with two simulated days
    target = history.bronze_parquet(logs, tmp_path / history.BRONZE_CACHE)
    assert len(list(target.glob("*.parquet"))) == 5  # 5 syslog lines in 3 files, 3 Zeek lines in 2
    expected = bronze_table(logs).select(COLUMNS).to_pylist()
    assert _rows(target) == expected
    assert [r["offset"] for r in expected] == [1, 2, 3, 4, 5, 1, 2, 3]  # line numbers, a last line without \n too


def test_the_copy_is_reused_until_a_log_file_changes(logs: list[Path], tmp_path: Path) -> None:
    target = history.bronze_parquet(logs, tmp_path / history.BRONZE_CACHE)
    written = {p.name: p.stat().st_mtime_ns for p in target.glob("*.parquet")}
    past = (target / "_SUCCESS").stat().st_mtime - 60
    for log in logs:
        os.utime(log, (past, past))
    history.bronze_parquet(logs, target)
    assert {p.name: p.stat().st_mtime_ns for p in target.glob("*.parquet")} == written

    logs[0].write_text(logs[0].read_text() + "<38>Mar  9 10:01:00 web-1 sshd[9]: Accepted password for bob\n")
    later = (target / "_SUCCESS").stat().st_mtime + 60  # newer than the copy whatever the clock's granularity
    os.utime(logs[0], (later, later))
    history.bronze_parquet(logs, target)
    assert len(_rows(target)) == 9  # rewritten with the new line


def test_ground_truth_comes_back_with_utc_times_and_is_empty_when_absent(tmp_path: Path) -> None:
    assert history.ground_truth(tmp_path) == []
    incident = {"incident_id": "i1", "scenario": "ssh_brute_force", "start": "2026-03-09T10:00:00Z",
                "end": "2026-03-09T10:05:30.250000Z", "entity": "10.0.0.6"}
    (tmp_path / "ground_truth.jsonl").write_text(json.dumps(incident) + "\n\n")
    [row] = history.ground_truth(tmp_path)
    assert row["start"] == dt.datetime(2026, 3, 9, 10, 0, tzinfo=dt.UTC)
    assert row["end"] == dt.datetime(2026, 3, 9, 10, 5, 30, 250000, tzinfo=dt.UTC)
    assert row["entity"] == "10.0.0.6" and row["scenario"] == "ssh_brute_force"
