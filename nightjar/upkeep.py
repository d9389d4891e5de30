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

A second daemon thread gives the driver's free heap pages back to the OS every :data:`HEAP_TRIM_S` seconds
(:func:`release_free_heap`). Measured in the soak (docs/deployment.md, "Driver memory"): the driver's Python heap
stays flat while glibc malloc's heap grows and keeps a third of it free, freed from many threads into several arenas;
the trim returns the whole free pages of that (not the free space fragmented between live chunks). With it the
driver's RSS was flat over a 75-minute soak at 36 events/s (+12.7 MiB/h, against +205 MiB/h without it).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import shutil
import threading
import time
import tracemalloc
from collections import Counter
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
HEAP_TRIM_S = 60.0  # how often the driver's free heap is returned to the OS (see release_free_heap)
# NIGHTJAR_TRACEMALLOC=<minutes>: log the driver's memory (see MemoryTrace) every that many minutes; unset = off.
TRACEMALLOC_ENV = "NIGHTJAR_TRACEMALLOC"
TRACE_TOP = 12  # allocation sites and object types listed per report


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
                 tables: tuple[str, ...] = PIPELINE_TABLES, trim_every_s: float = HEAP_TRIM_S) -> None:
        self.settings = settings
        self.interval_s = interval_s
        self.trim_every_s = trim_every_s  # 0: never trim the heap
        self.retention_hours = max(MIN_RETENTION_HOURS, retention_hours)
        self.min_files = min_files
        self.tables = tables
        self.stats = UpkeepStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nightjar-upkeep", daemon=True)
        # Its own thread: a compaction round can take minutes, the trim must not wait for it.
        self._trim_thread = threading.Thread(target=self._trim_loop, name="nightjar-heap-trim", daemon=True)
        self.memtrace = MemoryTrace.from_env()

    def start(self) -> Upkeep:
        log.info("upkeep: every %.0fs, compaction from %d files, vacuum after %.0fh", self.interval_s,
                 self.min_files, self.retention_hours)
        self._thread.start()
        if self.trim_every_s > 0:
            self._trim_thread.start()
        if self.memtrace is not None:  # the live run's heap diagnostic rides on upkeep's lifetime
            log.info("memtrace: driver memory report every %.0fs (%s)", self.memtrace.every_s, TRACEMALLOC_ENV)
            self.memtrace.start()
        return self

    def stop(self, timeout_s: float = 120.0) -> None:
        """Ask the thread to stop and wait for the table it is on (a Delta commit is not interrupted halfway)."""
        self._stop.set()
        if self.memtrace is not None:
            self.memtrace.stop()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._trim_thread.is_alive():
            self._trim_thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.run_once()

    def _trim_loop(self) -> None:
        while not self._stop.wait(self.trim_every_s):
            release_free_heap()

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


_libc: ctypes.CDLL | None = None


def glibc() -> ctypes.CDLL | None:
    """glibc, or None where the C library is another one (musl, macOS): then there is nothing to trim."""
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL("libc.so.6")
            lib.malloc_trim, lib.mallinfo2  # noqa: B018 - both exist only in glibc (mallinfo2: 2.33+)
        except (OSError, AttributeError):
            return None
        _libc = lib
    return _libc


def release_free_heap() -> bool:
    """Return the pages of glibc malloc's free chunks to the OS (``malloc_trim(0)``); True if any were.

    glibc gives freed memory back on its own only from the top of a heap; the free chunks between live ones,
    in every thread's arena, keep their pages resident for ever. A long-running driver frees many medium blocks
    from many threads (Py4J answers, collected rows, progress JSON), so its RSS climbs while its live heap
    does not. ``malloc_trim`` walks the arenas and releases the whole free pages (``MADV_DONTNEED``); free space
    smaller than a page, between live chunks, stays. It costs milliseconds and moves no live memory.
    """
    libc = glibc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def rss_parts() -> dict[str, int]:
    """The process's RSS split as the kernel sees it (bytes): anonymous (heaps) vs file-backed (libraries)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    out[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return out


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2``."""

    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def _glibc_heap() -> tuple[int, int] | None:
    """(bytes glibc malloc holds from the OS, bytes of it free) via ``mallinfo2``: a large free share is
    fragmentation, not a leak. None where glibc (2.33+) is not the allocator."""
    libc = glibc()
    if libc is None:
        return None
    fn = libc.mallinfo2
    fn.restype = _MallInfo2
    m = fn()
    return m.arena + m.hblkhd, m.fordblks


class MemoryTrace:
    """Diagnostic of the driver's memory in a live run, on only when ``NIGHTJAR_TRACEMALLOC`` is set.

    Every ``every_s`` it logs one line of totals (RSS anon/file, Python heap traced by ``tracemalloc``, glibc heap
    and its free part, Arrow's pool, gc objects) and, against the first report, the allocation sites and object
    types that grew most. Comparing the Python heap's growth with RSS's tells a Python leak from native memory
    (Arrow, deltalake) or allocator fragmentation. Off, it costs nothing: no thread, tracemalloc not started.
    On, it costs much (measured in a soak at load 13): tracing every allocation, ~90 MiB of RSS for the baseline
    snapshot and ~30 s of the GIL per report, and its own snapshots churn the heaps it measures; so RSS figures of
    a traced run are not comparable with an untraced one's, only with another traced run's.
    """

    def __init__(self, every_s: float, frames: int = 6) -> None:
        self.every_s = every_s
        self.frames = frames
        self._first: tracemalloc.Snapshot | None = None
        self._first_types: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nightjar-memtrace", daemon=True)

    @classmethod
    def from_env(cls) -> MemoryTrace | None:
        text = os.environ.get(TRACEMALLOC_ENV, "").strip()
        try:
            minutes = float(text) if text else 0.0
        except ValueError:
            log.warning("%s=%r is not a number of minutes: memory trace off", TRACEMALLOC_ENV, text)
            return None
        return cls(minutes * 60) if minutes > 0 else None

    def start(self) -> MemoryTrace:
        tracemalloc.start(self.frames)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        tracemalloc.stop()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.report()
            except Exception as exc:  # noqa: BLE001 - a diagnostic must never take the pipeline down
                log.warning("memtrace failed: %s", exc)

    def report(self) -> None:
        """Log the totals, then the top growth since the first report."""
        import pyarrow as pa

        types = Counter(type(o).__name__ for o in gc.get_objects())
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        traced, _peak = tracemalloc.get_traced_memory()
        rss, heap = rss_parts(), _glibc_heap()
        mib = 2 ** 20
        log.info("memtrace: rss %.0f MiB (anon %.0f, file %.0f), python traced %.1f MiB, glibc heap %s, "
                 "arrow %.1f MiB, gc objects %d",
                 rss.get("VmRSS", 0) / mib, rss.get("RssAnon", 0) / mib, rss.get("RssFile", 0) / mib, traced / mib,
                 f"{heap[0] / mib:.0f} MiB ({heap[1] / mib:.0f} free)" if heap else "n/a",
                 pa.total_allocated_bytes() / mib, sum(types.values()))
        if self._first is None:
            self._first, self._first_types = snap, types
            return
        for stat in snap.compare_to(self._first, "traceback")[:TRACE_TOP]:
            # a Traceback lists the oldest frame first: print the allocating line first, then its callers
            where = " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in reversed(stat.traceback))
            log.info("memtrace: %+.1f KiB %+d blocks at %s", stat.size_diff / 1024, stat.count_diff, where)
        grown = Counter({t: n - self._first_types.get(t, 0) for t, n in types.items()})
        log.info("memtrace: object types grown: %s",
                 ", ".join(f"{t} {n:+d}" for t, n in grown.most_common(TRACE_TOP) if n > 0))
