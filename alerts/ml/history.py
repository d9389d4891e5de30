"""Generated log files -> an ``events`` DataFrame in batch, through the stream's own transformations.

Training and evaluation need days of history; pushing two simulated days through Kafka and the live pipeline
takes hours on a two-core machine. The same parse (``ingest.arrow_parse.parse_bronze``), DHCP attribution
(``enrich.dhcp_sessions.attribute_batch``, the stream operator's per-key code) and reference joins
(``enrich.static_joins``) run here over the generator's ``--out`` files instead, so the events are the ones the
pipeline would have written (same columns, same host attribution), only without the Kafka hop.

The lines reach Spark as a Parquet copy of the bronze rows (:func:`bronze_parquet`, written once beside the logs and
reused): ``ingest.file_source.read_files`` hands Spark one in-memory Arrow table, which for two simulated days of
the default organization (2.8 M lines, 1 GB of Zeek JSON) does not fit the driver, and a local relation is
planned as one partition. A Parquet directory is read in file splits by the executors like any table.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from core.config import TABLE_ASSETS, TABLE_IOCS, TABLE_NETWORKS, TABLE_USERS
from enrich.dhcp_sessions import attribute_batch, events_from
from enrich.reference_data import reference_from_tables
from enrich.static_joins import enrich_static
from ingest.arrow_parse import SOURCE_FILE_HEADER, parse_bronze
from ingest.file_source import BRONZE_ARROW_SCHEMA, FILE_TOPIC, read_lines

LOG_FILES = ("syslog.log", "zeek.log")
BRONZE_CACHE = "bronze.parquet"  # directory beside the logs: the lines as bronze rows, for Spark to read in splits
ROWS_PER_FILE = 250_000  # about 90 MB of Zeek JSON per Parquet file: a few splits per core
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


def bronze_parquet(files: list[Path], target: Path) -> Path:
    """The lines of ``files`` as bronze rows (``ingest.file_source.bronze_table``'s columns and values) in Parquet
    files under ``target``; reused when it is newer than every log file. Streams the lines: bounded memory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    done = target / "_SUCCESS"
    if done.exists() and all(done.stat().st_mtime >= f.stat().st_mtime for f in files):
        return target
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.parquet"):
        old.unlink()
    ingested_at = dt.datetime.now(dt.UTC)
    part = 0

    def flush(values: list[bytes], offsets: list[int], index: int, header: list[dict]) -> None:
        nonlocal part
        n = len(values)
        table = pa.Table.from_pydict({
            "key": [None] * n, "value": values, "topic": [FILE_TOPIC] * n, "partition": [index] * n,
            "offset": offsets, "timestamp": [None] * n, "headers": [header] * n, "ingested_at": [ingested_at] * n,
        }, schema=BRONZE_ARROW_SCHEMA)
        pq.write_table(table, target / f"part-{part:05d}.parquet")
        part += 1

    for index, path in enumerate(files):
        header = [{"key": SOURCE_FILE_HEADER, "value": str(path).encode()}]
        values: list[bytes] = []
        offsets: list[int] = []
        for number, raw in read_lines(path):
            values.append(raw)
            offsets.append(number)
            if len(values) == ROWS_PER_FILE:
                flush(values, offsets, index, header)
                values, offsets = [], []
        if values:
            flush(values, offsets, index, header)
    done.touch()
    return target


def events_from_generated(spark: SparkSession, out_dir: Path) -> DataFrame:
    """The enriched events of a ``nightjar generate --out DIR`` directory (log files + reference tables)."""
    files = [out_dir / f for f in LOG_FILES if (out_dir / f).exists()]
    if not files:
        raise FileNotFoundError(f"no generated log files ({', '.join(LOG_FILES)}) in {out_dir}")
    refs = {name: _jsonl(out_dir / f"{name}.jsonl") for name in (TABLE_ASSETS, TABLE_USERS, TABLE_NETWORKS, TABLE_IOCS)}
    dhcp_networks = [r["cidr"] for r in refs[TABLE_NETWORKS] if r.get("dhcp")]
    bronze = spark.read.parquet(str(bronze_parquet(files, out_dir / BRONZE_CACHE)))
    parsed = parse_bronze(bronze)
    return enrich_static(events_from(attribute_batch(parsed, dhcp_networks)), reference_from_tables(refs))


def ground_truth(out_dir: Path) -> list[dict]:
    """The attack incidents the generator wrote beside the logs."""
    return _jsonl(out_dir / "ground_truth.jsonl")
