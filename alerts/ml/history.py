"""Generated log files -> an ``events`` DataFrame in batch, through the stream's own transformations.

Training and evaluation need days of history; pushing two simulated days through Kafka and the live pipeline
takes hours on a two-core machine. The same parse (``ingest.normalize``), DHCP attribution
(``enrich.dhcp_sessions.attribute_batch``, the stream operator's per-key code) and reference joins
(``enrich.static_joins``) run here over the generator's ``--out`` files instead, so the events are the ones the
pipeline would have written (same columns, same host attribution), only without the Kafka hop.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from core.config import TABLE_ASSETS, TABLE_IOCS, TABLE_NETWORKS, TABLE_USERS

LOG_FILES = ("syslog.log", "zeek.log")
_ISO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def _jsonl(path: Path) -> list[dict]:
    """Rows of a JSON-lines file; ISO times (``...Z``, as the generator writes them) back to datetimes."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        for k, v in row.items():
            if isinstance(v, str) and v.endswith("Z") and _ISO_TIME.match(v):
                row[k] = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    return rows


def events_from_generated(spark: SparkSession, out_dir: Path) -> DataFrame:
    """The enriched events of a ``nightjar generate --out DIR`` directory (log files + reference tables)."""
    from enrich.dhcp_sessions import attribute_batch, events_from
    from enrich.reference_data import reference_from_tables
    from enrich.static_joins import enrich_static
    from ingest.file_source import read_files
    from ingest.normalize import parse_records

    files = [out_dir / f for f in LOG_FILES if (out_dir / f).exists()]
    if not files:
        raise FileNotFoundError(f"no generated log files ({', '.join(LOG_FILES)}) in {out_dir}")
    refs = {name: _jsonl(out_dir / f"{name}.jsonl") for name in (TABLE_ASSETS, TABLE_USERS, TABLE_NETWORKS, TABLE_IOCS)}
    dhcp_networks = [r["cidr"] for r in refs[TABLE_NETWORKS] if r.get("dhcp")]
    # read_files builds a local relation; repartitioned, the parse runs as distributed generated code instead of
    # being folded into the local relation by the optimizer (ConvertToLocalRelation), which evaluates every
    # expression row by row, interpreted, on the driver: 50 lines/s instead of thousands.
    bronze = read_files(spark, files).repartition(max(2, spark.sparkContext.defaultParallelism))
    parsed = parse_records(bronze)
    return enrich_static(events_from(attribute_batch(parsed, dhcp_networks)), reference_from_tables(spark, refs))


def ground_truth(out_dir: Path) -> list[dict]:
    """The attack incidents the generator wrote beside the logs."""
    return _jsonl(out_dir / "ground_truth.jsonl")
