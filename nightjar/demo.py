"""``nightjar demo``: the whole loop on one machine — broker, generator, pipeline, dashboard.

Starts the embedded broker (unless ``--bootstrap`` names a Kafka cluster), the generator (``nightjar generate
--rate R``, a child process: benign traffic with labelled attacks, reference tables into the lake; it replays the
last simulated hour at R lines/s, so every scenario shows up in the first minutes, then goes on in real time), the
streaming pipeline (``nightjar run``, a child process) and the dashboard (Streamlit, a child process);
prints the dashboard URL and the topics; prints a status line every few seconds; stops everything on
Ctrl-C / SIGTERM or after ``--duration`` seconds. Every child runs in its own process group and is stopped
(SIGTERM, then SIGKILL after a grace period) before the demo exits, so nothing is left behind.
"""

from __future__ import annotations

import argparse
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar
# demo`'s arguments, and --help or a bad argument must not wait for pyspark (nightjar/cli.py).
from core.config import ALL_TOPICS, DEFAULT_BROKER_PORT, TABLE_ALERTS, TABLE_BRONZE, TABLE_EVENTS, Settings
from core.errors import UserError
from core.lake import excluded_from_detection, is_delta_table, row_count
from core.process_control import descendants, identify, reap, signal_group
from core.triggers import parse_interval
from dashboard.launcher import start_dashboard, wait_until_ready
from ingest.embedded_broker import EmbeddedBroker, ensure_topics, free_port, port_is_open

log = logging.getLogger(__name__)

# Each child's SIGTERM-to-SIGKILL grace. The pipeline needs the most: Settings.stop_wait_s (from the signal) for a
# running micro-batch, then its flush and Spark's stop; a cold batch on a loaded 2-core machine takes longer than the
# wait and is interrupted (replayed by the next run), so the stop ends within about stop_wait_s + 10 s.
STOP_GRACE_S = 45.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, metavar="S", help="stop by itself after S seconds (exit 0)")
    parser.add_argument("--broker-port", type=int, default=DEFAULT_BROKER_PORT,
                        help="port of the embedded broker (default 9092; a free one if that is taken)")
    parser.add_argument("--dashboard-port", type=int, default=8501, help="dashboard port (default 8501)")
    parser.add_argument("--rate", type=float, default=200.0, help="raw log lines per second while the generator replays the last hour (default 200); real time after that")
    parser.add_argument("--seed", type=int, default=1, help="generator seed (default 1)")
    parser.add_argument("--trigger", default="1s", help="pipeline micro-batch interval (default 1s)")
    parser.add_argument("--status-every", type=float, default=10.0, metavar="S", help="status line interval")


class _Children:
    """Child processes in their own process groups, stopped together."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], log_file: Path, env: dict[str, str] | None = None) -> None:
        out = open(log_file, "ab")  # noqa: SIM115 - handed to the child
        self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                            env=env)
        log.info("started %s (pid %d), log %s", name, self.procs[name].pid, log_file)

    def adopt(self, name: str, proc: subprocess.Popen) -> None:
        self.procs[name] = proc

    def failed(self) -> tuple[str, int] | None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                return name, proc.returncode
        return None

    def stop_all(self) -> None:
        # PySpark's Python worker daemons start their own process group, so signalling a child's group does not
        # reach them: remember every descendant now, and make sure each one is gone before the demo exits.
        tree = identify(p for proc in self.procs.values() for p in descendants(proc.pid))
        for name, proc in reversed(list(self.procs.items())):
            if proc.poll() is None:
                log.info("stopping %s (pid %d)", name, proc.pid)
                signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for name, proc in self.procs.items():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs: killing it", name, STOP_GRACE_S)
            # Whatever the leader did, nothing of its group may outlive the demo.
            signal_group(proc, signal.SIGKILL)
            proc.wait()
        reap(tree, grace_s=10.0)


def _rows(lake: Path, table: str) -> int:
    return row_count(lake, table) if is_delta_table(lake / table) else 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    from nightjar.pipeline import check_lake_writable

    if args.duration is not None and args.duration <= 0:
        raise UserError("--duration must be positive", exit_code=2)
    if args.rate <= 0:
        raise UserError("--rate must be positive", exit_code=2)
    parse_interval(args.trigger)
    check_lake_writable(settings.lake)
    logs = settings.lake / "_logs"
    logs.mkdir(parents=True, exist_ok=True)

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("received %s: stopping the demo", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    broker = None
    children = _Children()
    try:
        if settings.bootstrap is None:
            port = args.broker_port
            if port_is_open("127.0.0.1", port):
                port = free_port()
                log.info("port %d is taken: the embedded broker uses %d", args.broker_port, port)
            broker = EmbeddedBroker(port=port, log_file=logs / "broker.log").start()
            settings = settings.with_(bootstrap=broker.bootstrap)
        ensure_topics(settings, ALL_TOPICS)

        common = ["--bootstrap", settings.bootstrap_servers, "--lake", str(settings.lake)]
        children.start("pipeline", [sys.executable, "-m", "nightjar.cli", "run", *common, "--trigger", args.trigger],
                       logs / "pipeline.log")
        dash_port = args.dashboard_port if not port_is_open("127.0.0.1", args.dashboard_port) else free_port()
        children.adopt("dashboard", start_dashboard(settings, dash_port, log_file=logs / "dashboard.log"))
        url = f"http://127.0.0.1:{dash_port}"
        wait_until_ready(url, timeout=60)

        # The generator writes the reference tables before its first event, so enrichment has them at once.
        children.start("generator", [sys.executable, "-m", "nightjar.cli", "generate", *common, "--rate",
                                     str(args.rate), "--seed", str(args.seed), "--quiet"], logs / "generator.log")
        print(f"Nightjar demo running. Dashboard: {url}", flush=True)
        print(f"Kafka: {settings.bootstrap_servers}; topics: {', '.join(ALL_TOPICS)}", flush=True)
        print(f"Lake: {settings.lake.resolve()} (logs in {logs.resolve()}). Ctrl-C stops everything.", flush=True)

        started = time.monotonic()
        first_alert_s: float | None = None
        next_status = started + args.status_every
        while not stop.is_set():
            if args.duration is not None and time.monotonic() - started >= args.duration:
                log.info("--duration %.0fs reached", args.duration)
                break
            if broker is not None and broker.process is not None and broker.process.poll() is not None:
                raise UserError(f"the embedded broker exited; see {logs / 'broker.log'}")
            failed = children.failed()
            if failed:
                name, code = failed
                raise UserError(f"the {name} exited with code {code}; see {logs / (name + '.log')}")
            # The first alert is looked for every second (one table's log), so its time is exact to the second.
            if first_alert_s is None and _rows(settings.lake, TABLE_ALERTS):
                first_alert_s = time.monotonic() - started
                print(f"demo: first alert after {first_alert_s:.0f}s (`nightjar alerts tail` or the dashboard shows "
                      "it)", flush=True)
            if time.monotonic() >= next_status:
                next_status += args.status_every
                counts = {t: _rows(settings.lake, t) for t in (TABLE_BRONZE, TABLE_EVENTS, TABLE_ALERTS)}
                elapsed = time.monotonic() - started
                excluded = excluded_from_detection(settings.lake)
                print(f"demo: {elapsed:.0f}s, bronze {counts[TABLE_BRONZE]:,} rows, events "
                      f"{counts[TABLE_EVENTS]:,}, alert revisions {counts[TABLE_ALERTS]:,}"
                      + (f", {excluded:,} left out of detection (stamped in the future)" if excluded else ""),
                      flush=True)
            stop.wait(1.0 if first_alert_s is None else 0.5)
    finally:
        stop.set()
        children.stop_all()
        if broker is not None:
            broker.stop()
    print("demo stopped", flush=True)
    return 0
