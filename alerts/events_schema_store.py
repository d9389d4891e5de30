"""The events schema, stored per version of the code that defines it, so a run does not rebuild the parse plan.

Rules compile against the ``events`` schema, and :func:`events_schema` derives it from the
code that writes the table (an empty parse through the enrichment), so it cannot drift. Deriving it analyses the
whole parse plan: 25–40 s on a cold JVM on two cores (about 120,000 Py4J calls), paid by every ``nightjar run``,
``rules test`` and ``backtest`` before its first micro-batch — half of the demo's 60-second budget for a first
alert. The schema only changes when that code changes, so it is kept keyed by a fingerprint of the code:

1. the schema shipped in the repository (``alerts/resources/events_schema.json``), current when its fingerprint
   matches — a fresh clone starts without deriving it;
2. else a copy derived once on this machine for this code version, under ``$XDG_CACHE_HOME/nightjar`` (default
   ``~/.cache/nightjar``) — a developer who changes a parser pays once, not on every start;
3. else it is derived, and stored as (2).

The fingerprint hashes the PySpark version and the source files the plan is built from (:data:`SOURCES`); a
change anywhere there is a new version. ``tests/test_events_schema_store.py`` fails when the shipped file is
stale and says how to refresh it::

    .venv/bin/python -m alerts.events_schema_store --write
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from alerts.detection_input import detection_input
from core.config import Settings
from core.spark_session import build_spark
from enrich.reference_data import reference_from_tables
from enrich.static_joins import enrich_static
from ingest.file_source import lines_dataframe
from ingest.normalize import parse_records, to_events

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
SHIPPED = Path(__file__).parent / "resources" / "events_schema.json"
# What the empty parse + enrichment in `events_schema` is built from: the parsers, the ECS assembly, the file and
# Kafka record shapes, the static joins and reference schemas, the detection input, the derivation itself (this
# module) and the config they read.
SOURCES: tuple[str, ...] = (
    "ingest/parsers",
    "ingest/normalize.py",
    "ingest/ecs_schema.py",
    "ingest/file_source.py",
    "ingest/kafka_source.py",
    "enrich/static_joins.py",
    "enrich/reference_data.py",
    "alerts/detection_input.py",
    "alerts/events_schema_store.py",
    "core/config.py",
)
REFRESH_COMMAND = ".venv/bin/python -m alerts.events_schema_store --write"


def fingerprint(root: Path = REPO_ROOT) -> str:
    """A hash of the PySpark version and every source file in :data:`SOURCES` (path and content)."""
    digest = hashlib.sha256(f"pyspark {pyspark.__version__}\n".encode())
    files: list[Path] = []
    for name in SOURCES:
        path = root / name
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def cache_dir() -> Path:
    """Where schemas derived on this machine are kept: ``$XDG_CACHE_HOME/nightjar`` or ``~/.cache/nightjar``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nightjar"


def cached_path(version: str) -> Path:
    return cache_dir() / f"events_schema-{version}.json"


def load(version: str) -> dict | None:
    """The stored schema (Spark's JSON form) for this code version, shipped or cached; ``None`` if neither holds it.

    A file that is unreadable, not JSON or of another version is passed over (it is derived again), never an error:
    the store only saves time.
    """
    for path in (SHIPPED, cached_path(version)):
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(stored, dict) and stored.get("fingerprint") == version and isinstance(stored.get("schema"), dict):
            log.debug("events schema for code version %s read from %s", version, path)
            return stored["schema"]
    return None


def save(version: str, schema: dict, path: Path | None = None) -> Path | None:
    """Store ``schema`` for ``version`` (atomically: a reader never sees half a file); the path, or ``None``.

    Only the cache is written by default; a failure to write it (read-only home, full disk) is logged and ignored.
    """
    target = path or cached_path(version)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=target.parent, prefix=".events_schema-", delete=False) as f:
            json.dump({"fingerprint": version, "schema": schema}, f, indent=1, sort_keys=True)
            f.write("\n")
        os.chmod(f.name, 0o644)  # a schema, not a secret: the shipped copy is read by everyone
        os.replace(f.name, target)
    except OSError as exc:
        log.info("events schema not stored at %s (%s): the next start derives it again", target, exc)
        return None
    return target


def shipped_version() -> str | None:
    """The code version the shipped schema was derived from (``None`` if the file is missing or unreadable)."""
    try:
        return json.loads(SHIPPED.read_text()).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


def events_schema(spark: SparkSession) -> StructType:
    """The schema rules compile against: the ``events`` table's (parsed + enriched), plus the event-time column.

    Derived from the code that writes the table (:func:`derive_events_schema`), so it cannot drift; kept per version
    of that code by this module (deriving it costs 25–40 s on a cold JVM, and every run, rule
    test and backtest needs it before its first batch), and once per Spark context in this process (a run asks for
    it from the rule set and again from the ML scoring query).
    """
    context = id(SparkContext._active_spark_context)
    if context not in _SCHEMAS:
        version = fingerprint()
        stored = load(version)
        if stored is None:
            started = time.monotonic()
            stored = derive_events_schema(spark).jsonValue()
            where = save(version, stored)
            log.info("events schema derived from the parsers in %.1f s (code version %s; stored in %s)",
                     time.monotonic() - started, version, where or "nothing")
        _SCHEMAS[context] = stored
    return StructType.fromJson(_SCHEMAS[context])  # a fresh object: callers may not change the cached one


def derive_events_schema(spark: SparkSession) -> StructType:
    """The events schema as the code builds it: an empty parse through the enrichment and :func:`detection_input`."""
    empty = to_events(parse_records(lines_dataframe(spark, [])))
    return detection_input(enrich_static(empty, reference_from_tables(spark, {}))).schema


_SCHEMAS: dict[int, dict] = {}  # Spark context id -> the events schema as JSON


def main(argv: list[str] | None = None) -> int:
    """``python -m alerts.events_schema_store --write``: derive the schema and refresh the shipped copy."""
    parser = argparse.ArgumentParser(prog="python -m alerts.events_schema_store", description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"derive the schema and write {SHIPPED}")
    args = parser.parse_args(argv)
    version = fingerprint()
    if not args.write:
        current = shipped_version() == version
        print(f"code version {version}: shipped schema {'current' if current else 'stale — run ' + REFRESH_COMMAND}")
        return 0 if current else 1
    spark = build_spark(Settings(), app_name="nightjar-events-schema")
    try:
        save(version, derive_events_schema(spark).jsonValue(), SHIPPED)
    finally:
        spark.stop()
    print(f"wrote {SHIPPED.relative_to(REPO_ROOT)} for code version {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
