"""``auth_sessions``: every SSH login and Windows network logon joined with the network's view of the same
connection — a stream-stream join.

A host log says *who* logged in (sshd ``Accepted password for bob from 10.10.0.23 port 50022``); Zeek says what the
connection did (``conn``: duration, bytes each way, ``community_id``; ``ssh``: its own verdict ``auth_success``, the
client software). Neither alone answers "how long was bob's session and how much did it move?". One login is one
TCP connection, so the join is one-to-one: the login's client address and port, and the server's address (from the
``assets`` table: sshd does not log the address it answered on), equal Zeek's ``id.orig_h``/``id.orig_p`` and
``id.resp_h``, and the Zeek record's time (the connection's start) lies within ±:data:`JOIN_RANGE` of the login.

Windows network logons are the same shape: a 4624 of logon type 3 (Network: an SMB share, 445) or 10
(RemoteInteractive: RDP, 3389) carries the client's Source Network Address and Source Port, so it joins the Zeek
``conn`` record of that connection the same way. Each login carries its ``service`` (``ssh``, ``smb``, ``rdp``) and
a Zeek record joins only a login of its own service (by the server port, :data:`SERVICE_PORTS`): a Windows logon
never takes an SSH flow, and there is no Zeek ``ssh`` record for it.

Two left outer stream-stream joins, chained: logins ⟕ conn, then ⟕ ssh. Every input has a watermark on its event
time (:data:`~core.config.DEFAULT_AUTH_SESSIONS_WATERMARK`), so Spark drops a buffered row once no future row of the
other side can match it, and a login whose flow never arrives is emitted *unmatched* (flow columns null) when the
watermark passes ``login time + range`` — it is never lost and never emitted twice. The state bound is in
docs/enrichment.md.

The fields a source keeps in its own ``detail`` (sshd's ``system.auth.ssh.method``, a 4624's logon type and
``AuthenticationPackageName``, Zeek's ``uid``, ssh's ``auth_success``/``client``/``server``) are read through
:func:`ingest.field_resolver.column` by the names docs/fields.md gives them; the rest are core columns.

Plain functions: :func:`auth_sessions_stream` (streaming ``events`` -> streaming sessions), :func:`auth_sessions_batch`
(history: the same joins over a static ``events``), and :func:`start_auth_sessions`, the small streaming query the
pipeline supervisor runs (``events`` through the Delta streaming source, exactly-once Delta sink).
"""

from __future__ import annotations

import logging

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from core.batch_gate import batch_function
from core.config import DEFAULT_AUTH_SESSIONS_WATERMARK, TABLE_ASSETS, TABLE_AUTH_SESSIONS, Settings
from core.lake import is_delta_table
from core.spark_session import PoolCheck, scheduler_pool
from core.triggers import QUERY_AUTH_SESSIONS, Trigger
from ingest.delta_sink import write_batch
from ingest.field_resolver import column

log = logging.getLogger(__name__)

APP_ID = f"nightjar.{QUERY_AUTH_SESSIONS}"
SCHEDULER_POOL = "enrichment"  # a pool of core/resources/fairscheduler.xml, served after "default"
JOIN_RANGE = "2 minutes"  # a Zeek record belongs to a login when it started within this of the login
SSH_PORT = 22
# The login's service -> the server ports whose Zeek conn records can be its connection.
SERVICE_PORTS: dict[str, tuple[int, ...]] = {"ssh": (SSH_PORT,), "smb": (445,), "rdp": (3389,)}
# Windows logon types (winlog.logon.type, Elastic's names) that arrive over the network, and their service.
WINDOWS_NETWORK_LOGONS = {"Network": "smb", "RemoteInteractive": "rdp"}
SSH_DATASET, WINDOWS_DATASET = "system.auth", "windows.security"


def _logins(events: DataFrame) -> DataFrame:
    """Successful sshd logins (``Accepted …``: the only sshd line that is one per connection) and Windows network
    logons (4624 of type Network / RemoteInteractive with a client port: one per SMB or RDP connection)."""
    is_ssh = (F.col("event.dataset") == F.lit(SSH_DATASET)) & (F.col("event.action") == F.lit("ssh_login"))
    logon_type = column("winlog.logon.type", [WINDOWS_DATASET])
    is_windows = ((F.col("event.dataset") == F.lit(WINDOWS_DATASET)) & (F.col("event.code") == F.lit("4624"))
                  & logon_type.isin(*WINDOWS_NETWORK_LOGONS) & (F.col("source.port") > F.lit(0)))
    service = F.when(is_ssh, F.lit("ssh"))
    for name, svc in WINDOWS_NETWORK_LOGONS.items():
        service = service.when(logon_type == F.lit(name), F.lit(svc))
    method = F.when(is_ssh, column("system.auth.ssh.method", [SSH_DATASET])).otherwise(
        F.lower(column("AuthenticationPackageName", [WINDOWS_DATASET])))
    return (events
            .where((is_ssh | is_windows) & (F.col("event.outcome") == F.lit("success"))
                   & F.col("source.ip").isNotNull() & F.col("source.port").isNotNull()
                   & F.col("`@timestamp`").isNotNull())
            .select(F.col("`@timestamp`").alias("login_time"), F.col("event.id").alias("event_id"),
                    F.col("host.name").alias("host_name"), F.col("user.name").alias("user_name"),
                    method.alias("auth_method"), F.col("source.ip").alias("client_ip"),
                    F.col("source.port").cast("int").alias("client_port"), service.alias("service")))


def _zeek(events: DataFrame, path: str, prefix: str, extra: dict[str, Column], services: tuple[str, ...]) -> DataFrame:
    """Zeek ``path`` records of connections to the server ports of ``services``: their 4-tuple, start time, service
    (:data:`SERVICE_PORTS`) and ``extra``."""
    port = F.col("destination.port")
    service = None
    for svc in services:
        is_svc = port.isin(*SERVICE_PORTS[svc])
        service = F.when(is_svc, F.lit(svc)) if service is None else service.when(is_svc, F.lit(svc))
    return (events
            .where((F.col("event.dataset") == F.lit(f"zeek.{path}")) & service.isNotNull()
                   & F.col("source.ip").isNotNull() & F.col("`@timestamp`").isNotNull())
            .select(F.col("`@timestamp`").alias(f"{prefix}_time"), service.alias(f"{prefix}_service"),
                    F.col("source.ip").alias(f"{prefix}_client_ip"),
                    F.col("source.port").cast("int").alias(f"{prefix}_client_port"),
                    F.col("destination.ip").alias(f"{prefix}_server_ip"),
                    F.col("destination.port").cast("int").alias(f"{prefix}_server_port"),
                    *[c.alias(n) for n, c in extra.items()]))


def _conns(events: DataFrame) -> DataFrame:
    ds = ["zeek.conn"]
    return _zeek(events, "conn", "c", {
        "c_uid": column("uid", ds),
        "c_duration_s": F.col("event.duration") / F.lit(1e9),
        "c_bytes_out": F.col("source.bytes"), "c_bytes_in": F.col("destination.bytes"),
        "c_community_id": F.col("network.community_id"),
    }, tuple(SERVICE_PORTS))


def _sshs(events: DataFrame) -> DataFrame:
    ds = ["zeek.ssh"]
    return _zeek(events, "ssh", "s", {
        "s_uid": column("uid", ds), "s_auth_success": column("auth_success", ds),
        "s_client": column("client", ds), "s_server": column("server", ds),
    }, ("ssh",))


def servers_frame(spark: SparkSession, settings: Settings) -> DataFrame | None:
    """``assets`` host -> address (lower-cased name), or None when the lake has no assets table yet."""
    path = settings.table_path(TABLE_ASSETS)
    if not is_delta_table(path):
        return None
    from deltalake import DeltaTable

    table = DeltaTable(str(path)).to_pyarrow_table(columns=["host", "ip"])
    rows = [(h.lower(), ip) for h, ip in zip(table.column("host").to_pylist(), table.column("ip").to_pylist(),
                                             strict=True) if h and ip]
    return spark.createDataFrame(rows, "srv_host string, srv_ip string").dropDuplicates(["srv_host"])


def _with_server(logins: DataFrame, servers: DataFrame | None) -> DataFrame:
    """The address the login's host answers on (a stream-static join with the assets; null when unknown)."""
    if servers is None:
        return logins.withColumn("server_ip", F.lit(None).cast("string"))
    joined = logins.join(F.broadcast(servers), F.lower(logins["host_name"]) == servers["srv_host"], "left_outer")
    return joined.withColumnRenamed("srv_ip", "server_ip").drop("srv_host")


def _within(side: str) -> Column:
    return F.expr(f"{side}_time BETWEEN login_time - INTERVAL {JOIN_RANGE} AND login_time + INTERVAL {JOIN_RANGE}")


def _same_connection(side: str) -> Column:
    # A login whose server address is unknown (host not in assets) still matches on the client's address and port.
    # The service is an equality too: an SMB flow never joins an SSH login of the same client address and port.
    return ((F.col("client_ip") == F.col(f"{side}_client_ip")) & (F.col("client_port") == F.col(f"{side}_client_port"))
            & (F.col("service") == F.col(f"{side}_service"))
            & (F.col("server_ip").isNull() | (F.col("server_ip") == F.col(f"{side}_server_ip"))) & _within(side))


def _plain_time(column: str) -> Column:
    """``column``'s value without its event-time (watermark) mark: after the first join, ``login_time`` must be the
    only event-time column of that side, or Spark refuses the second join (MULTIPLE_EVENT_TIME_COLUMNS)."""
    return F.timestamp_micros(F.unix_micros(F.col(column))).alias(column)


def _join(logins: DataFrame, conns: DataFrame, sshs: DataFrame) -> DataFrame:
    """Logins joined with their conn and ssh records: the ``auth_sessions`` table's rows, one per login, in flat
    columns like ``dhcp_sessions`` (a derived table, not events); ``service`` last: it came later, and Delta
    appends new columns."""
    with_conn = logins.join(conns, _same_connection("c"), "left_outer")
    with_conn = with_conn.select(*[_plain_time(c) if c == "c_time" else F.col(c) for c in with_conn.columns])
    joined = with_conn.join(sshs, _same_connection("s"), "left_outer")
    return joined.select(
        "login_time", "event_id", "host_name", "user_name", "auth_method", "client_ip", "client_port",
        F.coalesce("server_ip", "c_server_ip", "s_server_ip").alias("server_ip"),
        F.coalesce("c_server_port", "s_server_port").alias("server_port"),
        (F.col("c_time").isNotNull() | F.col("s_time").isNotNull()).alias("matched"),
        F.coalesce("c_time", "s_time").alias("flow_start"),
        F.coalesce("c_uid", "s_uid").alias("zeek_uid"),
        F.col("c_duration_s").alias("duration_s"), F.col("c_bytes_out").alias("bytes_out"),
        F.col("c_bytes_in").alias("bytes_in"), F.col("s_auth_success").alias("zeek_auth_success"),
        F.col("s_client").alias("client_software"), F.col("s_server").alias("server_software"),
        F.col("c_community_id").alias("community_id"), "service",
    )


def auth_sessions_stream(events_stream: DataFrame, servers: DataFrame | None = None, *,
                         watermark: str = DEFAULT_AUTH_SESSIONS_WATERMARK) -> DataFrame:
    """Streaming ``events`` -> one row per SSH login or Windows network logon (append mode), joined with its Zeek
    conn (and, for SSH, ssh) records.

    Each side is watermarked on its own event time (``watermark`` late); a login is emitted when its flow records
    arrive, or unmatched once the watermark passes ``login_time + JOIN_RANGE``.
    """
    logins = _with_server(_logins(events_stream), servers).withWatermark("login_time", watermark)
    conns = _conns(events_stream).withWatermark("c_time", watermark)
    sshs = _sshs(events_stream).withWatermark("s_time", watermark)
    return _join(logins, conns, sshs)


def auth_sessions_batch(events: DataFrame, servers: DataFrame | None = None) -> DataFrame:
    """The same sessions over a static ``events`` (history, backfills): the same joins without watermarks."""
    return _join(_with_server(_logins(events), servers), _conns(events), _sshs(events))


def start_auth_sessions(spark: SparkSession, settings: Settings, trigger: Trigger, events: DataFrame) -> StreamingQuery:
    """The ``auth_sessions`` query: ``events`` (the events table through the Delta streaming source, as the windowed
    detection query reads it) -> joins -> the ``auth_sessions`` Delta table, exactly once per micro-batch (Delta app
    transaction ``nightjar.auth_sessions`` + the batch id: a replayed batch is skipped). ``trigger``: the pipeline's
    (``core.triggers.Trigger``); live, the query runs every ``settings.auth_sessions_trigger`` at most."""
    path = settings.table_path(TABLE_AUTH_SESSIONS)
    pool_check = PoolCheck(spark, QUERY_AUTH_SESSIONS, SCHEDULER_POOL)

    def write(df: DataFrame, batch_id: int) -> None:
        pool_check()
        rows = write_batch(df, path, APP_ID, batch_id)
        if rows:
            log.info("%s batch %d: %d login(s) written", QUERY_AUTH_SESSIONS, batch_id, rows)

    sessions = auth_sessions_stream(events, servers_frame(spark, settings))
    writer = (sessions.writeStream.queryName(QUERY_AUTH_SESSIONS).outputMode("append")
              .foreachBatch(batch_function(write))
              .option("checkpointLocation", str(settings.checkpoint(QUERY_AUTH_SESSIONS))))
    # Off the alert path (no rule reads auth_sessions): its batches take a core only when no ingest or rule task
    # waits, so that they do not add to event -> alert latency on a small machine.
    # Live, it also runs less often (settings.auth_sessions_trigger): each batch costs seconds of CPU whatever its size.
    trigger = trigger.slowed_to(settings.auth_sessions_trigger)
    with scheduler_pool(spark, SCHEDULER_POOL):
        query = trigger.apply(writer).start()
    log.info("started query %s (trigger %s, watermark %s, join range ±%s, scheduler pool %s)", QUERY_AUTH_SESSIONS,
             "available-now" if trigger.available_now else trigger.interval, DEFAULT_AUTH_SESSIONS_WATERMARK,
             JOIN_RANGE, SCHEDULER_POOL)
    return query
