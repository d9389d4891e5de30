"""An append-only Delta table as a Spark streaming source, on PySpark's Python Data Source API and delta-rs.

Why a Python source: delta-spark's jars (which provide ``readStream.format("delta")``) live only in Maven
repositories, which these machines cannot reach (docs/architecture.md, decision 2). The detection stage tails
the ``events`` table that ``ingest.delta_sink`` appends to; this source turns each new Delta commit into
micro-batch input, reading the commit's Parquet files with pyarrow.

Usage::

    df = read_delta_stream(spark, "/abs/path/lake/events")   # registers the source, then:
    spark.dataSource.register(DeltaDataSource)
    df = (spark.readStream.format("nightjar_delta")
          .option("path", "/abs/path/lake/events")       # or .load("/abs/path/lake/events")
          .option("startingVersion", "earliest")         # default; or "latest", or a version number
          .option("maxFilesPerTrigger", 1000)            # default, like delta-spark
          .option("initialOffsetFile", "/abs/path/checkpoint/nightjar_delta/events.initial.json")
          .load())

Columns: the table's schema when the query starts (partition columns included, with their values taken
from the Delta log because Parquet files do not store them). Columns added to the table later read as
absent until the query restarts; columns the table lacks in older files read as null.

Offsets are ``{"version": v, "index": i, "snapshot": s}``: every data file up to and including the
``i``-th file that version ``v`` added has been delivered (``i = -1``: none of version ``v`` yet, all of
the versions before it). ``snapshot`` is true while the query reads the files of the table *as of*
version ``v`` (the start of an ``earliest`` query) rather than the files commit ``v`` added; a snapshot
offset also names the order its index counts in: ``"order": "commit"`` (files by the version that added
their rows, so a watermarked query reads older commits first; see ``read_snapshot``), or no key at all for
offsets written before that order existed, which count in path order and keep doing so. Splitting at
file granularity lets ``maxFilesPerTrigger`` cut a large commit or snapshot into several micro-batches.
Spark writes each micro-batch's (start, end) to its offset log before running it, and Delta versions
never change once written, so a restarted query re-reads exactly the same files: with an idempotent sink
(``ingest.delta_sink``) every row lands exactly once.

What a commit may contain, and what the source does with it:

* ``add`` with ``dataChange: true`` (appends): delivered.
* ``add``/``remove`` with ``dataChange: false`` (OPTIMIZE compaction, Z-order): skipped, so a compaction
  never delivers rows a second time.
* ``remove`` with ``dataChange: true`` (DELETE, overwrite, UPDATE, MERGE): the query fails naming the
  version, because an append-only reader cannot express a deletion. ``ignoreDeletes=true`` skips commits
  that only remove files; ``ignoreChanges=true`` also delivers the files such commits rewrite (rows that
  were not changed arrive again: downstream must tolerate duplicates).

Why ``initialOffsetFile``: Spark logs no start offset for batch 0; it asks ``initialOffset()`` when it plans
batch 0 (always at the first trigger, with or without data) and again when it replays batch 0 after a
crash, and the Python Data Source API gives the reader no access to the checkpoint (Spark's own Kafka source keeps its initial
offsets in ``<checkpoint>/sources/<n>/``). ``startingVersion=latest`` (or ``earliest`` on a table with no
files yet) computed again after commits arrived would start past the replayed batch's logged end and skip
the rows in between. With the option, the first ``initialOffset()`` writes the offset to that file
(atomically, owner-only) and every later call, in this run or after a restart, returns the stored one.
Without it the first answer is only kept in the reader's memory, which a crash in batch 0 loses. The file belongs with the checkpoint: put it inside, and delete both together.

Only local table paths are supported (the lake is a local or shared-volume directory).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxFiles,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

SOURCE_NAME = "nightjar_delta"
DEFAULT_MAX_FILES_PER_TRIGGER = 1000  # delta-spark's default: bounds the first batch over a big snapshot
TARGET_PARTITION_BYTES = 128 * 1024 * 1024  # data per Spark task when a batch has many small files
RESTART_HINT = "restart the query with a new checkpoint and startingVersion=latest (or earliest)"


class DeltaSourceError(RuntimeError):
    """The table cannot be streamed as configured. The message names the version or file and the fix."""


# --- options -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeltaSourceOptions:
    """The source's options, validated once on the driver."""

    path: str
    starting_version: str | int
    max_files_per_trigger: int | None
    max_bytes_per_trigger: int | None
    ignore_deletes: bool
    ignore_changes: bool
    min_partitions: int
    read_batch_rows: int
    initial_offset_file: str | None = None

    @staticmethod
    def parse(options: dict[str, str]) -> DeltaSourceOptions:
        opts = {k.lower(): v for k, v in options.items()}
        raw_path = (opts.get("path") or "").strip()
        if not raw_path:
            raise ValueError("nightjar_delta: option path is required (the Delta table's directory), "
                             'e.g. .option("path", "/data/lake/events") or .load("/data/lake/events")')
        starting = opts.get("startingversion", "earliest").strip().lower()
        start: str | int
        if starting in ("earliest", "latest"):
            start = starting
        elif starting.isdigit():
            start = int(starting)
        else:
            raise ValueError("nightjar_delta: startingVersion must be earliest, latest or a table version "
                             f"number (0, 1, ...), got {starting!r}")
        max_files = _positive(opts, "maxfilespertrigger", "maxFilesPerTrigger", DEFAULT_MAX_FILES_PER_TRIGGER)
        max_bytes = opts.get("maxbytespertrigger")
        initial_file = (opts.get("initialoffsetfile") or "").strip()
        return DeltaSourceOptions(
            path=_local_path(raw_path),
            starting_version=start,
            max_files_per_trigger=max_files,
            max_bytes_per_trigger=_bytes(max_bytes) if max_bytes is not None else None,
            ignore_deletes=_bool(opts, "ignoredeletes", "ignoreDeletes"),
            ignore_changes=_bool(opts, "ignorechanges", "ignoreChanges"),
            min_partitions=_positive(opts, "minpartitions", "minPartitions", 2) or 2,
            read_batch_rows=_positive(opts, "readbatchrows", "readBatchRows", 20_000) or 20_000,
            initial_offset_file=_local_path(initial_file, "initialOffsetFile") if initial_file else None,
        )


def _local_path(raw: str, what: str = "table") -> str:
    parsed = urlparse(raw)
    if parsed.scheme == "file":
        raw = unquote(parsed.path)
    elif parsed.scheme and len(parsed.scheme) > 1:  # one letter: a Windows drive, not a scheme
        raise ValueError(f"nightjar_delta: only local {what} paths are supported, got {raw!r}")
    # Absolute now: executors must not resolve it against their own working directory.
    return os.path.abspath(raw)


def _positive(opts: dict[str, str], key: str, name: str, default: int | None) -> int | None:
    value = opts.get(key)
    if value is None:
        return default
    if not str(value).strip().isdigit() or int(value) <= 0:
        raise ValueError(f"nightjar_delta: {name} must be a positive integer, got {value!r}")
    return int(value)


def _bool(opts: dict[str, str], key: str, name: str) -> bool:
    value = opts.get(key, "false").strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"nightjar_delta: {name} must be true or false, got {value!r}")
    return value == "true"


def _bytes(value: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", str(value).lower())
    if not match or int(match.group(1)) <= 0:
        raise ValueError(f"nightjar_delta: maxBytesPerTrigger must be a positive size like 1048576, 512k, 64m "
                         f"or 1g, got {value!r}")
    return int(match.group(1)) * 1024 ** " kmgt".index(match.group(2) or " ")


# --- the Delta log ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataFile:
    """One Parquet file to deliver: path relative to the table (decoded) or absolute, and its partition values."""

    path: str
    size: int
    partition_values: tuple[tuple[str, Any], ...]
    version: int


# How a snapshot's files are numbered (see read_snapshot). Offsets written before the commit order existed
# have no "order" key and mean path order, so a query stopped mid-snapshot resumes on the same files.
ORDER_COMMIT = "commit"
ORDER_PATH = "path"


@dataclass(frozen=True)
class Position:
    """A point in the table's stream of data files; see the module docstring for the meaning."""

    version: int
    index: int
    snapshot: bool = False
    order: str = ORDER_COMMIT  # only meaningful while snapshot is true

    @staticmethod
    def parse(offset: dict[str, Any]) -> Position:
        snapshot = bool(offset.get("snapshot", False))
        order = str(offset.get("order", ORDER_PATH))
        if order not in (ORDER_COMMIT, ORDER_PATH):
            raise DeltaSourceError(f"nightjar_delta: offset {offset} has an unknown snapshot order {order!r} "
                                   "(written by a newer version of this source?)")
        return Position(int(offset["version"]), int(offset["index"]), snapshot,
                        order if snapshot else ORDER_COMMIT)

    def json(self) -> dict[str, Any]:
        # Spark compares offsets as JSON text: always the same keys in the same order for one position.
        # Only snapshot positions carry the order; a path-order one is spelled as before the key existed.
        offset: dict[str, Any] = {"version": self.version, "index": self.index, "snapshot": self.snapshot}
        if self.snapshot and self.order != ORDER_PATH:
            offset["order"] = self.order
        return offset


def _log_file(table: str, version: int) -> Path:
    return Path(table) / "_delta_log" / f"{version:020d}.json"


def table_version(table: str) -> int:
    """The table's current version, or -1 if there is no Delta table at ``table`` yet."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    if not (Path(table) / "_delta_log").is_dir():
        return -1
    try:
        return DeltaTable(table).version()
    except TableNotFoundError:
        return -1  # the directory exists but the first commit is not written yet


def _add_file(add: dict[str, Any], version: int) -> DataFile:
    if add.get("deletionVector"):
        raise DeltaSourceError(
            f"nightjar_delta: version {version} adds file {add['path']} with a deletion vector; this source reads "
            "whole Parquet files and would deliver deleted rows. Disable deletion vectors on the table "
            "(delta.enableDeletionVectors=false) or read it with delta-spark"
        )
    # Delta stores paths as URIs: relative ones are percent-encoded once (directory names that contain
    # %-escapes of their own, like Hive's partition escaping, are encoded again).
    path = _decoded(add["path"])
    return DataFile(path, int(add.get("size") or 0), tuple(sorted((add.get("partitionValues") or {}).items())),
                    version)


def _check_metadata(metadata: dict[str, Any], where: str) -> None:
    mode = (metadata.get("configuration") or {}).get("delta.columnMapping.mode", "none")
    if mode != "none":
        raise DeltaSourceError(
            f"nightjar_delta: {where} uses column mapping (delta.columnMapping.mode={mode}): Parquet column "
            "names differ from the table's, which this source does not translate. Read it with delta-spark"
        )


def read_commit(table: str, version: int, options: DeltaSourceOptions) -> list[DataFile]:
    """The data files commit ``version`` appended, in log order; raises if the commit removed data."""
    try:
        text = _log_file(table, version).read_text()
    except FileNotFoundError as exc:
        raise DeltaSourceError(
            f"nightjar_delta: the log entry of version {version} of {table} "
            f"(_delta_log/{version:020d}.json) is gone (log retention or cleanup_metadata removed it before "
            f"the query read it); {RESTART_HINT}"
        ) from exc
    added: list[DataFile] = []
    removed = 0
    operation = "unknown operation"
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        if "add" in action:
            # dataChange=false: the rows were already delivered (compaction rewrites them into new files).
            if action["add"].get("dataChange", True):
                added.append(_add_file(action["add"], version))
        elif "remove" in action:
            if action["remove"].get("dataChange", True):
                removed += 1
        elif "commitInfo" in action:
            operation = action["commitInfo"].get("operation") or operation
        elif "metaData" in action:
            _check_metadata(action["metaData"], f"version {version} of {table}")
    if not removed:
        return added
    if options.ignore_changes or (options.ignore_deletes and not added):
        log.warning("%s version %d (%s) removed %d files; %s", table, version, operation, removed,
                    f"delivering the {len(added)} files it rewrote" if added else "skipped (ignoreDeletes)")
        return added
    kind = "rewrote" if added else "deleted"
    raise DeltaSourceError(
        f"nightjar_delta: version {version} of {table} ({operation}) {kind} data ({removed} files removed); "
        "this source follows appends only. Set ignoreDeletes=true to skip commits that only delete files, "
        "ignoreChanges=true to also deliver the files that updates and overwrites rewrite (unchanged rows "
        f"arrive again), or restart with a new checkpoint and startingVersion={version + 1}"
    )


def read_snapshot(table: str, version: int, order: str = ORDER_COMMIT) -> list[DataFile]:
    """Every data file of the table as of ``version``, in a fixed order so an index names the same file
    whenever this is computed again (after a restart).

    ``order="commit"``: by the version that added each file's rows (see ``commit_order``), so a watermarked
    query that reads the snapshot over several micro-batches sees older commits first. ``order="path"``:
    by path, the order of offsets written before the commit order existed.
    """
    from deltalake import DeltaTable

    try:
        snapshot = DeltaTable(table, version=version)
    except Exception as exc:  # delta-rs raises several types here; all mean the same to the user
        raise DeltaSourceError(
            f"nightjar_delta: cannot load version {version} of {table} to read its files ({exc}); the log "
            f"needed for it was probably cleaned up; {RESTART_HINT}"
        ) from exc
    _check_metadata({"configuration": snapshot.metadata().configuration}, f"table {table}")
    if "deletionVectors" in (snapshot.protocol().reader_features or []) and \
            pa.table(snapshot.deletion_vectors().read_all()).num_rows:
        raise DeltaSourceError(
            f"nightjar_delta: version {version} of {table} has files with deletion vectors; this source reads "
            "whole Parquet files and would deliver deleted rows. Run OPTIMIZE (which purges them) or read the "
            "table with delta-spark"
        )
    actions = pa.table(snapshot.get_add_actions(flatten=True))
    columns = [c for c in actions.column_names if c.startswith("partition.")]
    files: list[DataFile] = []
    modified: dict[str, int] = {}
    for row in actions.select(["path", "size_bytes", "modification_time", *columns]).to_pylist():
        parts = tuple(sorted((c[len("partition."):], row[c]) for c in columns))
        path = _decoded(row["path"])
        files.append(DataFile(path, int(row["size_bytes"]), parts, version))
        mtime = row["modification_time"]
        modified[path] = int(mtime.timestamp() * 1000) if isinstance(mtime, dt.datetime) else int(mtime or 0)
    if order == ORDER_PATH:
        return sorted(files, key=lambda f: f.path)
    keys = commit_order(table, version, {f.path for f in files})
    if len(keys) < len(files):
        log.info("delta source: %d of %d files of %s version %d were added before the oldest log entry kept; "
                 "they come first, by modification time", len(files) - len(keys), len(files), table, version)

    def key(file: DataFile) -> tuple[int, int, str]:
        # Files whose adding commit is no longer in the log: first (older than every commit still logged),
        # by the modification time the log records for them (fixed, so a restart computes the same order).
        return (*keys.get(file.path, (-1, modified[file.path])), file.path)

    return sorted(files, key=key)


def _decoded(path: str) -> str:
    # Delta stores paths as URIs: relative ones are percent-encoded (see _add_file).
    return path if "://" in path else unquote(path)


def commit_order(table: str, version: int, paths: set[str]) -> dict[str, tuple[int, int]]:
    """For each data file in ``paths`` (live at ``version``): (the version its rows were committed in, its
    position in that commit), found by reading the JSON commits backwards from ``version``.

    Why the log and not the checkpoint or ``modificationTime``: a checkpoint lists the live files without
    the version that added them, and ``modificationTime`` is whatever clock the writer had (executors'
    clocks, several writers, a compaction's own time), not the commit order.

    A file that compaction wrote (``add`` with ``dataChange: false``) holds rows of the files that commit
    removed in the same partition; it takes the *newest* version among them (position -1: before the files
    that version added itself). That never delivers a row before the commit that wrote it, so the watermark
    never runs ahead of the commit order and files that were not compacted are never made late by it; only
    the compacted file's own older rows wait until its newest commit. The walk stops as soon as every file
    is placed, or where the log has been cleaned up; files not placed are missing from the result.
    """
    placed: dict[str, tuple[int, int]] = {}
    wanted: dict[str, set[str]] = {p: {p} for p in paths}  # a path in the log -> the live files it places
    for current in range(version, -1, -1):
        if len(placed) == len(paths) or not wanted:
            break
        try:
            text = _log_file(table, current).read_text()
        except FileNotFoundError:
            break  # older entries were cleaned up
        adds: list[tuple[str, bool, Any]] = []
        rewritten: list[tuple[str, Any]] = []  # removed with dataChange=false: compacted into this commit's adds
        for line in text.splitlines():
            if not line.strip() or ('"add"' not in line and '"remove"' not in line):
                continue
            action = json.loads(line)
            if "add" in action:
                add = action["add"]
                adds.append((_decoded(add["path"]), add.get("dataChange", True), add.get("partitionValues")))
            elif "remove" in action and not action["remove"].get("dataChange", True):
                remove = action["remove"]
                rewritten.append((_decoded(remove["path"]), remove.get("partitionValues")))
        for index, (path, data_change, partition) in enumerate(adds):
            roots = {r for r in wanted.pop(path, ()) if r not in placed}
            if not roots:
                continue
            if data_change:
                for root in roots:
                    placed[root] = (current, index if root == path else -1)
                continue
            # Compaction bins never cross partitions; a remove without partition values may be any of them.
            for old, old_partition in rewritten:
                if old_partition is None or partition is None or old_partition == partition:
                    wanted.setdefault(old, set()).update(roots)
    return placed


# --- the stored initial offset ----------------------------------------------------------------------------

INITIAL_OFFSET_FORMAT = 1


def load_initial_offset(file: str, table: str) -> dict[str, Any] | None:
    """The initial offset stored in ``file`` for ``table``, or None when there is none yet.

    Raises when the file is unreadable or belongs to another table: its offset would mean nothing here, and
    guessing a new one is exactly the loss the file exists to prevent."""
    try:
        text = Path(file).read_text()
    except FileNotFoundError:
        return None
    try:
        stored = json.loads(text)
        offset = Position.parse(stored["offset"]).json()
        owner = stored["table"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DeltaSourceError(f"nightjar_delta: initialOffsetFile {file} is not a stored initial offset ({exc}); "
                               f"{RESTART_HINT}") from exc
    if owner != table:
        raise DeltaSourceError(
            f"nightjar_delta: initialOffsetFile {file} holds the initial offset of a query on {owner}, not "
            f"{table}; give every query its own file inside its own checkpoint"
        )
    return offset


def store_initial_offset(file: str, table: str, starting_version: str | int,
                         offset: dict[str, Any]) -> dict[str, Any]:
    """Store ``offset`` as the initial offset in ``file`` unless one is stored already; return the one stored.

    Written to a temporary file (owner-only, fsynced) that is then linked to its name: a crash leaves either
    no file or a whole one, and when two readers race, the first one's offset wins and both return it."""
    target = Path(file)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    record = {"format": INITIAL_OFFSET_FORMAT, "table": table, "startingVersion": starting_version,
              "offset": offset, "writtenAt": dt.datetime.now(dt.UTC).isoformat()}
    temp = target.with_name(f".{target.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(record, out)
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temp, target)  # unlike rename, never replaces a file another reader stored first
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: rename (atomic; a racing writer may win instead)
            if not target.exists():
                os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)
    _fsync_dir(target.parent)
    stored = load_initial_offset(file, table)
    assert stored is not None
    return stored


def _fsync_dir(path: Path) -> None:
    # The new name must survive a power cut too, or a restart would compute a new offset after all.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the reader ----------------------------------------------------------------------------------------


class DeltaFilesPartition(InputPartition):
    """One Spark task: a few data files (files are never split between tasks)."""

    def __init__(self, files: list[DataFile]):
        super().__init__(len(files))
        self.files = files


class DeltaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader. Driver methods read the Delta log; ``read`` runs on executors."""

    def __init__(self, options: dict[str, str], schema: StructType):
        self.options = DeltaSourceOptions.parse(options)
        self.schema = schema
        self._latest: int | None = None  # highest version seen; versions only grow, so probe upwards
        self._available_now_target: int | None = None
        self._commits: dict[int, list[DataFile]] = {}  # versions are immutable: parse each once
        self._snapshot: tuple[int, str, list[DataFile]] | None = None  # (version, order, files)
        self._initial: dict[str, Any] | None = None  # the first initialOffset() answer (see initialOffset)

    # Only options and schema travel to executors; the driver's log caches stay behind.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_commits={}, _snapshot=None)
        return state

    # --- offsets (driver) --------------------------------------------------------------------------

    def _latest_version(self) -> int:
        table = self.options.path
        if self._latest is None or self._latest < 0:
            self._latest = table_version(table)
            if self._latest < 0:
                return -1
        # A commit is one atomically created NNNN.json, and versions are consecutive: probe the next ones.
        while _log_file(table, self._latest + 1).exists():
            self._latest += 1
        return self._latest

    def _files_of(self, version: int, snapshot: bool, order: str = ORDER_COMMIT) -> list[DataFile]:
        if snapshot:
            if self._snapshot is None or self._snapshot[:2] != (version, order):
                self._snapshot = (version, order, read_snapshot(self.options.path, version, order))
            return self._snapshot[2]
        if version not in self._commits:
            self._commits[version] = read_commit(self.options.path, version, self.options)
        return self._commits[version]

    def _versions(self, start: Position, last: int) -> Iterator[tuple[int, list[DataFile], bool]]:
        version = start.version
        if start.snapshot:
            yield version, self._files_of(version, True, start.order), True
            version += 1
        while version <= last:
            yield version, self._files_of(version, False), False
            version += 1

    def initialOffset(self) -> dict[str, Any]:
        """Where a new checkpoint starts: computed once, then the same answer on every later call.

        Spark asks again when it replays batch 0 after a crash and keeps no copy of its own (see the module
        docstring): ``initialOffsetFile`` makes the first answer survive that; without it, one reader at least
        never answers twice differently."""
        if self._initial is None:
            file, table = self.options.initial_offset_file, self.options.path
            stored = load_initial_offset(file, table) if file else None
            if stored is not None:
                log.info("delta source: initial offset %s, stored in %s", stored, file)
            else:
                stored = self._compute_initial_offset()
                if file:
                    stored = store_initial_offset(file, table, self.options.starting_version, stored)
            self._initial = stored
        return dict(self._initial)

    def _compute_initial_offset(self) -> dict[str, Any]:
        latest = self._latest_version()
        spec = self.options.starting_version
        if latest < 0:
            # No table yet: every commit it will ever have is new, whatever startingVersion says.
            first = spec if isinstance(spec, int) else 0
            log.info("delta source: no table at %s yet; waiting for version %d", self.options.path, first)
            return Position(first, -1).json()
        if spec == "latest":
            start = Position(latest + 1, -1)
        elif spec == "earliest":
            # The table as of now, then every later commit: unlike replaying the log from version 0, this
            # survives compaction + vacuum and log cleanup, and delivers each row once.
            start = Position(latest, -1, True) if self._files_of(latest, True) else Position(latest + 1, -1)
        else:
            assert isinstance(spec, int)
            if spec > latest + 1:
                raise DeltaSourceError(f"nightjar_delta: startingVersion={spec} is past the latest version "
                                       f"({latest}) of {self.options.path}")
            if spec <= latest and not _log_file(self.options.path, spec).exists():
                raise DeltaSourceError(
                    f"nightjar_delta: startingVersion={spec}: the log entry of that version is gone from "
                    f"{self.options.path} (cleaned up); use startingVersion=earliest to read the table as it "
                    "is now and follow it from there"
                )
            start = Position(spec, -1)
        log.info("delta source starts at %s (table version %d)", start.json(), latest)
        return start.json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_files_per_trigger:
            return ReadMaxFiles(self.options.max_files_per_trigger)
        if self.options.max_bytes_per_trigger:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # availableNow means "what is there now": a writer committing meanwhile must not keep us running.
        self._available_now_target = self._latest_version()
        log.info("delta source: availableNow target version %d", self._available_now_target)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = Position.parse(start)
        latest = self._latest_version()
        if latest < 0:
            return start  # no table yet (or it was dropped): wait for it
        if latest < begin.version - 1:
            raise DeltaSourceError(
                f"nightjar_delta: the checkpoint is at version {begin.version} but {self.options.path} is at "
                f"version {latest} (was the table deleted and re-created?); {RESTART_HINT}"
            )
        if self._available_now_target is not None:
            latest = min(latest, self._available_now_target)
        max_files = max_bytes = None
        if isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
            max_bytes = self.options.max_bytes_per_trigger  # both options set: both apply
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        end, _ = self._plan(begin, latest, max_files, max_bytes)
        return end.json()

    def _plan(self, start: Position, last: int, max_files: int | None,
              max_bytes: int | None) -> tuple[Position, list[DataFile]]:
        """The files after ``start`` up to version ``last`` within the limits, and the position after them.

        A fully delivered version is written as (next version, -1), so one position has one spelling and
        an unchanged table yields the unchanged offset (Spark then runs no batch). Except: a batch that
        reads snapshot files ends inside the snapshot, so its end offset names the snapshot's version (see
        ``partitions``); the step from there to (version + 1, -1) is one batch without files.
        """
        taken: list[DataFile] = []
        size = 0
        end = start
        for version, files, snapshot in self._versions(start, last):
            first = start.index + 1 if version == start.version else 0
            for index in range(first, len(files)):
                if taken and ((max_files and len(taken) >= max_files) or
                              (max_bytes and size + files[index].size > max_bytes)):
                    return end, taken
                taken.append(files[index])
                size += files[index].size
                end = Position(version, index, snapshot, start.order if snapshot else ORDER_COMMIT)
            if snapshot and taken:
                return end, taken
            end = Position(version + 1, -1)
        return end, taken

    def reportLatestOffset(self) -> dict[str, Any] | None:
        latest = self._latest_version()
        return Position(latest + 1, -1).json() if latest >= 0 else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[DeltaFilesPartition]:
        begin, stop = Position.parse(start), Position.parse(end)
        if begin.snapshot and begin.index < 0 and stop.snapshot and begin != replace(stop, index=-1):
            # A replayed first batch: Spark keeps no start offset for batch 0 and asks initialOffset() again,
            # which names the table's version (and the snapshot order) *now*; the logged end names the
            # snapshot that batch was planned on, so read that one, counted as that offset counts.
            log.info("delta source: first batch replayed on the snapshot of version %d (order %s), not %d",
                     stop.version, stop.order, begin.version)
            begin = replace(stop, index=-1)
        last = stop.version if stop.index >= 0 else stop.version - 1
        files = []
        for version, vfiles, _ in self._versions(begin, last):
            first = begin.index + 1 if version == begin.version else 0
            until = stop.index + 1 if version == stop.version else len(vfiles)
            files.extend(vfiles[first:until])
        return [DeltaFilesPartition(group) for group in _pack(files, self.options.min_partitions)]

    def commit(self, end: dict[str, Any]) -> None:
        # Versions before a committed offset are never planned again by this reader: drop them.
        done = Position.parse(end)
        self._commits = {v: f for v, f in self._commits.items() if v >= done.version}
        if self._snapshot is not None and not (done.snapshot and (done.version, done.order) == self._snapshot[:2]):
            self._snapshot = None

    # --- data (executors) ----------------------------------------------------------------------------

    def read(self, partition: DeltaFilesPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        from pyspark.sql.pandas.types import to_arrow_schema

        # Exactly the Arrow schema Spark checks the batches against (timestamps in UTC).
        target = to_arrow_schema(self.schema, timezone="UTC")
        for file in partition.files:
            yield from read_file(self.options, file, target)

    def stop(self) -> None:
        self._commits, self._snapshot = {}, None


def _pack(files: list[DataFile], min_partitions: int) -> list[list[DataFile]]:
    """Group files into tasks of about TARGET_PARTITION_BYTES, at least ``min_partitions`` (files permitting):
    one task per tiny micro-batch file would cost more in task overhead than in reading."""
    if not files:
        return []
    total = sum(f.size for f in files)
    count = min(len(files), max(min_partitions, math.ceil(total / TARGET_PARTITION_BYTES)))
    groups: list[list[DataFile]] = [[] for _ in range(count)]
    sizes = [0] * count
    for file in sorted(files, key=lambda f: -f.size):  # largest first into the lightest group
        lightest = sizes.index(min(sizes))
        groups[lightest].append(file)
        sizes[lightest] += file.size
    return [g for g in groups if g]


def read_file(options: DeltaSourceOptions, file: DataFile, target: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of one data file as record batches of schema ``target`` (partition values added)."""
    import pyarrow.parquet as pq

    full = file.path if "://" in file.path else os.path.join(options.path, file.path)
    if full.startswith("file://"):
        full = unquote(urlparse(full).path)
    try:
        parquet = pq.ParquetFile(full)
    except FileNotFoundError as exc:
        raise DeltaSourceError(
            f"nightjar_delta: data file {full} (added in version {file.version}) is gone: it was vacuumed or "
            f"deleted before this query read it, so its rows cannot be delivered; {RESTART_HINT}, and keep the "
            "vacuum retention longer than a query may fall behind"
        ) from exc
    partition_values = dict(file.partition_values)
    columns = parquet_columns(target, parquet.schema_arrow, set(partition_values))
    with parquet:
        for batch in parquet.iter_batches(batch_size=options.read_batch_rows, columns=columns):
            if batch.num_rows:
                yield conform(batch, target, partition_values)


def parquet_columns(target: pa.Schema, stored: pa.Schema, skip: set[str] = frozenset()) -> list[str]:
    """The Parquet columns to read for ``target``: whole top-level columns, or only the nested leaves ``target``
    keeps of a struct (``"event.dataset"``) when it is narrower than the file's.

    A reader that asks for a pruned schema (e.g. the ML query: ~20 of the events table's ~430 leaves) then decodes
    only those leaves; the file's other leaves are never read. Columns or leaves the file lacks are left to
    :func:`conform` (null)."""
    return [path for field in target if field.name not in skip and field.name in stored.names
            for path in _paths(field.type, stored.field(field.name).type, field.name)]


def _paths(want: pa.DataType, have: pa.DataType, path: str) -> list[str]:
    """``[path]`` for a whole column or field, else the paths of the leaves ``want`` keeps of the struct ``have``."""
    if not (pa.types.is_struct(want) and pa.types.is_struct(have)) or want.equals(have):
        return [path]
    out = [leaf for child in want if (index := have.get_field_index(child.name)) >= 0
           for leaf in _paths(child.type, have.field(index).type, f"{path}.{child.name}")]
    if not out and have.num_fields:
        # None of the wanted fields is in this (older) file: read one leaf anyway, so that the struct is null
        # exactly where the file's struct is null, as a full read gives it; conform's cast then drops that leaf.
        out = [f"{path}.{have.field(0).name}"]
    return out


def pruned_schema(schema: StructType, paths: Iterable[str]) -> StructType:
    """``schema`` keeping only the fields named by dotted ``paths`` (``"source.ip"``, ``"event"`` for a whole
    struct), in the schema's own order. Raises ``ValueError`` naming a path the schema lacks."""
    from pyspark.sql.types import StructField

    tree: dict[str, Any] = {}  # name -> True (the whole field) or a subtree of the fields kept
    for path in paths:
        *parents, last = path.split(".")
        node = tree
        for part in parents:
            child = node.setdefault(part, {})
            if child is True:  # the whole struct is already kept
                break
            node = child
        else:
            node[last] = True

    def prune(struct: StructType, wanted: dict[str, Any], where: str) -> StructType:
        names = {f.name for f in struct.fields}
        missing = [n for n in wanted if n not in names]
        if missing:
            raise ValueError(f"nightjar_delta: column {where}{missing[0]} is not in the table's schema")
        fields = []
        for f in struct.fields:
            sub = wanted.get(f.name)
            if sub is True:
                fields.append(f)
            elif sub is not None:
                if not isinstance(f.dataType, StructType):
                    raise ValueError(f"nightjar_delta: column {where}{f.name} is not a struct, it has no fields")
                fields.append(StructField(f.name, prune(f.dataType, sub, f"{where}{f.name}."), f.nullable,
                                          f.metadata))
        return StructType(fields)

    return prune(schema, tree, "")


def conform(batch: pa.RecordBatch, target: pa.Schema, partition_values: dict[str, Any]) -> pa.RecordBatch:
    """``batch`` shaped as ``target``: partition columns filled in, missing columns null, types cast.

    Casting matches struct fields by name, so files written before a nested field was added (schema
    evolution in ``delta_sink``) read it as null.
    """
    rows = batch.num_rows
    arrays = []
    for field in target:
        if field.name in partition_values:
            arrays.append(_partition_column(partition_values[field.name], field, rows))
        elif field.name in batch.schema.names:
            column = batch.column(field.name)
            arrays.append(column if column.type.equals(field.type) else column.cast(field.type))
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _partition_column(value: Any, field: pa.Field, rows: int) -> pa.Array:
    if value is None or value == "":  # Delta writes a null partition value as null (some writers as "")
        return pa.nulls(rows, field.type)
    if isinstance(value, str):
        value = _parse_partition_value(value, field.type)
    return pa.repeat(pa.scalar(value, type=field.type), rows)


def _parse_partition_value(text: str, typ: pa.DataType) -> Any:
    """A partition value as the Delta protocol serializes it, as a Python value of Arrow type ``typ``."""
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return text
    if pa.types.is_boolean(typ):
        return text.lower() == "true"
    if pa.types.is_integer(typ):
        return int(text)
    if pa.types.is_floating(typ):
        return float(text)
    if pa.types.is_decimal(typ):
        return decimal.Decimal(text)
    if pa.types.is_date(typ):
        return dt.date.fromisoformat(text)
    if pa.types.is_timestamp(typ):
        # "2024-01-01 00:00:00[.ffffff]" in UTC (or ISO 8601 with an offset, from newer writers).
        value = dt.datetime.fromisoformat(text)
        if typ.tz is None:
            return value.replace(tzinfo=None) if value.tzinfo is None else \
                value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return text.encode()
    raise DeltaSourceError(f"nightjar_delta: partition column of type {typ} is not supported")


class DeltaDataSource(DataSource):
    """``spark.readStream.format("nightjar_delta")``: see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        """The table's schema now. Only called when the query gives no schema of its own."""
        from deltalake import DeltaTable
        from pyspark.sql.pandas.types import from_arrow_schema

        path = DeltaSourceOptions.parse(dict(self.options)).path
        if table_version(path) < 0:
            raise DeltaSourceError(
                f"nightjar_delta: there is no Delta table at {path} yet, so its schema is unknown. Start the "
                "pipeline that writes it first (`nightjar run`), or give the schema with "
                "spark.readStream.schema(...) and the query will wait for the table"
            )
        table = DeltaTable(path)
        _check_metadata({"configuration": table.metadata().configuration}, f"table {path}")
        return from_arrow_schema(pa.schema(table.schema().to_arrow()))

    def streamReader(self, schema: StructType) -> DeltaStreamReader:
        return DeltaStreamReader(dict(self.options), schema)


def read_delta_stream(spark, path: str | Path, starting_version: str = "earliest",
                      initial_offset_file: str | Path | None = None, schema: StructType | None = None):
    """The append-only Delta table at ``path`` as a streaming DataFrame (registers the source first).

    ``initial_offset_file``: where the query's initial offset is kept (see the module docstring); give a path
    inside the query's checkpoint so a crash in its first batch cannot lose or repeat rows.
    ``schema``: the columns to read (default: the table's schema); a :func:`pruned_schema` of the table's makes the
    source read only those Parquet leaves."""
    spark.dataSource.register(DeltaDataSource)
    reader = spark.readStream.format(SOURCE_NAME)
    if schema is not None:
        reader = reader.schema(schema)
    reader = reader.option("path", str(path)).option("startingVersion", starting_version)
    if initial_offset_file is not None:
        reader = reader.option("initialOffsetFile", str(initial_offset_file))
    return reader.load()


def initial_offset_file(checkpoint: str | Path, table_name: str) -> Path:
    """Where a query with checkpoint ``checkpoint`` keeps the initial offset of the table it tails: inside the
    checkpoint (so deleting the checkpoint resets both), outside the directories Spark manages there."""
    return Path(checkpoint) / SOURCE_NAME / f"{table_name}.initial.json"
