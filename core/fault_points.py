"""Fault injection for chaos tests: SIGKILL the whole pipeline at the n-th pass of a named point.

Why: a SIGKILL at a random moment almost never lands between a Delta commit and Spark's commit log, or between a
Kafka publish and its Delta commit — the moments exactly-once depends on. ``tests/test_chaos.py`` therefore sets

    NIGHTJAR_FAULT=<point>:<n>          e.g. NIGHTJAR_FAULT=delta.after_commit:3

and the process that passes ``<point>`` for the ``n``-th time SIGKILLs every process of its session (the
``nightjar run`` driver, its JVM, the PySpark daemon and its Python workers, which sit in a process group of their
own but in the same session) — what a power cut or ``kill -9`` of the service does. Before dying it appends one
line ``<point> <n> <pid>`` to the file named by ``NIGHTJAR_FAULT_LOG`` (if set), so the test knows the kill
came from that point. Counts are per process (driver points count in the driver, ``kafka.read`` per Python
worker).

Production cost when ``NIGHTJAR_FAULT`` is unset: :func:`fault_point` tests one module global and returns.
As a guard, the hook only kills a session led by a ``nightjar`` process (started with ``setsid`` /
``start_new_session``); anywhere else (a test calling ``run_pipeline`` in-process) it refuses loudly.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)

ENV_FAULT = "NIGHTJAR_FAULT"
ENV_FAULT_LOG = "NIGHTJAR_FAULT_LOG"

# Where the points sit (grep the name to find the call):
POINTS: dict[str, str] = {
    "kafka.read": "an executor starts reading a Kafka partition range (ingest.kafka_source)",
    "delta.before_commit": "Parquet files written, the Delta commit not yet made (ingest.delta_sink)",
    "delta.after_commit": "the Delta commit made, the rest of the micro-batch not yet (ingest.delta_sink)",
    "alerts.after_publish": "alerts acknowledged by Kafka, not yet in the alerts table (alerts.alert_sink)",
    "alerts.after_commit": "alerts in Kafka and in the alerts table (alerts.alert_sink)",
    "batch.end": "an ingest micro-batch wrote every table and its state; Spark's commit log not yet written "
                 "(nightjar.pipeline)",
}


def _parse(spec: str | None) -> tuple[str, int] | None:
    if not spec:
        return None
    name, _, count = spec.partition(":")
    if name not in POINTS or not count.isdigit() or int(count) < 1:
        raise ValueError(f"{ENV_FAULT}={spec!r}: expected <point>:<n> with n >= 1 and point one of "
                         f"{', '.join(POINTS)}")
    return name, int(count)


_armed: tuple[str, int] | None = _parse(os.environ.get(ENV_FAULT))
_passes: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Mark a named point; SIGKILL the session at the configured pass. Nil cost when no fault is armed."""
    if _armed is None:
        return
    _hit(name)


def _hit(name: str) -> None:
    point, at = _armed  # type: ignore[misc]
    if name != point:
        return
    _passes[name] = _passes.get(name, 0) + 1
    if _passes[name] != at:
        return
    sid = os.getsid(0)
    leader = _cmdline(sid)
    if "nightjar" not in leader:
        raise RuntimeError(f"{ENV_FAULT} armed at {point}:{at}, but this process's session is led by {leader!r}, "
                           "not a nightjar command in its own session: refusing to kill it")
    log.warning("fault point %s reached for the %d. time: SIGKILL to session %d", name, at, sid)
    record = os.environ.get(ENV_FAULT_LOG)
    if record:
        with open(record, "a", encoding="utf-8") as out:
            out.write(f"{name} {at} {os.getpid()}\n")
            out.flush()
            os.fsync(out.fileno())
    kill_session(sid)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def session_processes(sid: int) -> list[int]:
    """Pids of the live processes in session ``sid`` (Linux ``/proc``), zombies excluded."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp session ...
        if int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (the caller last, if it is in it)."""
    me = os.getpid()
    for pid in session_processes(sid):
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if os.getsid(0) == sid:
        os.kill(me, signal.SIGKILL)
