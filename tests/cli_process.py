"""Test-side helper: run the ``nightjar`` CLI in a subprocess as a user would, and never leave it running.

Benchmarks start their own broker and children; on a timeout (or an interrupt) the CLI gets SIGTERM first so it
stops them itself, and SIGKILL only if that does not end it within two minutes.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_SCRIPT = Path(sys.executable).parent / "nightjar"
NIGHTJAR = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "nightjar.cli"]


def run_nightjar(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``nightjar ARGS`` to completion (stdout and stderr captured as text)."""
    with subprocess.Popen([*NIGHTJAR, *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except BaseException:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
