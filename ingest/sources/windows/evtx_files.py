"""Windows ``.evtx`` files -> one JSON text per event record, the evtx JSON rendering the ``windows`` source parses.

``{"Event": {"System": {...}, "EventData": {...}}}`` — the shape the ``evtx`` package (PyPI, a Rust parser)
prints, and the shape of SigmaHQ's regression data beside its ``.evtx`` files. So replay and parse can take
``.evtx`` files as they take JSON lines: each record becomes one line of JSON, parsed by
``ingest/sources/windows`` like any other Windows JSON record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def evtx_records(path: str | Path) -> Iterator[str]:
    """Each event record of the ``.evtx`` file at ``path`` as one line of JSON (no line breaks), in file order.

    Raises ``ImportError`` when the ``evtx`` package is missing and ``OSError``/``RuntimeError`` for a file it
    cannot read (a record it cannot decode is skipped by the package, with a warning)."""
    from evtx import PyEvtxParser  # imported here: only .evtx input needs it

    parser = PyEvtxParser(str(path))
    for record in parser.records_json():
        text: str = record["data"]
        if "\n" in text or "\r" in text:  # the package may pretty-print; a record must be one line
            text = json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
        yield text


def evtx_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Each event record of ``path`` as its JSON object (:func:`evtx_records`, decoded)."""
    for text in evtx_records(path):
        yield json.loads(text)
