"""Behavioural features per entity and hour: one ``DataFrame -> DataFrame`` function for history and stream.

Why host and user, over the last three hours, every hour (sliding windows of :data:`WINDOW` every :data:`SLIDE`):

- **Host** (network side: Zeek conn/dns from an internal source). The host is ``host.name`` (the DHCP lease holder
  the pipeline attributed) or, for addresses no lease names, the source address itself.
- **User** (authentication side: sshd and sudo). Logins are per account, wherever they happen: a service or admin
  account logging in at night from a machine it never used is an account anomaly, not a host one.
- **Every hour, each feature over the span its attack needs.** A row closes every hour (:data:`SLIDE`, the alert
  delay) and covers the last :data:`WINDOW` (three hours). Its admin-port peers (:data:`WINDOW_SETS`) are counted
  over all three hours: slow lateral movement, one new SMB/RDP peer every 15–30 minutes, puts its 4 peers into three
  clock hours (measured at 500 hosts: 17:59, 18:25, 18:51, 19:10, so no tumbling hour held more than two and the
  incident was missed, docs/ml.md). Everything else — volumes, counts and the other sets — is the row's *last
  hour*: measured at 500 hosts with every feature over three hours, a user's logins to two or three rare servers
  in one afternoon added up to the held-out hours that set the threshold (4.7, from 3.3 hourly), and an upload's
  excess over the entity's busiest three hours was smaller than over its busiest hour, so exfiltration and the night
  login fell under it (recall 0 and 0, docs/ml.md). A row exists only for an entity-hour with events (as hourly rows
  did), so the baseline's medians see the same rows.

:func:`entity_features` is plain Spark SQL over the ``events`` schema and contains no stateful or driver-side
step, so the same function runs over a static ``events`` DataFrame (training, ``nightjar ml evaluate``) and over
the streaming ``events`` (the scoring query, with a watermark on :data:`~ingest.arrow_parse.EVENT_TIME_COLUMN`):
batch and stream give the same rows for the same events (tests/test_ml_features.py).

Besides counts the rows carry small *sets* (internal admin-port peers, destination countries, login machines,
login hosts, queried domains). "New destination / new country / new login machine" are the set minus what the
entity did in the training history: that history lives in the model (``behaviour_model``), not in streaming
state, so the stream's state stays one hour per entity (bounded by the watermark).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.durations import parse_duration

WINDOW = "3 hours"  # what a row covers (see the module docstring)
SLIDE = "1 hour"  # how often a row closes: the alert delay
SLIDE_SECONDS = parse_duration(SLIDE, "features.SLIDE")
# Set features counted over the whole WINDOW; every other feature covers the row's last SLIDE (module docstring).
WINDOW_SETS: tuple[str, ...] = ("peers",)
ENTITY_HOST, ENTITY_USER = "host", "user"
# Ports of remote administration and file sharing: the paths of lateral movement (SSH, RPC, SMB, RDP, WinRM).
ADMIN_PORTS = (22, 135, 139, 445, 3389, 5985, 5986)
NIGHT_HOURS = (22, 23, 0, 1, 2, 3, 4, 5)  # UTC: the generator's organization works UTC office hours
MAX_SET = 200  # per entity-hour: bounds state and the row size (an hour has far fewer distinct values normally)
MAX_EVIDENCE = 20

# Numeric features in the order the model sees them (plus the derived "new_*" counts, see behaviour_model).
COUNT_FEATURES: tuple[str, ...] = (
    "events", "connections", "bytes_out", "bytes_in", "distinct_destinations", "distinct_ports",
    "distinct_countries", "distinct_domains", "dns_queries", "dns_name_len_max", "dns_entropy_max",
    "admin_port_peers", "logins_failed", "logins_ok", "night_logins", "sudo", "login_hour_max",
)
# set feature -> the per-event column it collects
SET_INPUTS: dict[str, str] = {"peers": "peer", "countries": "country", "login_machines": "login_machine",
                              "login_hosts": "login_host", "domains": "domain"}
SET_FEATURES: tuple[str, ...] = tuple(SET_INPUTS)
# Every events column the features read (dotted paths: core columns of the events contract and enrichment columns;
# nothing of ``detail``), plus what detection_input needs (the times): the scoring query reads only these, not
# event.original or detail, most of a row's bytes. A test runs entity_features over exactly these.
INPUT_COLUMNS: tuple[str, ...] = (
    "@timestamp", "event.ingested", "event.id", "event.dataset", "event.action", "event.outcome",
    "network.direction", "source.ip", "source.bytes", "destination.ip", "destination.port", "destination.bytes",
    "destination.geo.country_iso_code", "dns.question.name", "host.name", "host.hostname", "host.ip", "host.mac",
    "user.name", "process.name",
)
KEY_COLUMNS: tuple[str, ...] = ("entity_type", "entity", "window_start", "window_end")
FEATURE_COLUMNS: tuple[str, ...] = (*KEY_COLUMNS, *COUNT_FEATURES, *SET_FEATURES, "first_seen", "last_seen",
                                    "evidence")


def shannon_entropy(text: Column) -> Column:
    """Shannon entropy (bits per character) of a string, in Spark SQL (no Python UDF: stays in the JVM)."""
    chars = F.array_distinct(F.split(text, ""))
    n = F.length(text).cast("double")

    def term(acc: Column, c: Column) -> Column:
        p = (F.length(text) - F.length(F.replace(text, c, F.lit("")))).cast("double") / n
        return acc - p * F.log2(p)

    return F.when(n > 0, F.aggregate(chars, F.lit(0.0), term)).otherwise(F.lit(0.0))


def login_machine() -> Column:
    """The machine a login came from: ``mac:<MAC>`` of the DHCP lease holder of the client address, else the address.

    Under DHCP an address is a weak identity: the same laptop comes back with another address tomorrow, and an
    account "seen from an address it never used" was most of the false alerts (docs/ml.md). The pipeline's DHCP
    attribution (``enrich.dhcp_sessions``, keyed by the event's internal address — the client's, for a login)
    writes the lease holder's MAC into ``host.mac`` and the attributed address into ``host.ip`` of the sshd event
    (syslog carries neither, so both come from the attribution). When ``host.ip`` holds the login's own source
    address, ``host.mac`` is the machine behind it; otherwise (a static address, a VPN or outside client, no lease
    known) the address is the best identity there is.
    """
    attributed = F.col("host.mac").isNotNull() & F.coalesce(
        F.array_contains(F.col("host.ip"), F.col("source.ip")), F.lit(False))
    return F.when(attributed, F.concat(F.lit("mac:"), F.upper(F.col("host.mac")))).otherwise(F.col("source.ip"))


def _per_event(events: DataFrame, time_col: str) -> DataFrame:
    """One row per (event, entity it describes): the host row of network events, the user row of auth events."""
    ds = F.col("event.dataset")
    direction = F.col("network.direction")
    conn = ds == "zeek.conn"
    dns = ds == "zeek.dns"
    outbound = conn & (direction == "outbound")
    internal = conn & (direction == "internal")
    name = F.lower(F.col("dns.question.name"))
    first_label = F.substring_index(name, ".", 1)
    admin_peer = internal & F.col("destination.port").isin(*ADMIN_PORTS)
    hour = F.hour(F.col(time_col))

    host = events.where(ds.isin("zeek.conn", "zeek.dns") & direction.isin("outbound", "internal")
                        & F.col("source.ip").isNotNull()).select(
        F.lit(ENTITY_HOST).alias("entity_type"),
        F.coalesce(F.col("host.name"), F.col("source.ip")).alias("entity"),
        F.col(time_col).alias("ts"), F.col("event.id").alias("event_id"),
        conn.cast("int").alias("connections"),
        F.when(outbound, F.coalesce(F.col("source.bytes"), F.lit(0))).otherwise(0).alias("bytes_out"),
        F.when(conn, F.coalesce(F.col("destination.bytes"), F.lit(0))).otherwise(0).alias("bytes_in"),
        F.when(conn, F.col("destination.ip")).alias("destination"),
        F.when(conn, F.col("destination.port")).alias("port"),
        F.when(outbound, F.col("destination.geo.country_iso_code")).alias("country"),
        F.when(dns, name).alias("domain"),
        dns.cast("int").alias("dns_query"),
        F.when(dns, F.length(name)).alias("dns_name_len"),
        F.when(dns, shannon_entropy(first_label)).alias("dns_entropy"),
        F.when(admin_peer, F.col("destination.ip")).alias("peer"),
        F.lit(0).alias("login_failed"), F.lit(0).alias("login_ok"), F.lit(0).alias("night_login"),
        F.lit(0).alias("sudo"), F.lit(None).cast("int").alias("login_hour"),
        F.lit(None).cast("string").alias("login_machine"), F.lit(None).cast("string").alias("login_host"),
    )
    login = F.col("event.action") == "ssh_login"
    ok = login & (F.col("event.outcome") == "success")
    sudo = (F.col("process.name") == "sudo") & (F.col("event.action") == "sudo_command")
    user = events.where((login | sudo) & F.col("user.name").isNotNull()).select(
        F.lit(ENTITY_USER).alias("entity_type"), F.col("user.name").alias("entity"),
        F.col(time_col).alias("ts"), F.col("event.id").alias("event_id"),
        F.lit(0).alias("connections"), F.lit(0).cast("long").alias("bytes_out"), F.lit(0).cast("long").alias("bytes_in"),
        F.lit(None).cast("string").alias("destination"), F.lit(None).cast("int").alias("port"),
        F.lit(None).cast("string").alias("country"), F.lit(None).cast("string").alias("domain"),
        F.lit(0).alias("dns_query"), F.lit(None).cast("int").alias("dns_name_len"),
        F.lit(None).cast("double").alias("dns_entropy"), F.lit(None).cast("string").alias("peer"),
        (login & (F.col("event.outcome") == "failure")).cast("int").alias("login_failed"),
        ok.cast("int").alias("login_ok"),
        (ok & hour.isin(*NIGHT_HOURS)).cast("int").alias("night_login"),
        sudo.cast("int").alias("sudo"),
        # distance from 13:00 UTC (mid office hours), so 03:00 and 23:00 are both "far from normal"
        F.when(ok, F.least(F.abs(hour - 13), 24 - F.abs(hour - 13))).alias("login_hour"),
        F.when(ok, login_machine()).alias("login_machine"),
        F.when(ok, F.lower(F.coalesce(F.col("host.name"), F.col("host.hostname")))).alias("login_host"),
    )
    return host.unionByName(user)


WINDOW_SETS_INPUT = frozenset(SET_INPUTS[s] for s in WINDOW_SETS)


def _bounded_set(col: str | Column) -> Column:
    return F.slice(F.array_sort(F.collect_set(col)), 1, MAX_SET)


def entity_features(events: DataFrame, time_col: str = "@timestamp") -> DataFrame:
    """``events`` (static or streaming) -> one row per (entity type, entity, window of :data:`WINDOW` every
    :data:`SLIDE`) whose last :data:`SLIDE` holds events of the entity, with :data:`FEATURE_COLUMNS`: the sets of
    :data:`WINDOW_SETS` over the whole window, every other feature over its last :data:`SLIDE`.

    A streaming caller sets a watermark on ``time_col`` first; the aggregation is then bounded by it.
    """
    rows = _per_event(events, time_col).select("*", F.window("ts", WINDOW, SLIDE).alias("w"))
    # the row's last hour; window_sets look at the whole window
    recent = F.col("ts") >= F.col("w.end") - F.expr(f"INTERVAL {SLIDE_SECONDS} SECONDS")
    contributes = recent
    for c in WINDOW_SETS_INPUT:
        contributes = contributes | F.col(c).isNotNull()

    def hour(col: str) -> Column:
        return F.when(recent, F.col(col))

    def hour_sum(col: str) -> Column:
        return F.coalesce(F.sum(hour(col)), F.lit(0))

    agg = rows.groupBy("entity_type", "entity", "w").agg(
        F.count(hour("ts")).alias("events"),
        hour_sum("connections").alias("connections"),
        hour_sum("bytes_out").alias("bytes_out"),
        hour_sum("bytes_in").alias("bytes_in"),
        F.size(F.collect_set(hour("destination"))).alias("distinct_destinations"),
        F.size(F.collect_set(hour("port"))).alias("distinct_ports"),
        F.size(F.collect_set(hour("country"))).alias("distinct_countries"),
        F.size(F.collect_set(hour("domain"))).alias("distinct_domains"),
        hour_sum("dns_query").alias("dns_queries"),
        F.coalesce(F.max(hour("dns_name_len")), F.lit(0)).alias("dns_name_len_max"),
        F.coalesce(F.max(hour("dns_entropy")), F.lit(0.0)).alias("dns_entropy_max"),
        F.size(F.collect_set(hour("peer"))).alias("admin_port_peers"),
        hour_sum("login_failed").alias("logins_failed"),
        hour_sum("login_ok").alias("logins_ok"),
        hour_sum("night_login").alias("night_logins"),
        hour_sum("sudo").alias("sudo"),
        F.coalesce(F.max(hour("login_hour")), F.lit(0)).alias("login_hour_max"),
        *[_bounded_set(c if c in WINDOW_SETS_INPUT else hour(c)).alias(out) for out, c in SET_INPUTS.items()],
        F.min(F.when(contributes, F.col("ts"))).alias("first_seen"),
        F.max(F.when(contributes, F.col("ts"))).alias("last_seen"),
        F.slice(F.array_sort(F.collect_set(F.when(contributes, F.col("event_id")))), 1, MAX_EVIDENCE).alias("evidence"),
    )
    return agg.where(F.col("events") > 0).select(
        "entity_type", "entity", F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
        *[F.col(c).cast("double").alias(c) for c in COUNT_FEATURES],
        *SET_FEATURES, "first_seen", "last_seen", "evidence",
    )
