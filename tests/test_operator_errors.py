"""Operator mistakes get one line and the right exit status, and change nothing: a mistyped lake path is not made
into a new lake, and a bad or unreachable Kafka address says which of the two it is and why.

Every case runs the real ``nightjar`` program in a subprocess (tests/cli_process.py), as an operator would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_process import REPO, run_nightjar


def _error_lines(stderr: str) -> list[str]:
    """stderr without the log lines a command prints before it fails (those carry `` INFO ``)."""
    return [ln for ln in stderr.splitlines() if ln.strip() and " INFO " not in ln]


# --- a lake path that does not exist ---------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["run", "--available-now"], ["run"], ["cluster", "up"]])
def test_a_missing_lake_is_refused_and_not_created(tmp_path, command):
    lake = tmp_path / "a" / "b"
    done = run_nightjar([*command, "--lake", str(lake), "--bootstrap", "127.0.0.1:1"], timeout=120)
    assert done.returncode == 2, done.stderr
    lines = _error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert f"lake directory {lake} does not exist" in lines[0] and "--create" in lines[0]
    assert not (tmp_path / "a").exists(), "a refused lake path must be left as it was"


def test_a_missing_lake_from_the_environment_is_refused(tmp_path):
    lake = tmp_path / "typo-lake"
    env = {**os.environ, "NIGHTJAR_LAKE": str(lake)}
    done = subprocess.run([sys.executable, "-m", "nightjar.cli", "run", "--available-now", "--bootstrap",
                           "127.0.0.1:1"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "NIGHTJAR_LAKE" in done.stderr and not lake.exists()


def test_create_starts_a_new_lake(tmp_path):
    """With --create the lake check passes and the lake is made; the run then stops at the next check (no broker
    listens on a free port), before any Spark starts."""
    from ingest.embedded_broker import free_port

    lake = tmp_path / "new" / "lake"
    done = run_nightjar(["run", "--available-now", "--create", "--lake", str(lake),
                         "--bootstrap", f"127.0.0.1:{free_port()}"], timeout=120)
    assert done.returncode == 1, done.stderr
    assert "cannot reach Kafka" in done.stderr and "does not exist" not in done.stderr
    assert lake.is_dir()


def test_the_default_lake_is_created_without_create(tmp_path):
    """``./lake`` (no --lake, no NIGHTJAR_LAKE) is a checkout's first run: it is created as before."""
    from ingest.embedded_broker import free_port

    env = {k: v for k, v in os.environ.items() if k != "NIGHTJAR_LAKE"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "nightjar.cli", "run", "--available-now",
                           "--bootstrap", f"127.0.0.1:{free_port()}"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "cannot reach Kafka" in done.stderr
    assert (tmp_path / "lake").is_dir()


def test_generate_may_start_a_new_lake(tmp_path, broker):
    """The contract's ``generate --bootstrap B --lake L`` seeds a fresh lake (its reference tables): no --create."""
    from core.lake import is_delta_table

    lake = tmp_path / "fresh" / "lake"
    done = run_nightjar(["generate", "--events", "50", "--seed", "1", "--bootstrap", broker.bootstrap,
                         "--lake", str(lake), "--quiet"], timeout=300)
    assert done.returncode == 0, done.stderr
    assert is_delta_table(lake / "assets")


def test_an_existing_lake_needs_no_create(tmp_path: Path):
    lake = tmp_path / "lake"
    lake.mkdir()
    from ingest.embedded_broker import free_port

    done = run_nightjar(["run", "--available-now", "--lake", str(lake), "--bootstrap", f"127.0.0.1:{free_port()}"],
                        timeout=120)
    assert done.returncode == 1 and "cannot reach Kafka" in done.stderr, done.stderr


# --- a Kafka address that is wrong or does not answer ----------------------------------------------------------------

def _run_against(bootstrap: str) -> subprocess.CompletedProcess:
    return run_nightjar(["run", "--available-now", "--bootstrap", bootstrap], timeout=120)


@pytest.mark.parametrize(("bootstrap", "expected"), [
    ("notahost", "expected HOST:PORT"),
    ("127.0.0.1:ninety", "expected HOST:PORT"),
    ("notahost:99999", "port 99999 is out of range (1-65535)"),
    ("127.0.0.1:0", "port 0 is out of range"),
])
def test_a_malformed_bootstrap_address_is_an_argument_error(bootstrap, expected):
    done = _run_against(bootstrap)
    assert done.returncode == 2, done.stderr
    lines = _error_lines(done.stderr)
    assert len(lines) == 1 and f"bad bootstrap address {bootstrap!r}" in lines[0] and expected in lines[0], lines


def test_a_host_name_that_does_not_resolve_is_named_as_such():
    done = _run_against("nightjar-no-such-host.invalid:9092")
    assert done.returncode == 1, done.stderr
    lines = _error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert "'nightjar-no-such-host.invalid' does not resolve" in lines[0] and "refused" not in lines[0]


def test_a_refused_connection_is_named_as_such():
    from ingest.embedded_broker import free_port

    port = free_port()
    done = _run_against(f"127.0.0.1:{port}")
    assert done.returncode == 1, done.stderr
    lines = _error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert f"cannot reach Kafka at 127.0.0.1:{port}: connection refused" in lines[0]


def test_a_listener_that_never_accepts_times_out_and_says_so():
    """A socket listening with a backlog of 0 whose one queue slot is taken: further connections get no answer (the
    kernel drops their SYNs), which is what a host behind a dropping firewall looks like."""
    import socket

    with socket.socket() as server, socket.socket() as occupant:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        occupant.connect(server.getsockname())  # fills the accept queue; nothing ever accepts
        done = _run_against(f"127.0.0.1:{server.getsockname()[1]}")
    assert done.returncode == 1, done.stderr
    lines = _error_lines(done.stderr)
    assert len(lines) == 1, done.stderr
    assert "no answer within 3 s" in lines[0] and "refused" not in lines[0]
