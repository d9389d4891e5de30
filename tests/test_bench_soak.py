"""``nightjar bench soak``: the figures it samples and the verdicts it prints (issue #16).

The hour-long run itself is a benchmark, not a test; here each piece is checked on real Delta tables and on
samples whose answer is known, so a wrong count or a wrong verdict fails.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from nightjar.benchmarks.bench_soak import (
    SLACK,
    dir_size,
    open_alerts_held,
    operator_state,
    print_soak,
    soak_result,
    table_files,
    verdicts,
)
from nightjar.progress_recorder import PROGRESS_SCHEMA
from nightjar.upkeep import TRACEMALLOC_ENV, MemoryTrace, Upkeep, glibc

REPO = Path(__file__).resolve().parents[1]


def _sample(t: float, jvm: float, state: int, files: int = 3) -> dict:
    return {"t": t, "driver_mib": 300.0, "jvm_mib": jvm, "workers_mib": 900.0, "workers": 4, "ingest_lag": 10,
            "windowed_lag": 0, "state": {"windowed/stateStoreSave#0": state},
            "tables": {"events": {"active_files": files, "parquet_on_disk": files, "log_files": 2, "rows": 1}},
            "checkpoint_bytes": 1000, "checkpoint_files": 40, "open_alerts": {"windowed": 5}}


def test_verdicts_call_flat_what_is_flat_and_growth_what_grows() -> None:
    # 60 samples a minute apart; warm-up 10 min. JVM memory climbs 20 MiB a minute (1.2 GiB an hour); state stays
    # near 5,000 rows with noise; files grow 2 per minute (no compaction).
    samples = [_sample(60.0 * i, 2000 + 20 * i, 5000 + (i % 3) * 100, 3 + 2 * i) for i in range(60)]
    rows = {r["figure"]: r for r in verdicts(samples, warmup_s=600, tolerance=0.25)}
    assert not rows["rss jvm"]["flat"]
    assert rows["rss jvm"]["slope_per_h"] == pytest.approx(1200.0, rel=0.01)
    assert rows["state windowed/stateStoreSave#0"]["flat"]
    assert rows["rss driver"]["flat"] and rows["rss driver"]["slope_per_h"] == 0.0
    assert not rows["files events (active)"]["flat"]
    assert rows["files events (log)"]["flat"]
    # the first fifth after warm-up is minutes 10..19: the mean is exact
    assert rows["rss jvm"]["first"] == pytest.approx(2000 + 20 * 14.5)
    # warm-up samples are not judged: a spike before it does not count
    spiky = [_sample(60.0 * i, 9000 if i < 5 else 2000, 5000) for i in range(60)]
    assert {r["figure"]: r for r in verdicts(spiky, 600, 0.25)}["rss jvm"]["max"] == 2000


def test_small_absolute_changes_are_not_growth() -> None:
    # 3 -> 5 files is +67 %, but within the allowance for files
    samples = [_sample(60.0 * i, 2000, 5000, files=3 if i < 40 else 5) for i in range(60)]
    rows = {r["figure"]: r for r in verdicts(samples, 600, 0.25)}
    assert rows["files events (active)"]["flat"]
    assert SLACK["files"] >= 2


def _soak_args(**kw) -> argparse.Namespace:
    base = {"hours": 1.5, "hosts": 300, "trigger": "1s", "upkeep_every": "10m", "warmup_minutes": 10.0,
            "tolerance": 0.25, "table_minutes": 5.0}
    return argparse.Namespace(**{**base, **kw})


def _load() -> dict:
    return {"start": [1.0, 1.0, 1.0], "end": [2.0, 2.0, 2.0], "mean_1m": 1.5, "max_1m": 2.0, "samples": 3, "cpus": 2}


@pytest.mark.parametrize("stopped_early", [False, True])
def test_a_soak_stopped_early_still_prints_its_table_and_verdicts(capsys: pytest.CaptureFixture[str],
                                                                    stopped_early: bool) -> None:
    """Ctrl-C after 40 of 90 minutes: the 40 minutes sampled are the result, printed and marked as cut short."""
    from nightjar.benchmarks.bench_pipeline import Out

    samples = [{**_sample(60.0 * i, 2000 + 40 * i, 5000), "produced": 1800 * i, "load_1m": 1.0} for i in range(41)]
    result = soak_result(_soak_args(), samples, gen_s=40 * 60.0, missed=[], stop_rc=0, log_problems=[],
                         load=_load(), stopped_early=stopped_early)
    print_soak(Out(None), _soak_args(), result)
    text = capsys.readouterr().out
    assert result["events"] == 72_000 and result["events_per_s"] == 30.0 and result["stopped_early"] is stopped_early
    assert ("0.67 h of 1.5 h (stopped early)" in text) is stopped_early
    assert "72,000 events (30.0 events/s)" in text
    assert "    40min     72,000" in text  # the table's last row is the last sample
    assert "rss jvm" in text and "GROWS" in text and "all flat: no: rss jvm" in text


def test_a_soak_stopped_during_warm_up_says_there_is_no_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    from nightjar.benchmarks.bench_pipeline import Out

    samples = [{**_sample(60.0 * i, 2000, 5000), "produced": 100 * i, "load_1m": 1.0} for i in range(8)]
    result = soak_result(_soak_args(), samples, 420.0, [], 0, [], _load(), stopped_early=True)
    print_soak(Out(None), _soak_args(), result)
    text = capsys.readouterr().out
    assert result["verdicts"] == [] and "no verdict: fewer than 5 samples after the 10 min of warm-up" in text
    assert "     7min        700" in text


def test_table_files_counts_active_superseded_and_log_files(tmp_path: Path) -> None:
    path = tmp_path / "events"
    for i in range(3):
        write_deltalake(str(path), pa.table({"x": list(range(i * 10, i * 10 + 10))}), mode="append")
    before = table_files(path)
    assert before == {"active_files": 3, "rows": 30, "parquet_on_disk": 3, "log_files": 3}
    DeltaTable(str(path)).optimize.compact()
    after = table_files(path)
    # compaction: one active file, the three it replaced stay on disk until vacuum, one more commit in the log
    assert after["active_files"] == 1 and after["rows"] == 30
    assert after["parquet_on_disk"] == 4 and after["log_files"] == 4
    assert table_files(tmp_path / "missing") == {"active_files": 0, "rows": 0, "parquet_on_disk": 0, "log_files": 0}


def test_dir_size_adds_every_file(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one").write_bytes(b"x" * 100)
    (tmp_path / "a" / "b" / "two").write_bytes(b"y" * 23)
    assert dir_size(tmp_path) == (123, 2)


def test_operator_state_reads_the_newest_progress_row_of_each_query(tmp_path: Path) -> None:
    def row(query: str, batch: int, ops: list[tuple[str, int]]) -> dict:
        progress = {"stateOperators": [{"operatorName": n, "numRowsTotal": r} for n, r in ops]}
        return {"query_name": query, "query_id": "q", "run_id": "r", "batch_id": batch,
                "timestamp": dt.datetime(2026, 11, 24, tzinfo=dt.UTC), "progress_json": json.dumps(progress)}

    rows = [row("windowed", 7, [("stateStoreSave", 900)]), row("windowed", 8, [("stateStoreSave", 1200)]),
            row("ingest", 3, [("applyInPandasWithState", 40), ("dedupe", 11)]),
            row("windowed", 5, [("stateStoreSave", 50)])]
    table = pa.Table.from_pylist(rows, schema=PROGRESS_SCHEMA)
    write_deltalake(str(tmp_path / "pipeline_progress"), table)
    assert operator_state(tmp_path) == {"windowed/stateStoreSave#0": 1200, "ingest/applyInPandasWithState#0": 40,
                                        "ingest/dedupe#1": 11}


def test_open_alerts_held_reads_the_pipelines_own_log_lines(tmp_path: Path) -> None:
    # Written through the detection module's own logger and format, as `nightjar run` logs them.
    log_path = tmp_path / "run.log"
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("alerts.detection_stream")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        logger.info("ingest batch %d: %d alert revision(s) from single-event rules; %d open alert(s) held", 3, 2, 9)
        logger.info("%s batch %d: %d alert revision(s); %d open alert(s) held", "windowed", 4, 1, 30)
        logger.info("%s batch %d: %d alert revision(s); %d open alert(s) held", "windowed", 9, 4, 12)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        handler.close()
    assert open_alerts_held(log_path) == {"ingest": 9, "windowed": 12}
    assert open_alerts_held(tmp_path / "none.log") == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hours", "0"], "--hours must be positive"),
        (["--hours", "1", "--warmup-minutes", "90"], "--warmup-minutes must be shorter than --hours"),
        (["--upkeep-every", "soon"], "--upkeep-every must be a duration like"),
        (["--hosts", "3"], "--hosts must be at least 12"),
        (["--start", "yesterday"], "--start 'yesterday' is not an ISO 8601 time"),
        (["--start", "2999-01-01T00:00:00Z"], "--start 2999-01-01T00:00:00Z is in the future"),
    ],
)
def test_bad_arguments_are_one_line_exit_2(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "nightjar.cli", "bench", "soak", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# The soak's driver RSS rose ~200 MiB/h with a flat Python heap: glibc kept the pages of freed chunks. This child
# builds such a heap (freed 100 KB blocks between small survivors) and measures what release_free_heap gives back.
# Whether glibc trims some of a small heap's top by itself depends on its layout, so the child turns that off
# (M_TRIM_THRESHOLD): every freed page is then kept, as the driver's were, and the figure is deterministic.
_FRAGMENTED_HEAP = """
import ctypes, gc, json
from nightjar.upkeep import rss_parts, release_free_heap
ctypes.CDLL("libc.so.6").mallopt(-1, 2 ** 30)  # M_TRIM_THRESHOLD
blocks, survivors = [], []
for _ in range(2000):
    blocks.append(b"x" * 100_000)
    survivors.append(b"y" * 2_000)
del blocks
gc.collect()
held = rss_parts()["RssAnon"]
released = release_free_heap()
print(json.dumps({"held": held, "after": rss_parts()["RssAnon"], "released": released}))
"""


@pytest.mark.skipif(glibc() is None, reason="malloc_trim is glibc's")
def test_release_free_heap_returns_freed_pages_that_glibc_keeps() -> None:
    proc = subprocess.run([sys.executable, "-c", _FRAGMENTED_HEAP], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=True)
    r = json.loads(proc.stdout)
    mib = 2 ** 20
    assert r["released"] is True
    # ~200 MB was freed; glibc alone keeps nearly all of it resident, the trim gives back at least half.
    assert r["held"] - r["after"] >= 100 * mib, r


def test_upkeep_starts_the_heap_trim_and_can_be_told_not_to(tmp_path: Path) -> None:
    from core.config import Settings

    on = Upkeep(Settings(lake=tmp_path), interval_s=3600).start()
    off = Upkeep(Settings(lake=tmp_path), interval_s=3600, trim_every_s=0).start()
    try:
        assert on._trim_thread.is_alive()
        assert not off._trim_thread.is_alive()
    finally:
        on.stop()
        off.stop()
    assert not on._trim_thread.is_alive()  # stop() ends it with the upkeep thread


@pytest.mark.parametrize(("value", "every_s"), [(None, None), ("", None), ("0", None), ("soon", None), ("0.5", 30.0)])
def test_memory_trace_is_on_only_when_the_environment_asks(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                                           every_s: float | None) -> None:
    if value is None:
        monkeypatch.delenv(TRACEMALLOC_ENV, raising=False)
    else:
        monkeypatch.setenv(TRACEMALLOC_ENV, value)
    trace = MemoryTrace.from_env()
    assert (trace.every_s if trace else None) == every_s


class _Blob:
    """A gc-tracked object (gc.get_objects() lists containers and instances, not bytes) holding 4 KiB."""

    def __init__(self, i: int) -> None:
        self.data = b"g" * 4096 + bytes([i % 256])


_GROWN: list[_Blob] = []


def test_memory_trace_reports_totals_and_names_the_site_that_grew(caplog: pytest.LogCaptureFixture) -> None:
    trace = MemoryTrace(every_s=3600)
    trace.start()
    try:
        with caplog.at_level(logging.INFO, logger="nightjar.upkeep"):
            trace.report()  # the baseline
            _GROWN.extend(_Blob(i) for i in range(4000))  # ~16 MiB kept alive
            trace.report()
    finally:
        trace.stop()
        _GROWN.clear()
    lines = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("memtrace: rss") for m in lines) == 2
    assert "glibc heap" in lines[0] and "python traced" in lines[0]
    sites = [m for m in lines if m.startswith("memtrace: +")]
    # the largest growth is this test's 4 KiB blocks, named by the allocating line first (then its callers)
    assert sites and "+4000 blocks" in sites[0], sites[:3]
    assert sites[0].split(" at ", 1)[1].startswith("test_bench_soak.py:"), sites[0]
    assert any(m.startswith("memtrace: object types grown:") and "_Blob +4000" in m for m in lines), lines
