"""Streaming query progress -> the ``pipeline_progress`` Delta table, and one status line per batch.

A :class:`StreamingQueryListener` receives every query's progress on the driver. Rows are buffered and
appended to Delta at most every ``flush_interval_s`` (one small commit, not one per micro-batch per query)
and when a query terminates, so the dashboard sees figures within seconds without flooding the log.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.streaming import StreamingQueryListener

from alerts.detection_input import EXCLUDED_METRIC
from core.batch_gate import BatchNotStarted
from core.errors import summarize_query_error

log = logging.getLogger(__name__)

PROGRESS_SCHEMA = pa.schema(
    [
        ("query_name", pa.string()),
        ("query_id", pa.string()),
        ("run_id", pa.string()),
        ("batch_id", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("num_input_rows", pa.int64()),
        ("input_rows_per_second", pa.float64()),
        ("processed_rows_per_second", pa.float64()),
        ("batch_duration_ms", pa.int64()),
        ("watermark", pa.string()),
        ("state_rows", pa.int64()),
        ("state_memory_bytes", pa.int64()),
        ("progress_json", pa.string()),
        # events kept out of detection in the batch (stamped too far in the future; alerts/detection_input.py)
        ("excluded_rows", pa.int64()),
        # rows the query's stateful operators left out as older than their watermark (a windowed rule's events
        # replayed from a capture older than what the query has already seen); Spark counts what reaches the
        # state, so for an aggregation these are partial aggregates (per group and window), not events. None: the
        # query keeps no state
        ("late_rows", pa.int64()),
        # rule-health rows (query_name "rule:<id>"): the newest row per rule_id is the rule's current health
        ("rule_id", pa.string()),
        ("status", pa.string()),  # running | restarting | failed | disabled
        ("error", pa.string()),
        ("last_batch_at", pa.timestamp("us", tz="UTC")),
        ("last_alert_at", pa.timestamp("us", tz="UTC")),
    ]
)


def progress_row(progress: Any) -> dict[str, Any]:
    """One ``pipeline_progress`` row from a ``StreamingQueryProgress``."""
    states = progress.stateOperators or []
    watermark = (progress.eventTime or {}).get("watermark")
    return {
        "query_name": progress.name or "",
        "query_id": str(progress.id),
        "run_id": str(progress.runId),
        "batch_id": int(progress.batchId),
        "timestamp": dt.datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00")),
        "num_input_rows": int(progress.numInputRows),
        "input_rows_per_second": float(progress.inputRowsPerSecond or 0.0),
        "processed_rows_per_second": float(progress.processedRowsPerSecond or 0.0),
        "batch_duration_ms": int((progress.durationMs or {}).get("triggerExecution", 0)),
        # Spark reports the epoch as the watermark until event time advances: that is "no watermark yet".
        "watermark": None if not watermark or watermark.startswith("1970-01-01") else watermark,
        "state_rows": int(sum(s.numRowsTotal for s in states)),
        "state_memory_bytes": int(sum(s.memoryUsedBytes for s in states)),
        "progress_json": progress.json,
        "excluded_rows": _excluded(progress),
        "late_rows": int(sum(s.numRowsDroppedByWatermark or 0 for s in states)) if states else None,
    }


def _excluded(progress: Any) -> int | None:
    metrics = progress.observedMetrics or {}
    counts = [row[EXCLUDED_METRIC] for row in metrics.values() if EXCLUDED_METRIC in row.asDict()]
    return int(sum(c or 0 for c in counts)) if counts else None


class ProgressRecorder(StreamingQueryListener):
    """Appends every query's progress to ``pipeline_progress`` and logs one INFO line per data batch."""

    def __init__(self, table_path: Path, flush_interval_s: float = 5.0):
        self.table_path = table_path
        self.flush_interval_s = flush_interval_s
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self.failures: dict[str, str] = {}
        self.stopping = False  # set when the run stops its queries: an error then is the interruption itself
        self._terminated: set[str] = set()
        self._terminated_changed = threading.Condition()

    def onQueryStarted(self, event: Any) -> None:
        log.info("query %s started (id %s)", event.name, event.id)

    def onQueryProgress(self, event: Any) -> None:
        row = progress_row(event.progress)
        if row["num_input_rows"]:
            log.info(
                "%s batch %d: %d rows, %.0f rows/s, %d ms%s%s%s",
                row["query_name"], row["batch_id"], row["num_input_rows"], row["processed_rows_per_second"],
                row["batch_duration_ms"],
                f", watermark {row['watermark']}" if row["watermark"] else "",
                f", state {row['state_rows']} rows" if row["state_rows"] else "",
                f", {row['late_rows']} late rows left out (older than the watermark)" if row["late_rows"] else "",
            )
        with self._lock:
            self._rows.append(row)
        if time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception and self.stopping and BatchNotStarted.__name__ in event.exception:
            log.info("query %s stopped before its next micro-batch (the next run does it)", event.id)
        elif event.exception:
            self.failures[str(event.id)] = event.exception
            if self.stopping:  # e.g. a batch interrupted while planning by SIGTERM: replayed next run, not a fault
                log.info("query %s ended while stopping: %s", event.id, summarize_query_error(event.exception))
            else:
                log.error("query %s failed: %s", event.id, summarize_query_error(event.exception))
        else:
            log.info("query %s stopped", event.id)
        self.flush()
        with self._terminated_changed:
            self._terminated.add(str(event.id))
            self._terminated_changed.notify_all()

    def wait_terminated(self, query_ids: list[str], timeout_s: float = 15.0) -> bool:
        """Wait until the listener has seen these queries end (listener events arrive asynchronously,
        after ``awaitTermination`` returns; the termination event comes after a query's last progress)."""
        with self._terminated_changed:
            return self._terminated_changed.wait_for(lambda: set(query_ids) <= self._terminated, timeout_s)

    def add_rows(self, rows: list[dict[str, Any]]) -> None:
        """Rows of other kinds (rule health), written with the next flush."""
        with self._lock:
            self._rows.extend(rows)

    def flush(self) -> int:
        """Append buffered rows to the table; returns how many were written."""
        from deltalake import write_deltalake

        with self._lock:
            rows, self._rows = self._rows, []
            self._last_flush = time.monotonic()
            if not rows:
                return 0
            try:
                write_deltalake(str(self.table_path), pa.Table.from_pylist(rows, schema=PROGRESS_SCHEMA),
                                mode="append", schema_mode="merge")
            except Exception:  # progress is best-effort: never let it stop the pipeline
                log.exception("could not append %d rows to %s", len(rows), self.table_path)
                return 0
        return len(rows)
