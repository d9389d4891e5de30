"""``nightjar bench detail``: how to store each source's own fields — MAP<STRING,STRING>, JSON text, or VARIANT.

The events contract v2 keeps a narrow typed core and one semi-structured column per event for the rest
(``ingest/events_contract.py``). This measures the candidates on the parse benchmark's workload (generated syslog and
Zeek lines through the registry's parsers), per candidate:

1. encode: building the Arrow column from the parsed events' detail dicts (the parse's share of the cost);
2. write: the project's Delta writer (``ingest.delta_sink.write_batch``) — seconds and bytes on disk;
3. read in Spark: a filter on one detail key over the written files (``detail['k']`` vs ``get_json_object``);
4. read in DuckDB (what the dashboard uses): the same filter over the table read with ``deltalake`` to Arrow.

VARIANT is checked for what a Delta table needs: whether Spark can hand it to the Delta writer and whether the
written column is a Delta VARIANT (the ``variantType`` table feature) that delta-spark and DuckDB read as such.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
from deltalake import DeltaTable

# Spark-side modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar
# bench detail`'s arguments, and --help or a bad argument must not wait for pyspark (nightjar/cli.py).
from core.config import Settings
from core.errors import UserError
from ingest.events_contract import DETAIL
from ingest.sources.record_parser import parse_record
from nightjar.benchmarks.bench_parse import workload

LOOKUP_KEY = "conn_state"  # a Zeek conn field: present on about a third of the workload's events
LOOKUP_VALUE = "S0"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=50_000, help="records in the workload (default 50000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per candidate, alternated (default 3)")
    parser.add_argument("--json", action="store_true", help="one JSON object with every figure on stdout")


def _detail_dicts(n: int) -> list[dict[str, str] | None]:
    out = []
    for i, (_kind, raw) in enumerate(workload(n, 0.0)):
        parsed = parse_record(raw, topic="bench", partition=0, offset=i)
        out.append(parsed.event.get(DETAIL) if parsed.event else None)
    return out


def encode_map(details: list[dict[str, str] | None]) -> pa.Array:
    return pa.array([None if d is None else list(d.items()) for d in details], pa.map_(pa.string(), pa.string()))


def encode_json(details: list[dict[str, str] | None]) -> pa.Array:
    return pa.array([None if d is None else json.dumps(d, separators=(",", ":")) for d in details], pa.string())


def _spark_lookup(spark, path: Path, kind: str) -> float:
    df = spark.read.parquet(str(path))
    expr = f"detail['{LOOKUP_KEY}']" if kind == "map" else f"get_json_object(detail, '$.{LOOKUP_KEY}')"
    started = time.monotonic()
    df.where(f"{expr} = '{LOOKUP_VALUE}'").count()
    return time.monotonic() - started


def _duckdb_lookup(path: Path, kind: str) -> float:
    started = time.monotonic()
    con = duckdb.connect()
    con.register("events", DeltaTable(str(path)).to_pyarrow_table())
    expr = (f"detail['{LOOKUP_KEY}']" if kind == "map" else f"json_extract_string(detail, '$.{LOOKUP_KEY}')")
    con.sql(f"SELECT count(*) FROM events WHERE {expr} = '{LOOKUP_VALUE}'").fetchall()
    con.close()
    return time.monotonic() - started


def _variant_check(spark, lake: Path) -> dict[str, object]:
    """Can a VARIANT column reach a standard Delta table through the project's writers?"""
    from ingest.delta_sink import write_batch

    df = spark.sql("""SELECT parse_json('{"conn_state":"S0","history":"S"}') AS detail""")
    out: dict[str, object] = {}
    try:
        arrow_type = df.toArrow().schema.field(DETAIL).type
        out["variant_arrow_type"] = str(arrow_type)
    except Exception as exc:
        out["variant_arrow_type"] = f"failed: {type(exc).__name__}"
    try:
        write_batch(df, lake / "variant", "bench.detail.variant", 0)
        table = DeltaTable(str(lake / "variant"))
        out["variant_delta_type"] = str(table.schema().fields[0].type)
        out["variant_delta_features"] = str(table.protocol().writer_features)
    except Exception as exc:
        out["variant_delta_type"] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    return out


def run(args: argparse.Namespace, settings: Settings) -> int:
    from core.spark_session import build_spark
    from ingest.delta_sink import write_batch

    if args.events <= 0 or args.rounds <= 0:
        raise UserError("--events and --rounds must be positive", exit_code=2)
    out = sys.stderr if args.json else sys.stdout
    details = _detail_dicts(args.events)
    spark = build_spark(settings, app_name="nightjar-bench-detail")
    lake = Path(tempfile.mkdtemp(prefix="nightjar-bench-detail-"))
    result: dict[str, object] = {"events": args.events, "load_average_start": list(os.getloadavg()),
                                 "with_detail": sum(d is not None for d in details)}
    figures: dict[str, dict[str, list[float]]] = {k: {"encode": [], "write": [], "spark": [], "duckdb": []}
                                                  for k in ("map", "json")}
    sizes: dict[str, int] = {}
    try:
        for round_no in range(args.rounds):
            for kind, encode in (("map", encode_map), ("json", encode_json)):
                started = time.monotonic()
                column = encode(details)
                figures[kind]["encode"].append(time.monotonic() - started)
                df = spark.createDataFrame(pa.table({DETAIL: column}))
                path = lake / f"{kind}-{round_no}"
                started = time.monotonic()
                write_batch(df, path, f"bench.detail.{kind}", 0)
                figures[kind]["write"].append(time.monotonic() - started)
                sizes[kind] = sum(f.stat().st_size for f in path.glob("*.parquet"))
                figures[kind]["spark"].append(_spark_lookup(spark, path, kind))
                figures[kind]["duckdb"].append(_duckdb_lookup(path, kind))
        result |= _variant_check(spark, lake)
    finally:
        shutil.rmtree(lake, ignore_errors=True)
    print(f"detail column, {args.events:,} events ({result['with_detail']:,} with detail), median of {args.rounds}:",
          file=out)
    print(f"{'':6} {'encode s':>9} {'write s':>9} {'MB':>7} {'spark s':>9} {'duckdb s':>9}", file=out)
    for kind, f in figures.items():
        med = {k: statistics.median(v) for k, v in f.items()}
        result |= {f"{kind}_{k}_s": v for k, v in med.items()} | {f"{kind}_bytes": sizes[kind]}
        print(f"{kind:6} {med['encode']:>9.3f} {med['write']:>9.3f} {sizes[kind] / 1e6:>7.2f} {med['spark']:>9.3f} "
              f"{med['duckdb']:>9.3f}", file=out)
    print(f"VARIANT: Arrow type from Spark {result['variant_arrow_type']}; in Delta: {result['variant_delta_type']} "
          f"(writer features {result.get('variant_delta_features')})", file=out)
    result["load_average_end"] = list(os.getloadavg())
    print(f"load average: {result['load_average_start']} at start, {result['load_average_end']} at end", file=out)
    if args.json:
        print(json.dumps(result))
    return 0
