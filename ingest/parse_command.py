"""``nightjar parse [--format auto|syslog|zeek] FILE…``: batch-parse log files through the stream's transformations.

Prints one normalized ECS JSON object per parsed line on stdout (nested as ECS nests it, null fields left
out, timestamps in ISO 8601 UTC, ``event.original`` carrying the line), in file and line order, and one
line per bad line on stderr: ``FILE:LINE: PARSER: REASON``. A summary line ends stderr. Bad lines are data,
not a failure: the exit status is 0 once the files were read; bad arguments or a missing or unreadable file
give a one-line error and a non-zero exit.

The lines become a bronze-shaped DataFrame (:mod:`ingest.file_source`) that goes through
:func:`ingest.normalize.parse_bronze`, :func:`~ingest.normalize.events_of` and
:func:`~ingest.normalize.quarantine_of`: the same functions as ``nightjar run``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar
# parse`'s arguments, and --help or a bad argument must not wait for pyspark (nightjar/cli.py).
from core.config import Settings
from core.errors import UserError

JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX", "ignoreNullFields": "true"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("auto", "syslog", "zeek"), default="auto",
                        help="input format (default auto: a line starting with '{' is Zeek JSON, else syslog)")
    parser.add_argument("--max-record-bytes", type=int, default=None, metavar="N",
                        help="lines longer than N bytes are reported as bad (default: the pipeline's limit)")
    parser.add_argument("files", nargs="+", metavar="FILE", help="log files to parse")


def check_files(files: list[str]) -> list[Path]:
    paths = []
    for name in files:
        path = Path(name)
        if not path.exists():
            raise UserError(f"{name}: no such file", exit_code=2)
        if path.is_dir():
            raise UserError(f"{name}: is a directory, not a log file", exit_code=2)
        if not os.access(path, os.R_OK):
            raise UserError(f"{name}: permission denied", exit_code=2)
        paths.append(path)
    return paths


def ecs_json(parsed):
    """``parsed`` (from parse_bronze) -> rows (partition, offset, json, parser, error) in input order."""
    from pyspark.sql import functions as F

    from ingest.ecs_schema import ECS_COLUMNS
    from ingest.arrow_parse import ERROR_COLUMN

    err = F.col(ERROR_COLUMN)
    doc = F.to_json(F.struct(*[F.col(f"`{c}`") for c in ECS_COLUMNS]), JSON_OPTIONS)
    return parsed.select(
        "partition", "offset",
        F.when(err.isNull(), doc).alias("json"),
        err["parser"].alias("parser"), err["reason"].alias("error"),
    ).orderBy("partition", "offset")


def run(args: argparse.Namespace, settings: Settings) -> int:
    paths = check_files(args.files)
    max_bytes = args.max_record_bytes if args.max_record_bytes is not None else settings.max_record_bytes
    if max_bytes <= 0:
        raise UserError("--max-record-bytes must be positive", exit_code=2)

    from core.spark_session import build_spark
    from ingest.file_source import read_files
    from ingest.arrow_parse import parse_bronze

    spark = build_spark(settings, app_name="nightjar-parse")
    try:
        bronze = read_files(spark, paths)
        rows = ecs_json(parse_bronze(bronze, args.format, max_bytes))
        good = bad = 0
        out = sys.stdout
        for row in rows.toLocalIterator():
            if row["json"] is not None:
                out.write(row["json"])
                out.write("\n")
                good += 1
            else:
                out.flush()
                print(f"{paths[row['partition']]}:{row['offset']}: {row['parser']}: {row['error']}", file=sys.stderr)
                bad += 1
        out.flush()
    finally:
        spark.stop()
    print(f"nightjar parse: {good} events, {bad} bad lines", file=sys.stderr)
    return 0
