"""bronze -> events (contract v2) in Spark: the registry's Python parsers over Arrow batches (``mapInArrow``).

Plain ``DataFrame -> DataFrame`` functions, the same in batch and streaming::

    parsed = parse_bronze(bronze)          # exactly one row per input row: core + detail + raw columns + _error
    events = events_of(parsed)             # the rows that parsed: the core columns and detail
    bad = quarantine_of(parsed)            # raw bytes, coordinates, parser, reason

Why Arrow-batched Python and not Spark SQL expressions: the per-record work (regexes, JSON, branching per source)
is what Python does well, and one ``mapInArrow`` node plans in milliseconds, where the SQL parse of the 412-field
contract planned for a second per micro-batch and cost 400-500 µs of core time per record (docs/performance.md).
The records cross to the Python workers and back as Arrow column batches. Only what the parse needs goes there, and
only the quarantined records' bytes come back (untouched Arrow buffers, so ``quarantine`` keeps the exact bytes;
``bronze`` is written from the records themselves): the round trip of every record's bytes and headers cost the JVM
more than half again of its share (docs/events_contract.md).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from ingest.events_contract import CORE_ARROW_SCHEMA, CORE_COLUMNS, to_arrow
from ingest.sources.record_parser import DEFAULT_MAX_RECORD_BYTES, FORMAT_AUTO, formats, parse_record

ERROR_COLUMN = "_error"
# The column rules window on: ``@timestamp`` under a name of its own (alerts.detection_input).
EVENT_TIME_COLUMN = "_event_time"
SOURCE_FILE_HEADER = "nightjar.source_file"  # set by ingest.file_source: part of event.id
HEADERS_TYPE = "array<struct<key: string, value: binary>>"  # Kafka record headers
# What crosses into the Python workers: the record's bytes and coordinates, and the file a line came from (read from
# the headers in the JVM, so that the headers array does not make the round trip).
INPUT_COLUMNS = ("value", "topic", "partition", "offset", "timestamp", "ingested_at", "_source_file")
# What comes back besides the event: the coordinates, and the raw bytes only on the rows that go to quarantine (the
# bytes of every record are in bronze already; sending each back doubled the Arrow round trip's cost).
RAW_FIELDS: tuple[pa.Field, ...] = (
    pa.field("value", pa.binary()), pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("ingested_at", pa.timestamp("us", tz="UTC")),
)
RAW_COLUMNS: tuple[str, ...] = tuple(f.name for f in RAW_FIELDS)
ERROR_TYPE = pa.struct([pa.field("parser", pa.string()), pa.field("reason", pa.string())])
OUTPUT_SCHEMA = pa.schema([*CORE_ARROW_SCHEMA, *RAW_FIELDS, pa.field(ERROR_COLUMN, ERROR_TYPE)])
QUARANTINE_COLUMNS = ("value", "topic", "partition", "offset", "timestamp", "ingested_at", "parser", "error")
_SPARK_INPUT = {"value": "binary", "topic": "string", "partition": "int", "offset": "bigint",
                "timestamp": "timestamp", "ingested_at": "timestamp"}
# With ``raw_record=True`` the whole record comes back on every row (the ingest query writes ``bronze`` from it).
RECORD_FIELDS: tuple[pa.Field, ...] = (
    pa.field("key", pa.binary()), pa.field("headers", pa.list_(pa.struct([
        pa.field("key", pa.string()), pa.field("value", pa.binary())]))),
)


def output_schema(raw_record: bool = False) -> pa.Schema:
    return pa.schema([*OUTPUT_SCHEMA, *RECORD_FIELDS]) if raw_record else OUTPUT_SCHEMA


def parse_bronze(bronze: DataFrame, fmt: str = FORMAT_AUTO,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, raw_record: bool = False) -> DataFrame:
    """Core columns + ``detail`` + the record's coordinates (+ its bytes when quarantined) + ``_error`` (null when the
    record parsed); one row per input row, in batch and streaming alike; never raises on bad data.

    ``raw_record``: every row keeps its record whole (``value``, ``key``, ``headers``), for a plan that writes
    ``bronze`` from the parsed rows (the ingest query, whose DHCP operator carries records to their release)."""
    if fmt not in formats():
        raise ValueError(f"format must be one of {', '.join(formats())}, not {fmt!r}")
    cols = set(bronze.columns)
    missing = {"value", "topic", "partition", "offset"} - cols
    if missing:
        raise ValueError(f"not a bronze-shaped DataFrame: no column(s) {', '.join(sorted(missing))}")
    wanted = {**_SPARK_INPUT, **({"key": "binary", "headers": HEADERS_TYPE} if raw_record else {})}
    inputs = [F.col(name).cast(typ).alias(name) if name in cols else F.lit(None).cast(typ).alias(name)
              for name, typ in wanted.items()]
    source_file = (F.try_element_at(F.filter(F.col("headers"), lambda h: h["key"] == F.lit(SOURCE_FILE_HEADER)),
                                    F.lit(1))["value"].cast("string")
                   if "headers" in cols else F.lit(None).cast("string"))

    def parse_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield parse_batch(batch, fmt, max_record_bytes, raw_record)

    return bronze.select(*inputs, source_file.alias("_source_file")).mapInArrow(
        parse_batches, from_arrow_schema(output_schema(raw_record)))


def parse_batch(batch: pa.RecordBatch, fmt: str = FORMAT_AUTO,
                max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, raw_record: bool = False) -> pa.RecordBatch:
    """One Arrow batch of :data:`INPUT_COLUMNS` -> the same rows parsed (:func:`output_schema`)."""
    n = batch.num_rows
    values = batch.column("value").to_pylist()
    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()
    created = batch.column("timestamp").cast(pa.int64()).to_pylist()
    now_us = int(time.time() * 1_000_000)
    ingested = [now_us if v is None else v for v in batch.column("ingested_at").cast(pa.int64()).to_pylist()]
    files = batch.column("_source_file").to_pylist()
    events: list[dict] = []
    parsers: list[str | None] = []
    reasons: list[str | None] = []
    for i in range(n):
        parsed = parse_record(values[i], topic=topics[i], partition=partitions[i], offset=offsets[i], fmt=fmt,
                              timestamp_us=created[i], ingested_us=ingested[i], source_file=files[i],
                              max_record_bytes=max_record_bytes)
        events.append(parsed.event or {})
        parsers.append(parsed.error[0] if parsed.error else None)
        reasons.append(parsed.error[1] if parsed.error else None)
    core = to_arrow(events)
    failed = pa.array([p is not None for p in parsers])
    error = pa.StructArray.from_arrays([pa.array(parsers, pa.string()), pa.array(reasons, pa.string())],
                                       names=["parser", "reason"], mask=pc.invert(failed))
    raw = {"ingested_at": pa.array(ingested, pa.int64()).cast(pa.timestamp("us", tz="UTC"))}
    if not raw_record:
        raw["value"] = pc.if_else(failed, batch.column("value"), pa.scalar(None, pa.binary()))
    columns = [raw.get(f.name, batch.column(f.name)).cast(f.type) for f in RAW_FIELDS]
    record = [batch.column(f.name).cast(f.type) for f in RECORD_FIELDS] if raw_record else []
    return pa.RecordBatch.from_arrays([*core.flatten(), *columns, error, *record], schema=output_schema(raw_record))


def events_of(parsed: DataFrame) -> DataFrame:
    """The rows that parsed: the core columns (with ``detail``), in contract order."""
    return parsed.where(F.col(ERROR_COLUMN).isNull()).select(*[F.col(f"`{c}`") for c in CORE_COLUMNS])


def quarantine_of(parsed: DataFrame) -> DataFrame:
    """The rows that did not parse: raw bytes, coordinates, the parser tried and the reason."""
    err = F.col(ERROR_COLUMN)
    return parsed.where(err.isNotNull()).select(
        "value", "topic", "partition", "offset", "timestamp", "ingested_at",
        err["parser"].alias("parser"), err["reason"].alias("error"))
