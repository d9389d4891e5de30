"""A real Spark standalone cluster (a master and two workers, each its own JVM, started by `nightjar cluster up` from
the installed PySpark distribution) runs the pipeline and gets the same events and the same alert ids as a
local-mode run of the same input."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

from core.config import TABLE_ALERTS, TABLE_EVENTS, Settings
from core.lake import table_dataset
from core.process_control import alive
from ingest.embedded_broker import EmbeddedBroker, free_port

REPO = Path(__file__).resolve().parent.parent
RULES = ("ssh_brute_force.yml", "sudo_non_admin.yml")  # a correlation (its own windowed query) and a single-event rule


def nightjar(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nightjar.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def event_ids(lake: Path) -> list[str]:
    return sorted(pc.struct_field(table_dataset(lake, TABLE_EVENTS).to_table(columns=["event"])["event"],
                                  "id").to_pylist())


def alert_ids(lake: Path) -> set[str]:
    return set(table_dataset(lake, TABLE_ALERTS).to_table(columns=["alert_id"])["alert_id"].to_pylist())


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(1800)
def test_the_pipeline_on_a_standalone_cluster_matches_local_mode(spark, tmp_path):
    from alerts.rule_loader import BUILTIN_RULES
    from core.triggers import QUERY_DETECT, QUERY_INGEST, Trigger
    from nightjar.pipeline import run_pipeline

    rules = tmp_path / "rules"
    rules.mkdir()
    for name in RULES:
        shutil.copy(BUILTIN_RULES / name, rules / name)
    state = tmp_path / "cluster"
    cluster = ["--state-dir", str(state), "--master-port", str(free_port()), "--ui-port", str(free_port())]
    with EmbeddedBroker() as broker:
        generated = nightjar("generate", "--events", "6000", "--seed", "11", "--scenarios",
                             "ssh_brute_force,ssh_brute_force_success,mistype_3", "--start", "2026-03-09T09:00:00Z",
                             "--bootstrap", broker.bootstrap, "--lake", str(tmp_path / "cluster-lake"), "--quiet")
        assert generated.returncode == 0, generated.stderr[-500:]
        shutil.copytree(tmp_path / "cluster-lake", tmp_path / "local-lake")  # the same reference tables

        up = nightjar("cluster", "up", *cluster, timeout=300)
        assert up.returncode == 0, up.stderr[-800:]
        # each pid file names its process by pid and start time (a pid alone may be another process's later)
        pids = {n: tuple(int(x) for x in (state / f"{n}.pid").read_text().split()) for n in ("master", "worker-1",
                                                                                              "worker-2")}
        assert all(len(ref) == 2 and alive(*ref) for ref in pids.values()), pids
        try:
            master = up.stdout.split("master ", 1)[1].split()[0]
            assert master.startswith("spark://127.0.0.1:")
            status = nightjar("cluster", "status", *cluster)
            assert "2 worker(s) alive" in status.stdout, status.stdout + status.stderr
            on_cluster = nightjar("run", "--available-now", "--query", QUERY_INGEST, "--query", QUERY_DETECT,
                                  "--rules", str(rules), "--no-builtin-rules", "--bootstrap", broker.bootstrap,
                                  "--lake", str(tmp_path / "cluster-lake"), env={"NIGHTJAR_SPARK_MASTER": master})
            assert on_cluster.returncode == 0, on_cluster.stderr[-1500:]
            assert f"master={master}" in on_cluster.stderr
            # The tasks ran in the workers' executors (their own JVMs and Python workers), not in the driver.
            executors = list(state.glob("worker-*-work/app-*/*/stderr"))
            assert len({p.parts[-4] for p in executors}) == 2, f"both workers ran executors: {executors}"
        finally:
            down = nightjar("cluster", "down", *cluster)
        assert down.returncode == 0, down.stderr[-500:]
        assert not [n for n, ref in pids.items() if alive(*ref)], "cluster down stops every JVM"

        # The same input in local mode (the test session's local[2] Spark).
        local = Settings(bootstrap=broker.bootstrap, lake=tmp_path / "local-lake", shuffle_partitions=2,
                         rules=(rules,), builtin_rules=False)
        run_pipeline(local, Trigger(available_now=True), [QUERY_INGEST, QUERY_DETECT])

    cluster_events, local_events = event_ids(tmp_path / "cluster-lake"), event_ids(tmp_path / "local-lake")
    assert len(local_events) > 5000 and cluster_events == local_events
    cluster_alerts, local_alerts = alert_ids(tmp_path / "cluster-lake"), alert_ids(tmp_path / "local-lake")
    assert local_alerts and cluster_alerts == local_alerts


# --- without a cluster: quick, so that nightjar/cluster.py stays in the quick tier -------------------------------------

def _cluster_args(*argv: str) -> argparse.Namespace:
    from nightjar import cluster

    parser = argparse.ArgumentParser()
    cluster.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_pid_file_a_reboot_left_is_no_cluster_and_down_clears_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The state directory names the master by a pid that runs (this test's own) with another start time: what a
    reboot leaves behind. Status says nothing runs (exit 3) and down stops nothing, above all not that process."""
    from nightjar import cluster

    layout = cluster.ClusterLayout(tmp_path)
    layout.pid_file("worker-1").write_text(f"{os.getpid()} 1\n")
    layout.pid_file("master").write_text(f"{os.getpid()} 1\n")
    assert layout.names() == ["master", "worker-1"]  # master first
    settings = Settings(lake=tmp_path / "lake")
    assert cluster.run(_cluster_args("status", "--state-dir", str(tmp_path)), settings) == 3
    assert capsys.readouterr().out.strip() == f"no cluster runs from {tmp_path}"
    assert cluster.run(_cluster_args("down", "--state-dir", str(tmp_path)), settings) == 0
    assert capsys.readouterr().out.strip() == f"no cluster runs from {tmp_path}"
    assert layout.names() == []  # the stale files are gone; this process still runs
    assert cluster.master_state(cluster.ClusterLayout(tmp_path, ui_port=free_port()), timeout=0.5) is None
    assert cluster.alive_workers(None) == 0
    assert cluster.alive_workers({"workers": [{"state": "ALIVE"}, {"state": "DEAD"}]}) == 1


def test_workers_and_cores_below_one_are_a_usage_error(tmp_path: Path) -> None:
    from core.errors import UserError
    from nightjar import cluster

    for flag in ("--workers", "--worker-cores"):
        with pytest.raises(UserError, match="--workers and --worker-cores must be at least 1") as caught:
            cluster.run(_cluster_args("up", flag, "0", "--state-dir", str(tmp_path)), Settings(lake=tmp_path))
        assert caught.value.exit_code == 2
    assert not list(tmp_path.iterdir())  # nothing started, nothing written
