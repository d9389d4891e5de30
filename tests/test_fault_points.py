"""core/fault_points.py without a pipeline: the spec check, the kill at the n-th pass, and the guard that keeps an armed
point from killing a session a nightjar command does not lead. The chaos scenarios (tests/test_chaos.py, slow) use
these points on real pipelines; these checks keep the module in the quick tier."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.fault_points import ENV_FAULT, ENV_FAULT_LOG, POINTS, _parse
from tests.conftest import REPO

# Passes batch.end twice, with a grandchild sleeping in the same session (off the pipes, which would otherwise stay
# open after the script ends); prints before each pass.
_SCRIPT = textwrap.dedent("""
    import os, subprocess, time
    from core.fault_points import fault_point
    sleeper = subprocess.Popen([os.environ["SLEEPER_PYTHON"], "-c", "import time; time.sleep(60)"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    print("sleeper", sleeper.pid, flush=True)
    fault_point("kafka.read")
    print("pass 1", flush=True)
    fault_point("batch.end")
    print("pass 2", flush=True)
    fault_point("batch.end")
    print("survived", flush=True)
    sleeper.kill()
""")


def _run_as(argv0: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """The script in a session of its own led by a process named ``argv0`` (what the guard reads: the leader's whole
    command line, so nothing else on it may say "nightjar" — the checkout's path, where the interpreter lives, may),
    armed at batch.end:2. Its own session: a kill can never reach the test run."""
    env = {**os.environ, ENV_FAULT: "batch.end:2", ENV_FAULT_LOG: str(tmp_path / "faults.log"),
           "SLEEPER_PYTHON": sys.executable}
    assert "nightjar" not in _SCRIPT
    return subprocess.run([argv0, "-c", _SCRIPT], executable=sys.executable, cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, start_new_session=True)


def _gone_soon(pid: int, within_s: float = 10.0) -> bool:
    """True once ``pid`` is dead: a SIGKILLed process on a loaded machine still shows as running until it is
    scheduled to die (the kill itself is not in doubt, only when the kernel gets to it)."""
    import time

    deadline = time.monotonic() + within_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.parametrize("spec", ["batch.end", "batch.end:0", "batch.end:x", "no.such.point:1"])
def test_a_bad_spec_names_the_form_and_every_point(spec: str) -> None:
    with pytest.raises(ValueError, match="expected <point>:<n>") as caught:
        _parse(spec)
    assert all(point in str(caught.value) for point in POINTS)


def test_unset_is_unarmed_and_a_good_spec_is_point_and_count() -> None:
    assert _parse(None) is None and _parse("") is None
    assert _parse("delta.after_commit:3") == ("delta.after_commit", 3)


def test_the_nth_pass_kills_the_whole_session_and_records_the_point(tmp_path: Path) -> None:
    done = _run_as("nightjar-run", tmp_path)
    assert done.returncode == -9, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "pass 2" in done.stdout and "survived" not in done.stdout  # not at the first pass, at the second
    sleeper = int(done.stdout.split()[1])
    assert _gone_soon(sleeper), "the session's other processes are killed too"
    assert (tmp_path / "faults.log").read_text().split()[:2] == ["batch.end", "2"]


def test_an_armed_point_refuses_to_kill_a_session_no_nightjar_command_leads(tmp_path: Path) -> None:
    done = _run_as("python-under-test", tmp_path)
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "refusing to kill it" in done.stderr and "survived" not in done.stdout
    assert not (tmp_path / "faults.log").exists()
    sleeper = int(done.stdout.split()[1])
    if _alive(sleeper):  # the script died before it could kill its sleeper: clean up
        os.kill(sleeper, 9)
