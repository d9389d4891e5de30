"""``nightjar backtest --rules PATH [--from T] [--to T]``: the stream's compiled rules, in batch, over history.

The same :class:`~alerts.rule_loader.Rule` objects (same compiled predicates and aggregations) run over the
``events`` table read as a static DataFrame, and their candidates go through the same
:class:`~alerts.alert_builder.AlertBuilder` — so on the same input a backtest raises the same ``alert_id``s as the
stream did (the parity test checks it). Output: one line per alert (or ``--json``), and with ``--write`` the
alerts are written to the ``backtest_alerts`` table (overwritten), never to ``alerts`` or Kafka.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from alerts.alert_builder import AlertBuilder
from alerts.alert_schema import ALERT_SCHEMA
from alerts.detection_input import detection_input, events_schema
from alerts.rule_loader import Rule, load_rules, not_applicable_line
from alerts.rule_sources import add_rules_arguments, rules_from_args
from alerts.single_event_pass import collect_candidates
from core.config import TABLE_BACKTEST_ALERTS, TABLE_EVENTS, Settings
from core.durations import parse_time
from core.errors import UserError
from core.spark_session import build_spark
from ingest.delta_sink import arrow_schema


def read_events(spark: SparkSession, lake: Path) -> DataFrame:
    """The ``events`` table as a static DataFrame (its current version's files, read by Spark in parallel)."""
    from deltalake import DeltaTable

    path = lake / TABLE_EVENTS
    if not (path / "_delta_log").is_dir():
        raise UserError(f"no events table under {lake}: run the pipeline (nightjar run) first, or pass --lake DIR")
    from pyspark.sql.pandas.types import from_arrow_schema

    table = DeltaTable(str(path))
    schema = from_arrow_schema(pa.schema(table.schema().to_arrow()))
    files = table.file_uris()
    if not files:
        return spark.createDataFrame([], schema=schema)
    return spark.read.schema(schema).parquet(*files)


def backtest(spark: SparkSession, events: DataFrame, rules: list[Rule], start: dt.datetime | None = None,
             end: dt.datetime | None = None, detected_at: dt.datetime | None = None) -> list[dict]:
    """Every alert revision the rules would have raised on ``events`` in ``[start, end)``, newest revision only."""
    ts = F.col("`@timestamp`")
    if start is not None:
        events = events.where(ts >= F.lit(start))
    if end is not None:
        events = events.where(ts < F.lit(end))
    prepared = detection_input(events).cache()
    try:
        candidates: list[dict] = []
        single = [r for r in rules if not r.stateful]
        if single:  # every single-event rule in one projection (a SigmaHQ checkout is thousands of rules)
            candidates.extend(collect_candidates(prepared, single))
        for rule in rules:
            if rule.stateful:
                candidates.extend(r.asDict(recursive=True) for r in rule.detect(prepared).collect())
    finally:
        prepared.unpersist()
    builder = AlertBuilder({r.rule_id: r.meta for r in rules})
    when = detected_at or dt.datetime.now(dt.UTC).replace(tzinfo=None)
    revisions = builder.add(candidates, when)
    return sorted(revisions, key=lambda a: (a["first_seen"], a["rule_id"], a["entity"]["value"]))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rules_arguments(parser)
    parser.add_argument("--from", dest="start", metavar="TIME", help="first event time (ISO 8601, inclusive)")
    parser.add_argument("--to", dest="end", metavar="TIME", help="last event time (ISO 8601, exclusive)")
    parser.add_argument("--json", action="store_true", help="one JSON alert per line")
    parser.add_argument("--write", action="store_true", help=f"also write the alerts to {TABLE_BACKTEST_ALERTS}")


def run(args: argparse.Namespace, settings: Settings) -> int:
    start, end = parse_time(args.start, "--from"), parse_time(args.end, "--to")
    if start and end and start >= end:
        raise UserError("--from must be before --to", exit_code=2)
    paths = rules_from_args(args, settings)
    spark = build_spark(settings, app_name="nightjar-backtest")
    rules, errors = load_rules(paths, events_schema(spark))
    for e in errors:
        if not e.not_applicable:
            print(f"ERROR {e} (skipped)", file=sys.stderr)
    if line := not_applicable_line(errors):
        print(line, file=sys.stderr)
    events = read_events(spark, settings.lake)
    t0 = time.monotonic()
    alerts = backtest(spark, events, rules, start, end)
    for a in alerts:
        if args.json:
            print(json.dumps(a, default=lambda v: v.isoformat() + "Z" if isinstance(v, dt.datetime) else str(v)))
        else:
            print(f"{a['first_seen']:%Y-%m-%d %H:%M:%S}  {a['severity']:<8} {a['rule_id']:<24} "
                  f"{a['entity']['type']}={a['entity']['value']:<18} {a['event_count']:>6} events  {a['alert_id']}")
    print(f"backtest: {len(rules)} rules, {len(alerts)} alerts in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    if args.write:
        _write(settings.lake / TABLE_BACKTEST_ALERTS, alerts)
    return 0


def _write(path: Path, alerts: list[dict]) -> None:
    from deltalake import write_deltalake

    schema = arrow_schema(ALERT_SCHEMA)
    write_deltalake(str(path), pa.Table.from_pylist(alerts, schema=schema), mode="overwrite", schema_mode="overwrite")
    print(f"written to {path}", file=sys.stderr)
