"""Security basics: Kafka client settings pass through from ``NIGHTJAR_KAFKA_*`` to every client, secrets never
reach logs, progress rows, the lake or error messages; the dashboard listens on loopback unless told otherwise; the
lake and checkpoints are owner-only."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.config import Settings, kafka_client_overrides, settings_from_env
from ingest.embedded_broker import free_port, port_is_open

REPO = Path(__file__).resolve().parent.parent
SECRET = "Nj-s3cr3t-7f1c2a"  # unlikely to appear anywhere by chance
# Tansu speaks plaintext: SASL credentials without security.protocol=SASL_* are passed to librdkafka (which accepts
# and ignores them), so a full run carries the secret through every client without needing a SASL broker.
SECRET_ENV = {"NIGHTJAR_KAFKA_SASL_MECHANISM": "PLAIN", "NIGHTJAR_KAFKA_SASL_USERNAME": "nightjar",
              "NIGHTJAR_KAFKA_SASL_PASSWORD": SECRET}


def nightjar(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nightjar.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_nightjar_kafka_variables_become_librdkafka_settings_of_every_client():
    env = {**SECRET_ENV, "NIGHTJAR_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "NIGHTJAR_KAFKA_SSL_CA_LOCATION": "/ca.pem",
           "NIGHTJAR_LAKE": "/tmp/x"}
    assert kafka_client_overrides(env) == {"sasl.mechanism": "PLAIN", "sasl.username": "nightjar",
                                           "sasl.password": SECRET, "security.protocol": "SASL_SSL",
                                           "ssl.ca.location": "/ca.pem"}
    settings = settings_from_env(env, bootstrap="k:9093")
    from alerts.alert_sink import producer_config
    from ingest.kafka_source import KafkaOptions, read_kafka  # noqa: F401 - read_kafka forwards kafka_config()

    assert producer_config(settings)["sasl.password"] == SECRET
    assert producer_config(settings)["security.protocol"] == "SASL_SSL"
    # The Spark source gets them as kafka.* options and hands them to its consumers on the executors.
    options = {f"kafka.{k}": v for k, v in settings.kafka_config().items()} | {"subscribe": "t"}
    consumer = KafkaOptions.parse(options).consumer_config()
    assert consumer["sasl.password"] == SECRET and consumer["bootstrap.servers"] == "k:9093"


def test_the_secret_is_not_in_the_settings_repr():
    """Settings are logged and end up in tracebacks; their repr must not carry the credentials."""
    settings = Settings(kafka_overrides={"sasl.password": SECRET, "sasl.mechanism": "PLAIN"})
    assert SECRET not in repr(settings) and SECRET not in str(settings)
    assert "PLAIN" in repr(settings)  # what is not secret stays visible for debugging


@pytest.mark.slow
def test_a_client_that_cannot_authenticate_fails_in_one_line_without_the_secret(broker, tmp_path):
    """SASL switched on against a broker that will not authenticate: the settings reached librdkafka (else it would
    connect), and the error names the broker, not the credentials."""
    env = {**SECRET_ENV, "NIGHTJAR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}
    for args in (["alerts", "tail", "--no-follow", "--bootstrap", broker.bootstrap],
                 ["generate", "--events", "100", "--bootstrap", broker.bootstrap, "--lake", str(tmp_path / "lake")]):
        done = nightjar(*args, env=env, timeout=180)
        assert done.returncode != 0, args
        assert "cannot reach Kafka" in done.stderr, done.stderr[-400:]
        assert SECRET not in done.stdout + done.stderr


@pytest.mark.slow
def test_dashboard_listens_on_loopback_only_by_default(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nightjar.cli", "dashboard", "--lake", str(tmp_path / "lake"),
                             "--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not port_is_open("127.0.0.1", port):
            assert proc.poll() is None and time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.3)
        assert _listen_addresses(port) == {"127.0.0.1"}
    finally:
        proc.terminate()
        proc.wait(60)


def _listen_addresses(port: int) -> set[str]:
    """Local addresses of the sockets LISTENing on ``port`` (from /proc/net/tcp and tcp6)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, _remote, state = line.split()[1:4]
            addr, hexport = local.split(":")
            if state != "0A" or int(hexport, 16) != port:
                continue
            if len(addr) == 8:
                out.add(".".join(str(b) for b in reversed(bytes.fromhex(addr))))
            else:
                out.add("::1" if addr == "00000000000000000000000001000000" else f"ipv6:{addr}")
    return out


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_lake_is_owner_only(broker, tmp_path):
    lake = tmp_path / "lake"
    done = nightjar("generate", "--events", "500", "--bootstrap", broker.bootstrap, "--lake", str(lake), "--quiet")
    assert done.returncode == 0, done.stderr[-400:]
    assert _mode(lake) == 0o700
    for p in lake.rglob("*"):
        assert _mode(p) & 0o077 == 0, f"{p} is readable by others: {oct(_mode(p))}"


@pytest.mark.slow
def test_a_run_with_credentials_keeps_them_out_of_logs_progress_and_lake(broker, tmp_path):
    from core.config import TOPIC_ALERTS
    from ingest.embedded_broker import ensure_topics

    ensure_topics(Settings(bootstrap=broker.bootstrap), (TOPIC_ALERTS,))
    lake = tmp_path / "lake"
    env = dict(SECRET_ENV)
    gen = nightjar("generate", "--events", "600", "--seed", "3", "--bootstrap", broker.bootstrap,
                   "--lake", str(lake), env=env)
    # The ingest query (Kafka source on the executors, Delta sinks, progress rows): the whole topology would not fit
    # a test's time on a shared 2-core machine; the alert producer's settings are checked above.
    run = nightjar("run", "--available-now", "--query", "ingest", "--bootstrap", broker.bootstrap, "--lake", str(lake),
                   "-v", env=env)
    tail = nightjar("alerts", "tail", "--no-follow", "--from-beginning", "--bootstrap", broker.bootstrap, env=env)
    for name, done in (("generate", gen), ("run", run), ("alerts tail", tail)):
        assert done.returncode == 0, f"{name}: {done.stderr[-600:]}"
        assert SECRET not in done.stdout + done.stderr, f"{name} printed the secret"
    from core.lake import row_count

    assert row_count(lake, "events") > 0 and row_count(lake, "pipeline_progress") > 0
    # Every byte the run left: Delta tables (pipeline_progress included), checkpoints, Spark's logs under _logs.
    assert (lake / "_logs").is_dir() and any((lake / "_logs").iterdir())
    assert files_containing(lake, SECRET.encode()) == []
    # Owner-only, checkpoints included.
    assert _mode(lake) == 0o700 and _mode(lake / "_checkpoints") & 0o077 == 0
    assert [p for p in lake.rglob("*") if _mode(p) & 0o077] == []


def test_a_relative_lake_is_made_absolute_for_executors(tmp_path, monkeypatch):
    # Executors on a cluster run in their own working directories: a relative lake path would point elsewhere there.
    monkeypatch.chdir(tmp_path)
    assert settings_from_env({}).lake == tmp_path / "lake"
    assert settings_from_env({"NIGHTJAR_LAKE": "data/lake"}).lake == tmp_path / "data" / "lake"
    assert settings_from_env({}, lake="other").lake == tmp_path / "other"
    assert settings_from_env({}, lake="/srv/lake").lake == Path("/srv/lake")
