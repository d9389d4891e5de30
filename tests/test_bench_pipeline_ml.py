"""``nightjar bench pipeline --mode live-ml``: the live run without and with a trained model, end to end at tiny
scale against the benchmark's own real broker and Spark (figures, not timings: issue #15's <= 20 % bar is measured
by the benchmark at 500 hosts, docs/ml.md "Cost in the live pipeline").

The model is trained in the test through the real CLI (`nightjar ml train --generated`) on a few generated hours of
the same organization the benchmark then simulates (seed 1, 12 hosts, 300 users), as tests/test_ml_pipeline.py
trains its models on generated history.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from generator.command import generate_files
from tests.cli_process import run_nightjar

MONDAY = dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()
HOSTS, USERS, SEED = 12, 300, 1  # the benchmark's organization: --hosts 12 --seed 1, its reference tables' 300 users
TRAIN_H = 5  # >= 4 hours: `ml train` needs four hourly windows to hold one quarter out for the threshold
DURATION_S = 60


@pytest.fixture(scope="module")
def model_lake(tmp_path_factory) -> Path:
    """A lake holding a behavioural and a domain model trained on 5 benign generated hours of the organization."""
    root = tmp_path_factory.mktemp("bench-ml")
    generate_files(root / "train", seed=SEED, hosts=HOSTS, users=USERS, start=MONDAY, duration=TRAIN_H * 3600,
                   scenarios={})
    lake = root / "lake"
    done = run_nightjar(["ml", "train", "--lake", str(lake), "--generated", str(root / "train")], timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    listed = run_nightjar(["ml", "list", "--lake", str(lake)], timeout=120)
    assert listed.returncode == 0 and "usable" in listed.stdout, listed.stdout + listed.stderr
    return lake


@pytest.mark.slow
@pytest.mark.bench  # two live pipeline runs and a model fit: ~12 min at load 8-13, not in the default run (-m bench)
@pytest.mark.timeout(3600)  # a model fit and two live pipeline runs: many minutes on a busy 2-core machine
def test_live_ml_runs_without_then_with_the_model_and_reports_every_figure(model_lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = run_nightjar(["bench", "pipeline", "--mode", "live-ml", "--model-from", str(model_lake), "--hosts", str(HOSTS),
                      "--seed", str(SEED), "--duration", str(DURATION_S), "--sample-seconds", "2", "--drain-timeout", "600",
                      "--json", str(out)], timeout=2400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    r = report["live_ml"]
    assert r["order"] == ["without", "with"] and r["model_from"] == str(model_lake)
    without, with_ = r["without_model"], r["with_model"]

    # Same organization, seed and duration in both halves; both caught up, and both stopped cleanly.
    for run in (without, with_):
        assert run["hosts"] == HOSTS and run["duration_s"] == DURATION_S
        assert run["events"] > 0 and run["caught_up"] is True
        assert run["pipeline_exit_code_on_sigterm"] == 0
        assert run["alert_consumer_error"] is None
        lat = run["latency"]
        for group in ("overall", "single_event", "windowed", "rules", "ml"):
            assert set(lat[group]) >= {"alerts", "p50", "p95", "p99", "max"}
        # rule alerts and ML alerts partition every alert raised
        assert lat["rules"]["alerts"] + lat["ml"]["alerts"] == lat["overall"]["alerts"]
        assert lat["rules"]["alerts"] >= 1  # the seed's scenarios fire rules in both halves: a p50 to compare
        rules = lat["rules"]
        assert 0 <= rules["p50"] <= rules["p95"] <= rules["p99"] <= rules["max"]
        load = run["load_average"]
        assert len(load["start"]) == 3 and load["samples"] >= 1 and load["mean_1m"] >= 0

    # Without the model: no ML query, no ML alert. With it: the copied models scored in the `ml` query.
    assert without["models"] == [] and without["ml_query"] is None and without["latency"]["ml"]["alerts"] == 0
    assert any(m.startswith("behaviour v") for m in with_["models"])
    q = with_["ml_query"]
    assert q["progress_rows"] >= 1 and q["batches_with_input"] >= 1 and q["input_rows"] >= 1
    assert len(q["batch_ms_all"]) == q["batches_with_input"] and all(ms >= 0 for ms in q["batch_ms_all"])
    assert q["batch_ms"]["p50"] <= q["batch_ms"]["max"]
    assert with_["max"]["ml_lag"] >= 0

    # The comparison is computed from the two runs' own figures.
    c = r["comparison"]
    wo_p50, w_p50 = without["latency"]["rules"]["p50"], with_["latency"]["rules"]["p50"]
    assert c["rules_without"]["p50"] == wo_p50 and c["rules_with"]["p50"] == w_p50
    if wo_p50:
        assert c["p50_ratio_rules"] == round(w_p50 / wo_p50, 3)
        assert c["target_met"] is (c["p50_ratio_rules"] <= 1.2)
    else:  # every rule alert at once (p50 0): no ratio, no verdict
        assert c["p50_ratio_rules"] is None and c["target_met"] is None
    assert c["ml_batch_ms"] == q["batch_ms"]
    assert c["load_1m_mean_without"] == without["load_average"]["mean_1m"]
    assert c["load_1m_mean_with"] == with_["load_average"]["mean_1m"]
    # the table went to stdout, the JSON to the file
    assert "live-ml" in done.stdout and "with/without" in done.stdout and "ML scoring" in done.stdout


def test_live_ml_without_a_model_lake_is_one_line_exit_2(tmp_path: Path) -> None:
    for args, needle in ((["--mode", "live-ml"], "needs --model-from"),
                         (["--mode", "live-ml", "--model-from", str(tmp_path)], "no models under"),
                         (["--mode", "drained", "--model-from", str(tmp_path)], "live and live-ml only")):
        done = run_nightjar(["bench", "pipeline", *args], timeout=120)
        assert done.returncode == 2, done.stderr
        assert needle in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
