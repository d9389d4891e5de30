"""``nightjar bench dashboard``: build a lake with the real pipeline, then time each dashboard page's queries.

The lake comes from the same path production takes: ``nightjar generate`` (labelled attacks) to a broker, then
``nightjar run --available-now`` (the pipeline drains Kafka into the Delta tables and runs the detections). Each
page's query functions are then timed on it (warm, median and worst of ``--repeat`` runs): what an analyst waits
for, less Streamlit's rendering. ``--lake DIR`` with an existing lake skips the build.

At scale (``--events 5000000``) the pipeline builds ``--pipeline-events`` (attacks, alerts) and the rest is history
added in batch by :func:`add_bulk_events`: the pipeline runs at a few hundred events/s on this machine kind, so
millions of events cannot go through it in a bench. The history is time-shifted copies of a seed — the pipeline's
own events by default, or ``--parsed N`` generated events parsed in batch by the stream's own steps on Spark —
written in time order, 50,000 rows a file, so the pages' time filters skip files by their statistics.

:func:`build_lake` is also what the dashboard's browser tests use to get a lake produced by the real pipeline.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar bench
# dashboard`'s arguments, and --help or a bad argument must not wait for Spark, Streamlit and DuckDB
# (nightjar/cli.py).
from core.config import TABLE_ALERTS, TABLE_EVENTS, TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK, Settings
from core.errors import UserError
from dashboard.rules_catalog import load_catalog
from ingest.embedded_broker import EmbeddedBroker

REPO = Path(__file__).resolve().parents[2]
# Attacks whose alerts the dashboard tests look for; small enough to build in about a minute and a half.
DEFAULT_SCENARIOS = "ssh_brute_force,sudo_non_admin,ioc_match,new_country_login,port_scan_vertical"


def _nightjar(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "nightjar.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def build_lake(lake: Path, bootstrap: str, events: int = 4000, seed: int = 7, scenarios: str = DEFAULT_SCENARIOS,
               hosts: int = 40, users: int = 20, timeout: float = 900) -> dict[str, str]:
    """Generate ``events`` events with ``scenarios`` to the broker at ``bootstrap`` (reference tables and ground
    truth into ``lake``), then run the pipeline over them until Kafka is drained and the detections have run.
    Returns the two commands' outputs; raises :class:`UserError` with their stderr tail if either fails."""
    out = {}
    steps = {
        "generate": ["generate", "--events", str(events), "--seed", str(seed), "--hosts", str(hosts),
                     "--users", str(users), "--scenarios", scenarios, "--bootstrap", bootstrap,
                     "--lake", str(lake), "--quiet"],
        "run": ["run", "--available-now", "--bootstrap", bootstrap, "--lake", str(lake)],
    }
    for name, argv in steps.items():
        done = _nightjar(*argv, timeout=timeout)
        out[name] = done.stdout + done.stderr
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise UserError(f"nightjar {name} failed (exit {done.returncode}):\n{tail}")
    return out


def _reference_row(line: str) -> dict:
    """A reference-table row of the generator's JSONL (times are ISO strings there)."""
    row = json.loads(line)
    if isinstance(row.get("first_seen"), str):
        row["first_seen"] = dt.datetime.fromisoformat(row["first_seen"].replace("Z", "+00:00"))
    return row


def add_bulk_events(lake: Path, total: int, seed: int = 8, parsed: int = 100_000, chunk: int = 100_000,
                    hosts: int = 500, users: int = 300, rows_per_file: int = 50_000,
                    settings: Settings | None = None, log: Callable[[str], None] = print) -> dict:
    """Grow the lake's ``events`` to about ``total`` rows of history before its first event, in batch.

    The streaming pipeline runs at a few hundred events/s on this machine kind, so millions of events cannot be
    built through it. Instead a seed set of parsed events is written as time-shifted copies (each copy moved back
    by the seed's span, ``event.id`` suffixed ``~k``) until ``total`` is reached. The seed is either ``parsed``
    background events from ``nightjar generate --out`` (no attacks) sent through the stream's own parse -> DHCP
    attribution -> reference-join steps in batch (:func:`alerts.python_rules.enriched_events`, with the generated
    organization's reference tables), or, with ``parsed=0``, the events the streaming pipeline already wrote to
    this lake. Copies are written ``rows_per_file`` at a time, sorted by ``@timestamp``, so every file covers a
    narrow time range and a time filter skips files by their statistics. Returns the figures."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from core.lake import row_count, table_dataset

    have = row_count(lake, TABLE_EVENTS)
    need = total - have
    if need <= 0:
        return {"added": 0, "parsed": 0, "copies": 0}
    target = DeltaTable(str(lake / TABLE_EVENTS))
    schema = target.schema().to_arrow()
    schema = schema if isinstance(schema, pa.Schema) else pa.schema(schema)
    first = min(v for v in pa.table(target.get_add_actions(flatten=True))["min.@timestamp"].to_pylist() if v)
    t0 = time.perf_counter()
    if parsed > 0:
        table, figures = _parse_generated(lake, min(parsed, need), first, seed, chunk, hosts, users, settings, log)
        table = table.cast(schema)
    else:
        table = table_dataset(lake, TABLE_EVENTS).to_table().cast(schema)
        figures = {"seed": "the pipeline's own events"}
    bounds = pa.compute.min_max(table.column("@timestamp")).as_py()
    span = max(bounds["max"] - bounds["min"], dt.timedelta(minutes=1)) + dt.timedelta(seconds=1)
    copies = max(1, round(need / table.num_rows))  # the lake ends within half a seed of ``total``
    # the parsed history already lies before the lake's events; the pipeline's own events start the copies at -1
    offset = 0 if parsed > 0 else 1
    t1 = time.perf_counter()
    written = _write_copies(lake, table, range(offset, offset + copies), span, rows_per_file, log)
    figures.update(seed_events=table.num_rows, copies=copies, added=written, span_h=span.total_seconds() / 3600,
                   seed_s=t1 - t0, write_s=time.perf_counter() - t1)
    return figures


def _parse_generated(lake: Path, events: int, before: dt.datetime, seed: int, chunk: int, hosts: int, users: int,
                     settings: Settings | None, log: Callable[[str], None]):
    """``events`` generated background events ending about a day before ``before``, parsed and enriched in batch."""
    import math

    import pyarrow as pa

    from alerts.python_rules import dhcp_networks, enriched_events
    from core.spark_session import build_spark
    from enrich.reference_data import reference_from_tables
    from ingest.file_source import BRONZE_ARROW_SCHEMA

    with tempfile.TemporaryDirectory(prefix="nightjar-bench-bulk-") as tmp:
        out = Path(tmp)
        t0 = time.perf_counter()
        start = (before - dt.timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
        done = _nightjar("generate", "--out", str(out), "--events", str(events), "--seed", str(seed), "--hosts",
                         str(hosts), "--users", str(users), "--no-attacks", "--start", start, "--quiet",
                         timeout=3600)
        if done.returncode != 0:
            raise UserError(f"nightjar generate failed: {done.stderr.strip().splitlines()[-1:]}")
        figures = {"seed": "generated and parsed in batch", "generate_s": time.perf_counter() - t0}
        files = {TOPIC_RAW_SYSLOG: (out / "syslog.log").read_bytes().splitlines(),
                 TOPIC_RAW_ZEEK: (out / "zeek.log").read_bytes().splitlines()}
        reference = {name: [_reference_row(ln) for ln in (out / f"{name}.jsonl").read_text().splitlines() if ln]
                     for name in ("assets", "users", "networks", "iocs") if (out / f"{name}.jsonl").exists()}
        spark = build_spark((settings or Settings()).with_(shuffle_partitions=2), app_name="nightjar-bench-bulk")
        ref = reference_from_tables(reference)
        dhcp = dhcp_networks(reference)
        n_chunks = max(1, math.ceil(sum(len(v) for v in files.values()) / chunk))
        parts = []
        t1 = time.perf_counter()
        for i in range(n_chunks):
            # the same slice of both files covers about the same simulated time; partitions from 1000 on give
            # event ids no Kafka record of the lake has
            cols: dict[str, list] = {name: [] for name in BRONZE_ARROW_SCHEMA.names}
            now = dt.datetime.now(dt.UTC)
            for topic, lines in files.items():
                for n, value in enumerate(lines[len(lines) * i // n_chunks:len(lines) * (i + 1) // n_chunks]):
                    for name, v in (("key", None), ("value", value), ("topic", topic), ("partition", 1000 + i),
                                    ("offset", n), ("timestamp", None), ("headers", None), ("ingested_at", now)):
                        cols[name].append(v)
            bronze = spark.createDataFrame(pa.Table.from_pydict(cols, schema=BRONZE_ARROW_SCHEMA))
            events, _ = enriched_events(bronze, ref, dhcp)
            parts.append(events.toArrow())
            log(f"bulk events: chunk {i + 1}/{n_chunks} parsed ({parts[-1].num_rows:,} events, "
                f"{time.perf_counter() - t1:.0f} s)")
        spark.stop()
    figures["parse_s"] = time.perf_counter() - t1
    return pa.concat_tables(parts), figures


def _write_copies(lake: Path, table, ks: range, span: dt.timedelta, rows_per_file: int,
                  log: Callable[[str], None]) -> int:
    """Append copy ``k`` of ``table`` for every ``k`` in ``ks`` (see :func:`_shifted`), grouped into commits of about
    ``rows_per_file`` rows each sorted by ``@timestamp``; returns the rows written."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import write_deltalake

    written, group = 0, []
    for n, k in enumerate(ks):
        group.append(_shifted(table, k, span, pa, pc))
        if sum(t.num_rows for t in group) >= rows_per_file or n == len(ks) - 1:
            batch = pa.concat_tables(group).sort_by([("@timestamp", "ascending")])
            write_deltalake(str(lake / TABLE_EVENTS), batch, mode="append")
            written += batch.num_rows
            group = []
            log(f"bulk events: {written:,} written ({n + 1}/{len(ks)} copies)")
    return written


def _shifted(table, k: int, span: dt.timedelta, pa, pc):
    """Copy ``k`` of parsed events: ``@timestamp`` moved back by ``k`` spans, ``event.id`` suffixed ``~k``."""
    if k == 0:
        return table
    i = table.schema.get_field_index("@timestamp")
    ts = table.column(i)
    table = table.set_column(i, table.schema.field(i), pc.subtract(ts, pa.scalar(span * k, pa.duration("us"))))
    j = table.schema.get_field_index("event")
    event = table.column(j).combine_chunks()
    children = [event.field(n) for n in range(event.type.num_fields)]
    idx = event.type.get_field_index("id")
    children[idx] = pc.binary_join_element_wise(children[idx], pa.scalar(f"~{k}"), "")
    moved = pa.StructArray.from_arrays(children, fields=list(event.type), mask=pc.is_null(event))
    return table.set_column(j, table.schema.field(j), moved)


def page_queries(lake: Path) -> dict[str, list[tuple[str, Callable[[], object]]]]:
    """Per page, the query calls it makes on first render (with representative arguments from the lake)."""
    from dashboard import coverage, entities, hunt, queries, triage
    from dashboard.alerts_data import (
        AlertFilter,
        alert_queue,
        alert_volume,
        current_alert,
        entity_context,
        entity_events,
        evidence_events,
        filter_options,
        related_alerts,
    )
    from dashboard.ui import TIME_WINDOWS
    from dashboard.views.entity_page import DEFAULT_WINDOW

    queue = alert_queue(lake)
    if queue.empty:
        raise UserError(f"no alerts in {lake}: nothing to time on the alert pages")
    top = queue.iloc[0]
    alert = current_alert(lake, top["alert_id"])
    etype, value = alert["entity"]["type"], alert["entity"]["value"]
    # the entity page's default window, as the page computes it
    since = dt.datetime.now(dt.UTC) - TIME_WINDOWS[DEFAULT_WINDOW] if TIME_WINDOWS[DEFAULT_WINDOW] else None
    return {
        "alerts": [("filter_options", lambda: filter_options(lake)),
                   ("alert_queue", lambda: alert_queue(lake, AlertFilter())),
                   ("alert_volume", lambda: alert_volume(lake, AlertFilter()))],
        "alert": [("current_alert", lambda: current_alert(lake, top["alert_id"])),
                  ("evidence_events", lambda: evidence_events(lake, alert)),
                  ("entity_context", lambda: entity_context(lake, etype, value, alert["first_seen"])),
                  ("related_alerts", lambda: related_alerts(lake, alert)),
                  ("triage_history", lambda: triage.history(lake, top["alert_id"])),
                  ("rule_catalog", load_catalog)],
        "hunt": [(h.name, (lambda h=h: hunt.run_hunt(lake, h.sql))) for h in hunt.SHIPPED_HUNTS[:3]],
        "entity": [("event_timeline", lambda: entities.event_timeline(lake, etype, value, since=since)),
                   ("entity_alerts", lambda: entities.entity_alerts(lake, etype, value)),
                   ("entity_events", lambda: entity_events(lake, etype, value, since=since, limit=500,
                                                           newest_first=True)),
                   ("dhcp_history", lambda: entities.dhcp_history(lake, etype, value)),
                   ("login_countries", lambda: entities.login_countries(lake, etype, value, since=since)),
                   ("logins", lambda: entities.logins(lake, etype, value, since=since)),
                   ("top_peers", lambda: entities.top_peers(lake, etype, value, since=since)),
                   ("top_ports", lambda: entities.top_ports(lake, etype, value, since=since))],
        "coverage": [("coverage_table", lambda: coverage.coverage_table(lake)),
                     ("daily_alerts", lambda: coverage.daily_alerts(lake)),
                     ("query_health", lambda: coverage.query_health(lake))],
        "pipeline": [("table_overview", lambda: queries.table_overview(lake)),
                     ("latest_progress", lambda: queries.latest_progress(lake)),
                     ("current_leases", lambda: queries.current_leases(lake, limit=20))],
    }


def _file_count(lake: Path, table: str) -> int:
    from deltalake import DeltaTable

    return len(DeltaTable(str(lake / table)).file_uris())


def time_pages(lake: Path, repeat: int = 5) -> list[dict]:
    rows = []
    for page, calls in page_queries(lake).items():
        page_total = []
        for name, call in calls:
            times = []
            try:
                call()  # warm: first open of the Delta logs, imports
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    call()
                    times.append(time.perf_counter() - t0)
            except Exception as exc:  # a hunt's statement timeout is a result too: report it, time the rest
                t = time.perf_counter() - t0 if times else float("nan")
                rows.append({"page": page, "query": name, "median_s": t, "max_s": None,
                             "error": " ".join(str(exc).split())[:120]})
                page_total.append(t)
                continue
            page_total.append(statistics.median(times))
            rows.append({"page": page, "query": name, "median_s": statistics.median(times), "max_s": max(times)})
        if page == "hunt":  # the hunt page runs one query per click, not all of them
            rows.append({"page": page, "query": "(slowest hunt)", "median_s": max(page_total), "max_s": None})
        else:
            rows.append({"page": page, "query": "(page total)", "median_s": sum(page_total), "max_s": None})
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=20_000,
                        help="events the lake should hold (default 20000); beyond --pipeline-events they are "
                             "added as batch-parsed history (see --parsed)")
    parser.add_argument("--pipeline-events", type=int, default=20_000,
                        help="events (with the labelled attacks) that go through the streaming pipeline (default 20000)")
    parser.add_argument("--parsed", type=int, default=0,
                        help="seed the history with N generated events parsed in batch by the stream's own steps "
                             "(Spark); default 0: seed it with the events the pipeline wrote. The rest of --events "
                             "are time-shifted copies of the seed")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per query (default 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from core.lake import is_delta_table, row_count

    lake = settings.lake
    built_s = None
    broker = None
    if not is_delta_table(lake / TABLE_ALERTS):
        tmp = None
        if settings.lake == Path("lake") and not Path("lake").exists():
            tmp = tempfile.mkdtemp(prefix="nightjar-bench-dashboard-")
            lake = Path(tmp) / "lake"
        bootstrap = settings.bootstrap
        if bootstrap is None:
            broker = EmbeddedBroker()
            broker.__enter__()
            bootstrap = broker.bootstrap
        try:
            t0 = time.perf_counter()
            build_lake(lake, bootstrap, events=min(args.events, args.pipeline_events), seed=args.seed)
            built_s = time.perf_counter() - t0
        finally:
            if broker is not None:
                broker.__exit__(None, None, None)
    bulk = {}
    if row_count(lake, TABLE_EVENTS) < args.events:
        t0 = time.perf_counter()
        bulk = add_bulk_events(lake, args.events, seed=args.seed + 1, parsed=args.parsed, settings=settings,
                               log=lambda m: print(m, file=sys.stderr, flush=True))
        bulk["seconds"] = time.perf_counter() - t0
    load = os.getloadavg()
    rows = time_pages(lake, args.repeat)
    figures = {"lake": str(lake), "events": row_count(lake, TABLE_EVENTS), "alerts": row_count(lake, TABLE_ALERTS),
               "build_s": built_s, "bulk": bulk, "event_files": _file_count(lake, TABLE_EVENTS),
               "load_avg_1m": load[0], "load_avg_after_1m": os.getloadavg()[0], "queries": rows}
    if args.json:
        print(json.dumps(figures, default=str))
        return 0
    print(f"lake {lake}: {figures['events']:,} events in {figures['event_files']:,} files, "
          f"{figures['alerts']:,} alert revisions" + (f", built in {built_s:.0f} s" if built_s else "")
          + f"; load average {load[0]:.2f} before timing, {figures['load_avg_after_1m']:.2f} after")
    if bulk.get("added"):
        print(f"history: {bulk['seed_events']:,} events ({bulk['seed']}) x {bulk['copies']} time-shifted copies "
              f"({bulk['span_h']:.1f} h each) = {bulk['added']:,} events added in {bulk['seconds']:.0f} s")
    print(f"{'page':<10} {'query':<32} {'median s':>9} {'max s':>8}")
    for r in rows:
        mx = f"{r['max_s']:8.3f}" if r["max_s"] is not None else " " * 8
        print(f"{r['page']:<10} {r['query'][:32]:<32} {r['median_s']:9.3f} {mx}"
              + (f"  error: {r['error']}" if r.get("error") else ""))
    return 0
