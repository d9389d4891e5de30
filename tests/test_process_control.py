"""``core/process_control``: processes are remembered by pid *and* start time, so a pid reused by another process
after the one that was seen has gone is never killed or counted as a survivor."""

from __future__ import annotations

import subprocess
import sys
import time

from core.process_control import alive, descendants, identify, reap, start_time


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_identify_names_each_running_process_by_its_start_time_and_skips_the_gone() -> None:
    proc = _sleeper()
    try:
        ids = identify([proc.pid, 2 ** 22 + 12345])  # the second is above any pid_max: no such process
        assert list(ids) == [proc.pid] and ids[proc.pid] == start_time(proc.pid)
        assert alive(proc.pid) and alive(proc.pid, ids[proc.pid])
        # the same pid with another start time is another process: the one remembered is not running
        assert not alive(proc.pid, ids[proc.pid] - 1)
    finally:
        proc.kill()
        proc.wait()
    assert not alive(proc.pid, ids[proc.pid]) and start_time(proc.pid) is None


def test_reap_kills_the_process_it_remembers_and_leaves_a_pid_held_by_another_alone() -> None:
    remembered, other = _sleeper(), _sleeper()
    try:
        ids = identify([remembered.pid])
        # ``other`` stands for a process that got a remembered pid after its first holder had gone: same pid
        # (here: its own), another start time.
        impostor = {other.pid: start_time(other.pid) + 1}
        started = time.monotonic()
        reap(ids | impostor, grace_s=0.5)
        assert remembered.wait(10) == -9  # SIGKILLed
        assert other.poll() is None, "a process the caller never saw was killed"
        assert time.monotonic() - started < 10
    finally:
        for p in (remembered, other):
            p.kill()
            p.wait()


def test_descendants_finds_grandchildren() -> None:
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while len(descendants(parent.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = identify(descendants(parent.pid))
        assert len(tree) == 1
        parent.kill()
        parent.wait()
        reap(tree, grace_s=0.2)  # an orphaned grandchild, found through what was remembered
        assert not any(alive(p, t) for p, t in tree.items())
    finally:
        parent.kill()
        parent.wait()
