"""``nightjar bench pipeline``: the drained mode end to end at tiny scale, real broker and Spark (figures, not timings).

The benchmark starts its own embedded broker and runs ``nightjar generate`` / ``nightjar run`` as subprocesses, so
the test runs it as a user would: the CLI in a subprocess, ``--json FILE``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from nightjar.benchmarks.bench_pipeline import STAGES
from tests.cli_process import NIGHTJAR, REPO, run_nightjar


@pytest.mark.slow
@pytest.mark.bench  # 8 min quiet on 2 cores (two Spark applications and a drain): on demand, `scripts/test -m bench`
@pytest.mark.timeout(2400)  # two Spark applications and a pipeline run: minutes on a busy 2-core machine
def test_drained_tiny_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    events = 3000
    done = run_nightjar(["bench", "pipeline", "--events", str(events), "--json", str(out)], timeout=2300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    d = report["drained"]
    assert d["events"] == events
    assert d["raw_consume"]["records"] == events and d["raw_consume"]["events_per_s"] > 0
    assert d["tables"]["bronze"] == events
    assert d["events_counted"] == events  # events + quarantine: every record accounted for
    p = d["pipeline"]
    assert p["events_per_s_end_to_end"] > 0 and p["ratio_to_raw_end_to_end"] > 0
    assert p["events_per_s_since_first_batch"] > 0 and p["ingest_batches"] >= 1
    assert d["alerts"]["raised"] >= 0 and d["alerts"]["published_kafka"] >= d["alerts"]["raised"]
    assert isinstance(d["target_met"], bool)
    assert [r["stage"] for r in d["stages"]["rows"]] == list(STAGES)
    assert all(r["seconds"] >= 0 for r in d["stages"]["rows"])
    assert abs(sum(r["share"] for r in d["stages"]["rows"]) - 1.0) < 0.01
    for load in (report["load_average"], d["load_average"]):
        assert len(load["start"]) == 3 and load["samples"] >= 1
    # the table went to stdout, the JSON to the file
    assert "events/s" in done.stdout and "per-stage cost" in done.stdout


def test_bad_arguments_are_one_line_exit_2() -> None:
    for args in (["--events", "0"], ["--mode", "sideways"], ["--start", "2999-01-01T00:00:00Z"],
                 ["--rates", "fast"], ["--trigger", "soon"]):
        proc = subprocess.run([*NIGHTJAR, "bench", "pipeline", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
