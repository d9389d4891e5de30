"""``nightjar bench enrich``: one simulated hour through the ingest query (parse, DHCP attribution, joins); state
size per stateful operator per micro-batch (is it flat?), host attribution coverage, and the rate of the ingest and
windowed queries of the same run.

1. ``nightjar generate`` writes ``--duration`` simulated seconds (default one hour, starting at a fixed working
   hour) to two fresh topics of an embedded broker, and the reference tables into a fresh lake.
2. The pipeline (the ingest query, then the windowed detections) drains them in ``--max-offsets-per-trigger``
   micro-batches.
3. From ``pipeline_progress``: per ingest micro-batch, each stateful operator's rows and memory (Spark's
   ``stateOperators``); from ``events``: the share of events from DHCP zones that carry ``host.name``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import shutil
import tempfile
import time
from pathlib import Path

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar bench
# enrich`'s arguments, and --help or a bad argument must not wait for pyspark and the generator (Faker)
# (nightjar/cli.py).
from core.config import RAW_TOPICS, TABLE_EVENTS, TABLE_NETWORKS, TABLE_PIPELINE_PROGRESS, Settings
from core.errors import UserError
from core.triggers import QUERIES, QUERY_INGEST, QUERY_WINDOWED, Trigger, parse_interval
from generator.sinks import KafkaSink
from ingest.embedded_broker import EmbeddedBroker, ensure_topics


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=3600.0, help="simulated seconds (default 3600)")
    parser.add_argument("--start", default="2026-03-09T09:00:00Z", help="simulated start (default a Monday 09:00)")
    parser.add_argument("--hosts", type=int, default=500, help="hosts in the organization (default 500)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=20_000, help="micro-batch size")
    parser.add_argument("--keep-lake", action="store_true", help="keep the lake directory")
    parser.add_argument("--speedup", type=float, metavar="X",
                        help="live mode: generate at X times real time while the pipeline runs (trigger --trigger), "
                             "so state eviction by the watermark is exercised; default: generate first, then drain")
    parser.add_argument("--trigger", default="5 seconds", metavar="INTERVAL", help="live mode trigger interval")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from core.lake import table_dataset
    from generator.command import add_arguments as generator_arguments
    from generator.command import generate, options_from_args
    from generator.organization import build_organization
    from generator.reference_tables import write_lake
    from nightjar.pipeline import run_pipeline

    if args.duration <= 0 or args.max_offsets_per_trigger <= 0:
        raise UserError("--duration and --max-offsets-per-trigger must be positive", exit_code=2)
    lake = Path(tempfile.mkdtemp(prefix="nightjar-bench-enrich-"))
    broker = None
    try:
        if settings.bootstrap is None:
            broker = EmbeddedBroker().start()
            settings = settings.with_(bootstrap=broker.bootstrap)
        settings = settings.with_(lake=lake, max_offsets_per_trigger=args.max_offsets_per_trigger)
        ensure_topics(settings, RAW_TOPICS)
        gen_parser = argparse.ArgumentParser()
        generator_arguments(gen_parser)
        gen_args = gen_parser.parse_args(["--duration", str(args.duration), "--start", args.start,
                                          "--hosts", str(args.hosts), "--quiet"])
        opts = options_from_args(gen_args)
        org = build_organization(opts.seed, opts.hosts, opts.users)
        write_lake(lake, org, opts.start, None, None)
        sink = KafkaSink(settings)
        started = time.monotonic()
        if args.speedup:
            _live(settings, opts, sink, org, args)
        else:
            _, by_source, _, produced, _ = generate(opts, sink, org=org)
            sink.close()
            print(f"generated {produced:,} events ({args.duration / 3600:.1f} simulated hours) in "
                  f"{time.monotonic() - started:.1f}s")
            started = time.monotonic()
            run_pipeline(settings, Trigger(available_now=True), list(QUERIES))
            print(f"pipeline drained in {time.monotonic() - started:.1f}s")

        progress = sorted(table_dataset(lake, TABLE_PIPELINE_PROGRESS).to_table().to_pylist(),
                          key=lambda p: (p["query_name"], p["batch_id"]))
        for query in (QUERY_INGEST, QUERY_WINDOWED):
            rows = [p for p in progress if p["query_name"] == query and p["num_input_rows"]]
            steady = rows[1:] or rows
            rate = sum(p["num_input_rows"] for p in steady) / max(sum(p["batch_duration_ms"] for p in steady) / 1000,
                                                                   1e-9)
            print(f"{query:>8}: {sum(p['num_input_rows'] for p in rows):,} records in {len(rows)} batches, "
                  f"{rate:,.0f} records/s steady")
        _state_table([p for p in progress if p["query_name"] == QUERY_INGEST])
        _attribution(lake, table_dataset(lake, TABLE_EVENTS), table_dataset(lake, TABLE_NETWORKS))
    finally:
        if broker is not None:
            broker.stop()
        if args.keep_lake:
            print(f"lake kept at {lake}")
        else:
            shutil.rmtree(lake, ignore_errors=True)
    return 0


def _live(settings: Settings, opts, sink, org, args: argparse.Namespace) -> None:
    """Generate at ``--speedup`` in a thread while the pipeline runs; stop once the ingest query has read it all."""
    import threading

    from generator.command import generate
    from nightjar.pipeline import run_pipeline

    stop = threading.Event()
    produced: list[int] = []

    def produce() -> None:
        try:
            produced.append(generate(opts, sink, speedup=args.speedup, org=org)[3])
        finally:
            sink.close()

    def watch() -> None:  # the ingest query has consumed everything produced: stop the pipeline
        from core.lake import table_dataset

        gen.join()
        total = produced[0] if produced else 0
        print(f"generated {total:,} events at speedup {args.speedup:g} in {time.monotonic() - t0:.0f}s", flush=True)
        while not stop.wait(5):
            try:
                rows = table_dataset(settings.lake, TABLE_PIPELINE_PROGRESS).to_table(
                    columns=["query_name", "num_input_rows"]).to_pylist()
            except Exception:
                continue
            if sum(r["num_input_rows"] or 0 for r in rows if r["query_name"] == QUERY_INGEST) >= total:
                stop.set()

    t0 = time.monotonic()
    gen = threading.Thread(target=produce, name="bench-generator", daemon=True)
    gen.start()
    threading.Thread(target=watch, name="bench-watch", daemon=True).start()
    run_pipeline(settings, Trigger(interval=parse_interval(args.trigger)), list(QUERIES), stop_event=stop)
    print(f"pipeline ran {time.monotonic() - t0:.0f}s (live)")


def _state_table(progress: list[dict]) -> None:
    """Per batch: each stateful operator's state rows and memory."""
    print("state per micro-batch of the ingest query (rows / MiB per operator):")
    for p in progress:
        ops = json.loads(p["progress_json"]).get("stateOperators", [])
        cells = [f"{o['operatorName']}: {o['numRowsTotal']:,} / {o['memoryUsedBytes'] / 2**20:.1f}" for o in ops]
        print(f"  batch {p['batch_id']:>3} ({p['num_input_rows']:>6,} in): " + "; ".join(cells))


def _attribution(lake: Path, events, networks) -> None:
    nets = [ipaddress.ip_network(r["cidr"]) for r in networks.to_table(columns=["cidr", "dhcp"]).to_pylist()
            if r["dhcp"]]

    def in_dhcp(ip: str | None) -> bool:
        if not ip:
            return False
        try:
            a = ipaddress.ip_address(ip)
        except ValueError:
            return False
        return any(a in n for n in nets)

    table = events.to_table(columns=["host", "source", "destination", "@timestamp"]).to_pylist()
    first = min(r["@timestamp"] for r in table)
    warm = first + dt.timedelta(minutes=10)  # a host's first ACK comes at its first renewal (half a lease)
    total = named = total_warm = named_warm = 0
    for r in table:
        host = r["host"] or {}
        if host.get("hostname"):
            continue  # syslog: the reporting host names itself
        src = (r["source"] or {}).get("ip")
        dst = (r["destination"] or {}).get("ip")
        if not (in_dhcp(src) or in_dhcp(dst)):
            continue
        total += 1
        named += bool(host.get("name"))
        if r["@timestamp"] >= warm:
            total_warm += 1
            named_warm += bool(host.get("name"))
    print(f"host attribution: {named:,} of {total:,} events from DHCP zones carry host.name "
          f"({100 * named / max(total, 1):.2f}%); after the first 10 simulated minutes "
          f"{100 * named_warm / max(total_warm, 1):.2f}% ({named_warm:,} of {total_warm:,})")
