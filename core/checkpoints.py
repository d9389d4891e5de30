"""Streaming checkpoints: repairs that must happen before a query starts on its checkpoint.

Spark writes each micro-batch's offsets as a temporary file in ``<checkpoint>/offsets`` and renames it to the
batch number. A process killed between the two (seen in the chaos storm: a SIGKILL 34 s after the first start)
leaves only ``.0.<uuid>.tmp`` (and its ``.crc``). No batch was ever planned, yet Spark 4 refuses to start a
stateful query whose offsets directory is not empty on batch 0 (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``),
so every restart failed and the run gave up. Such leftovers hold nothing that was committed: they are removed.

The same offset log also gives a micro-batch's timestamp without a Spark job (:func:`batch_timestamp`).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def clear_unplanned_first_batch(checkpoint: Path) -> list[Path]:
    """Remove the temporary files a killed first offset write left in ``checkpoint/offsets``; return them.

    Only when no batch's offsets were ever committed (no file named by a batch number): then nothing in the
    directory is state Spark could need. With a committed batch nothing is touched (Spark ignores its own temporary
    files there)."""
    offsets = Path(checkpoint) / "offsets"
    if not offsets.is_dir():
        return []
    entries = list(offsets.iterdir())
    if any(e.name.isdigit() for e in entries):
        return []
    removed = []
    for entry in entries:
        if entry.is_file() and entry.name.endswith((".tmp", ".tmp.crc")):
            entry.unlink()
            removed.append(entry)
    if removed:
        log.info("checkpoint %s: removed %d temporary file(s) of a first batch whose offsets were never committed "
                 "(a process stopped while writing them)", checkpoint, len(removed))
    return removed


def batch_timestamp(checkpoint: Path, batch_id: int) -> dt.datetime | None:
    """The timestamp of micro-batch ``batch_id`` as its offset log records it (naive UTC), or None if unreadable.

    It is the value ``current_timestamp()`` takes in that batch, and the same when the batch is replayed. Reading it
    here spares a ``foreachBatch`` body a Spark job (a ``limit(1)`` collect over the batch: 0.2-1.2 s per alerting
    live batch, measured)."""
    try:
        with open(Path(checkpoint) / "offsets" / str(batch_id), encoding="utf-8") as f:
            f.readline()  # format version, "v1"
            millis = json.loads(f.readline())["batchTimestampMs"]
        return dt.datetime.fromtimestamp(int(millis) / 1000, dt.UTC).replace(tzinfo=None)
    except (OSError, ValueError, KeyError, TypeError):
        return None
