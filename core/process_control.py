"""Stopping what a command started: signal forwarding and the process-tree checks behind it.

Every long-running ``nightjar`` command (``demo``, ``dashboard``, ``broker``, ``run``, ``generate --rate``,
``replay``, ``alerts tail``) must stop on SIGTERM (``kill PID``, a service manager, ``docker stop``) as it does on
Ctrl-C, and take down what it started: a child started in its own session (the broker, Streamlit, the demo's
children) does not receive a signal sent to the command, so the command forwards it to the child's process group
and waits. PySpark's Python worker daemons start process groups of their own, so a child's group does not cover
them either: :func:`descendants` finds the whole tree before stopping, :func:`identify` remembers each process by pid and
start time (a pid alone may be reused by the time it is checked), and :func:`reap` makes sure each one is gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping

log = logging.getLogger(__name__)


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return set()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None: with the pid, it names one process for good."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields else None  # field 22 of stat, "starttime"
    except (ValueError, IndexError):
        return None


def identify(pids: Iterable[int]) -> dict[int, int]:
    """``{pid: start time}`` of those of ``pids`` that run now.

    Why: a pid is reused once its process is gone (pid_max is 32,768 on many machines, and a Spark run starts
    thousands of processes), so a pid remembered minutes ago may name somebody else's process by the time it is
    killed or checked; the start time tells the process that was seen from its successor."""
    out = {}
    for pid in pids:
        started = start_time(pid)
        if started is not None:
            out[pid] = started
    return out


def alive(pid: int, started: int | None = None) -> bool:
    """The process exists and is not a zombie (and, given ``started``, is the one that started then)."""
    fields = _stat(pid)
    if not fields or fields[0] == "Z":
        return False
    return started is None or (len(fields) > 19 and fields[19] == str(started))


def reap(procs: Mapping[int, int], grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``procs`` (``{pid: start time}``, from :func:`identify`) to exit on their own
    (workers notice their JVM is gone), then kill the rest and wait until they are gone. A pid now held by another
    process is left alone."""
    deadline = time.monotonic() + grace_s
    while any(alive(p, t) for p, t in procs.items()) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {p: t for p, t in procs.items() if alive(p, t)}
    for p, t in left.items():
        if alive(p, t):  # checked again just before: the smallest window for a reuse
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + 10
    while any(alive(p, t) for p, t in left.items()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        log.info("killed %d leftover worker process(es)", len(left))


def signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the process group ``proc`` leads (it was started with ``start_new_session=True``)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _interrupt(signum: int, _frame: object) -> None:
    log.info("received %s: stopping", signal.Signals(signum).name)
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM raises ``KeyboardInterrupt`` in the main thread, as Ctrl-C does, so the command's
    ``finally`` clauses stop what it started; outside it the previous handler is back."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
