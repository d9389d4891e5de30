"""``nightjar bench dashboard``: build a lake with the real pipeline, then time each dashboard page's queries.

The lake comes from the same path production takes: ``nightjar generate`` (labelled attacks) to a broker, then
``nightjar run --available-now`` (the pipeline drains Kafka into the Delta tables and runs the detections). Each
page's query functions are then timed on it (warm, median and worst of ``--repeat`` runs): what an analyst waits
for, less Streamlit's rendering. ``--lake DIR`` with an existing lake skips the build.

:func:`build_lake` is also what the dashboard's browser tests use to get a lake produced by the real pipeline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from core.config import TABLE_ALERTS, TABLE_EVENTS, Settings
from core.errors import UserError

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


def page_queries(lake: Path) -> dict[str, list[tuple[str, Callable[[], object]]]]:
    """Per page, the query calls it makes on first render (with representative arguments from the lake)."""
    from dashboard import coverage, entities, hunt, queries, triage
    from dashboard.alerts_data import (
        AlertFilter,
        alert_queue,
        alert_volume,
        current_alert,
        entity_context,
        evidence_events,
        filter_options,
        related_alerts,
    )
    from dashboard.rules_catalog import load_catalog

    queue = alert_queue(lake)
    if queue.empty:
        raise UserError(f"no alerts in {lake}: nothing to time on the alert pages")
    top = queue.iloc[0]
    alert = current_alert(lake, top["alert_id"])
    etype, value = alert["entity"]["type"], alert["entity"]["value"]
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
        "entity": [("event_timeline", lambda: entities.event_timeline(lake, etype, value)),
                   ("entity_alerts", lambda: entities.entity_alerts(lake, etype, value)),
                   ("dhcp_history", lambda: entities.dhcp_history(lake, etype, value)),
                   ("logins", lambda: entities.logins(lake, etype, value)),
                   ("top_peers", lambda: entities.top_peers(lake, etype, value)),
                   ("top_ports", lambda: entities.top_ports(lake, etype, value))],
        "coverage": [("coverage_table", lambda: coverage.coverage_table(lake)),
                     ("daily_alerts", lambda: coverage.daily_alerts(lake)),
                     ("query_health", lambda: coverage.query_health(lake))],
        "pipeline": [("table_overview", lambda: queries.table_overview(lake)),
                     ("latest_progress", lambda: queries.latest_progress(lake)),
                     ("current_leases", lambda: queries.current_leases(lake, limit=20))],
    }


def time_pages(lake: Path, repeat: int = 5) -> list[dict]:
    rows = []
    for page, calls in page_queries(lake).items():
        page_total = []
        for name, call in calls:
            call()  # warm: first open of the Delta logs, imports
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            page_total.append(statistics.median(times))
            rows.append({"page": page, "query": name, "median_s": statistics.median(times), "max_s": max(times)})
        rows.append({"page": page, "query": "(page total)", "median_s": sum(page_total), "max_s": None})
    return rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=20_000, help="events to generate (default 20000)")
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
            from ingest.embedded_broker import EmbeddedBroker

            broker = EmbeddedBroker()
            broker.__enter__()
            bootstrap = broker.bootstrap
        try:
            t0 = time.perf_counter()
            build_lake(lake, bootstrap, events=args.events, seed=args.seed)
            built_s = time.perf_counter() - t0
        finally:
            if broker is not None:
                broker.__exit__(None, None, None)
    load = os.getloadavg()
    rows = time_pages(lake, args.repeat)
    figures = {"lake": str(lake), "events": row_count(lake, TABLE_EVENTS), "alerts": row_count(lake, TABLE_ALERTS),
               "build_s": built_s, "load_avg_1m": load[0], "queries": rows}
    if args.json:
        print(json.dumps(figures, default=str))
        return 0
    print(f"lake {lake}: {figures['events']:,} events, {figures['alerts']:,} alert revisions"
          + (f", built in {built_s:.0f} s" if built_s else "") + f"; load average {load[0]:.2f}")
    print(f"{'page':<10} {'query':<32} {'median s':>9} {'max s':>8}")
    for r in rows:
        mx = f"{r['max_s']:8.3f}" if r["max_s"] is not None else " " * 8
        print(f"{r['page']:<10} {r['query'][:32]:<32} {r['median_s']:9.3f} {mx}")
    return 0
