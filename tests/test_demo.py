"""`nightjar demo --duration S`: everything starts, data flows, everything stops, nothing is left behind."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from core.lake import is_delta_table, row_count
from core.process_control import alive, descendants, identify
from ingest.embedded_broker import free_port

REPO = Path(__file__).resolve().parent.parent


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().split(")")[-1].split()[0]
        return f"{state} {text}"
    except OSError:
        return "?"


@pytest.mark.slow
@pytest.mark.e2e
def test_demo_runs_everything_and_stops_cleanly(tmp_path):
    """No fixed duration: the demo runs until parsed events reach the lake (bounded generously: a fresh 2-core
    machine needs most of a minute to warm Spark up), then SIGTERM must stop everything, as Ctrl-C would."""
    lake = tmp_path / "lake"
    broker_port, dash_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nightjar.cli", "demo", "--lake", str(lake),
         "--broker-port", str(broker_port), "--dashboard-port", str(dash_port), "--rate", "300",
         "--status-every", "5"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen_children: dict[int, int] = {}  # pid -> start time: a pid freed during the run may be reused
    state = {"url_checked": False}
    lines: list[str] = []

    def read_stdout() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            m = re.search(r"Dashboard: (http://\S+)", line)
            if m and not state["url_checked"]:
                assert m.group(1) == f"http://127.0.0.1:{dash_port}"
                with urllib.request.urlopen(m.group(1) + "/_stcore/health", timeout=10) as resp:
                    state["url_checked"] = resp.status == 200

    # Each pipe has exactly one reader: communicate() alongside the stdout thread would race it for the last
    # lines ("demo stopped"), and an unread stderr pipe could fill and block the demo.
    err_chunks: list[str] = []
    reader = threading.Thread(target=read_stdout, daemon=True)
    err_reader = threading.Thread(target=lambda: err_chunks.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    reader.start()
    err_reader.start()
    deadline = time.monotonic() + 400
    try:
        while not (_rows(lake, "bronze") > 0 and _rows(lake, "events") > 0):
            assert proc.poll() is None, f"the demo exited early: {''.join(err_chunks)[-3000:]}"
            assert time.monotonic() < deadline, f"no events after 400 s: {''.join(lines)[-2000:]}"
            seen_children |= identify(descendants(proc.pid))
            time.sleep(1)
        seen_children |= identify(descendants(proc.pid))
    finally:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=180)
    reader.join(10)
    err_reader.join(10)
    out, err = "".join(lines), "".join(err_chunks)
    assert proc.returncode == 0, err[-3000:]
    assert state["url_checked"], out
    assert f"127.0.0.1:{broker_port}" in out and "nightjar.raw.syslog" in out and "nightjar.alerts" in out
    assert "demo stopped" in out
    assert len(seen_children) >= 4, "expected broker, generator, pipeline and dashboard processes"
    survivors = [p for p, started in seen_children.items() if alive(p, started)]
    assert survivors == [], f"processes left behind: {[(p, _cmdline(p)) for p in survivors]}"
    # The generator seeded the reference tables and, stopped by SIGTERM, wrote its ground truth.
    assert row_count(lake, "assets") > 0 and row_count(lake, "networks") > 0
    assert (lake / "ground_truth").exists()
    pipeline_log = (lake / "_logs" / "pipeline.log").read_text()
    # The pipeline finished its own stop, also when the JVM's SIGTERM hook stopped Spark first (seen: a traceback
    # from removing the progress listener of a JVM already gone).
    assert "pipeline stopped" in pipeline_log and "ConnectionRefusedError" not in pipeline_log, pipeline_log[-3000:]
    # A clean stop: no traceback. (Spark's own log can still show an ERROR from a shutdown race inside the JVM — seen:
    # TorrentBroadcast "Store broadcast ... fail" once in three stops; tests/test_clean_exits.py checks the stop of
    # `nightjar run` for ERROR lines.)
    assert "Traceback" not in pipeline_log, pipeline_log[-3000:]


def _rows(lake: Path, table: str) -> int:
    return row_count(lake, table) if is_delta_table(lake / table) else 0


# --- without starting the demo: quick, so that nightjar/demo.py stays in the quick tier ------------------------------

def test_stopping_the_demos_children_leaves_none_of_their_processes_and_a_dead_child_is_reported(tmp_path: Path):
    """A child with a grandchild in a process group of its own (as PySpark's daemons are), which the child's SIGTERM
    does not reach, is gone with its whole tree after stop_all; a child that exited is reported with its status."""
    from nightjar.demo import _Children

    children = _Children()
    parent = ("import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True); "
              "print('ready', flush=True); time.sleep(120)")
    children.start("parent", [sys.executable, "-c", parent], tmp_path / "parent.log")
    children.start("quitter", [sys.executable, "-c", "raise SystemExit(7)"], tmp_path / "quitter.log")
    deadline = time.monotonic() + 60
    while "ready" not in (tmp_path / "parent.log").read_text() or children.procs["quitter"].poll() is None:
        assert time.monotonic() < deadline, "the children did not start"
        time.sleep(0.1)
    assert children.failed() == ("quitter", 7)
    tree = identify(descendants(children.procs["parent"].pid) | {children.procs["parent"].pid})
    assert len(tree) == 2
    children.stop_all()  # the grandchild outlives the group's SIGTERM: killed after the reap's 10-s grace
    assert not [pid for pid, started in tree.items() if alive(pid, started)]


@pytest.mark.parametrize(("args", "message"), [(["--duration", "0"], "--duration must be positive"),
                                               (["--rate", "-5"], "--rate must be positive")])
def test_a_non_positive_duration_or_rate_is_a_usage_error(tmp_path: Path, args: list[str], message: str) -> None:
    import argparse

    from core.config import Settings
    from core.errors import UserError
    from nightjar import demo

    parser = argparse.ArgumentParser()
    demo.add_arguments(parser)
    with pytest.raises(UserError, match=message) as caught:
        demo.run(parser.parse_args(args), Settings(lake=tmp_path / "lake"))
    assert caught.value.exit_code == 2 and not (tmp_path / "lake").exists()
