"""Clean exits: commands that read several Delta tables exit 0, and every long-running command stops, with everything
it started, on SIGTERM.

The exit-134 abort after reading Delta tables (deltalake 1.6.6 / pyarrow 26; cause in core/clean_exit.py) is
timing-dependent. ``test_arrow_threads_busy_at_exit_do_not_abort_the_program`` makes it near-certain by keeping Arrow
threads scanning through deltalake's Python filesystem while the program ends, so the workaround is tested on
every run, not once in thirty.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from core.lake import is_delta_table
from core.process_control import alive, descendants, identify, reap
from ingest.embedded_broker import free_port, port_is_open

REPO = Path(__file__).resolve().parent.parent


def nightjar(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nightjar.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def generated_lake(broker, tmp_path_factory) -> Path:
    """A lake with the generator's tables (reference tables, ground truth, hard negatives) and an alerts table."""
    from deltalake import write_deltalake

    lake = tmp_path_factory.mktemp("clean-exits") / "lake"
    done = nightjar("generate", "--events", "8000", "--seed", "4", "--scenarios", "ssh_brute_force,mistype_3",
                    "--start", "2026-03-09T09:00:00Z", "--bootstrap", broker.bootstrap,
                    "--lake", str(lake), "--quiet")
    assert done.returncode == 0, done.stderr
    t0 = dt.datetime(2026, 3, 9, 10, 0)
    alerts = pa.Table.from_pylist([
        {"alert_id": f"a{i}", "revision": 1, "rule_id": "ssh_brute_force", "entity": {"type": "ip", "value": f"10.0.0.{i}"},
         "first_seen": t0, "last_seen": t0 + dt.timedelta(minutes=i), "detected_at": t0 + dt.timedelta(minutes=i + 1)}
        for i in range(5)])
    for _ in range(3):  # several files, like a streaming writer's
        write_deltalake(str(lake / "alerts"), alerts, mode="append")
    return lake


@pytest.mark.slow
def test_arrow_threads_busy_at_exit_do_not_abort_the_program(generated_lake):
    """Scans through deltalake's PyFileSystem still running when the program ends: without the workaround most such
    runs abort (134 or 139, measured 6 of 10); through ``run_as_program`` every one exits with the command's status."""
    script = textwrap.dedent(f"""
        import threading
        from core.clean_exit import run_as_program
        from deltalake import DeltaTable

        started = threading.Event()

        def scan():
            dataset = DeltaTable({str(generated_lake / 'assets')!r}).to_pyarrow_dataset()
            while True:
                for _ in dataset.to_batches(batch_size=10):
                    started.set()

        def main():
            for _ in range(6):
                threading.Thread(target=scan, daemon=True).start()
            started.wait()
            print("read")
            return 3

        run_as_program(main)
    """)
    for _ in range(5):
        done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stdout) == (3, "read\n"), done.stderr[-500:]


@pytest.mark.slow
def test_commands_reading_several_tables_exit_zero(generated_lake, broker):
    from core.config import TOPIC_ALERTS, Settings
    from ingest.embedded_broker import ensure_topics

    ensure_topics(Settings(bootstrap=broker.bootstrap), (TOPIC_ALERTS,))
    lake = ["--lake", str(generated_lake)]
    for _ in range(3):
        tables = nightjar("tables", *lake)
        assert tables.returncode == 0, tables.stderr[-500:]
        assert {"assets", "users", "ground_truth", "ground_truth_negatives", "alerts"} <= {
            line.split()[0] for line in tables.stdout.splitlines()[1:]}
        score = nightjar("score", "--json", *lake)
        assert score.returncode == 0, score.stderr[-500:]
        assert '"alerts_total": 5' in score.stdout
    tail = nightjar("alerts", "tail", "--no-follow", "--from-beginning", "--bootstrap", broker.bootstrap, *lake)
    assert tail.returncode == 0, tail.stderr[-500:]


def test_a_usage_error_keeps_its_status_and_one_line():
    done = nightjar("tables", "--no-such-option")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1


# --- stopping: SIGTERM to each long-running command leaves no process behind --------------------------------------

def _start(args: list[str], log: Path, stderr: Path | None = None, session: bool = False) -> subprocess.Popen:
    """``nightjar ARGS`` in the background, output to ``log`` (stderr to ``stderr`` if given); with ``session`` in a
    session and process group of its own, as `nightjar demo` starts its children."""
    out = open(log, "wb")  # noqa: SIM115 - the child's log, closed with the test's tmp dir
    err = open(stderr, "wb") if stderr else subprocess.STDOUT  # noqa: SIM115 - likewise
    return subprocess.Popen([sys.executable, "-m", "nightjar.cli", *args], cwd=REPO, stdout=out, stderr=err,
                            start_new_session=session)


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"{what}: the command exited early ({proc.returncode}): {log.read_text()[-800:]}")
        if time.monotonic() > deadline:
            _kill_tree(proc)  # a failed test leaves nothing running on the shared cores (a pipeline ran on for 16 min)
            raise AssertionError(f"{what} did not happen within {timeout:.0f}s: {log.read_text()[-800:]}")
        time.sleep(0.3)


def _kill_tree(proc: subprocess.Popen) -> None:
    tree = identify(descendants(proc.pid))
    proc.kill()
    proc.wait()
    reap(tree, grace_s=0)


def _terminate_and_check(proc: subprocess.Popen, log: Path, timeout: float = 120, group: bool = False) -> dict[int, str]:
    """SIGTERM to the command only (as `kill PID`, systemd's or `docker stop`'s first signal), or with ``group`` to
    its process group (as `nightjar demo` stops its children, or `kill -- -PGID`): it must exit and leave no process
    it started. Returns the command lines of what it had started."""
    tree = identify(descendants(proc.pid))  # by pid and start time: a pid freed meanwhile may be reused
    started = {p: _cmd(p) for p in tree}
    if group:
        os.killpg(proc.pid, signal.SIGTERM)
    else:
        proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        raise AssertionError(f"did not stop within {timeout:.0f}s of SIGTERM: {log.read_text()[-800:]}") from None
    assert code in (0, 130, -signal.SIGTERM), log.read_text()[-800:]
    deadline = time.monotonic() + 15
    while any(alive(p, t) for p, t in tree.items()) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p, t in tree.items() if alive(p, t)]
    reap({p: tree[p] for p in left}, grace_s=0)
    assert not left, f"left running after SIGTERM: {left}"
    return started


@pytest.mark.slow
def test_sigterm_stops_the_dashboard_and_its_server(tmp_path):
    port = free_port()
    log = tmp_path / "dashboard.log"
    proc = _start(["dashboard", "--lake", str(tmp_path / "lake"), "--port", str(port)], log)
    _wait_for(lambda: port_is_open("127.0.0.1", port), 120, "the dashboard listening", proc, log)
    started = _terminate_and_check(proc, log)
    assert started, "the dashboard runs Streamlit as a child process"
    assert not port_is_open("127.0.0.1", port), "nothing may serve on the port after the dashboard stopped"


def test_sigterm_stops_the_broker(tmp_path):
    port = free_port()
    log = tmp_path / "broker.log"
    proc = _start(["broker", "--port", str(port)], log)
    _wait_for(lambda: "broker ready" in log.read_text(), 60, "the broker ready", proc, log)
    _terminate_and_check(proc, log)
    assert not port_is_open("127.0.0.1", port)


def test_sigterm_stops_a_paced_generator_and_a_follower(tmp_path, broker):
    from core.config import ALL_TOPICS, Settings
    from ingest.embedded_broker import ensure_topics

    ensure_topics(Settings(bootstrap=broker.bootstrap), ALL_TOPICS)  # `alerts tail` follows an existing topic
    lake = tmp_path / "lake"
    gen_log, tail_log = tmp_path / "generate.log", tmp_path / "tail.log"
    gen = _start(["generate", "--rate", "50", "--events", "1000000", "--seed", "2", "--bootstrap", broker.bootstrap,
                  "--lake", str(lake), "--quiet"], gen_log)
    tail = _start(["alerts", "tail", "--bootstrap", broker.bootstrap], tail_log)
    # Past the reference tables (the last one written before the first event), the generator is pacing events.
    _wait_for(lambda: is_delta_table(lake / "iocs"), 120, "the generator running", gen, gen_log)
    time.sleep(1.0)
    _terminate_and_check(gen, gen_log)
    # Stopped by SIGTERM, the generator still writes the ground truth of what it generated (it was interrupted).
    assert is_delta_table(lake / "ground_truth"), gen_log.read_text()[-800:]
    _terminate_and_check(tail, tail_log)


@pytest.mark.slow
def test_sigterm_stops_a_live_pipeline_and_its_spark_processes(tmp_path, broker):
    lake = tmp_path / "lake"
    log = tmp_path / "run.log"
    proc = _start(["run", "--create", "--bootstrap", broker.bootstrap, "--lake", str(lake), "--trigger", "2s",
                   "--upkeep-every", "5s"], log)
    _wait_for(lambda: (lake / "pipeline_progress" / "_delta_log").is_dir(), 240, "a first micro-batch", proc, log)
    started = _terminate_and_check(proc, log, timeout=180)
    assert any("java" in cmd for cmd in started.values()), f"the pipeline ran a Spark JVM: {started}"
    text = log.read_text()
    assert proc.returncode == 0 and "Traceback" not in text, text[-3000:]
    assert "pipeline stopped" in text
    assert "upkeep: every 5s" in text, "a live run starts the background upkeep"


@pytest.mark.slow
def test_sigterm_to_the_pipelines_process_group_stops_it_cleanly(tmp_path):
    """SIGTERM to the pipeline's whole process group while events flow (how `nightjar demo` stops it, or `kill --
    -PGID`): exit 0, no traceback, and no ERROR in Spark's log. The signal used to reach the JVM as well, whose own
    hook stopped Spark under the running queries: Py4J tracebacks ("Answer from Java side is empty", EOFError), exit
    1, and TaskSchedulerImpl / "Python worker crashed" / rejected-task ERRORs in lake/_logs."""
    from ingest.embedded_broker import EmbeddedBroker

    lake = tmp_path / "lake"
    with EmbeddedBroker() as own:  # its own topics: the session broker's other data would only slow the run
        gen_log = tmp_path / "generate.log"
        gen = _start(["generate", "--rate", "100", "--events", "1000000", "--seed", "5", "--bootstrap", own.bootstrap,
                      "--lake", str(lake), "--quiet"], gen_log)
        try:
            _wait_for(lambda: is_delta_table(lake / "iocs"), 120, "the generator running", gen, gen_log)
            log, err = tmp_path / "run.log", tmp_path / "run.err"
            proc = _start(["run", "--bootstrap", own.bootstrap, "--lake", str(lake), "--trigger", "1s"], log,
                          stderr=err, session=True)
            # A first micro-batch recorded while events keep arriving: tasks are running or about to when it stops.
            _wait_for(lambda: (lake / "pipeline_progress" / "_delta_log").is_dir(), 420, "a first micro-batch", proc,
                      err)
            time.sleep(2.0)
            # Whether the JVM's own hook wins the race against Python's ordered stop depends on timing (a loaded
            # machine's stop with one query running raced nothing); that the JVM cannot get the group's signal does
            # not, so it is checked as well.
            jvm_groups = {p: os.getpgid(p) for p in descendants(proc.pid) if "java" in _cmd(p)}
            started = _terminate_and_check(proc, err, timeout=180, group=True)
        finally:
            _terminate_and_check(gen, gen_log)
    assert jvm_groups, f"the pipeline ran a Spark JVM: {started}"
    assert proc.pid not in jvm_groups.values(), "the JVM shares the pipeline's process group"
    assert proc.returncode == 0, err.read_text()[-2000:]
    stderr = err.read_text()
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "pipeline stopped" in stderr
    spark_logs = sorted((lake / "_logs").glob("*.log"))
    assert spark_logs, "Spark's log goes to the lake's _logs"
    errors = [line for f in spark_logs for line in f.read_text(errors="replace").splitlines() if " ERROR " in line]
    assert not errors, "\n".join(errors[:20])


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_sigterm_stops_a_paced_replay_after_delivering_what_it_sent(tmp_path, broker):
    """A paced replay stopped by SIGTERM flushes what it produced, says how far it got and exits 130: every line it
    reports as replayed is on the topic, none more."""
    import re
    import uuid

    from core.config import TOPIC_RAW_SYSLOG
    from tests.test_replay import consume_all

    marker = uuid.uuid4().hex[:12]
    capture = tmp_path / "auth.log"
    capture.write_text("".join(f"<38>Mar 24 16:00:{i % 60:02d} host-{marker} sshd[{i}]: Failed password for root "
                               f"from 10.0.0.6 port {i} ssh2\n" for i in range(2000)))
    log = tmp_path / "replay.log"
    proc = _start(["replay", str(capture), "--rate", "20", "--bootstrap", broker.bootstrap], log)
    _wait_for(lambda: re.search(r"replay \[#*\s*\] [1-9]\d*/2,000", log.read_text()), 120, "lines sent", proc, log)
    time.sleep(1.0)
    _terminate_and_check(proc, log)
    assert proc.returncode == 130, log.read_text()[-800:]
    summary = re.search(r"replayed (\d+) lines .*: interrupted before the end of the input", log.read_text())
    assert summary, log.read_text()[-800:]
    sent = int(summary[1])
    assert 0 < sent < 2000
    got = consume_all(broker.bootstrap, TOPIC_RAW_SYSLOG, marker.encode())
    assert len(got) == sent
