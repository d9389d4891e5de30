"""``nightjar bench generate``: generator events/s to files and to Kafka (unpaced, default organization).

Without ``--bootstrap`` an embedded broker (Tansu) is started on a free port for the Kafka figure, so the
benchmark never writes into a broker someone else is using by accident.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from core.config import Settings
from core.errors import UserError
from generator.command import generate
from generator.engine import Options
from generator.scenarios import SCENARIOS
from generator.sinks import FileSink, KafkaSink
from ingest.embedded_broker import EmbeddedBroker, free_port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=200_000, help="events per measurement (default 200000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--hosts", type=int, default=500)
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--only", choices=("files", "kafka"), help="run one measurement only")


def _measure(opts: Options, sink) -> tuple[int, float]:
    t0 = time.perf_counter()
    _sim, _src, _scn, n, _ts = generate(opts, sink)
    sink.close()
    return n, time.perf_counter() - t0


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.events <= 0:
        raise UserError("--events must be positive", exit_code=2)
    opts = Options(seed=args.seed, hosts=args.hosts, users=args.users, start=1767600000.0 + 8 * 3600,
                   events=args.events, scenarios={n: 1 for n in SCENARIOS})
    results = []
    if args.only in (None, "files"):
        with tempfile.TemporaryDirectory(prefix="nightjar-bench-") as tmp:
            n, secs = _measure(opts, FileSink(Path(tmp)))
            size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        results.append(("files", n, secs, size))
    if args.only in (None, "kafka"):
        broker = None
        if settings.bootstrap is None:
            broker = EmbeddedBroker(port=free_port()).start()
            settings = settings.with_(bootstrap=broker.bootstrap)
        try:
            n, secs = _measure(opts, KafkaSink(settings))
        finally:
            if broker is not None:
                broker.stop()
        results.append((f"kafka ({settings.bootstrap_servers}{', embedded' if broker else ''})", n, secs, None))
    for name, n, secs, size in results:
        extra = f", {size / secs / 1e6:.1f} MB/s" if size else ""
        print(f"generate -> {name}: {n:,} events in {secs:.2f}s = {n / secs:,.0f} events/s{extra}")
    return 0
