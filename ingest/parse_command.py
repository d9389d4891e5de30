"""``nightjar parse [--format auto|syslog|<json source>] FILE…``: parse log files as the stream parses them.

Prints one event of the events contract (v2) per parsed line on stdout as nested ECS JSON
(:func:`ingest.events_contract.as_ecs_json`: the core fields nested as ECS nests them plus ``detail``, the source's
own fields by their own names; nulls left out, timestamps ISO 8601 UTC, ``event.original`` carrying the line), in
file and line order, and one line per bad line on stderr: ``FILE:LINE: PARSER: REASON``. A summary line ends
stderr. Bad lines are data, not a failure: the exit status is 0 once the files were read; bad arguments or a
missing or unreadable file give a one-line error and a non-zero exit.

Files are read in place whatever their packaging (:mod:`ingest.capture_files`): plain or gzipped lines, ``.zip`` and
``.tar.gz`` archives member by member, Windows ``.evtx`` as one evtx-JSON record per event; an archive member is
named ``ARCHIVE:MEMBER`` in reports. Each line is the record a file source would put in ``bronze`` (:mod:`ingest.file_source`: topic ``file``,
partition = the file's position in the arguments, offset = the line number, the path as the source-file header, so
``event.id`` is the one ``nightjar replay`` of the same files gives) and goes through
:func:`ingest.sources.record_parser.parse_record` — the per-record code that the stream's ``mapInArrow``
(:func:`ingest.arrow_parse.parse_bronze`) runs on its executors. It is called here directly, in this process,
without starting Spark: the same answers, in well under a second instead of the ~15 s a Spark session takes to
start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# Only light modules at import: the CLI imports this module to parse `nightjar parse`'s arguments (nightjar/cli.py).
from core.config import Settings
from core.errors import UserError
from ingest.capture_files import capture_lines
from ingest.events_contract import as_ecs_json
from ingest.sources.record_parser import formats, parse_record


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=formats(), default="auto",
                        help="input format (default auto: a line starting with '{' or '[' is JSON, whose source is "
                             "detected — Zeek when none claims it —, anything else syslog); a source's name forces "
                             "that JSON source")
    parser.add_argument("--max-record-bytes", type=int, default=None, metavar="N",
                        help="lines longer than N bytes are reported as bad (default: the pipeline's limit)")
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="log files to parse: lines (.gz too), .zip/.tar.gz archives of them, Windows .evtx")


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


def run(args: argparse.Namespace, settings: Settings) -> int:
    paths = check_files(args.files)
    max_bytes = args.max_record_bytes if args.max_record_bytes is not None else settings.max_record_bytes
    if max_bytes <= 0:
        raise UserError("--max-record-bytes must be positive", exit_code=2)

    from ingest.file_source import FILE_TOPIC

    ingested_us = int(time.time() * 1_000_000)
    good = bad = 0
    out = sys.stdout
    unreadable = 0

    def report(where: str, reason: str) -> None:
        nonlocal unreadable
        unreadable += 1
        out.flush()
        print(f"{where}: {reason}", file=sys.stderr)

    for index, path in enumerate(paths):
        for line in capture_lines(path, report):
            number = line.number
            parsed = parse_record(line.value, topic=FILE_TOPIC, partition=index, offset=number, fmt=args.format,
                                  ingested_us=ingested_us, source_file=line.where, max_record_bytes=max_bytes)
            if parsed.error is None:
                out.write(json.dumps(as_ecs_json(parsed.event), ensure_ascii=False, separators=(",", ":")))
                out.write("\n")
                good += 1
            else:
                out.flush()
                print(f"{line.where}:{number}: {parsed.error[0]}: {parsed.error[1]}", file=sys.stderr)
                bad += 1
    out.flush()
    print(f"nightjar parse: {good} events, {bad} bad lines"
          + (f", {unreadable} unreadable files or archive members" if unreadable else ""), file=sys.stderr)
    return 0
