"""Stopping streaming queries between micro-batches, not inside one.

``StreamingQuery.stop()`` cancels the running micro-batch's job with thread interrupts: its tasks die mid-work and
Spark logs ERROR lines for what they were doing (``Error in TaskCompletionListener`` with a
``java.lang.InterruptedException``, ``Store broadcast … fail``), although nothing is lost — the batch's offsets are
logged and not committed, and the next run replays it. Seen on a loaded machine when ``nightjar demo`` or a service
manager stopped the pipeline while a batch ran. A stop should log no ERROR, so the pipeline stops in two steps:

1. :meth:`BatchGate.close`: from now on a micro-batch that has not started its work does not start it
   (:meth:`BatchGate.guard` raises :class:`BatchNotStarted` before the ``foreachBatch`` function runs): its query ends
   with nothing half-done, and the next run does the batch;
2. :func:`stop_between_batches`: each query is stopped once it is between batches (idle, waiting for its trigger) or
   has ended at the gate; a batch still running after ``wait_s`` is interrupted as before, with a log line saying so.

The wait is bounded by one micro-batch's duration (a few seconds live; ``wait_s`` caps it below the grace that
``nightjar demo`` and service managers give before SIGKILL). It counts from the stop's request (:class:`StopRequest`),
not from when the pipeline gets round to stopping: a signal that arrives while the supervisor starts a query (seconds
on a loaded machine) must not push the end of the stop past that grace.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from core.errors import short_batch_errors

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often a query's state is asked while the stop waits for its batch to end


class BatchNotStarted(RuntimeError):
    """A micro-batch was due after the stop was requested: its query ends before doing any of the batch's work."""


class StopRequest(threading.Event):
    """A :class:`threading.Event` that remembers when it was first set (monotonic clock): the stop's deadline counts
    from the request (a signal handler sets it), whatever the pipeline was busy with then."""

    def __init__(self) -> None:
        super().__init__()
        self.requested_at: float | None = None

    def set(self) -> None:
        if self.requested_at is None:
            self.requested_at = time.monotonic()
        super().set()


class BatchGate:
    """Open while the pipeline runs; closed by the stop. One per process: a run in the same process reopens it."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def open(self) -> None:
        self._closed.clear()

    def close(self) -> None:
        self._closed.set()

    def guard(self, fn: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
        """Wrap a ``foreachBatch`` function: once the gate is closed it raises :class:`BatchNotStarted` instead of
        running (on the driver, before any task of the batch starts)."""

        @functools.wraps(fn)
        def run(df: Any, batch_id: int) -> Any:
            if self._closed.is_set():
                raise BatchNotStarted(f"stop requested: micro-batch {batch_id} not started (the next run does it)")
            return fn(df, batch_id)

        return run


BATCH_GATE = BatchGate()


def batch_function(fn: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """What a query's ``foreachBatch`` runs: ``fn`` behind :data:`BATCH_GATE` (no micro-batch starts once a stop has
    closed it) with its failures reaching Spark as one short line (:func:`core.errors.short_batch_errors` says why)."""
    return BATCH_GATE.guard(short_batch_errors(fn))


def _between_batches(query: Any) -> bool:
    """The query ended, or waits for its next trigger (no batch of its own is running)."""
    try:
        return not query.isActive or not query.status["isTriggerActive"]
    except Exception:  # the JVM is gone (its own SIGTERM hook): nothing runs any more
        return True


def stop_between_batches(queries: Iterable[Any], wait_s: float, gate: BatchGate = BATCH_GATE,
                         stop: Callable[[Any], None] | None = None, requested_at: float | None = None) -> list[str]:
    """Close ``gate`` and stop every query of ``queries`` once it is between micro-batches; ``wait_s`` seconds after
    ``requested_at`` (monotonic; default now) stop the rest anyway (interrupting their batches). Returns the names of
    the queries that were interrupted.

    ``stop(query)`` stops one query (default ``query.stop()``); callers pass theirs to handle a JVM already gone.
    """
    stop = stop or (lambda q: q.stop())
    gate.close()
    pending = [q for q in queries if _is_active(q)]
    now = time.monotonic()
    deadline = min(requested_at if requested_at is not None else now, now) + max(wait_s, 0.0)
    running = [_name(q) for q in pending if not _between_batches(q)]
    if running:
        log.info("stop: waiting up to %.0f s for the running micro-batch of %s to finish",
                 max(deadline - now, 0.0), ", ".join(running))
    interrupted: list[str] = []
    try:
        _stop_all(pending, deadline, wait_s, stop, interrupted)
    finally:
        gate.open()  # every query given is stopped: queries started later in this process (tests) run as usual
    return interrupted


def _stop_all(pending: list[Any], deadline: float, wait_s: float, stop: Callable[[Any], None],
              interrupted: list[str]) -> None:
    while pending:
        for q in list(pending):
            if _between_batches(q):
                stop(q)
                pending.remove(q)
        if not pending:
            break
        if time.monotonic() >= deadline:
            for q in pending:
                interrupted.append(_name(q))
                stop(q)
            log.info("stop: interrupted the micro-batch of %s after %.0f s; the next run replays it from its "
                     "checkpoint", ", ".join(interrupted), wait_s)
            break
        time.sleep(POLL_S)


def _is_active(query: Any) -> bool:
    try:
        return bool(query.isActive)
    except Exception:
        return False


def _name(query: Any) -> str:
    try:
        return query.name or str(query.id)
    except Exception:
        return "?"
