"""Automatic upkeep inside ``nightjar run``: the lake stays fast to read while the pipeline appends to it.

Every micro-batch adds small files and a log entry to the tables the pipeline writes, and a changed rule leaves
its old query checkpoint behind. A live run therefore starts :class:`Upkeep`, a daemon thread that, every
``interval_s`` seconds, per table the pipeline writes:

* compacts small files once there are at least ``min_files`` of them (``core.maintenance.maintain_table``, the
  code behind ``nightjar maintain``; Z-ordering rewrites whole tables and stays a manual step);
* writes a Delta log checkpoint, so opening the table no longer replays every JSON commit;
* vacuums unreferenced files older than the retention period, never less than :data:`MIN_RETENTION_HOURS`: the
  pipeline's writers put parquet files in place *before* their commit, and a short retention would delete a
  batch's files between the two (data loss);

and removes the checkpoints of rule queries superseded by a newer version of the same rule (see
:func:`stale_rule_checkpoints`).

Why a thread and not a step of the micro-batch: compaction and vacuum are separate Delta transactions, done by
deltalake (Rust) outside Spark, so a micro-batch never waits for them. Appends and a compaction can race: Delta's
optimistic concurrency then fails one of the two commits. A failed upkeep commit is harmless (logged, retried next
round; its files are unreferenced and vacuumed later). A failed append fails its micro-batch, which the Supervisor
replays, and the app-transaction check in ``ingest.delta_sink`` makes the replay exactly-once; the test
``tests/test_upkeep.py`` runs upkeep rounds back to back during appends and counts every row once.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core.config import (
    TABLE_ALERTS,
    TABLE_AUTH_SESSIONS,
    TABLE_BRONZE,
    TABLE_DHCP_SESSIONS,
    TABLE_EVENTS,
    TABLE_PIPELINE_PROGRESS,
    TABLE_QUARANTINE,
    VACUUM_RETENTION_HOURS,
    Settings,
)
from core.lake import is_delta_table
from core.maintenance import maintain_table

log = logging.getLogger(__name__)

# The tables `nightjar run` appends to (the reference tables, ground truth and the dashboard's tables are not its).
PIPELINE_TABLES: tuple[str, ...] = (TABLE_BRONZE, TABLE_EVENTS, TABLE_QUARANTINE, TABLE_DHCP_SESSIONS,
                                    TABLE_AUTH_SESSIONS, TABLE_ALERTS, TABLE_PIPELINE_PROGRESS)
DEFAULT_INTERVAL_S = 600.0
DEFAULT_MIN_FILES = 16  # compact once a table has this many files: fewer are cheap to read, rewriting costs I/O
MIN_RETENTION_HOURS = 1  # far longer than any micro-batch takes between writing its files and committing them
RULE_CHECKPOINTS = "rules"  # <checkpoint root>/rules/<rule id>-<digest>, see alerts/detection_stream.py
STALE_CHECKPOINT_S = 3600.0  # a superseded rule checkpoint untouched this long is removed


@dataclass
class UpkeepStats:
    rounds: int = 0
    compactions: int = 0
    files_removed: int = 0
    conflicts: int = 0
    checkpoints_removed: int = 0


def stale_rule_checkpoints(checkpoint_root: Path, now: float | None = None,
                           min_age_s: float = STALE_CHECKPOINT_S) -> list[Path]:
    """Checkpoints of rule queries that a newer version of the same rule replaced.

    A rule's query checkpoints under ``rules/<rule id>-<digest>``: editing the rule starts a query with a new digest
    and leaves the old directory for ever. Of the directories of one rule id, all but the most recently written
    one are stale once untouched for ``min_age_s`` (the Supervisor stopped that query long ago). The newest one is
    always kept, also for a rule that was removed: its query may come back, and one directory costs little.
    """
    root = checkpoint_root / RULE_CHECKPOINTS
    if not root.is_dir():
        return []
    now = time.time() if now is None else now
    by_rule: dict[str, list[tuple[float, Path]]] = {}
    for d in root.iterdir():
        if d.is_dir() and "-" in d.name:
            newest = max((p.stat().st_mtime for p in d.rglob("*")), default=d.stat().st_mtime)
            by_rule.setdefault(d.name.rsplit("-", 1)[0], []).append((newest, d))
    stale = []
    for versions in by_rule.values():
        versions.sort()
        stale += [d for mtime, d in versions[:-1] if now - mtime >= min_age_s]
    return stale


class Upkeep:
    """The background upkeep of one pipeline run: ``start()``, then ``stop()`` when the run ends."""

    def __init__(self, settings: Settings, interval_s: float = DEFAULT_INTERVAL_S,
                 retention_hours: int = VACUUM_RETENTION_HOURS, min_files: int = DEFAULT_MIN_FILES,
                 tables: tuple[str, ...] = PIPELINE_TABLES) -> None:
        self.settings = settings
        self.interval_s = interval_s
        self.retention_hours = max(MIN_RETENTION_HOURS, retention_hours)
        self.min_files = min_files
        self.tables = tables
        self.stats = UpkeepStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nightjar-upkeep", daemon=True)

    def start(self) -> Upkeep:
        log.info("upkeep: every %.0fs, compaction from %d files, vacuum after %.0fh", self.interval_s,
                 self.min_files, self.retention_hours)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 120.0) -> None:
        """Ask the thread to stop and wait for the table it is on (a Delta commit is not interrupted halfway)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.run_once()

    def run_once(self) -> UpkeepStats:
        """One round over every table and the rule checkpoints; errors are logged, never raised (the next round
        retries)."""
        from deltalake.exceptions import CommitFailedError

        started = time.monotonic()
        for name in self.tables:
            if self._stop.is_set():
                break
            path = self.settings.table_path(name)
            if not is_delta_table(path):
                continue
            try:
                r = maintain_table(path, retention_hours=self.retention_hours, min_files=self.min_files)
            except CommitFailedError as exc:
                # A concurrent append won the race: nothing was changed, the next round compacts.
                self.stats.conflicts += 1
                log.info("upkeep: %s: a concurrent commit won (%s); retried next round", name, str(exc)[:120])
                continue
            except Exception as exc:  # noqa: BLE001 - upkeep must never take the pipeline down
                log.warning("upkeep: %s failed: %s", name, str(exc)[:300])
                continue
            self.stats.compactions += r.files_after < r.files_before
            self.stats.files_removed += r.vacuumed
        for stale in stale_rule_checkpoints(self.settings.checkpoint_root):
            shutil.rmtree(stale, ignore_errors=True)
            self.stats.checkpoints_removed += 1
            log.info("upkeep: removed the checkpoint of a superseded rule query: %s", stale.name)
        self.stats.rounds += 1
        log.debug("upkeep round %d took %.1fs", self.stats.rounds, time.monotonic() - started)
        return self.stats
