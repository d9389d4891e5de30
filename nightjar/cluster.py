"""``nightjar cluster up|down|status``: a Spark standalone cluster on this machine, without Docker.

``up`` starts a master and ``--workers`` workers from the installed PySpark distribution
(``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``), each its own JVM
on loopback ports, each worker with ``--worker-cores`` cores and ``--worker-memory`` memory, and returns once every
worker has registered. Pid files and logs live in the state directory (default ``<lake>/_cluster``); ``down``
stops what the pid files name (SIGTERM, then SIGKILL), ``status`` says what runs. Then::

    NIGHTJAR_SPARK_MASTER=spark://127.0.0.1:7077 nightjar run ...

runs the pipeline's driver here and its tasks in the workers' executors: separate JVMs, each with its own Python
workers. Those import the project's modules (the Kafka source and the Delta sink run there), so the workers get
``PYSPARK_PYTHON`` (this interpreter) and ``PYTHONPATH`` (this repository) in their environment, which their
executors inherit. On a real cluster the same holds per machine: the same Python environment on every worker and
one lake path that every worker and the driver see (a shared filesystem); see docs/deployment.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from core.config import Settings
from core.errors import UserError
from core.lake import add_create_argument, require_lake
from core.process_control import alive, descendants, identify, reap, start_time
from ingest.embedded_broker import port_is_open

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MASTER_PORT = 7077
DEFAULT_MASTER_UI_PORT = 8080
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STOP_GRACE_S = 20.0


def spark_home() -> Path:
    """The Spark distribution inside the installed ``pyspark`` package (``bin/spark-class``, ``jars/``)."""
    import pyspark

    home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
    if not (home / "bin" / "spark-class").exists():
        raise UserError(f"no bin/spark-class under SPARK_HOME {home}: unset SPARK_HOME or point it at a Spark 4 "
                        "distribution")
    return home


@dataclass(frozen=True)
class ClusterLayout:
    """Where one local cluster keeps its pid files, logs and work directories, and its ports."""

    state_dir: Path
    master_port: int = DEFAULT_MASTER_PORT
    ui_port: int = DEFAULT_MASTER_UI_PORT

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def pid_file(self, name: str) -> Path:
        return self.state_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.state_dir / f"{name}.log"

    def names(self) -> list[str]:
        """Processes recorded in the state directory (master first)."""
        if not self.state_dir.is_dir():
            return []
        found = sorted(p.stem for p in self.state_dir.glob("*.pid"))
        return sorted(found, key=lambda n: n != "master")


def worker_env(home: Path) -> dict[str, str]:
    """The environment of every cluster JVM: executors inherit it from their worker, and their Python workers run
    this interpreter with this repository importable."""
    env = dict(os.environ)
    env["SPARK_HOME"] = str(home)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["SPARK_NO_DAEMONIZE"] = "1"
    return env


def _read_pid(path: Path) -> tuple[int, int | None] | None:
    """(pid, start time) from a pid file; the start time is None in a file written before it was recorded."""
    try:
        parts = path.read_text().split()
        return int(parts[0]), (int(parts[1]) if len(parts) > 1 else None)
    except (OSError, ValueError, IndexError):
        return None


def _running_pid(layout: ClusterLayout, name: str) -> int | None:
    """The pid of ``name`` while the process its pid file names runs. A stale file (the machine rebooted, the
    process died) may name a pid that another process holds now: the start time tells them apart."""
    ref = _read_pid(layout.pid_file(name))
    return ref[0] if ref and alive(*ref) else None


def _start(layout: ClusterLayout, name: str, argv: list[str], env: dict[str, str]) -> int:
    with open(layout.log_file(name), "ab") as out:
        # Own session: the cluster outlives `nightjar cluster up` and a Ctrl-C in its terminal.
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, cwd=layout.state_dir)
    started = start_time(proc.pid)
    layout.pid_file(name).write_text(f"{proc.pid} {started}\n" if started is not None else f"{proc.pid}\n")
    log.info("started %s (pid %d), log %s", name, proc.pid, layout.log_file(name))
    return proc.pid


def master_state(layout: ClusterLayout, timeout: float = 2.0) -> dict | None:
    """The master's own view (its web UI's JSON: status, registered workers), or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{layout.ui_port}/json/", timeout=timeout) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


def alive_workers(state: dict | None) -> int:
    return sum(1 for w in (state or {}).get("workers", []) if w.get("state") == "ALIVE")


def cluster_up(layout: ClusterLayout, workers: int = 2, cores: int = 1, memory: str = "1g",
               timeout: float = 180.0) -> str:
    """Start the master and ``workers`` workers; return the master URL once every worker registered."""
    if any(_running_pid(layout, n) for n in layout.names()):
        raise UserError(f"a cluster already runs from {layout.state_dir}: `nightjar cluster down` first")

    for port in (layout.master_port, layout.ui_port):
        if port_is_open("127.0.0.1", port):
            raise UserError(f"port {port} is already in use: pass --master-port/--ui-port")
    layout.state_dir.mkdir(parents=True, exist_ok=True)
    for stale in layout.state_dir.glob("*.pid"):
        stale.unlink()
    home = spark_home()
    env = worker_env(home)
    spark_class = str(home / "bin" / "spark-class")
    _start(layout, "master", [spark_class, MASTER_CLASS, "--host", "127.0.0.1", "--port", str(layout.master_port),
                              "--webui-port", str(layout.ui_port)], env)
    for i in range(1, workers + 1):
        work = layout.state_dir / f"worker-{i}-work"
        work.mkdir(exist_ok=True)
        # --webui-port 0: a free port each, so several workers share one machine.
        _start(layout, f"worker-{i}", [spark_class, WORKER_CLASS, "--host", "127.0.0.1", "--cores", str(cores),
                                       "--memory", memory, "--webui-port", "0", "--work-dir", str(work),
                                       layout.master_url], env)
    deadline = time.monotonic() + timeout
    while alive_workers(master_state(layout)) < workers:
        dead = [n for n in layout.names() if not _running_pid(layout, n)]
        if dead:
            cluster_down(layout)
            raise UserError(f"{', '.join(dead)} exited on start; see {layout.log_file(dead[0])}")
        if time.monotonic() > deadline:
            cluster_down(layout)
            raise UserError(f"the cluster did not come up within {timeout:.0f}s; see the logs in {layout.state_dir}")
        time.sleep(0.5)
    return layout.master_url


def cluster_down(layout: ClusterLayout) -> list[str]:
    """Stop every process the state directory names (workers first); returns the names of those that ran."""
    stopped = []
    names = sorted(layout.names(), key=lambda n: n == "master")  # workers first: no re-registration noise
    tree: dict[int, int] = {}
    for name in names:
        pid = _running_pid(layout, name)
        if pid:
            tree |= identify(descendants(pid) | {pid})
            try:
                os.killpg(pid, signal.SIGTERM)  # the group: spark-class's shell and its JVM
            except ProcessLookupError:
                pass
            stopped.append(name)
    reap(tree, grace_s=STOP_GRACE_S)
    for name in names:
        layout.pid_file(name).unlink(missing_ok=True)
    return stopped


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("up", "down", "status"), help="start, stop or describe the cluster")
    parser.add_argument("--state-dir", type=Path, metavar="DIR",
                        help="pid files, logs and work directories (default <lake>/_cluster)")
    parser.add_argument("--workers", type=int, default=2, help="workers to start (default 2)")
    parser.add_argument("--worker-cores", type=int, default=1, help="cores per worker (default 1)")
    parser.add_argument("--worker-memory", default="1g", help="memory per worker for its executors (default 1g)")
    parser.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT,
                        help=f"master port (default {DEFAULT_MASTER_PORT})")
    parser.add_argument("--ui-port", type=int, default=DEFAULT_MASTER_UI_PORT,
                        help=f"master web UI port (default {DEFAULT_MASTER_UI_PORT})")
    add_create_argument(parser)


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.workers < 1 or args.worker_cores < 1:
        raise UserError("--workers and --worker-cores must be at least 1", exit_code=2)
    if args.action == "up" and args.state_dir is None:  # its state goes under the lake: a typo would start one
        require_lake(settings.lake, args.create)
    layout = ClusterLayout((args.state_dir or settings.lake / "_cluster").absolute(), args.master_port, args.ui_port)
    if args.action == "up":
        url = cluster_up(layout, args.workers, args.worker_cores, args.worker_memory)
        print(f"Spark cluster up: master {url} (UI http://127.0.0.1:{layout.ui_port}), {args.workers} workers; "
              f"logs in {layout.state_dir}", flush=True)
        print(f"run the pipeline on it: NIGHTJAR_SPARK_MASTER={url} nightjar run --lake {settings.lake.absolute()}",
              flush=True)
    elif args.action == "down":
        stopped = cluster_down(layout)
        print(f"stopped {', '.join(stopped)}" if stopped else f"no cluster runs from {layout.state_dir}", flush=True)
    else:
        state = master_state(layout)
        running = [n for n in layout.names() if _running_pid(layout, n)]
        if not running:
            print(f"no cluster runs from {layout.state_dir}")
            return 3
        print(f"master {layout.master_url}: {state.get('status', '?') if state else 'not answering'}, "
              f"{alive_workers(state)} worker(s) alive, {state.get('cores', '?') if state else '?'} cores; "
              f"processes: {', '.join(running)}")
    return 0
