"""``nightjar bench pipeline``: the whole pipeline, end to end (issue #13) — the headline benchmark.

Every mode starts its own embedded broker on a free port and a fresh lake, runs ``nightjar generate`` and
``nightjar run`` as subprocesses (what a user runs), and stops every process it started, also on Ctrl-C.

``--mode drained`` (default)
    ``--events`` generator events (simulated from a fixed past working hour) into the raw topics; the raw consume
    rate of one plain confluent-kafka consumer over the same topics; then ``nightjar run --available-now`` (bronze,
    parse, DHCP attribution, reference joins, events, every built-in rule, alerts published), timed end to end
    (Spark start included) and from its first micro-batch (``pipeline_progress``). Then a per-stage cost table,
    in batch over the same records: the Kafka read is the pipeline's source draining the topics into Spark's
    ``noop`` sink; the rest starts from ``bronze``, cached, and runs with the ingest micro-batch's cache
    boundaries (attributed records, parsed records, enriched events): each step is timed on the cached output
    of the one before; attribution and joins are differences of two plans. Target: >= 15,000 events/s.
``--mode live``
    ``nightjar generate --speedup 1`` (event time = wall time) beside ``nightjar run --trigger 1s``. Every few
    seconds: ingest lag (raw topics' true end offsets vs the ingest checkpoint's committed offsets), windowed lag
    (``events`` rows the windowed query has not read), state rows, RSS of the pipeline's driver, JVM and Python
    workers. Every alert raised (revision 1) on ``nightjar.alerts``: event->alert latency = Kafka timestamp of the
    alert message - the alert's ``last_seen`` (the deciding event's time). Targets: p50 <= 5 s, p99 <= 15 s,
    single-event rules p50 <= 3 s.
``--mode step-up``
    ``nightjar generate --rate R`` for ``--step-seconds`` per rate against one ``nightjar run --trigger 1s``;
    a step is bounded when, at its end, neither query is more than ``--lag-bound-s`` seconds of input behind.
    Reports the highest rate with bounded lag. Target: >= 5,000 events/s.
``--mode live-ml``
    What ML scoring costs the live pipeline (issue #15: scoring adds <= 20 % to the event->alert p50): the live run
    twice, same seed, hosts and duration, back to back, once without a model and once with the models of
    ``--model-from LAKE`` copied into the fresh lake before ``nightjar run`` starts (so its supervisor starts the
    ``ml`` query). Prints both runs' p50/p95/p99 for the rule alerts and the ML alerts (``ml.*``) apart, the ratio
    with/without of the p50s, the ``ml`` query's batch durations and the load average during each run. The
    per-entity model only knows the organization it was trained on: ``--seed``/``--hosts`` must be the training
    data's (the 500-host models of docs/ml.md: ``--hosts 500 --seed 1``). ``--model-from`` also works with
    ``--mode live`` alone (one run with the model).

``--json`` prints one JSON object (every printed figure, plus the load average sampled during the run) on
stdout and the tables on stderr; ``--json FILE`` writes it to FILE and keeps the tables on stdout.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar bench
# pipeline`'s arguments, and --help or a bad argument must not wait for pyspark, pandas, scikit-learn and the
# generator (Faker) (nightjar/cli.py).
from core.config import (
    ALL_TOPICS,
    RAW_TOPICS,
    TABLE_ALERTS,
    TABLE_BRONZE,
    TABLE_EVENTS,
    TABLE_NETWORKS,
    TABLE_PIPELINE_PROGRESS,
    TABLE_QUARANTINE,
    TOPIC_ALERTS,
    Settings,
)
from core.errors import UserError, summarize_query_error
from core.process_control import descendants, identify, reap, signal_group
from core.triggers import QUERY_INGEST, QUERY_ML, QUERY_WINDOWED, parse_interval
from ingest.embedded_broker import EmbeddedBroker, ensure_topics

MODES = ("drained", "live", "step-up", "live-ml", "all")  # all = drained, live, step-up
ML_ORDERS = ("without-first", "with-first")
TARGET_ML_P50_RATIO = 1.2  # issue #15: scoring adds <= 20 % to the event->alert p50
DEFAULT_START = "2026-03-10T09:00:00Z"  # a past Tuesday, 09:00 UTC: a working hour, nothing in the future
DEFAULT_RATES = "1000,2500,5000,7500,10000"
TARGET_DRAINED_EPS = 15_000
TARGET_P50_S, TARGET_P99_S, TARGET_SINGLE_P50_S = 5.0, 15.0, 3.0
TARGET_STEP_EPS = 5_000
SINGLE_EVENT_FALLBACK = ("ioc_match", "sudo_non_admin")  # when pipeline_progress names no rule's query
STATUS_EVERY_S = 15.0
STOP_GRACE_S = 60.0  # `nightjar run` stops after its current micro-batch
STAGES = ("kafka read", "parse", "lease attribution", "reference joins", "delta write (events)",
          "single-event rules", "correlations")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=MODES, default="drained", help="which benchmark (default drained)")
    parser.add_argument("--events", type=int, default=200_000, help="drained: generator events (default 200000)")
    parser.add_argument("--start", default=DEFAULT_START, help=f"drained: simulated start (default {DEFAULT_START})")
    parser.add_argument("--seed", type=int, default=1, help="generator seed (default 1)")
    parser.add_argument("--hosts", type=int, help="hosts in the simulated organization (default: 500 drained, "
                        "8000 live and step-up)")
    parser.add_argument("--duration", type=float, default=300.0, help="live: seconds of generated traffic "
                        "(default 300)")
    parser.add_argument("--trigger", default="1s", help="live/step-up: the pipeline's trigger (default 1s)")
    parser.add_argument("--rates", default=DEFAULT_RATES, help=f"step-up: events/s per step (default {DEFAULT_RATES})")
    parser.add_argument("--step-seconds", type=float, default=300.0, help="step-up: seconds per rate (default 300)")
    parser.add_argument("--lag-bound-s", type=float, default=10.0,
                        help="step-up: a step is bounded when at its end each query is less than this many seconds "
                             "of input behind (default 10)")
    parser.add_argument("--all-steps", action="store_true", help="step-up: go on after the first unbounded step")
    parser.add_argument("--sample-seconds", type=float, default=5.0, help="live/step-up: sampling interval (default 5)")
    parser.add_argument("--drain-timeout", type=float, default=180.0,
                        help="live: seconds to wait after the generator ends for the pipeline to catch up (default 180)")
    parser.add_argument("--run-timeout", type=float, default=3600.0,
                        help="drained: stop `nightjar run --available-now` after this many seconds and report what "
                             "it did (default 3600)")
    parser.add_argument("--no-stages", action="store_true", help="drained: skip the per-stage cost table")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="one JSON object with every figure: on stdout (tables go to stderr), or to FILE")
    parser.add_argument("--keep-lake", action="store_true", help="keep the benchmark's lake and logs")
    parser.add_argument("--model-from", type=Path, metavar="LAKE",
                        help="live/live-ml: copy the trained models of LAKE (LAKE/models, see `nightjar ml list`) into "
                             "the benchmark's fresh lake before the pipeline starts, so the run includes the ML "
                             "scoring query. The models know one organization: use the --hosts and --seed of their "
                             "training data (e.g. --hosts 500 --seed 1)")
    parser.add_argument("--ml-order", choices=ML_ORDERS, default="without-first",
                        help="live-ml: which run goes first (default without-first; run the pair twice, reversed, "
                             "to see what the order does)")


# -- output -----------------------------------------------------------------------------------------------------------
class Out:
    """Tables to stdout (stderr when the JSON object goes to stdout); status lines always to stderr."""

    def __init__(self, json_target: str | None) -> None:
        self.stream = sys.stderr if json_target == "-" else sys.stdout

    def say(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    @staticmethod
    def status(text: str) -> None:
        print(f"[{dt.datetime.now(dt.UTC):%H:%M:%S}] {text}", file=sys.stderr, flush=True)


class LoadSampler:
    """``os.getloadavg()`` every few seconds while the benchmark runs (2 shared cores: the context of every figure)."""

    def __init__(self, every_s: float = 5.0) -> None:
        self.every_s = every_s
        self.samples: list[tuple[float, tuple[float, float, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-load", daemon=True)

    def start(self) -> LoadSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), os.getloadavg()))
            if self._stop.wait(self.every_s):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.samples.append((time.time(), os.getloadavg()))

    def summary(self, since: float = 0.0, until: float = float("inf")) -> dict[str, Any]:
        rows = [s for t, s in self.samples if since <= t <= until] or [os.getloadavg()]
        one = [r[0] for r in rows]
        return {"start": list(rows[0]), "end": list(rows[-1]), "mean_1m": round(statistics.fmean(one), 2),
                "max_1m": round(max(one), 2), "samples": len(rows), "cpus": os.cpu_count()}


def load_text(load: dict[str, Any]) -> str:
    """The machine's load while a benchmark ran, as one line of its report."""
    return (f"load average (1 min) mean {load['mean_1m']:.2f}, max {load['max_1m']:.2f} on {load['cpus']} cpus "
            f"(start {'/'.join(f'{x:.2f}' for x in load['start'])}, end {'/'.join(f'{x:.2f}' for x in load['end'])})")


# -- child processes ------------------------------------------------------------------------------------------------
def _nightjar_argv() -> list[str]:
    exe = Path(sys.executable).parent / "nightjar"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "nightjar.cli"]


class Children:
    """Subprocesses in their own process groups; :meth:`stop` sends SIGTERM to the command, waits, then SIGKILLs its
    group, and :meth:`stop_all` leaves nothing behind (PySpark's worker daemons start a process group of their own:
    every descendant seen is reaped too)."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.procs: dict[str, subprocess.Popen] = {}
        self.seen: dict[int, int] = {}  # pid -> start time of every descendant seen

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        log_path = self.logs / f"{name}.log"
        out = open(log_path, "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(_nightjar_argv() + args, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        out.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def remember(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                self.seen |= identify(descendants(proc.pid))

    def stop(self, name: str, grace_s: float = STOP_GRACE_S) -> int | None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return None
        tree = identify(descendants(proc.pid)) if proc.poll() is None else {}
        self.seen |= tree
        if proc.poll() is None:
            # SIGTERM to the command only, as `kill PID` or `docker stop` would: signalled too, the Spark JVM (same
            # process group) would run its shutdown hook and stop the SparkContext under the pipeline's own stop.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                Out.status(f"{name} (pid {proc.pid}) did not stop within {grace_s:.0f}s: killing it")
        signal_group(proc, signal.SIGKILL)
        proc.wait()
        reap(tree, grace_s=10.0)
        return proc.returncode

    def stop_all(self) -> None:
        self.remember()
        for name in reversed(list(self.procs)):
            self.stop(name)
        # Remembered by pid and start time: over an hours-long run pids are reused (pid_max is often 32,768), and a
        # bare pid seen an hour ago killed another program's Spark JVM here.
        reap(self.seen, grace_s=10.0)


def _rss(pid: int) -> dict[str, Any]:
    """RSS (MiB) of the pipeline's Python driver, its JVM and its Python workers (PySpark daemon + workers)."""
    import psutil

    try:
        root = psutil.Process(pid)
        driver = root.memory_info().rss
        jvm = workers = 0
        n_workers = 0
        for child in root.children(recursive=True):
            try:
                name = child.name()
                rss = child.memory_info().rss
            except psutil.Error:
                continue
            if name.startswith("java"):
                jvm += rss
            elif "python" in name:
                workers += rss
                n_workers += 1
    except psutil.Error:
        return {"driver_mib": None, "jvm_mib": None, "workers_mib": None, "workers": None}
    mib = 2 ** 20
    return {"driver_mib": round(driver / mib, 1), "jvm_mib": round(jvm / mib, 1),
            "workers_mib": round(workers / mib, 1), "workers": n_workers}


# -- the broker, Kafka offsets, the checkpoint ----------------------------------------------------------------------
class KafkaEnds:
    """True end offsets of topics (Tansu reports the last batch's base offset + 1: see ingest.kafka_source)."""

    def __init__(self, settings: Settings, topics: tuple[str, ...]) -> None:
        from ingest.kafka_source import KafkaBroker, KafkaOptions

        options = {f"kafka.{k}": v for k, v in settings.kafka_config().items()}
        options |= {"subscribe": ",".join(topics), "fetchWaitMaxMs": str(settings.kafka.fetch_wait_max_ms)}
        self.broker = KafkaBroker(KafkaOptions.parse(options))

    def ends(self) -> dict[str, dict[int, int]]:
        return self.broker.bounds(self.broker.partitions())[1]

    def close(self) -> None:
        self.broker.close()


def committed_offsets(checkpoint: Path) -> tuple[int | None, dict | None]:
    """(last committed batch id, the source offset it ended at) from a query's checkpoint; (None, None) before."""
    try:
        ids = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    except OSError:
        return None, None
    for batch in sorted(ids, reverse=True):
        try:
            lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
            return batch, json.loads(lines[2])
        except (OSError, IndexError, ValueError):
            continue
    return None, None


def _total(offsets: dict[str, dict[Any, int]] | None) -> int:
    return sum(int(v) for parts in (offsets or {}).values() for v in parts.values())


def ingest_lag(ends: dict[str, dict[int, int]], committed: dict | None) -> int:
    lag = 0
    for topic, parts in ends.items():
        done = (committed or {}).get(topic, {})
        for p, end in parts.items():
            lag += max(0, end - int(done.get(str(p), done.get(p, 0))))
    return lag


def delta_rows_after(table: Path, version: int) -> tuple[int, int]:
    """(latest version, rows added by the commits after ``version``) from the table's JSON log (cheap)."""
    log_dir = table / "_delta_log"
    try:
        versions = sorted(int(p.name[:20]) for p in log_dir.iterdir() if re.fullmatch(r"\d{20}\.json", p.name))
    except OSError:
        return -1, 0
    rows = 0
    for v in versions:
        if v <= version:
            continue
        try:
            for line in (log_dir / f"{v:020d}.json").read_text().splitlines():
                action = json.loads(line)
                if "add" in action:
                    stats = json.loads(action["add"].get("stats") or "{}")
                    rows += int(stats.get("numRecords", 0))
        except (OSError, ValueError):
            continue
    return (versions[-1] if versions else -1), rows


def windowed_lag(lake: Path, query: str = QUERY_WINDOWED) -> tuple[int, int]:
    """(events rows the windowed query (or another query reading ``events``) has not committed, events version)."""
    _, offset = committed_offsets(lake / "_checkpoints" / query)
    # ingest.delta_source offsets: {"version": v, "index": i}: the files of v up to the i-th read (-1: none of v)
    done = -1 if not offset else int(offset["version"]) - (1 if int(offset.get("index", -1)) < 0 else 0)
    latest, rows = delta_rows_after(lake / TABLE_EVENTS, done)
    return rows, latest


class AlertConsumer:
    """Reads ``nightjar.alerts`` from the beginning in a thread: (Kafka timestamp s, message) per alert."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.messages: list[tuple[float, dict]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-alerts", daemon=True)
        self.error: str | None = None

    def start(self) -> AlertConsumer:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer(self.settings.kafka_config() | {
            "group.id": f"bench-alerts-{os.getpid()}-{time.monotonic_ns()}", "enable.auto.commit": False,
            "fetch.wait.max.ms": self.settings.kafka.fetch_wait_max_ms})
        try:
            meta = consumer.list_topics(TOPIC_ALERTS, timeout=10).topics[TOPIC_ALERTS]
            consumer.assign([TopicPartition(TOPIC_ALERTS, p, OFFSET_BEGINNING) for p in meta.partitions])
            while not self._stop.is_set():
                for msg in consumer.consume(num_messages=1000, timeout=0.5):
                    if msg.error() is None:
                        try:
                            self.messages.append((msg.timestamp()[1] / 1000.0, json.loads(msg.value())))
                        except ValueError:
                            continue
        except Exception as exc:  # reported with the figures; never kills the benchmark
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            consumer.close()

    def stop(self) -> None:
        time.sleep(1.0)  # the last alerts published before the pipeline stopped
        self._stop.set()
        self._thread.join(10)


def raw_consume(settings: Settings, topics: tuple[str, ...], expected: int) -> dict[str, Any]:
    """One plain confluent-kafka consumer reads every record of ``topics``: the ceiling for one Python reader."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(settings.kafka_config() | {
        "group.id": f"bench-raw-{os.getpid()}", "enable.auto.commit": False,
        "fetch.wait.max.ms": settings.kafka.fetch_wait_max_ms, "enable.partition.eof": False})
    meta = consumer.list_topics(timeout=10)
    consumer.assign([TopicPartition(t, p, 0) for t in topics for p in meta.topics[t].partitions])
    seen = 0
    started = time.monotonic()
    last_data = started
    while seen < expected and time.monotonic() - last_data < 15:
        batch = consumer.consume(num_messages=10_000, timeout=1.0)
        for msg in batch:
            if msg.error() is None:
                seen += 1
        if batch:
            last_data = time.monotonic()
    elapsed = time.monotonic() - started
    consumer.close()
    return {"records": seen, "seconds": round(elapsed, 3), "events_per_s": round(seen / max(elapsed, 1e-9), 1)}


# -- lake reads (no Spark) ------------------------------------------------------------------------------------------
def table_rows(lake: Path, table: str, columns: list[str] | None = None) -> list[dict]:
    """A lake table's rows (those of ``columns`` it has), read without Spark; none while the table does not exist."""
    from core.lake import is_delta_table, table_dataset

    if not is_delta_table(lake / table):
        return []
    dataset = table_dataset(lake, table)
    if columns is not None:
        columns = [c for c in columns if c in dataset.schema.names]
    return dataset.to_table(columns=columns).to_pylist()


def table_count(lake: Path, table: str) -> int:
    from core.lake import is_delta_table, row_count

    return row_count(lake, table) if is_delta_table(lake / table) else 0


def progress_rows(lake: Path) -> list[dict]:
    return table_rows(lake, TABLE_PIPELINE_PROGRESS, ["query_name", "query_id", "batch_id", "timestamp", "num_input_rows",
                                                 "batch_duration_ms", "state_rows", "rule_id", "late_rows"])


def _single_event_rules(progress: list[dict]) -> set[str]:
    """Rules whose health rows name the ingest query (single-event rules run in the ingest micro-batch)."""
    rules = {p["rule_id"] for p in progress if p.get("rule_id") and p.get("query_id") == QUERY_INGEST}
    return rules or set(SINGLE_EVENT_FALLBACK)


def _batch_end(p: dict) -> dt.datetime:
    return p["timestamp"] + dt.timedelta(milliseconds=p["batch_duration_ms"] or 0)


def log_problems(path: Path, limit: int = 12) -> list[str]:
    """ERROR/WARNING lines and Python tracebacks' last lines of a child's log (the evidence for the report)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    hits = [ln.strip() for ln in lines if re.search(r"\b(ERROR|WARNING|WARN|CRITICAL)\b|Traceback|Exception", ln)
            and not any(x in ln for x in ("Using incubator modules", "NativeCodeLoader", "Setting default log level"))]
    return hits[:limit]


def log_tail(path: Path, n: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return round(xs[lo] + (xs[hi] - xs[lo]) * (k - lo), 3)


def _fmt(x: float | None, unit: str = "s") -> str:
    return "-" if x is None else f"{x:.2f}{unit}"


def _mark(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


# -- the run --------------------------------------------------------------------------------------------------------
class Bench:
    """One benchmark run: its work directory, children, brokers, load sampler and output."""

    def __init__(self, args: argparse.Namespace, settings: Settings) -> None:
        self.args, self.base_settings = args, settings
        self.out = Out(args.json)
        self.workdir = Path(tempfile.mkdtemp(prefix="nightjar-bench-pipeline-"))
        self.children = Children(self.workdir)
        self.brokers: list = []
        self.load = LoadSampler().start()

    def fresh(self, mode: str) -> tuple[Settings, Path]:
        broker = EmbeddedBroker(log_file=self.workdir / f"broker-{mode}.log").start()
        self.brokers.append(broker)
        lake = self.workdir / mode / "lake"
        lake.mkdir(parents=True)
        settings = self.base_settings.with_(bootstrap=broker.bootstrap, lake=lake)
        ensure_topics(settings, ALL_TOPICS)
        return settings, lake

    def close(self) -> None:
        self.children.stop_all()
        for b in self.brokers:
            b.stop()
        self.load.stop()

    def generate_args(self, settings: Settings, *extra: str) -> list[str]:
        return ["generate", "--seed", str(self.args.seed), "--bootstrap", settings.bootstrap_servers,
                "--lake", str(settings.lake), "--quiet", *extra]

    def run_args(self, settings: Settings, *extra: str) -> list[str]:
        return ["run", "--bootstrap", settings.bootstrap_servers, "--lake", str(settings.lake), *extra]

    def wait(self, name: str, proc: subprocess.Popen, what: str, status, timeout_s: float | None = None) -> int:
        """The child's exit code; None when it ran past ``timeout_s`` (it is then stopped)."""
        last = started = time.monotonic()
        while proc.poll() is None:
            if timeout_s is not None and time.monotonic() - started > timeout_s:
                Out.status(f"{what}: still running after {timeout_s:.0f}s: stopping it")
                self.children.stop(name)
                return None
            time.sleep(0.5)
            if time.monotonic() - last >= STATUS_EVERY_S:
                last = time.monotonic()
                self.children.remember()
                Out.status(f"{what}: {status()}")
        return proc.returncode

    def check_exit(self, name: str, rc: int) -> None:
        if rc != 0:
            raise UserError(f"`nightjar {name}` exited with {rc}; its log ({self.children.log(name)}) ends:\n"
                            f"{log_tail(self.children.log(name))}")


# -- drained --------------------------------------------------------------------------------------------------------
def drained(bench: Bench) -> dict[str, Any]:
    args, out = bench.args, bench.out
    hosts = args.hosts or 500
    t_mode = time.time()
    settings, lake = bench.fresh("drained")
    Out.status(f"drained: generating {args.events:,} events ({hosts} hosts, from {args.start}) into "
               f"{settings.bootstrap_servers}")
    t0 = time.monotonic()
    gen = bench.children.start("drained-generate", bench.generate_args(
        settings, "--events", str(args.events), "--start", args.start, "--hosts", str(hosts)))
    bench.check_exit("drained-generate", bench.wait("drained-generate", gen, "generating", lambda: "running"))
    generate_s = time.monotonic() - t0
    Out.status(f"drained: generated in {generate_s:.1f}s; raw consume")
    raw = raw_consume(settings, RAW_TOPICS, args.events)
    produced = raw["records"]
    if produced != args.events:
        Out.status(f"drained: the raw topics hold {produced:,} records, {args.events:,} were asked for")

    Out.status("drained: nightjar run --available-now")
    t0 = time.monotonic()
    wall0 = time.time()
    proc = bench.children.start("drained-run", bench.run_args(settings, "--available-now"))

    def status() -> str:
        rows = [p for p in progress_rows(lake) if p["query_name"] == QUERY_INGEST and p["num_input_rows"]]
        return (f"{time.monotonic() - t0:.0f}s, ingest {len(rows)} batches / "
                f"{sum(p['num_input_rows'] for p in rows):,} of {produced:,} records")

    rc = bench.wait("drained-run", proc, "pipeline", status, timeout_s=args.run_timeout)
    wall_s = time.monotonic() - t0
    bench.children.procs.pop("drained-run", None)
    failure = None
    if rc != 0:  # report what it did all the same: the failure is a finding
        failure = (f"timed out after {args.run_timeout:.0f}s" if rc is None else f"exited with {rc}") + \
            f"; log {bench.children.log('drained-run')}"
        Out.status(f"drained: `nightjar run --available-now` {failure}:\n{log_tail(bench.children.log('drained-run'), 8)}")

    progress = progress_rows(lake)
    ingest = sorted([p for p in progress if p["query_name"] == QUERY_INGEST and p["num_input_rows"]],
                    key=lambda p: p["batch_id"])
    windowed = sorted([p for p in progress if p["query_name"] == QUERY_WINDOWED and p["num_input_rows"]],
                      key=lambda p: p["batch_id"])
    queries = [p for p in progress if p["query_name"] and not p["query_name"].startswith("rule:")
               and p["batch_id"] >= 0]
    first_start = ingest[0]["timestamp"] if ingest else None
    last_end = max((_batch_end(p) for p in queries), default=None)
    ingest_end = max((_batch_end(p) for p in ingest), default=None)
    since_first = (last_end - first_start).total_seconds() if first_start and last_end else None
    ingest_s = (ingest_end - first_start).total_seconds() if first_start and ingest_end else None
    startup_s = (first_start.timestamp() - wall0) if first_start else None

    counts = {t: table_count(lake, t) for t in (TABLE_BRONZE, TABLE_EVENTS, TABLE_QUARANTINE, TABLE_ALERTS)}
    alert_rows = table_rows(lake, TABLE_ALERTS, ["alert_id", "rule_id", "revision"])
    by_rule: dict[str, int] = defaultdict(int)
    for a in alert_rows:
        if a["revision"] == 1:
            by_rule[a["rule_id"]] += 1
    published = _topic_count(settings, TOPIC_ALERTS)
    eps_e2e = produced / wall_s
    eps_first = produced / since_first if since_first else None
    result: dict[str, Any] = {
        "events": produced, "hosts": hosts, "start": args.start, "generate_s": round(generate_s, 2),
        "pipeline_failure": failure,
        "raw_consume": raw,
        "pipeline": {
            "wall_s": round(wall_s, 2), "events_per_s_end_to_end": round(eps_e2e, 1),
            "startup_s": None if startup_s is None else round(startup_s, 2),
            "since_first_batch_s": None if since_first is None else round(since_first, 2),
            "events_per_s_since_first_batch": None if eps_first is None else round(eps_first, 1),
            "ingest_s": None if ingest_s is None else round(ingest_s, 2),
            "ingest_events_per_s": round(produced / ingest_s, 1) if ingest_s else None,
            "ratio_to_raw_end_to_end": round(eps_e2e / raw["events_per_s"], 6),
            "ratio_to_raw_since_first_batch": round(eps_first / raw["events_per_s"], 6) if eps_first else None,
            "ingest_batches": len(ingest), "windowed_batches": len(windowed),
            "ingest_batch_ms": [p["batch_duration_ms"] for p in ingest],
            "windowed_batch_ms": [p["batch_duration_ms"] for p in windowed],
        },
        "tables": counts,
        "events_counted": counts[TABLE_EVENTS] + counts[TABLE_QUARANTINE],
        "alerts": {"raised": sum(by_rule.values()), "revisions": len(alert_rows), "published_kafka": published,
                   "by_rule": dict(sorted(by_rule.items()))},
        "target_events_per_s": TARGET_DRAINED_EPS,
        "log_problems": log_problems(bench.children.log("drained-run")),
    }
    result["target_met"] = failure is None and eps_e2e >= TARGET_DRAINED_EPS
    result["target_met_since_first_batch"] = failure is None and (eps_first or 0) >= TARGET_DRAINED_EPS
    result["load_average_pipeline"] = bench.load.summary(wall0, wall0 + wall_s)
    _print_drained(out, result)

    if not bench.args.no_stages:
        Out.status("drained: per-stage costs in batch (cumulative plans over the cached bronze records)")
        t_st = time.time()
        try:
            result["stages"] = stage_costs(settings, lake, out)
        except Exception as exc:  # keep the pipeline's figures: a failing stage table is reported, not fatal
            result["stages"] = {"error": summarize_query_error(str(exc))[:500]}
            out.say(f"  per-stage cost table FAILED: {result['stages']['error']}")
        result["load_average_stages"] = bench.load.summary(t_st)
        out.say(f"  {load_text(result['load_average_stages'])}")
    result["load_average"] = bench.load.summary(t_mode)
    return result


def _topic_count(settings: Settings, topic: str) -> int:
    ends = KafkaEnds(settings, (topic,))
    try:
        return _total(ends.ends())
    finally:
        ends.close()


def _print_drained(out: Out, r: dict[str, Any]) -> None:
    p = r["pipeline"]
    out.say(f"== drained: {r['events']:,} events ({r['hosts']} hosts, simulated from {r['start']}) ==")
    if r["pipeline_failure"]:
        out.say(f"  PIPELINE FAILED: `nightjar run --available-now` {r['pipeline_failure']} (figures below: what it "
                f"did until then)")
    out.say(f"  raw consume (one confluent-kafka consumer) {r['raw_consume']['events_per_s']:>10,.0f} events/s")
    out.say(f"  pipeline end to end (incl. Spark start)    {p['events_per_s_end_to_end']:>10,.0f} events/s  "
            f"({p['wall_s']:.1f}s; ratio to raw {p['ratio_to_raw_end_to_end']:.3g})")
    if p["events_per_s_since_first_batch"]:
        out.say(f"  pipeline from its first micro-batch        {p['events_per_s_since_first_batch']:>10,.0f} events/s  "
                f"({p['since_first_batch_s']:.1f}s after {p['startup_s']:.1f}s start-up; ratio to raw "
                f"{p['ratio_to_raw_since_first_batch']:.3g})")
    if p["ingest_events_per_s"]:
        out.say(f"  ingest query alone                         {p['ingest_events_per_s']:>10,.0f} events/s  "
                f"({p['ingest_s']:.1f}s)")
    out.say(f"  micro-batches: ingest {p['ingest_batches']} ({', '.join(f'{m / 1000:.1f}s' for m in p['ingest_batch_ms'])})"
            f", windowed {p['windowed_batches']} ({', '.join(f'{m / 1000:.1f}s' for m in p['windowed_batch_ms'])})")
    t = r["tables"]
    out.say(f"  tables: bronze {t['bronze']:,}, events {t['events']:,}, quarantine {t['quarantine']:,} "
            f"(events + quarantine = {r['events_counted']:,} of {r['events']:,} produced)")
    a = r["alerts"]
    rules = ", ".join(f"{k} {v}" for k, v in a["by_rule"].items()) or "none"
    out.say(f"  alerts raised: {a['raised']} ({a['revisions']} revisions, {a['published_kafka']} messages on "
            f"{TOPIC_ALERTS}): {rules}")
    out.say(f"  target >= {TARGET_DRAINED_EPS:,} events/s end to end: {_mark(r['target_met'])}"
            f" (from the first micro-batch: {_mark(r['target_met_since_first_batch'])})")
    out.say(f"  {load_text(r['load_average_pipeline'])}")
    if r["log_problems"]:
        out.say(f"  pipeline log: {len(r['log_problems'])} warning/error line(s), first: {r['log_problems'][0][:200]}")


def stage_costs(settings: Settings, lake: Path, out: Out) -> dict[str, Any]:
    """Each stage's cost in batch, over the same records: cumulative plans, the cost is the difference."""
    from alerts.detection_input import detection_input, events_schema
    from alerts.rule_loader import BUILTIN_RULES, load_rules
    from alerts.single_event_pass import collect_candidates
    from alerts.window_aggregator import run_windowed
    from core.spark_session import build_spark
    from enrich.dhcp_sessions import attribute_batch, dhcp_networks_from_lake, events_from
    from enrich.reference_data import ReferenceCache
    from enrich.static_joins import enrich_static
    from ingest.arrow_parse import parse_bronze
    from ingest.delta_sink import write_batch
    from ingest.kafka_source import read_kafka

    scratch = lake.parent / "stages"
    spark = build_spark(settings, app_name="nightjar-bench-stages")
    try:
        def noop(df) -> None:
            df.write.format("noop").mode("overwrite").save()

        def timed(fn) -> float:
            t = time.monotonic()
            fn()
            return time.monotonic() - t

        # Kafka read: the pipeline's source, every record in one availableNow batch, nothing written.
        def kafka_read() -> None:
            q = (read_kafka(spark, settings.with_(max_offsets_per_trigger=None), drain=True).writeStream
                 .format("noop").trigger(availableNow=True)
                 .option("checkpointLocation", str(scratch / "kafka-checkpoint")).start())
            q.awaitTermination()

        kafka_s = timed(kafka_read)
        Out.status(f"stages: kafka read {kafka_s:.1f}s")
        bronze = _read_delta(spark, lake / TABLE_BRONZE).cache()
        t = time.monotonic()
        n = bronze.count()
        cache_s = time.monotonic() - t
        networks = dhcp_networks_from_lake(lake / TABLE_NETWORKS)
        ref = ReferenceCache(lake).current()
        rules, _errors = load_rules([BUILTIN_RULES], events_schema(spark))
        single = [r for r in rules if not r.stateful]
        windowed = [r for r in rules if r.stateful and r.windowed is not None]
        own = [r for r in rules if r.stateful and r.windowed is None]

        def parsed():
            return parse_bronze(bronze, max_record_bytes=settings.max_record_bytes)

        def unified():
            return attribute_batch(parsed(), networks)

        # Like the ingest micro-batch: the attributed records are cached once, the enriched events too, and the
        # writes and rules run on the cached events (a plan of parse + attribution + joins + every rule at once
        # also runs the driver out of heap).
        cum: dict[str, float] = {}

        failures: dict[str, str] = {}

        def step(name: str, fn) -> None:
            try:
                cum[name] = timed(fn)
            except Exception as exc:  # e.g. the JVM out of heap: the other stages still tell where time goes
                cum[name] = float("nan")
                failures[name] = summarize_query_error(str(exc))[:300]
                Out.status(f"stages: {name} FAILED: {failures[name]}")
                return
            Out.status(f"stages: {name}: {cum[name]:.1f}s")

        # Warm-up on a slice (code generation, Python workers), so the first stage timed does not pay for it.
        sample = bronze.limit(1000)
        noop(attribute_batch(parse_bronze(sample, max_record_bytes=settings.max_record_bytes), networks))
        step("parse+attribution", lambda: noop(unified()))
        cached_unified = unified().persist()
        cached_unified.count()
        # The ingest batch's shape: the operator's attributed rows, decoded into events (events_from).
        step("parse", lambda: noop(parsed()))
        step("attributed events", lambda: noop(events_from(cached_unified)))
        step("attributed events+joins", lambda: noop(enrich_static(events_from(cached_unified), ref)))
        events = enrich_static(events_from(cached_unified), ref).persist()
        events.count()

        def single_rules() -> int:
            return len(collect_candidates(detection_input(events), single))

        def correlations() -> int:
            ev = detection_input(events)
            found = len(run_windowed(ev, [r.windowed for r in windowed]).collect()) if windowed else 0
            return found + sum(len(r.detect(ev).collect()) for r in own)

        step("write", lambda: write_batch(events, scratch / "events", "bench-stages", 0))
        step("single", single_rules)
        step("correlations", correlations)
        events.unpersist()
        cached_unified.unpersist()
        costs = {
            "kafka read": kafka_s,
            "parse": cum["parse"],
            # the applyInPandasWithState-shaped operator (parse + attribution minus the parse), plus building the
            # attributed ECS events from its output
            "lease attribution": cum["parse+attribution"] - cum["parse"] + cum["attributed events"],
            "reference joins": cum["attributed events+joins"] - cum["attributed events"],
            "delta write (events)": cum["write"],
            "single-event rules": cum["single"],
            "correlations": cum["correlations"],
        }
        failed = [k for k, v in costs.items() if v != v]  # NaN: a step it depends on failed
        clamped = [k for k, v in costs.items() if v < 0]
        costs = {k: (None if k in failed else max(0.0, v)) for k, v in costs.items()}
        total = sum(v for v in costs.values() if v is not None)
        rows = [{"stage": k, "seconds": None if v is None else round(v, 3),
                 "share": None if v is None else (round(v / total, 4) if total else 0.0),
                 "events_per_s": round(n / v, 1) if v else None} for k, v in costs.items()]
        out.say(f"== per-stage cost, batch, {n:,} records (bronze cached in {cache_s:.1f}s; each step timed with the "
                f"ingest batch's cache boundaries: attributed records, enriched events; attribution "
                f"and joins as differences of plans; the ingest query's Spark settings, correlations the windowed "
                f"query's) ==")
        out.say(f"  {'stage':<22} {'seconds':>8} {'share':>7} {'events/s':>11}")
        for r in rows:
            eps = f"{r['events_per_s']:,.0f}" if r["events_per_s"] else "-"
            if r["seconds"] is None:
                out.say(f"  {r['stage']:<22} {'failed':>8}")
                continue
            out.say(f"  {r['stage']:<22} {r['seconds']:>8.2f} {100 * r['share']:>6.1f}% {eps:>11}")
        out.say(f"  {'total':<22} {total:>8.2f} {100.0:>6.1f}% {n / total if total else 0:>11,.0f}")
        if clamped:
            out.say(f"  (negative differences, i.e. noise, shown as 0: {', '.join(clamped)})")
        for name, error in failures.items():
            out.say(f"  step {name} failed: {error}")
        out.say(f"  rules: {len(single)} single-event, {len(windowed)} windowed, {len(own)} with their own plan")
        return {"records": n, "input_cache_s": round(cache_s, 3), "cumulative_s": {k: (None if v != v else round(v, 3)) for k, v in cum.items()},
                "rows": rows, "total_s": round(total, 3), "clamped": clamped, "failures": failures,
                "rules": {"single_event": len(single), "windowed": len(windowed), "own_plan": len(own)}}
    finally:
        spark.stop()


def _read_delta(spark, path: Path):
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql.pandas.types import from_arrow_schema

    table = DeltaTable(str(path))
    schema = from_arrow_schema(pa.schema(table.schema().to_arrow()))
    return spark.read.schema(schema).parquet(*table.file_uris())


# -- live and step-up: a running pipeline, sampled ------------------------------------------------------------------
class Sampler:
    """Per-query lag, state rows and memory of a running pipeline, sampled on demand."""

    def __init__(self, settings: Settings, lake: Path, pipeline_pid: int, ml: bool = False) -> None:
        self.settings, self.lake, self.pid = settings, lake, pipeline_pid
        self.ml = ml  # the ``ml`` query runs: sample its lag too (without it every events row would count as lag)
        self.kafka = KafkaEnds(settings, RAW_TOPICS)
        self.t0 = time.time()
        self.samples: list[dict[str, Any]] = []

    def sample(self) -> dict[str, Any]:
        ends = self.kafka.ends()
        batch, committed = committed_offsets(self.settings.checkpoint(QUERY_INGEST))
        w_rows, events_version = windowed_lag(self.lake)
        progress = progress_rows(self.lake)
        newest: dict[str, dict] = {}
        for p in progress:
            q = p["query_name"]
            if q in (QUERY_INGEST, QUERY_WINDOWED) and (q not in newest or p["batch_id"] >= newest[q]["batch_id"]):
                newest[q] = p
        s = {
            "t": round(time.time() - self.t0, 1), "at": time.time(),
            "produced": _total(ends), "ingested": _total(committed), "ingest_batch": batch,
            "ingest_lag": ingest_lag(ends, committed), "windowed_lag": w_rows, "events_version": events_version,
            "ingest_state_rows": (newest.get(QUERY_INGEST) or {}).get("state_rows"),
            "windowed_state_rows": (newest.get(QUERY_WINDOWED) or {}).get("state_rows"),
            "ingest_batch_ms": (newest.get(QUERY_INGEST) or {}).get("batch_duration_ms"),
            "windowed_batch_ms": (newest.get(QUERY_WINDOWED) or {}).get("batch_duration_ms"),
            "load_1m": os.getloadavg()[0], **_rss(self.pid),
        }
        if self.ml:
            s["ml_lag"] = windowed_lag(self.lake, QUERY_ML)[0]
        self.samples.append(s)
        return s

    def close(self) -> None:
        self.kafka.close()


def _status_line(s: dict[str, Any], prefix: str) -> str:
    return (f"{prefix} t={s['t']:.0f}s produced {s['produced']:,} ingested {s['ingested']:,} lag {s['ingest_lag']:,} "
            f"(windowed {s['windowed_lag']:,}) state {s['ingest_state_rows']}/{s['windowed_state_rows']} "
            f"batch {_ms(s['ingest_batch_ms'])}/{_ms(s['windowed_batch_ms'])} rss driver {s['driver_mib']} "
            f"jvm {s['jvm_mib']} workers {s['workers_mib']} MiB load {s['load_1m']:.2f}")


def _ms(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f}s"


def every(samples: list[dict[str, Any]], every_s: float) -> list[dict[str, Any]]:
    """One sample per ``every_s`` seconds of ``t`` (and the last one): the rows of a table over time."""
    shown, last = [], None
    for s in samples:
        if last is None or s["t"] - last >= every_s - 0.01 or s is samples[-1]:
            shown.append(s)
            last = s["t"]
    return shown


def _print_lag_table(out: Out, samples: list[dict[str, Any]], every_s: float = 15.0) -> list[dict[str, Any]]:
    shown = every(samples, every_s)
    out.say(f"  {'t':>5} {'produced':>10} {'ingested':>10} {'ingest lag':>10} {'windowed lag':>12} "
            f"{'state ingest':>12} {'state windowed':>14} {'batch i/w':>11} {'driver':>7} {'jvm':>7} "
            f"{'workers':>8} {'load1':>6}")
    for s in shown:
        out.say(f"  {s['t']:>4.0f}s {s['produced']:>10,} {s['ingested']:>10,} {s['ingest_lag']:>10,} "
                f"{s['windowed_lag']:>12,} {s['ingest_state_rows'] or 0:>12,} {s['windowed_state_rows'] or 0:>14,} "
                f"{_ms(s['ingest_batch_ms']) + '/' + _ms(s['windowed_batch_ms']):>11} "
                f"{s['driver_mib'] or 0:>6.0f}M {s['jvm_mib'] or 0:>6.0f}M {s['workers_mib'] or 0:>7.0f}M "
                f"{s['load_1m']:>6.2f}")
    out.say("  (lags in records; state in rows; batch = duration of the newest ingest/windowed micro-batch; "
            "RSS in MiB)")
    return shown


def start_pipeline(bench: Bench, settings: Settings, lake: Path, name: str) -> subprocess.Popen:
    """``nightjar run --trigger`` and wait until both queries run and the ingest query has reported a micro-batch."""

    parse_interval(bench.args.trigger)  # one line, exit 2, before anything starts
    proc = bench.children.start(name, bench.run_args(settings, "--trigger", bench.args.trigger))
    t0 = time.monotonic()
    last = t0
    while True:
        if proc.poll() is not None:
            bench.check_exit(name, proc.returncode)
            raise UserError(f"`nightjar {name}` exited early; log {bench.children.log(name)}")
        # The ingest query runs micro-batches from the start (its state has timeouts); the windowed query reports
        # no progress before ``events`` has data (an idle trigger), so its start is read from the log.
        seen = {p["query_name"] for p in progress_rows(lake)}
        started = f"query {QUERY_WINDOWED} started" in bench.children.log(name).read_text(errors="replace")
        if QUERY_INGEST in seen and (QUERY_WINDOWED in seen or started):
            break
        if time.monotonic() - t0 > 300:
            raise UserError(f"the pipeline did not start both queries within 300 s; log "
                            f"{bench.children.log(name)}:\n{log_tail(bench.children.log(name))}")
        if time.monotonic() - last >= STATUS_EVERY_S:
            last = time.monotonic()
            bench.children.remember()
            Out.status(f"{name}: waiting for both queries to start ({time.monotonic() - t0:.0f}s)")
        time.sleep(1.0)
    bench.children.remember()
    Out.status(f"{name}: pipeline warm after {time.monotonic() - t0:.0f}s")
    return proc


def write_reference(lake: Path, seed: int, hosts: int, start: float) -> None:
    """The generator's reference tables (same seed and sizes: same organization), before the pipeline starts, so
    the ingest query reads the DHCP zones at its start, as in a real deployment."""
    from generator.organization import build_organization
    from generator.reference_tables import write_lake

    write_lake(lake, build_organization(seed, hosts, 300), start, None, None)


def copy_models(source_lake: Path, lake: Path) -> list[str]:
    """Copy ``source_lake/models`` into ``lake`` (before the pipeline starts, so its supervisor starts the ``ml``
    query); the usable versions found, e.g. ``["behaviour v0003", "domain v0003"]``. A lake without a usable model
    is refused up front: the run would silently measure the pipeline without scoring."""
    from alerts.ml.ml_scoring import MODEL_FEATURES
    from alerts.ml.model_store import ModelRefused, ModelTracker, models_root

    src = models_root(source_lake)
    if not src.is_dir():
        raise UserError(f"--model-from {source_lake}: no models under {src} (train them with `nightjar ml train`)",
                        exit_code=2)
    shutil.copytree(src, models_root(lake), dirs_exist_ok=False)
    usable = []
    for name, feats in MODEL_FEATURES.items():
        try:
            model = ModelTracker(lake, name, feats).current()
        except ModelRefused:
            model = None
        if model is not None:
            usable.append(f"{name} {model.version}")
    if not usable:
        raise UserError(f"--model-from {source_lake}: no usable model (see `nightjar ml list --lake {source_lake}`)",
                        exit_code=2)
    return usable


def live(bench: Bench, tag: str = "live", model_from: Path | None = None) -> dict[str, Any]:
    """One live run; ``tag`` names its lake, logs and children (live-ml runs two); ``model_from``: a lake whose
    models are copied in first."""
    args, out = bench.args, bench.out
    hosts = args.hosts or 8000
    t_mode = time.time()
    settings, lake = bench.fresh(tag)
    models = copy_models(model_from, lake) if model_from else []
    if models:
        Out.status(f"{tag}: models from {model_from}: {', '.join(models)}")
    write_reference(lake, args.seed, hosts, time.time())
    alerts = AlertConsumer(settings).start()
    Out.status(f"{tag}: starting the pipeline (trigger {args.trigger}) on {settings.bootstrap_servers}")
    run_name, gen_name = f"{tag}-run", f"{tag}-generate"
    pipe = start_pipeline(bench, settings, lake, run_name)
    sampler = Sampler(settings, lake, pipe.pid, ml=bool(models))
    try:
        Out.status(f"{tag}: generating at speedup 1, {hosts} hosts, {args.duration:.0f}s")
        gen_t0 = time.time()
        gen = bench.children.start(gen_name, bench.generate_args(
            settings, "--speedup", "1", "--hosts", str(hosts), "--duration", str(args.duration)))
        sampler.t0 = gen_t0
        last = 0.0
        while gen.poll() is None:
            s = sampler.sample()
            if time.monotonic() - last >= STATUS_EVERY_S:
                last = time.monotonic()
                Out.status(_status_line(s, f"{tag}:"))
            if pipe.poll() is not None:
                bench.check_exit(run_name, pipe.returncode)
                raise UserError(f"the pipeline exited during the {tag} run")
            time.sleep(args.sample_seconds)
        bench.check_exit(gen_name, gen.returncode)
        gen_s = time.time() - gen_t0
        Out.status(f"{tag}: generator done after {gen_s:.0f}s; waiting for the pipeline to catch up")
        deadline = time.monotonic() + args.drain_timeout
        caught_up = False
        while time.monotonic() < deadline:
            s = sampler.sample()
            if s["ingest_lag"] == 0 and s["windowed_lag"] == 0 and not s.get("ml_lag"):
                caught_up = True
                break
            if time.monotonic() - last >= STATUS_EVERY_S:
                last = time.monotonic()
                Out.status(_status_line(s, f"{tag} (catching up):"))
            time.sleep(min(args.sample_seconds, 2.0))
        catch_up_s = time.time() - gen_t0 - gen_s
        time.sleep(3.0)  # the windowed batch over the last events publishes its alerts
    finally:
        sampler.close()
        bench.children.remember()
        stop_rc = bench.children.stop(run_name)
        alerts.stop()
    progress = progress_rows(lake)
    single_rules = _single_event_rules(progress)
    events_total = sampler.samples[-1]["produced"] if sampler.samples else 0
    lat = _latencies(alerts.messages, single_rules)
    offset = _producer_offset(lake)
    result: dict[str, Any] = {
        "hosts": hosts, "duration_s": args.duration, "trigger": args.trigger, "events": events_total,
        "events_per_s": round(events_total / max(gen_s, 1e-9), 1), "generator_s": round(gen_s, 1),
        "caught_up": caught_up, "catch_up_s": round(catch_up_s, 1),
        "latency": lat, "single_event_rules": sorted(single_rules),
        "generator_emission_offset_s": offset,
        "alert_consumer_error": alerts.error,
        "samples": [{k: v for k, v in s.items() if k != "at"} for s in sampler.samples],
        "max": {k: max((s[k] or 0 for s in sampler.samples), default=0)
                for k in ("ingest_lag", "windowed_lag", "ingest_state_rows", "windowed_state_rows", "driver_mib",
                          "jvm_mib", "workers_mib")},
        "targets": {"p50_s": TARGET_P50_S, "p99_s": TARGET_P99_S, "single_event_p50_s": TARGET_SINGLE_P50_S},
        "pipeline_exit_code_on_sigterm": stop_rc,
        "log_problems": log_problems(bench.children.log(run_name)),
        "load_average": bench.load.summary(t_mode),
        "models": models,
        "ml_query": _ml_query(progress) if models else None,
    }
    if models:
        result["max"]["ml_lag"] = max((s.get("ml_lag") or 0 for s in sampler.samples), default=0)
    o = lat["overall"]
    se = lat["single_event"]
    result["target_met"] = {
        "p50": None if o["p50"] is None else o["p50"] <= TARGET_P50_S,
        "p99": None if o["p99"] is None else o["p99"] <= TARGET_P99_S,
        "single_event_p50": None if se["p50"] is None else se["p50"] <= TARGET_SINGLE_P50_S,
    }
    _print_live(out, result, sampler.samples)
    return result


def _parse_ts(text: str | None) -> float | None:
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.timestamp()


def _latencies(messages: list[tuple[float, dict]], single_rules: set[str]) -> dict[str, Any]:
    """Event->alert latency of every alert raised (revision 1): Kafka timestamp of the message - ``last_seen``."""
    per_rule: dict[str, list[float]] = defaultdict(list)
    for ts, msg in messages:
        if msg.get("revision") != 1:
            continue
        last_seen = _parse_ts(msg.get("last_seen"))
        if last_seen is None:
            continue
        per_rule[msg.get("rule_id") or "?"].append(ts - last_seen)

    def stats(values: list[float]) -> dict[str, Any]:
        return {"alerts": len(values), "p50": _pct(values, 0.5), "p95": _pct(values, 0.95), "p99": _pct(values, 0.99),
                "max": round(max(values), 3) if values else None}

    everything = [v for vs in per_rule.values() for v in vs]
    single = [v for r, vs in per_rule.items() if r in single_rules for v in vs]
    windowed = [v for r, vs in per_rule.items() if r not in single_rules for v in vs]
    # ML alerts (rule_id ml.*) apart: a run with a model raises them, one without cannot, so the cost of scoring to
    # the rules' latency is the rule alerts' p50 with vs without, and the ML alerts' own latency is another figure.
    rules = [v for r, vs in per_rule.items() if not _is_ml(r) for v in vs]
    ml = [v for r, vs in per_rule.items() if _is_ml(r) for v in vs]
    return {"messages": len(messages), "overall": stats(everything), "single_event": stats(single),
            "windowed": stats(windowed), "rules": stats(rules), "ml": stats(ml),
            "by_rule": {r: stats(vs) for r, vs in sorted(per_rule.items())}}


def _is_ml(rule_id: str) -> bool:
    from alerts.ml.ml_scoring import RULES  # the ML rule ids the scoring query publishes under

    return rule_id in RULES


def _ml_query(progress: list[dict]) -> dict[str, Any]:
    """The ``ml`` query's micro-batches from ``pipeline_progress``: how often it ran and what a batch cost."""
    rows = sorted((p for p in progress if p["query_name"] == QUERY_ML and (p["batch_id"] or 0) >= 0),
                  key=lambda p: (p["batch_id"], p["timestamp"]))
    busy = [p for p in rows if p["num_input_rows"]]
    ms = [float(p["batch_duration_ms"]) for p in busy if p["batch_duration_ms"] is not None]
    return {"progress_rows": len(rows), "batches_with_input": len(busy),
            "input_rows": sum(p["num_input_rows"] for p in busy),
            "batch_ms": {"p50": _pct(ms, 0.5), "p95": _pct(ms, 0.95), "max": max(ms, default=None),
                         "mean": round(statistics.fmean(ms), 1) if ms else None},
            "batch_ms_all": [p["batch_duration_ms"] for p in busy]}


def _producer_offset(lake: Path) -> dict[str, Any] | None:
    """How far the generator's emission trails the events' own time: Kafka record time (``event.created``) -
    ``@timestamp`` over Zeek events (sub-second times). Part of every latency above; the generator's start-up
    (building the organization) delays emission behind the simulated clock."""
    rows = table_rows(lake, TABLE_EVENTS, ["@timestamp", "event"])
    diffs = []
    for r in rows:
        ev = r.get("event") or {}
        if not str(ev.get("dataset") or "").startswith("zeek") or not ev.get("created") or not r.get("@timestamp"):
            continue
        diffs.append((ev["created"] - r["@timestamp"]).total_seconds())
    if not diffs:
        return None
    return {"events": len(diffs), "p50": _pct(diffs, 0.5), "p95": _pct(diffs, 0.95)}


def _print_live(out: Out, r: dict[str, Any], samples: list[dict[str, Any]]) -> None:
    out.say(f"== live: generator at speedup 1, {r['hosts']} hosts, {r['duration_s']:.0f}s; nightjar run --trigger "
            f"{r['trigger']} ==")
    out.say(f"  events: {r['events']:,} in {r['generator_s']:.0f}s ({r['events_per_s']:,.0f} events/s); "
            f"caught up: {'yes' if r['caught_up'] else 'NO'} {r['catch_up_s']:.0f}s after the generator ended")
    out.say("  lag over time:")
    _print_lag_table(out, samples)
    m = r["max"]
    out.say(f"  max: ingest lag {m['ingest_lag']:,}, windowed lag {m['windowed_lag']:,}, state rows ingest "
            f"{m['ingest_state_rows']:,} / windowed {m['windowed_state_rows']:,}, RSS driver {m['driver_mib']:.0f} "
            f"MiB, JVM {m['jvm_mib']:.0f} MiB, Python workers {m['workers_mib']:.0f} MiB")
    lat = r["latency"]
    out.say(f"  event->alert latency (alert's Kafka time - its last_seen), {lat['messages']} messages on "
            f"{TOPIC_ALERTS}:")
    out.say(f"  {'rule':<28} {'alerts':>6} {'p50':>8} {'p95':>8} {'p99':>8} {'max':>8}")

    def row(name: str, s: dict[str, Any]) -> None:
        out.say(f"  {name:<28} {s['alerts']:>6} {_fmt(s['p50']):>8} {_fmt(s['p95']):>8} {_fmt(s['p99']):>8} "
                f"{_fmt(s['max']):>8}")

    row("ALL", lat["overall"])
    row("single-event rules", lat["single_event"])
    row("windowed rules", lat["windowed"])
    if r.get("models"):
        row("rule alerts (not ml.*)", lat["rules"])
        row("ML alerts (ml.*)", lat["ml"])
    for rule, s in lat["by_rule"].items():
        row(f"  {rule}", s)
    if r.get("models"):
        q = r["ml_query"]
        b = q["batch_ms"]
        out.say(f"  ML scoring ({', '.join(r['models'])}): query {QUERY_ML} {q['batches_with_input']} batches with "
                f"input ({q['input_rows']:,} events rows, {q['progress_rows']} progress rows), batch p50 "
                f"{_ms(b['p50'])}, p95 {_ms(b['p95'])}, max {_ms(b['max'])}; max ML lag {r['max']['ml_lag']:,} rows")
    off = r["generator_emission_offset_s"]
    if off:
        out.say(f"  (included above: the generator emits events {off['p50']:.2f}s (p50) after their own time, "
                f"measured as Kafka time - @timestamp over {off['events']:,} Zeek events; syslog times have "
                f"whole seconds)")
    t = r["target_met"]
    o, se = lat["overall"], lat["single_event"]
    out.say(f"  targets: p50 <= {TARGET_P50_S:g}s: {_mark(t['p50'])} ({_fmt(o['p50'])}); p99 <= {TARGET_P99_S:g}s: "
            f"{_mark(t['p99'])} ({_fmt(o['p99'])}); single-event p50 <= {TARGET_SINGLE_P50_S:g}s: "
            f"{_mark(t['single_event_p50'])} ({_fmt(se['p50'])})")
    out.say(f"  pipeline stopped with SIGTERM: exit code {r['pipeline_exit_code_on_sigterm']}")
    if r["alert_consumer_error"]:
        out.say(f"  alert consumer error: {r['alert_consumer_error']}")
    out.say(f"  {load_text(r['load_average'])}")
    if r["log_problems"]:
        out.say(f"  pipeline log: {len(r['log_problems'])} warning/error line(s), first: {r['log_problems'][0][:200]}")


# -- live-ml: the live run without and with the models ------------------------------------------------------------
def _ratio(with_: float | None, without: float | None) -> float | None:
    return round(with_ / without, 3) if with_ is not None and without else None


def live_ml(bench: Bench) -> dict[str, Any]:
    """The live run twice, back to back so they share the machine's conditions: without a model, then with the
    models of ``--model-from`` (or the other way round with ``--ml-order with-first``)."""
    args = bench.args
    order = ("with", "without") if args.ml_order == "with-first" else ("without", "with")
    runs: dict[str, dict[str, Any]] = {}
    for which in order:
        Out.status(f"live-ml: the run {which} the model ({order.index(which) + 1} of 2)")
        runs[which] = live(bench, f"live-{which}-model", args.model_from if which == "with" else None)
    result = {"order": list(order), "model_from": str(args.model_from), "without_model": runs["without"],
              "with_model": runs["with"]}
    result["comparison"] = ml_comparison(runs["without"], runs["with"])
    _print_live_ml(bench.out, result)
    return result


def ml_comparison(without: dict[str, Any], with_: dict[str, Any]) -> dict[str, Any]:
    """The figures of issue #15's bar from two live runs: p50/p95/p99 of each, ratios with/without of the p50s."""
    lw, lm = without["latency"], with_["latency"]

    def pcts(s: dict[str, Any]) -> dict[str, Any]:
        return {k: s[k] for k in ("alerts", "p50", "p95", "p99")}

    cmp: dict[str, Any] = {
        "rules_without": pcts(lw["rules"]), "rules_with": pcts(lm["rules"]),
        "all_without": pcts(lw["overall"]), "all_with": pcts(lm["overall"]),
        "ml_with": pcts(lm["ml"]),
        # the bar: what scoring adds to the rules' event->alert p50 (the ML alerts exist only in the run with it)
        "p50_ratio_rules": _ratio(lm["rules"]["p50"], lw["rules"]["p50"]),
        "p50_ratio_all": _ratio(lm["overall"]["p50"], lw["overall"]["p50"]),
        "p95_ratio_rules": _ratio(lm["rules"]["p95"], lw["rules"]["p95"]),
        "p99_ratio_rules": _ratio(lm["rules"]["p99"], lw["rules"]["p99"]),
        "ml_batch_ms": with_["ml_query"]["batch_ms"] if with_.get("ml_query") else None,
        "load_1m_mean_without": without["load_average"]["mean_1m"],
        "load_1m_mean_with": with_["load_average"]["mean_1m"],
        "target_p50_ratio": TARGET_ML_P50_RATIO,
    }
    r = cmp["p50_ratio_rules"]
    cmp["target_met"] = None if r is None else r <= TARGET_ML_P50_RATIO
    return cmp


def _print_live_ml(out: Out, r: dict[str, Any]) -> None:
    c = r["comparison"]
    out.say(f"== live-ml: the live run without and with the models of {r['model_from']} (order: "
            f"{' then '.join(r['order'])}) ==")
    out.say(f"  {'alerts':<26} {'run':<8} {'n':>5} {'p50':>8} {'p95':>8} {'p99':>8} {'load1 mean':>11}")
    for label, key, which in (("rule alerts (not ml.*)", "rules_without", "without"),
                              ("rule alerts (not ml.*)", "rules_with", "with"),
                              ("all alerts", "all_without", "without"), ("all alerts", "all_with", "with"),
                              ("ML alerts (ml.*)", "ml_with", "with")):
        s = c[key]
        out.say(f"  {label:<26} {which:<8} {s['alerts']:>5} {_fmt(s['p50']):>8} {_fmt(s['p95']):>8} "
                f"{_fmt(s['p99']):>8} {c['load_1m_mean_' + which]:>11.2f}")

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}x"

    out.say(f"  with/without: rule alerts p50 {ratio(c['p50_ratio_rules'])} (p95 {ratio(c['p95_ratio_rules'])}, p99 "
            f"{ratio(c['p99_ratio_rules'])}); all alerts p50 {ratio(c['p50_ratio_all'])}")
    b = c["ml_batch_ms"] or {}
    out.say(f"  ml query batches: p50 {_ms(b.get('p50'))}, p95 {_ms(b.get('p95'))}, max {_ms(b.get('max'))}")
    out.say(f"  target: scoring adds <= {100 * (TARGET_ML_P50_RATIO - 1):.0f} % to the rule alerts' p50 "
            f"(ratio <= {TARGET_ML_P50_RATIO:g}): {_mark(c['target_met'])}")


# -- step-up --------------------------------------------------------------------------------------------------------
def _rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--rates {text!r} must be comma-separated numbers, e.g. {DEFAULT_RATES}", exit_code=2) from None
    if not rates or any(r <= 0 for r in rates):
        raise UserError("--rates must list positive events/s", exit_code=2)
    return rates


_SIMULATED = re.compile(r"simulated (\S+ \S+Z) \.\. (\S+ \S+Z)")


def step_up(bench: Bench) -> dict[str, Any]:
    args, out = bench.args, bench.out
    hosts = args.hosts or 8000
    rates = _rates(args.rates)
    t_mode = time.time()
    settings, lake = bench.fresh("step-up")
    # Simulated time runs as fast as the rate asks: start in the past (yesterday 09:00 UTC) so that no event is
    # stamped in the future (detection leaves those out); each step continues where the previous one ended.
    today = dt.datetime.now(dt.UTC).replace(hour=9, minute=0, second=0, microsecond=0)
    sim_start = today - dt.timedelta(days=1)
    write_reference(lake, args.seed, hosts, sim_start.timestamp())
    Out.status(f"step-up: starting the pipeline (trigger {args.trigger}) on {settings.bootstrap_servers}")
    pipe = start_pipeline(bench, settings, lake, "step-run")
    sampler = Sampler(settings, lake, pipe.pid)
    steps: list[dict[str, Any]] = []
    try:
        for i, rate in enumerate(rates):
            name = f"step-generate-{i}"
            n = int(rate * args.step_seconds)
            Out.status(f"step-up: step {i + 1}/{len(rates)}: {rate:,.0f} events/s for {args.step_seconds:.0f}s "
                       f"({n:,} events from {sim_start:%Y-%m-%d %H:%M:%S}Z)")
            before = sampler.sample()
            t0 = time.time()
            gen = bench.children.start(name, bench.generate_args(
                settings, "--rate", f"{rate:g}", "--events", str(n), "--hosts", str(hosts),
                "--start", sim_start.strftime("%Y-%m-%dT%H:%M:%SZ")))
            step_samples, last = [], 0.0
            while gen.poll() is None:
                s = sampler.sample()
                step_samples.append(s)
                if time.monotonic() - last >= STATUS_EVERY_S:
                    last = time.monotonic()
                    Out.status(_status_line(s, f"step {rate:,.0f}/s:"))
                if pipe.poll() is not None:
                    bench.check_exit("step-run", pipe.returncode)
                    raise UserError("the pipeline exited during the step-up run")
                time.sleep(args.sample_seconds)
            bench.check_exit(name, gen.returncode)
            elapsed = time.time() - t0
            end = sampler.sample()
            step_samples.append(end)
            match = _SIMULATED.search(bench.children.log(name).read_text(errors="replace"))
            if match:
                sim_start = dt.datetime.strptime(match.group(2), "%Y-%m-%d %H:%M:%SZ").replace(
                    tzinfo=dt.UTC) + dt.timedelta(seconds=1)
            bench.children.procs.pop(name, None)
            step = _step_result(rate, elapsed, before, step_samples, args.lag_bound_s)
            steps.append(step)
            Out.status(f"step-up: {rate:,.0f}/s -> achieved {step['achieved_events_per_s']:,.0f}/s, lag mid "
                       f"{step['mid_ingest_lag']:,} end {step['end_ingest_lag']:,} (windowed {step['end_windowed_lag']:,})"
                       f": {'bounded' if step['bounded'] else 'NOT bounded'}")
            if not step["bounded"] and not args.all_steps:
                break
    finally:
        sampler.close()
        bench.children.remember()
        stop_rc = bench.children.stop("step-run")
    bounded = [s for s in steps if s["bounded"]]
    best = max((s["rate"] for s in bounded), default=None)
    best_achieved = max((s["achieved_events_per_s"] for s in bounded), default=None)
    result = {
        "hosts": hosts, "trigger": args.trigger, "step_seconds": args.step_seconds, "lag_bound_s": args.lag_bound_s,
        "steps": steps, "highest_bounded_rate": best, "highest_bounded_achieved_events_per_s": best_achieved,
        "target_events_per_s": TARGET_STEP_EPS,
        "target_met": best_achieved is not None and best_achieved >= TARGET_STEP_EPS * 0.95,
        "samples": [{k: v for k, v in s.items() if k != "at"} for s in sampler.samples],
        "pipeline_exit_code_on_sigterm": stop_rc,
        "log_problems": log_problems(bench.children.log("step-run")),
        "load_average": bench.load.summary(t_mode),
    }
    _print_step_up(out, result)
    return result


def _step_result(rate: float, elapsed: float, before: dict, samples: list[dict], bound_s: float) -> dict[str, Any]:
    end = samples[-1]
    mid = samples[len(samples) // 2]
    produced = end["produced"] - before["produced"]
    achieved = produced / max(elapsed, 1e-9)
    limit = rate * bound_s
    growing = end["ingest_lag"] > max(1.5 * mid["ingest_lag"], rate * 2)
    return {
        "rate": rate, "seconds": round(elapsed, 1), "produced": produced, "achieved_events_per_s": round(achieved, 1),
        "mid_ingest_lag": mid["ingest_lag"], "end_ingest_lag": end["ingest_lag"],
        "mid_windowed_lag": mid["windowed_lag"], "end_windowed_lag": end["windowed_lag"],
        "max_ingest_lag": max(s["ingest_lag"] for s in samples),
        "end_lag_s_of_input": round(end["ingest_lag"] / rate, 1),
        "end_windowed_lag_s_of_input": round(end["windowed_lag"] / rate, 1),
        "ingest_growing": growing,
        "bounded": end["ingest_lag"] < limit and end["windowed_lag"] < limit,
        "max_batch_ms": {"ingest": max((s["ingest_batch_ms"] or 0) for s in samples),
                         "windowed": max((s["windowed_batch_ms"] or 0) for s in samples)},
        "max_rss_mib": {k: max((s[k] or 0) for s in samples) for k in ("driver_mib", "jvm_mib", "workers_mib")},
        "load_1m_mean": round(statistics.fmean(s["load_1m"] for s in samples), 2),
    }


def _print_step_up(out: Out, r: dict[str, Any]) -> None:
    out.say(f"== step-up: generator --rate R for {r['step_seconds']:.0f}s per step, {r['hosts']} hosts; nightjar run "
            f"--trigger {r['trigger']} ==")
    out.say(f"  {'rate':>7} {'achieved':>9} {'lag mid':>9} {'lag end':>9} {'end (s)':>8} {'win mid':>9} "
            f"{'win end':>9} {'win (s)':>8} {'max batch i/w':>14} {'load1':>6}  bounded")
    for s in r["steps"]:
        mb = s["max_batch_ms"]
        out.say(f"  {s['rate']:>7,.0f} {s['achieved_events_per_s']:>9,.0f} {s['mid_ingest_lag']:>9,} "
                f"{s['end_ingest_lag']:>9,} {s['end_lag_s_of_input']:>8.1f} {s['mid_windowed_lag']:>9,} "
                f"{s['end_windowed_lag']:>9,} {s['end_windowed_lag_s_of_input']:>8.1f} "
                f"{_ms(mb['ingest']) + '/' + _ms(mb['windowed']):>14} {s['load_1m_mean']:>6.2f}  "
                f"{'yes' if s['bounded'] else 'NO'}{' (ingest lag growing)' if s['ingest_growing'] else ''}")
    out.say(f"  (bounded: at the step's end each query is less than {r['lag_bound_s']:g}s of input behind; "
            f"lags in records, 'win' = events rows the windowed query has not read)")
    best = r["highest_bounded_rate"]
    out.say(f"  highest rate with bounded lag: {'none' if best is None else f'{best:,.0f} events/s'}"
            + (f" (achieved {r['highest_bounded_achieved_events_per_s']:,.0f})" if best is not None else ""))
    out.say(f"  target >= {TARGET_STEP_EPS:,} events/s: {_mark(r['target_met'])}")
    out.say(f"  pipeline stopped with SIGTERM: exit code {r['pipeline_exit_code_on_sigterm']}")
    out.say(f"  {load_text(r['load_average'])}")
    if r["log_problems"]:
        out.say(f"  pipeline log: {len(r['log_problems'])} warning/error line(s), first: {r['log_problems'][0][:200]}")


# -- entry point ----------------------------------------------------------------------------------------------------
def _validate(args: argparse.Namespace) -> None:
    for flag in ("events", "duration", "step_seconds", "sample_seconds", "lag_bound_s", "drain_timeout", "run_timeout"):
        if getattr(args, flag) <= 0:
            raise UserError(f"--{flag.replace('_', '-')} must be positive", exit_code=2)
    if args.hosts is not None and args.hosts < 12:
        raise UserError("--hosts must be at least 12", exit_code=2)
    from generator.command import parse_start

    if parse_start(args.start, False) > time.time():
        raise UserError(f"--start {args.start} is in the future: the drained run replays the past", exit_code=2)
    parse_interval(args.trigger)
    _rates(args.rates)
    if args.mode == "live-ml" and args.model_from is None:
        raise UserError("--mode live-ml needs --model-from LAKE (a lake with trained models)", exit_code=2)
    if args.model_from is not None:
        if args.mode not in ("live", "live-ml"):
            raise UserError("--model-from applies to --mode live and live-ml only", exit_code=2)
        if not (args.model_from / "models").is_dir():
            raise UserError(f"--model-from {args.model_from}: no models under {args.model_from / 'models'} "
                            "(train them with `nightjar ml train`)", exit_code=2)
    if args.json not in (None, "-") and not Path(args.json).parent.exists():
        raise UserError(f"--json {args.json}: directory {Path(args.json).parent} does not exist", exit_code=2)


def run_bench(args: argparse.Namespace, settings: Settings, name: str, body, bench_cls: type[Bench] = Bench) -> int:
    """The harness every whole-pipeline benchmark shares: SIGTERM acts as Ctrl-C, everything started is stopped, the
    work directory is removed unless ``--keep-lake``, and the report goes to ``--json``. ``body(bench, report)``
    fills the report."""
    if settings.bootstrap:
        Out.status(f"note: --bootstrap {settings.bootstrap} ignored: the benchmark starts its own embedded broker "
                   "so that the topics hold only its records")
    settings = settings.with_(bootstrap=None)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    bench = bench_cls(args, settings)
    report: dict[str, Any] = {"benchmark": name, "started_at": dt.datetime.now(dt.UTC).isoformat(),
                              "machine": {"cpus": os.cpu_count(), "spark_master": settings.spark_master},
                              "workdir": str(bench.workdir)}
    try:
        body(bench, report)
    finally:
        bench.close()
        signal.signal(signal.SIGTERM, previous)
        if args.keep_lake:
            Out.status(f"lakes and logs kept in {bench.workdir}")
        else:
            shutil.rmtree(bench.workdir, ignore_errors=True)
    report["load_average"] = bench.load.summary()
    report["finished_at"] = dt.datetime.now(dt.UTC).isoformat()
    bench.out.say(f"overall {load_text(report['load_average'])}")
    if args.json == "-":
        print(json.dumps(report, default=str), flush=True)
    elif args.json:
        Path(args.json).write_text(json.dumps(report, default=str, indent=1) + "\n")
        Out.status(f"JSON written to {args.json}")
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    _validate(args)
    try:
        import psutil  # noqa: F401
    except ImportError:
        raise UserError("bench pipeline needs psutil in the environment (pip install psutil)") from None

    def body(bench: Bench, report: dict[str, Any]) -> None:
        report["mode"] = args.mode
        modes = ("drained", "live", "step-up") if args.mode == "all" else (args.mode,)
        for mode in modes:
            fn = {"drained": drained, "live": lambda b: live(b, model_from=args.model_from), "step-up": step_up,
                  "live-ml": live_ml}[mode]
            report[mode.replace("-", "_")] = fn(bench)

    return run_bench(args, settings, "pipeline", body)
