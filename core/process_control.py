"""Stopping what a command started: signal forwarding and the process-tree checks behind it.

Every long-running ``nightjar`` command (``demo``, ``dashboard``, ``broker``, ``run``, ``generate --rate``,
``replay``, ``alerts tail``) must stop on SIGTERM (``kill PID``, a service manager, ``docker stop``) as it does on
Ctrl-C, and take down what it started: a child started in its own session (the broker, Streamlit, the demo's
children) does not receive a signal sent to the command, so the command forwards it to the child's process group
and waits. PySpark's Python worker daemons start process groups of their own, so a child's group does not cover
them either: :func:`descendants` remembers the whole tree before stopping, and :func:`reap` makes sure each one is
gone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator

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


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def reap(pids: set[int], grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``pids`` to exit on their own (workers notice their JVM is gone), then kill the
    rest and wait until they are gone."""
    deadline = time.monotonic() + grace_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if alive(p)]
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 10
    while any(alive(p) for p in left) and time.monotonic() < deadline:
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
