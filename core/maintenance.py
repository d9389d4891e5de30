"""``nightjar maintain``: keep the lake fast to read while the pipeline keeps appending.

Every micro-batch adds a few small files and a log entry. Per table this command:

* compacts small files into large ones (or Z-orders them on the columns analysts filter by, from
  ``config.ZORDER_COLUMNS``), which rewrites data without changing it: readers and appenders carry on
  (Delta's optimistic concurrency: compaction conflicts only with deletes, which the pipeline never does);
* writes a log checkpoint, so opening the table no longer replays every JSON commit;
* vacuums files no longer referenced and older than the retention period (default 7 days), and expired logs.

App transactions survive all of it, so the exactly-once bookkeeping of the streaming writers is untouched.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path

from core.config import VACUUM_RETENTION_HOURS, ZORDER_COLUMNS, Settings
from core.errors import UserError
from core.lake import list_tables

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenanceResult:
    table: str
    files_before: int
    files_after: int
    zordered: bool
    vacuumed: int


def maintain_table(path: Path, zorder: tuple[str, ...] = (), retention_hours: int = VACUUM_RETENTION_HOURS,
                   vacuum: bool = True, min_files: int = 2) -> MaintenanceResult:
    """Compact (or Z-order) the table once it has ``min_files`` files, checkpoint its log, vacuum it.

    Used by ``nightjar maintain`` and by the pipeline's background upkeep (nightjar/upkeep.py), which runs it while
    the pipeline appends: a conflicting concurrent commit raises deltalake's ``CommitFailedError``.
    """
    from deltalake import DeltaTable

    table = DeltaTable(str(path))
    before = len(table.file_uris())
    existing = {f.name for f in table.schema().fields}
    columns = [c for c in zorder if c in existing]
    rewrite = before >= max(2, min_files)
    if columns and rewrite:
        table.optimize.z_order(columns)
    elif rewrite:
        table.optimize.compact()
    table = DeltaTable(str(path))
    table.create_checkpoint()
    removed = 0
    if vacuum:
        removed = len(table.vacuum(retention_hours=retention_hours, dry_run=False,
                                   enforce_retention_duration=retention_hours >= VACUUM_RETENTION_HOURS))
        table.cleanup_metadata()
    after = len(DeltaTable(str(path)).file_uris())
    result = MaintenanceResult(path.name, before, after, bool(columns) and rewrite, removed)
    log.info("%s: %d -> %d files%s, %d unreferenced files vacuumed", path.name, before, after,
             f" (Z-ordered on {', '.join(columns)})" if result.zordered else "", removed)
    return result


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--table", action="append", dest="tables", metavar="NAME",
                        help="only this table (repeatable; default: every table in the lake)")
    parser.add_argument("--retention-hours", type=int, default=VACUUM_RETENTION_HOURS,
                        help=f"vacuum files unreferenced for longer than this (default {VACUUM_RETENTION_HOURS})")
    parser.add_argument("--no-vacuum", action="store_true", help="compact and checkpoint only")


def run(args: argparse.Namespace, settings: Settings) -> int:
    available = list_tables(settings.lake)
    names = args.tables or available
    unknown = [n for n in names if n not in available]
    if unknown:
        raise UserError(f"no table {', '.join(unknown)} in {settings.lake} (tables: {', '.join(available) or 'none'})",
                        exit_code=2)
    if args.retention_hours < 0:
        raise UserError("--retention-hours must be 0 or more", exit_code=2)
    for name in names:
        r = maintain_table(settings.table_path(name), ZORDER_COLUMNS.get(name, ()), args.retention_hours,
                           vacuum=not args.no_vacuum)
        print(f"{r.table}: {r.files_before} -> {r.files_after} files"
              f"{' (Z-ordered)' if r.zordered else ''}, {r.vacuumed} old files removed")
    return 0
