"""Streaming checkpoints: repairs that must happen before a query starts on its checkpoint.

Spark writes each micro-batch's offsets as a temporary file in ``<checkpoint>/offsets`` and renames it to the
batch number. A process killed between the two (seen in the chaos storm: a SIGKILL 34 s after the first start)
leaves only ``.0.<uuid>.tmp`` (and its ``.crc``). No batch was ever planned, yet Spark 4 refuses to start a
stateful query whose offsets directory is not empty on batch 0 (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``),
so every restart failed and the run gave up. Such leftovers hold nothing that was committed: they are removed.
"""

from __future__ import annotations

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
