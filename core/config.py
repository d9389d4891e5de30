"""One typed place for Nightjar's configuration.

Every knob has a default; the CLI and the environment (``NIGHTJAR_*``) override it. Modules take a
:class:`Settings` (or the few fields they need) instead of reading strings from the environment
themselves, so there is exactly one spelling of each name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.durations import parse_duration, spark_interval
from core.errors import UserError

# Topic names are a contract with producers and the SOC (docs/architecture.md): keep them here only.
TOPIC_RAW_SYSLOG = "nightjar.raw.syslog"
TOPIC_RAW_ZEEK = "nightjar.raw.zeek"
# Windows events as JSON, one per message: NXLog/Winlogbeat-style flat keys or the evtx rendering (ingest/sources/windows)
TOPIC_RAW_WINDOWS = "nightjar.raw.windows"
TOPIC_ALERTS = "nightjar.alerts"
RAW_TOPICS: tuple[str, ...] = (TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK, TOPIC_RAW_WINDOWS)
ALL_TOPICS: tuple[str, ...] = (*RAW_TOPICS, TOPIC_ALERTS)

# Table names under the lake directory (a contract with the dashboard and the checks).
TABLE_BRONZE = "bronze"
TABLE_EVENTS = "events"
TABLE_QUARANTINE = "quarantine"
TABLE_DHCP_SESSIONS = "dhcp_sessions"
TABLE_ALERTS = "alerts"
TABLE_ASSETS = "assets"
TABLE_USERS = "users"
TABLE_NETWORKS = "networks"
TABLE_IOCS = "iocs"
TABLE_GROUND_TRUTH = "ground_truth"
TABLE_GROUND_TRUTH_NEGATIVES = "ground_truth_negatives"  # the generator's hard negatives (must not alert)
TABLE_BACKTEST_ALERTS = "backtest_alerts"  # `nightjar backtest --write`; never the live alerts
TABLE_PIPELINE_PROGRESS = "pipeline_progress"
TABLE_ALERT_TRIAGE = "alert_triage"  # written by the dashboard only: analysts' triage actions (append-only)
TABLE_SAVED_HUNTS = "saved_hunts"  # written by the dashboard only: shared saved hunts
TABLE_AUTH_SESSIONS = "auth_sessions"  # enrich/auth_sessions.py: each SSH login joined with its Zeek conn/ssh records
KNOWN_TABLES: tuple[str, ...] = (
    TABLE_BRONZE,
    TABLE_EVENTS,
    TABLE_QUARANTINE,
    TABLE_DHCP_SESSIONS,
    TABLE_AUTH_SESSIONS,
    TABLE_ALERTS,
    TABLE_ASSETS,
    TABLE_USERS,
    TABLE_NETWORKS,
    TABLE_IOCS,
    TABLE_GROUND_TRUTH,
    TABLE_PIPELINE_PROGRESS,
)

# Columns analysts filter by, per table: `nightjar maintain` Z-orders the table's files on them.
ZORDER_COLUMNS: dict[str, tuple[str, ...]] = {
    TABLE_BRONZE: ("topic", "timestamp"),
    TABLE_PIPELINE_PROGRESS: ("query_name", "timestamp"),
}
# Files no longer referenced by a table are deleted by `nightjar maintain` after this many hours (Delta's
# default). Shorter risks breaking readers of older versions and time travel.
VACUUM_RETENTION_HOURS = 168

# ML (alerts/ml/): model artifacts live under <lake>/models/<name>/<version>/ (joblib + metadata.json).
MODELS_DIR = "models"
ML_BEHAVIOUR_MODEL = "behaviour"  # alerts carry rule_id "ml.<model name>"
ML_DOMAIN_MODEL = "domain"
ML_MODELS: tuple[str, ...] = (ML_BEHAVIOUR_MODEL, ML_DOMAIN_MODEL)
# How late an event may arrive and still count in its entity-hour (the scoring query's watermark).
DEFAULT_ML_WATERMARK = "10 minutes"
# How often the scoring query runs a micro-batch when live (never more often than the pipeline's --trigger). The
# models judge hour-long windows: a minute of delay costs their alerts nothing, while a 1-s trigger made the query
# compete with ingest and the rules for the cores (docs/ml.md, "Cost in the live pipeline").
DEFAULT_ML_TRIGGER = "60 seconds"

# auth_sessions (enrich/auth_sessions.py): how late a login or a Zeek record may arrive (event time) and still be
# joined; with the join's ±2 minutes this bounds how long either side is held in state.
DEFAULT_AUTH_SESSIONS_WATERMARK = "2 minutes"
# How often the auth_sessions query runs a micro-batch when live (never more often than the pipeline's --trigger).
# No rule reads the table (it serves hunting and the dashboard), and each batch costs 3-4 s of CPU whatever its
# size: at a 1-s trigger its tasks held both cores while ingest batches waited, and live ingest batches went ~6 ->
# ~3.9 s with this trigger (docs/performance.md, "Queries off the alert path").
DEFAULT_AUTH_SESSIONS_TRIGGER = "30 seconds"
# How often the detection queries (windowed rules, rules with their own query) look for new events commits when
# live, when --trigger is slower. They run a batch only when the ingest query has committed one, which a 1-s trigger
# noticed 0.46 s later on average (a tick of its grid), the poll 0.10 s; looking costs one Delta log check
# (docs/performance.md, "Windowed query").
DETECTION_POLL = "250 milliseconds"
# Detection (alerts/): how late an event may arrive (event time) and still count in its windows.
DEFAULT_DETECTION_WATERMARK = "10 minutes"
# Ingest: the most records one micro-batch takes from Kafka. Live, batches are as large as what arrived during the
# previous one (small when keeping up, large when catching up after a backlog); this only bounds memory.
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 50_000
# The driver JVM's heap (in local mode also the executors'). Spark's default of 1g ran out while planning the
# ingest query's wide ECS expressions and spilled a large micro-batch's persisted rows to disk.
DEFAULT_DRIVER_MEMORY = "3g"
# How long an event whose DHCP lease is not known yet waits for it (processing time), see enrich/dhcp_sessions.py.
DEFAULT_LEASE_HOLD_S = 60.0
# How long a rule's query may stay failed (not one batch completed since) before the SOC gets a health alert. Under
# CPU load a query restart can fail at start ("Python worker failed to connect back": Spark waits a fixed 10 s for a
# new Python process) and recover on the next attempt within seconds: a transient, recorded in pipeline_progress
# and the log, not an outage. Two minutes cover the supervisor's first backoff steps (1+2+4+8+16 s) and their starts.
DEFAULT_HEALTH_GRACE_S = 120.0
# How long a stop waits, from the signal, for running micro-batches to finish before interrupting them. The stop then
# needs a few seconds more (progress flush, Spark's own stop): 15 s keeps the whole stop within the 30 s that the docs
# ask service managers to give before SIGKILL (`nightjar demo` gives its pipeline 45 s).
DEFAULT_STOP_WAIT_S = 15.0

# Parsing (ingest/sources/record_parser.py). A record larger than this is quarantined unparsed: it bounds the regex and
# JSON work one record can cost (RFC 5424 asks receivers to accept 2 KiB, should 8 KiB; Zeek lines are < 4 KiB).
DEFAULT_MAX_RECORD_BYTES = 64 * 1024

ENV_BOOTSTRAP = "NIGHTJAR_BOOTSTRAP"
ENV_LAKE = "NIGHTJAR_LAKE"
ENV_SPARK_MASTER = "NIGHTJAR_SPARK_MASTER"
# The driver JVM's heap (Spark's spelling: 3g, 8g). Local runs execute in it too; a SigmaHQ checkout's thousands of
# rules need more than the default (docs/deployment.md).
ENV_DRIVER_MEMORY = "NIGHTJAR_DRIVER_MEMORY"
# Rule files/directories (os.pathsep-separated): where the dashboard's rule lab saves rules; `nightjar run --rules`
# names the directories the pipeline re-reads.
ENV_RULES = "NIGHTJAR_RULES"
# "0"/"false"/"no": the built-in rule pack does not run beside NIGHTJAR_RULES (`--no-builtin-rules`).
ENV_BUILTIN_RULES = "NIGHTJAR_BUILTIN_RULES"
ENV_ML_TRIGGER = "NIGHTJAR_ML_TRIGGER"  # the scoring query's live trigger, any core/durations.py spelling
ENV_AUTH_SESSIONS_TRIGGER = "NIGHTJAR_AUTH_SESSIONS_TRIGGER"  # the auth_sessions query's live trigger, likewise
ENV_HEALTH_GRACE = "NIGHTJAR_HEALTH_GRACE"  # Settings.health_grace_s, any core/durations.py spelling
ENV_KAFKA_PREFIX = "NIGHTJAR_KAFKA_"  # NIGHTJAR_KAFKA_SASL_MECHANISM=PLAIN -> sasl.mechanism=PLAIN

DEFAULT_BROKER_PORT = 9092
DEFAULT_DASHBOARD_PORT = 8501
ENV_DASHBOARD_REFRESH_S = "NIGHTJAR_DASHBOARD_REFRESH_S"  # page refresh interval (seconds)
# The most a hunt's result may hold (Arrow bytes of the rows fetched; the rows are capped too, dashboard/hunt.py).
# Streamlit refuses a message over 200 MB (`SELECT repeat('x', 30000000) FROM range(8)` showed its raw
# MessageSizeError and left the dashboard at 635 MB); every session keeps its last result, and the CSV export copies
# it: well under that.
DEFAULT_HUNT_MAX_BYTES = 64 * 1024 * 1024
ENV_HUNT_MAX_BYTES = "NIGHTJAR_HUNT_MAX_BYTES"
# The analyst's identity (dashboard/identity.py): the request header a login proxy sets with the user's name, honoured
# only when named here; and, on a dashboard serving loopback alone without a login, the local name (else the OS user).
ENV_DASHBOARD_USER_HEADER = "NIGHTJAR_DASHBOARD_USER_HEADER"
ENV_ANALYST = "NIGHTJAR_ANALYST"


# librdkafka settings whose values are credentials: never printed (Settings' repr, logs, error messages). Spark's
# own redaction (core/spark_session.py) uses the same words for the Kafka source's options.
SECRET_SETTING_WORDS = ("password", "secret", "token", "jaas", "sasl.username", "ssl.key.pem", "private")
# Files and directories the `nightjar` program creates (lake, checkpoints, logs) are its owner's only: security logs
# and alerts are sensitive, and a shared machine's other users have no business reading them.
OWNER_ONLY_UMASK = 0o077


def is_secret_setting(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_SETTING_WORDS)


class KafkaOverrides(dict):
    """librdkafka settings from ``NIGHTJAR_KAFKA_*``; a plain dict whose repr hides the credentials."""

    def __repr__(self) -> str:
        return repr({k: "***" if is_secret_setting(k) else v for k, v in self.items()})


def kafka_client_overrides(environ: dict[str, str] | None = None) -> KafkaOverrides:
    """librdkafka settings passed through from ``NIGHTJAR_KAFKA_*`` variables (SASL, TLS, …).

    ``NIGHTJAR_KAFKA_SECURITY_PROTOCOL=SASL_SSL`` becomes ``security.protocol=SASL_SSL``.
    """
    env = os.environ if environ is None else environ
    out = KafkaOverrides()
    for name, value in env.items():
        if name.startswith(ENV_KAFKA_PREFIX):
            out[name[len(ENV_KAFKA_PREFIX):].lower().replace("_", ".")] = value
    return out


@dataclass(frozen=True)
class KafkaTuning:
    """Client settings measured to suit Tansu and Apache Kafka alike (docs/architecture.md, decision 3)."""

    # Tansu waits the full fetch.wait.max.ms at a partition's end: keep it short.
    fetch_wait_max_ms: int = 25
    # How long an offset lookup may take before the broker is declared unreachable.
    metadata_timeout_s: float = 10.0
    # How long the start-up check (ingest/embedded_broker.check_reachable) waits for a TCP connection to be accepted.
    connect_timeout_s: float = 3.0
    topic_partitions: int = 4


@dataclass(frozen=True)
class Settings:
    """Runtime configuration for every Nightjar command.

    ``bootstrap`` of ``None`` means "the embedded broker" (started by ``nightjar demo`` or
    ``nightjar broker``, listening on ``127.0.0.1:DEFAULT_BROKER_PORT``).
    """

    bootstrap: str | None = None
    lake: Path = Path("lake")
    spark_master: str = "local[2]"
    shuffle_partitions: int = 4
    driver_memory: str = DEFAULT_DRIVER_MEMORY
    max_offsets_per_trigger: int | None = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    fail_on_data_loss: bool = True
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    detection_watermark: str = DEFAULT_DETECTION_WATERMARK
    lease_hold_s: float = DEFAULT_LEASE_HOLD_S
    health_grace_s: float = DEFAULT_HEALTH_GRACE_S  # a rule down this long (or for good) raises a health alert
    stop_wait_s: float = DEFAULT_STOP_WAIT_S  # a stop waits this long for running micro-batches (core.batch_gate)
    kafka: KafkaTuning = field(default_factory=KafkaTuning)
    kafka_overrides: dict[str, str] = field(default_factory=KafkaOverrides)
    rules: tuple[Path, ...] = ()  # detection rule files/directories, run beside the built-in pack
    builtin_rules: bool = True  # False: only `rules` run (alerts.rule_sources)
    upkeep_interval_s: float = 600.0  # `nightjar run`'s background compaction/vacuum (nightjar/upkeep.py); 0: off
    ml_trigger: str = DEFAULT_ML_TRIGGER  # Spark interval text; settings_from_env normalizes any duration spelling
    auth_sessions_trigger: str = DEFAULT_AUTH_SESSIONS_TRIGGER  # likewise
    hunt_max_bytes: int = DEFAULT_HUNT_MAX_BYTES  # the dashboard's hunt result cap, bytes
    dashboard_user_header: str = ""  # e.g. X-Forwarded-User; '' honours no header
    analyst: str = ""  # the local analyst name on a loopback-only dashboard without a login; '' is the OS user

    def __post_init__(self) -> None:
        # Whatever mapping was given, its repr must hide the credentials: Settings are logged and end up in tracebacks.
        object.__setattr__(self, "kafka_overrides", KafkaOverrides(self.kafka_overrides))

    @property
    def bootstrap_servers(self) -> str:
        return self.bootstrap or f"127.0.0.1:{DEFAULT_BROKER_PORT}"

    @property
    def checkpoint_root(self) -> Path:
        # Checkpoints live beside the tables so that one directory is the whole durable state.
        return self.lake / "_checkpoints"

    def table_path(self, name: str) -> Path:
        return self.lake / name

    def checkpoint(self, query_name: str) -> Path:
        return self.checkpoint_root / query_name

    def kafka_config(self) -> dict[str, str]:
        """Base librdkafka configuration for producers, consumers and admin clients."""
        conf = {"bootstrap.servers": self.bootstrap_servers}
        conf.update(self.kafka_overrides)
        return KafkaOverrides(conf)

    def with_(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]


def settings_from_env(environ: dict[str, str] | None = None, **overrides: object) -> Settings:
    """Settings from defaults, then ``NIGHTJAR_*`` variables, then explicit (CLI) overrides.

    An override of ``None`` means "not given" and leaves the lower layer in place.
    """
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    if env.get(ENV_BOOTSTRAP):
        values["bootstrap"] = env[ENV_BOOTSTRAP]
    if env.get(ENV_LAKE):
        values["lake"] = Path(env[ENV_LAKE])
    if env.get(ENV_SPARK_MASTER):
        values["spark_master"] = env[ENV_SPARK_MASTER]
    if env.get(ENV_DRIVER_MEMORY):
        values["driver_memory"] = jvm_memory(env[ENV_DRIVER_MEMORY], ENV_DRIVER_MEMORY)
    if env.get(ENV_RULES):
        values["rules"] = tuple(Path(p) for p in env[ENV_RULES].split(os.pathsep) if p)
    if env.get(ENV_BUILTIN_RULES):
        values["builtin_rules"] = env_flag(env[ENV_BUILTIN_RULES], ENV_BUILTIN_RULES)
    for key, name in _TRIGGER_SETTINGS.items():
        if env.get(name):
            values[key] = env[name]
    if env.get(ENV_HUNT_MAX_BYTES):
        values["hunt_max_bytes"] = byte_count(env[ENV_HUNT_MAX_BYTES], ENV_HUNT_MAX_BYTES)
    if env.get(ENV_DASHBOARD_USER_HEADER):
        values["dashboard_user_header"] = header_name(env[ENV_DASHBOARD_USER_HEADER], ENV_DASHBOARD_USER_HEADER)
    if env.get(ENV_ANALYST):
        values["analyst"] = env[ENV_ANALYST].strip()
    if env.get(ENV_HEALTH_GRACE):
        values["health_grace_s"] = _health_grace(env[ENV_HEALTH_GRACE])
    values["kafka_overrides"] = kafka_client_overrides(env)
    for key, value in overrides.items():
        if value is not None:
            values[key] = Path(value) if key == "lake" else value
    # Absolute from here on: on a cluster the lake path travels to executors, whose working directory is not ours.
    values["lake"] = Path(values.get("lake", Settings.lake)).absolute()  # type: ignore[arg-type]
    for key, name in _TRIGGER_SETTINGS.items():
        if key in values:
            values[key] = trigger_interval(values[key], name)  # type: ignore[arg-type]
    return Settings(**values)  # type: ignore[arg-type]


def _health_grace(text: str) -> float:
    """``NIGHTJAR_HEALTH_GRACE`` in seconds (0: every failure raises a health alert at once); a UserError otherwise."""
    try:
        return parse_duration(text, f"{ENV_HEALTH_GRACE} (how long a failed rule may stay down before a health alert)")
    except ValueError as exc:
        raise UserError(str(exc), exit_code=2) from None


# The live triggers of the queries off the alert path: Settings field -> its environment variable.
_TRIGGER_SETTINGS = {"ml_trigger": ENV_ML_TRIGGER, "auth_sessions_trigger": ENV_AUTH_SESSIONS_TRIGGER}
_TRIGGER_WHAT = {ENV_ML_TRIGGER: "the ML scoring trigger", ENV_AUTH_SESSIONS_TRIGGER: "the auth_sessions trigger"}


def trigger_interval(text: str | float, env_name: str = ENV_ML_TRIGGER) -> str:
    """A query's live trigger (``30s``, ``1m``, ``2 minutes``, …) as Spark's interval text; a UserError naming
    ``env_name`` otherwise."""
    try:
        seconds = parse_duration(text, f"{env_name} ({_TRIGGER_WHAT.get(env_name, 'a trigger')})")
    except ValueError as exc:
        raise UserError(str(exc), exit_code=2) from None
    if seconds <= 0:
        raise UserError(f"{env_name} {text!r} must be longer than zero", exit_code=2)
    return spark_interval(seconds)


def jvm_memory(text: str, env_name: str) -> str:
    """A JVM memory size (``3g``, ``8192m``) from ``env_name``'s value; a UserError naming the variable otherwise."""
    value = str(text).strip().lower()
    if not value[:-1].isdigit() or value[-1] not in "kmgt" or int(value[:-1]) <= 0:
        raise UserError(f"{env_name} {text!r} must be a JVM memory size such as 3g or 8192m", exit_code=2)
    return value


def env_flag(text: str, env_name: str) -> bool:
    """A yes/no value (``1/true/yes/on`` or ``0/false/no/off``) from ``env_name``; a UserError naming it otherwise."""
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise UserError(f"{env_name} {text!r} must be 1/true/yes/on or 0/false/no/off", exit_code=2)


def byte_count(text: str, env_name: str) -> int:
    """A positive whole number of bytes from ``env_name``'s value; a UserError naming the variable otherwise."""
    try:
        value = int(str(text).strip().replace("_", ""))
    except ValueError:
        value = 0
    if value <= 0:
        raise UserError(f"{env_name} {text!r} must be a whole number of bytes above zero (67108864 is 64 MiB)",
                        exit_code=2)
    return value


def header_name(text: str, what: str) -> str:
    """An HTTP header name (letters, digits, '-'); a UserError naming ``what`` otherwise."""
    import re

    name = text.strip()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*", name):
        raise UserError(f"{what} {text!r} is not an HTTP header name (letters, digits and '-', e.g. X-Forwarded-User)",
                        exit_code=2)
    return name
