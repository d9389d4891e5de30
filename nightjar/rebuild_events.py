"""``nightjar rebuild-events``: rebuild ``events`` (and what the parse derives) from ``bronze`` under the current contract.

Why: ``bronze`` keeps every raw record as it arrived, so a lake written by an older parse — the first ``events``
contract, one struct of 412 fields — loses nothing when the events are parsed again. ``nightjar run`` refuses such a
lake in one line and names this command.

What it does, with a progress line per step (stop ``nightjar run`` on the lake first):

1. reads ``bronze`` (every file of its current version, in parallel), parses it with the stream's parse
   (:func:`ingest.arrow_parse.parse_bronze`), attributes DHCP leases over the whole history at once
   (:func:`enrich.dhcp_sessions.attribute_batch`: a lease seen in any record attributes the events of its time) and
   joins the reference tables as they are now;
2. writes ``events``, ``quarantine`` and ``dhcp_sessions`` as new tables beside the lake (``_rebuild/``), then swaps
   them in; the tables they replace are kept whole under ``_previous/<table>-<time>/`` (delete them when satisfied);
3. points the queries that follow ``events`` (detections, ML scoring, auth sessions) at the rebuilt table's end: their
   old checkpoints name versions of the old table. Detections therefore carry on from new events and do not raise
   the history's alerts a second time; ``alerts`` and ``auth_sessions`` are left as they are. Event ids are
   derived from the records' Kafka coordinates, so every alert's evidence ids still name the same events.

The ingest query's checkpoint is kept: records already in ``bronze`` are not read from Kafka again.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa

# Spark-side modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar
# rebuild-events`'s arguments, and --help or a bad argument must not wait for pyspark (nightjar/cli.py).
from core.config import (
    TABLE_BRONZE,
    TABLE_DHCP_SESSIONS,
    TABLE_EVENTS,
    TABLE_NETWORKS,
    TABLE_QUARANTINE,
    Settings,
)
from core.errors import UserError
from core.lake import is_delta_table
from core.triggers import QUERY_INGEST
from enrich.reference_data import ReferenceCache

log = logging.getLogger(__name__)

REBUILT = (TABLE_EVENTS, TABLE_QUARANTINE, TABLE_DHCP_SESSIONS)
STAGING = "_rebuild"
PREVIOUS = "_previous"
APP_ID = "nightjar.rebuild"


def events_contract_of(path: Path) -> str | None:
    """``"v2"`` for an events table of the current contract, ``"v1"`` for the old wide one, None when no table."""
    if not is_delta_table(path):
        return None
    from deltalake import DeltaTable

    names = set(pa.schema(DeltaTable(str(path)).schema().to_arrow()).names)
    return "v2" if "detail" in names else "v1"


def require_current_events(lake: Path) -> None:
    """Refuse, in one line, a lake whose ``events`` table was written by the old parse."""
    if events_contract_of(lake / TABLE_EVENTS) == "v1":
        raise UserError(f"{lake / TABLE_EVENTS} holds events of the old contract (412-field struct): run "
                        f"`nightjar rebuild-events --lake {lake}` once to rebuild them from bronze (nothing is lost)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="rebuild even when events already has the current contract (e.g. after a parser fix)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    lake = settings.lake
    if not is_delta_table(lake / TABLE_BRONZE):
        raise UserError(f"no bronze table under {lake}: nothing to rebuild from (check --lake)", exit_code=2)
    contract = events_contract_of(lake / TABLE_EVENTS)
    if contract == "v2" and not args.force:
        print(f"{lake / TABLE_EVENTS} already has the current contract: nothing to do (--force rebuilds anyway)")
        return 0
    counts = rebuild(settings)
    print(f"rebuilt from {counts['bronze']:,} bronze records: {counts[TABLE_EVENTS]:,} events, "
          f"{counts[TABLE_QUARANTINE]:,} quarantined, {counts[TABLE_DHCP_SESSIONS]:,} DHCP session changes; "
          f"the tables replaced are under {lake / PREVIOUS}")
    return 0


def _step(message: str, *args: object) -> float:
    log.info("rebuild-events: " + message, *args)
    return time.monotonic()


def rebuild(settings: Settings) -> dict[str, int]:
    """Rebuild the tables of :data:`REBUILT` from ``bronze``; the number of rows of each (and of bronze)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    from core.spark_session import build_spark
    from enrich.dhcp_sessions import (
        attribute_batch,
        dhcp_networks_from_lake,
        events_from,
        quarantine_from,
        records_from,
        sessions_from,
    )
    from enrich.static_joins import enrich_static
    from ingest.arrow_parse import parse_bronze
    from ingest.delta_sink import write_batch

    lake = settings.lake
    staging = lake / STAGING
    shutil.rmtree(staging, ignore_errors=True)  # a rebuild stopped half-way left it: start over
    spark = build_spark(settings, app_name="nightjar-rebuild-events")
    try:
        from deltalake import DeltaTable

        started = _step("reading %s", lake / TABLE_BRONZE)
        bronze_table = DeltaTable(str(lake / TABLE_BRONZE))
        schema = from_arrow_schema(pa.schema(bronze_table.schema().to_arrow()))
        files = bronze_table.file_uris()
        bronze = (spark.read.schema(schema).parquet(*files) if files
                  else spark.createDataFrame([], schema=schema))
        parsed = parse_bronze(bronze, max_record_bytes=settings.max_record_bytes, raw_record=True)
        unified = attribute_batch(parsed, dhcp_networks_from_lake(settings.table_path(TABLE_NETWORKS))).cache()
        counts = {"bronze": records_from(unified).count()}
        _step("parsed and attributed %d records in %.1f s", counts["bronze"], time.monotonic() - started)
        references = ReferenceCache(lake).current()
        frames = {TABLE_EVENTS: enrich_static(events_from(unified), references),
                  TABLE_QUARANTINE: quarantine_from(unified), TABLE_DHCP_SESSIONS: sessions_from(unified)}
        for table, frame in frames.items():
            started = time.monotonic()
            counts[table] = write_batch(frame, staging / table, f"{APP_ID}.{table}", 0)
            _step("%s: %d rows written in %.1f s", table, counts[table], time.monotonic() - started)
        unified.unpersist()
    finally:
        spark.stop()
    _swap(lake, staging)
    _follow_from_end(settings)
    return counts


def _swap(lake: Path, staging: Path) -> None:
    """Move the old tables under ``_previous/`` and the rebuilt ones into place (renames: no copy)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    (lake / PREVIOUS).mkdir(mode=0o700, exist_ok=True)
    for table in REBUILT:
        old = lake / table
        if old.exists():
            old.rename(lake / PREVIOUS / f"{table}-{stamp}")
        new = staging / table
        if new.exists():
            new.rename(old)
        _step("%s swapped in%s", table, f" (the old one is {PREVIOUS}/{table}-{stamp})" if old.exists() else "")
    shutil.rmtree(staging, ignore_errors=True)


def _follow_from_end(settings: Settings) -> None:
    """Every query but ingest gets a new checkpoint whose ``events`` source starts after the rebuilt table's end."""
    from deltalake import DeltaTable

    from ingest.delta_source import Position, initial_offset_file, store_initial_offset

    root = settings.checkpoint_root
    if not root.is_dir():
        return
    events = settings.table_path(TABLE_EVENTS)
    latest = DeltaTable(str(events)).version() if is_delta_table(events) else -1
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    for checkpoint in sorted(p for p in root.iterdir() if p.is_dir() and p.name != QUERY_INGEST):
        kept = settings.lake / PREVIOUS / f"checkpoint-{checkpoint.name}-{stamp}"
        checkpoint.rename(kept)
        file = initial_offset_file(checkpoint, TABLE_EVENTS)
        store_initial_offset(file, os.path.abspath(events), "latest", Position(latest + 1, -1).json())
        _step("query %s follows events from version %d (its old checkpoint is %s)", checkpoint.name, latest + 1,
              kept.relative_to(settings.lake))
