"""Log files -> a bronze-shaped DataFrame, so batch parsing uses exactly the stream's transformations.

Each line of each file becomes one record, shaped like a Kafka record of the ``bronze`` table:

* ``value``: the line's raw bytes, without its ``\\n`` (the parse, ``ingest.sources.record_parser.decode``, strips
  a trailing ``\\r`` and a byte-order mark), never decoded here, so invalid UTF-8 reaches the quarantine byte for byte;
* ``topic``: :data:`FILE_TOPIC`; ``partition``: the file's position in the argument list (0-based);
  ``offset``: the 1-based line number, so a quarantined row names the line it came from;
* ``timestamp``: null (a file line has no broker timestamp), ``ingested_at``: the time of reading;
* ``headers``: ``nightjar.source_file`` = the file's path, which also goes into ``event.id``.

Lines are read on the driver and handed to Spark as one Arrow table (``nightjar replay``, tests and benchmarks);
``nightjar parse`` reads the same lines with :func:`read_lines` and parses each with the stream's per-record parser
without Spark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from ingest.arrow_parse import SOURCE_FILE_HEADER
from ingest.kafka_source import ARROW_SCHEMA as KAFKA_ARROW_SCHEMA

FILE_TOPIC = "file"
BRONZE_ARROW_SCHEMA = pa.schema([*KAFKA_ARROW_SCHEMA, pa.field("ingested_at", pa.timestamp("us", tz="UTC"))])


def read_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, raw bytes without the ``\\n``) of every line; a last line without ``\\n`` counts."""
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            yield number, line[:-1] if line.endswith(b"\n") else line


def bronze_table(paths: Iterable[Path], ingested_at: dt.datetime | None = None) -> pa.Table:
    """The lines of ``paths`` as an Arrow table with the bronze columns (plus ``headers``)."""
    ingested_at = ingested_at or dt.datetime.now(dt.UTC)

    def records():
        for index, path in enumerate(paths):
            header = [{"key": SOURCE_FILE_HEADER, "value": str(path).encode()}]
            for number, raw in read_lines(Path(path)):
                yield index, number, raw, header, ingested_at

    return records_table(records())


def records_table(records: Iterable[tuple[int, int, bytes | str, list | None, dt.datetime]],
                  topic: str = FILE_TOPIC) -> pa.Table:
    """``(partition, offset, raw line, headers, ingested_at)`` tuples -> an Arrow table with the bronze columns
    (no key, no Kafka timestamp)."""
    cols: dict[str, list] = {name: [] for name in BRONZE_ARROW_SCHEMA.names}
    for partition, offset, raw, headers, ingested_at in records:
        cols["key"].append(None)
        cols["value"].append(raw.encode() if isinstance(raw, str) else raw)
        cols["topic"].append(topic)
        cols["partition"].append(partition)
        cols["offset"].append(offset)
        cols["timestamp"].append(None)
        cols["headers"].append(headers)
        cols["ingested_at"].append(ingested_at)
    return pa.Table.from_pydict(cols, schema=BRONZE_ARROW_SCHEMA)


def read_files(spark: SparkSession, paths: Iterable[Path], ingested_at: dt.datetime | None = None) -> DataFrame:
    """A bronze-shaped DataFrame of the lines of ``paths`` (see the module doc)."""
    return spark.createDataFrame(bronze_table(paths, ingested_at))


def lines_dataframe(spark: SparkSession, lines: Iterable[bytes | str], topic: str = FILE_TOPIC,
                    ingested_at: dt.datetime | None = None) -> DataFrame:
    """A bronze-shaped DataFrame of in-memory lines (offsets 1…n, partition 0): tests and benchmarks."""
    ingested_at = ingested_at or dt.datetime.now(dt.UTC)
    table = records_table(((0, offset, v, None, ingested_at) for offset, v in enumerate(lines, start=1)), topic)
    return spark.createDataFrame(table)
