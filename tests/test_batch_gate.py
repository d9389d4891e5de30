"""core.batch_gate on real streaming queries: a stop waits for the running micro-batch, a batch due after the stop
does not start, and a batch that outlasts the wait is interrupted (and said to be)."""

from __future__ import annotations

import threading
import time

import pytest

from core.batch_gate import BatchGate, BatchNotStarted, StopRequest, stop_between_batches


def _slow_query(spark, tmp_path, gate: BatchGate, batch_s: float, name: str):
    """A rate-source query whose every micro-batch takes ``batch_s`` seconds of Spark work on the executors (a task
    that sleeps), with the batches that started and the ones that finished."""
    started, finished = [], []
    running = threading.Event()

    def write(df, batch_id: int) -> None:
        started.append(batch_id)
        running.set()
        df.sparkSession.range(1).repartition(1).rdd.map(lambda x: time.sleep(batch_s) or x).count()
        finished.append(batch_id)

    query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
             .writeStream.queryName(name).trigger(processingTime="100 milliseconds")
             .foreachBatch(gate.guard(write)).option("checkpointLocation", str(tmp_path / name)).start())
    return query, started, finished, running


def test_the_stop_waits_for_the_running_batch_and_starts_no_other(spark, tmp_path):
    gate = BatchGate()
    query, started, finished, running = _slow_query(spark, tmp_path, gate, 3.0, "gate_waits")
    try:
        assert running.wait(120), "a first micro-batch ran"
        time.sleep(0.5)  # inside the batch's task
        assert query.status["isTriggerActive"]
        t0 = time.monotonic()
        interrupted = stop_between_batches([query], wait_s=60, gate=gate)
        took = time.monotonic() - t0
    finally:
        query.stop()
    assert interrupted == []
    assert not query.isActive
    assert started == finished, f"every batch that started finished: started {started}, finished {finished}"
    assert took >= 1.0, "the stop waited for the batch's task rather than cutting it"
    assert not gate.closed, "the gate is open again for queries started later in the process"


def test_a_batch_past_the_wait_is_interrupted_and_named(spark, tmp_path):
    gate = BatchGate()
    query, started, finished, running = _slow_query(spark, tmp_path, gate, 30.0, "gate_interrupts")
    try:
        assert running.wait(120)
        time.sleep(0.5)
        t0 = time.monotonic()
        interrupted = stop_between_batches([query], wait_s=1.0, gate=gate)
        took = time.monotonic() - t0
    finally:
        query.stop()
    assert interrupted == ["gate_interrupts"]
    assert not query.isActive
    assert finished == [] and started, "the 30-s batch was cut, not waited for"
    assert took < 25


def test_a_closed_gate_refuses_the_batch_before_its_work():
    gate = BatchGate()
    ran = []
    guarded = gate.guard(lambda df, batch_id: ran.append(batch_id))
    guarded(None, 1)
    gate.close()
    with pytest.raises(BatchNotStarted, match="micro-batch 2 not started"):
        guarded(None, 2)
    gate.open()
    guarded(None, 3)
    assert ran == [1, 3]


def test_the_wait_counts_from_the_stop_request_not_from_the_stop(spark, tmp_path):
    """A signal that came while the pipeline was busy (starting a query: seconds under load) has used part of the wait:
    the batch is interrupted ``wait_s`` after the request, so the whole stop stays within a service manager's grace."""
    gate = BatchGate()
    query, started, finished, running = _slow_query(spark, tmp_path, gate, 30.0, "gate_since_request")
    try:
        assert running.wait(120)
        request = StopRequest()
        request.set()
        request.requested_at = time.monotonic() - 10.0  # the signal came 10 s ago
        t0 = time.monotonic()
        interrupted = stop_between_batches([query], wait_s=11.0, gate=gate, requested_at=request.requested_at)
        took = time.monotonic() - t0
    finally:
        query.stop()
    assert interrupted == ["gate_since_request"]
    assert took < 9.0, f"the stop waited {took:.1f} s: it counted the 11-s wait from its own start"


def test_a_stop_request_keeps_the_moment_of_its_first_set():
    request = StopRequest()
    assert request.requested_at is None and not request.is_set()
    before = time.monotonic()
    request.set()
    first = request.requested_at
    assert first is not None and first >= before and request.is_set()
    time.sleep(0.01)
    request.set()  # a second Ctrl-C
    assert request.requested_at == first


def test_the_supervisor_starts_no_waiting_query_once_the_stop_is_requested(spark, settings):
    """A query whose start waits for the events table (auth_sessions) is not started by a poll after the signal: its
    cold start would only delay the stop."""
    from core.triggers import Trigger
    from nightjar.pipeline import Managed, Supervisor

    request = StopRequest()
    supervisor = Supervisor(spark, settings, Trigger(interval="1 second"), [], stop_request=request)
    starts: list[str] = []
    supervisor.managed["late"] = Managed("late", start=lambda: starts.append("late"), start_after=lambda: True)
    request.set()
    supervisor.poll()
    assert starts == [], "started after the stop was requested"
    request.clear()
    supervisor.poll()
    assert starts == ["late"], "without a stop request the waiting query starts once its condition holds"
