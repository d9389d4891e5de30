"""DHCP sessions and host attribution with ``applyInPandasWithState``, plus DNS names on connections.

Why one stateful operator keyed by the internal IP, and not stream-stream joins: the three questions asked here
— who held this address at the event's time, which name did this client resolve to the address it connects to,
and which DHCP sessions opened and closed — all key on the same internal address, and each needs "the latest
match before t", which a Spark join cannot pick (it emits every match, so a renewed lease or a repeated lookup
would duplicate the event). A left outer stream-stream join would also hold every unmatched event (internal
traffic, scans) until the watermark — ten minutes here — before writing it. Keyed state answers at once when the
lease is known, waits (bounded, :attr:`Limits.wait_s` of log time) only for events whose lease has not arrived,
and keeps state bounded: sessions and DNS answers are pruned by log time, an idle key is dropped by an event-time
timeout on the query's watermark.

The functions (``DataFrame -> DataFrame``)::

    unified = attribute_stream(parsed, dhcp_networks)   # streaming: applyInPandasWithState
    unified = attribute_batch(parsed, dhcp_networks)    # batch: applyInPandas, same per-key code
    events_from(unified), sessions_from(unified), quarantine_from(unified)

``parsed`` is :func:`ingest.normalize.parse_records` output (good and bad rows). ``unified`` carries three
kinds of rows (``kind`` = ``event`` / ``session`` / ``quarantine``) so that one micro-batch writes the three
tables. Every row crosses the operator once, as JSON (ECS for events, the quarantine columns for bad records);
rows with no internal address go to a few stateless bucket keys. A single linear plan matters: a union of
branches of one stream would read Kafka and run the parser once per branch.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from enrich.lease_book import ACK, RELEASE, LeaseBook, Limits, process
from ingest.ecs_schema import ECS_COLUMNS, ECS_SCHEMA
from ingest.normalize import ERROR_COLUMN, EVENT_TIME_COLUMN, QUARANTINE_COLUMNS

log = logging.getLogger(__name__)

KIND_EVENT = "event"
KIND_SESSION = "session"
KIND_QUARANTINE = "quarantine"
# Rows with no internal address are spread over this many stateless keys (prefix cannot start an IP address).
PASS_KEY_PREFIX = "~"
# Rows cross the operator as JSON; the default timestamp format would cut microseconds to milliseconds.
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
PASS_BUCKETS = 16
QUARANTINE_SCHEMA = StructType([
    StructField("value", BinaryType()), StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("offset", LongType()), StructField("timestamp", TimestampType()),
    StructField("ingested_at", TimestampType()), StructField("parser", StringType()),
    StructField("error", StringType()),
])

# RFC 1918 and IPv6 unique-local addresses: the organization's own hosts.
_INTERNAL_V4 = r"^(10\.|192\.168\.|172\.(1[6-9]|2[0-9]|3[01])\.)"
_INTERNAL_V6 = r"^[fF][cdCD][0-9a-fA-F]{2}:"

SESSION_FIELDS = ("session_id", "ip", "mac", "hostname", "lease_start", "lease_end", "end_reason", "state",
                  "updated_at", "dataset")
_OUTPUT_SCHEMA = (
    "kind string, event_id string, payload string, host_name string, host_mac string, host_ip string, "
    "dest_domain string, s_session_id string, s_ip string, s_mac string, s_hostname string, s_lease_start double, "
    "s_lease_end double, s_end_reason string, s_state string, s_updated_at double, s_dataset string"
)
_OUTPUT_COLUMNS = tuple(f.split()[0] for f in _OUTPUT_SCHEMA.split(", "))
_STATE_SCHEMA = "book string"
DEFAULT_LIMITS = Limits()


def dhcp_networks_from_lake(networks_path: Path) -> list[str]:
    """The CIDRs flagged ``dhcp`` in the ``networks`` reference table, read once when a query starts (a DHCP
    zone added later takes effect at the next restart; attribution itself never needs it)."""
    from deltalake import DeltaTable

    try:
        rows = DeltaTable(str(networks_path)).to_pyarrow_table(columns=["cidr", "dhcp"]).to_pylist()
    except Exception as exc:  # no table yet (the generator seeds it), or an older table without the column
        log.info("no DHCP networks from %s (%s): events are attributed when their lease is known, none waits",
                 networks_path, type(exc).__name__)
        return []
    cidrs = [r["cidr"] for r in rows if r["dhcp"]]
    log.info("DHCP-managed networks: %s", ", ".join(cidrs) or "none")
    return cidrs


def is_internal(ip: Column) -> Column:
    return ip.rlike(_INTERNAL_V4) | ip.rlike(_INTERNAL_V6)


def _operator_input(parsed: DataFrame) -> DataFrame:
    """Every parsed row (events and quarantine) -> the flat columns the operator reads.

    ``key`` is the event's internal address; rows without one (events between outside addresses, quarantine)
    get a bucket key starting with :data:`PASS_KEY_PREFIX` and pass through without state. One linear plan, no
    union: a union of branches of the same stream would read Kafka and parse once per branch.
    The watermarked column of :func:`ingest.normalize.deduplicate` is carried along when present: Spark accepts
    an event-time timeout only when the operator's input shows the watermark."""
    src, dst = F.col("source.ip"), F.col("destination.ip")
    types = F.col("dhcp.message_types")
    bad = F.col(ERROR_COLUMN).isNotNull()
    bucket = F.concat(F.lit(PASS_KEY_PREFIX),
                      F.pmod(F.xxhash64("topic", "partition", "offset"), F.lit(PASS_BUCKETS)).cast("string"))
    key = F.when(bad, bucket).when(is_internal(src), src).when(is_internal(dst), dst).otherwise(bucket)
    quarantine = F.struct(*[F.col(c) if c not in ("parser", "error") else F.col(f"{ERROR_COLUMN}.{c}").alias(c)
                            for c in QUARANTINE_COLUMNS if c not in ("parser", "error")],
                          F.col(f"{ERROR_COLUMN}.parser").alias("parser"), F.col(f"{ERROR_COLUMN}.reason").alias("error"))
    payload = F.when(bad, F.to_json(quarantine, JSON_OPTIONS)).otherwise(
        F.to_json(F.struct(*[F.col(f"`{c}`") for c in ECS_COLUMNS]), JSON_OPTIONS))
    return parsed.select(
        key.alias("key"),
        F.when(bad, F.lit(KIND_QUARANTINE)).otherwise(F.lit(KIND_EVENT)).alias("kind"),
        F.coalesce(F.unix_micros(F.col("`@timestamp`")) / F.lit(1e6), F.lit(0.0)).alias("ts"),
        F.coalesce(F.col("event.id"), F.concat_ws(":", "topic", "partition", "offset")).alias("event_id"),
        F.col("event.original").alias("original"),
        payload.alias("payload"),
        F.col("host.hostname").isNotNull().alias("has_host"),
        F.when(F.array_contains(types, "ACK"), F.lit(ACK))
         .when(F.array_contains(types, "RELEASE"), F.lit(RELEASE)).alias("dhcp"),
        F.col("source.mac").alias("mac"),
        F.col("dhcp.client_hostname").alias("hostname"),
        F.col("dhcp.lease_seconds").cast("double").alias("lease_s"),
        F.col("event.dataset").alias("dataset"),
        F.lower(F.col("dns.question.name")).alias("dns_domain"),
        F.col("dns.resolved_ip").alias("dns_ips"),
        F.when(F.col("destination.domain").isNull(), dst).alias("dst_ip"),
        *([EVENT_TIME_COLUMN] if EVENT_TIME_COLUMN in parsed.columns else []),
    )


def _passthrough(pdfs: Iterator[pd.DataFrame] | list[pd.DataFrame]) -> pd.DataFrame:
    """Rows of a bucket key: written as they are, no state."""
    out = []
    for pdf in pdfs:
        for kind, event_id, payload in zip(pdf["kind"], pdf["event_id"], pdf["payload"], strict=True):
            out.append({"kind": kind, "event_id": event_id, "payload": payload})
    return pd.DataFrame(out, columns=list(_OUTPUT_COLUMNS), dtype=object)


def _rows(pdfs: Iterator[pd.DataFrame] | list[pd.DataFrame], networks: list) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for pdf in pdfs:
        rows += pdf.to_dict("records")
    for r in rows:
        r.pop(EVENT_TIME_COLUMN, None)  # only there to carry the watermark into the operator
        if r["lease_s"] is not None and (isinstance(r["lease_s"], float) and math.isnan(r["lease_s"])):
            r["lease_s"] = None
        ips = r["dns_ips"]
        r["dns_ips"] = [str(x) for x in ips] if ips is not None and len(ips) else None
        r["has_host"] = bool(r["has_host"])
        r["needs_host"] = not r["has_host"] and _in(r["key"], networks)
    return rows


def _in(ip: str, networks: list) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(addr in n for n in networks)


def _output(events: list[dict[str, Any]], sessions: list[dict[str, Any]]) -> pd.DataFrame:
    out = [{"kind": KIND_EVENT, "event_id": e["event_id"], "payload": e["payload"], "host_name": e["host_name"],
            "host_mac": e["host_mac"], "host_ip": e["host_ip"], "dest_domain": e["dest_domain"]} for e in events]
    out += [{"kind": KIND_SESSION, **{f"s_{k}": s[k] for k in SESSION_FIELDS}} for s in sessions]
    # dtype=object: an all-None string column would otherwise become float64 NaN, which Arrow cannot make a string.
    return pd.DataFrame(out, columns=list(_OUTPUT_COLUMNS), dtype=object)


def _networks(dhcp_networks: list[str]) -> list:
    nets = []
    for cidr in dhcp_networks:
        try:
            nets.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError as exc:
            raise ValueError(f"DHCP network {cidr!r} is not a CIDR: {exc}") from None
    return nets


def attribute_stream(parsed: DataFrame, dhcp_networks: list[str], limits: Limits = DEFAULT_LIMITS,
                     watermark_delay_s: float = 600.0) -> DataFrame:
    """Streaming: ``parsed`` (with a watermark, e.g. from :func:`ingest.normalize.deduplicate`, whose delay is
    ``watermark_delay_s``) -> unified rows."""
    networks = _networks(dhcp_networks)
    delay_ms = int(watermark_delay_s * 1000)
    wait_ms = int(limits.wait_s * 1000)
    idle_ms = int(limits.history_s * 1000)

    def step(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        (ip,) = key
        if ip.startswith(PASS_KEY_PREFIX):
            yield _passthrough(pdfs)
            return
        book = LeaseBook.from_json(state.get[0]) if state.exists else LeaseBook(ip)
        if state.hasTimedOut:
            had_waiting = bool(book.waiting)
            events, sessions = process(book, [], limits, flush=True)
            if not had_waiting:  # idle key: close what is open and forget it
                sessions += book.close_all(limits)
                state.remove()
                yield _output(events, sessions)
                return
        else:
            events, sessions = process(book, _rows(pdfs, networks), limits, flush=False)
        state.update((book.to_json(),))
        # The watermark follows arrival time (ingest.normalize.deduplicate); before the first one exists (0), the
        # clock minus the delay stands in, or every key of the first batch would time out at the second.
        base = max(state.getCurrentWatermarkMs(), int(time.time() * 1000) - delay_ms)
        state.setTimeoutTimestamp(base + (wait_ms if book.waiting else idle_ms))
        yield _output(events, sessions)

    return _operator_input(parsed).groupBy("key").applyInPandasWithState(
        step, _OUTPUT_SCHEMA, _STATE_SCHEMA, "append", GroupStateTimeout.EventTimeTimeout)


def attribute_batch(parsed: DataFrame, dhcp_networks: list[str], limits: Limits = DEFAULT_LIMITS) -> DataFrame:
    """Batch: the same per-key code over a static ``parsed`` (history, backfills, the parity test)."""
    networks = _networks(dhcp_networks)

    def step(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        (ip,) = key
        if ip.startswith(PASS_KEY_PREFIX):
            return _passthrough([pdf])
        events, sessions = process(LeaseBook(ip), _rows([pdf], networks), limits, flush=True)
        return _output(events, sessions)

    return _operator_input(parsed).groupBy("key").applyInPandas(step, _OUTPUT_SCHEMA)


def events_from(unified: DataFrame) -> DataFrame:
    """The ``event`` rows back as ECS columns, with the lease holder in ``host.*`` (events with no reporting host)
    and the resolved name in ``destination.domain``."""
    rows = unified.where(F.col("kind") == KIND_EVENT)
    ecs = rows.select(F.from_json("payload", ECS_SCHEMA, JSON_OPTIONS).alias("e"), "host_name", "host_mac", "host_ip",
                      "dest_domain")
    host_type = ECS_SCHEMA["host"].dataType
    attributed = {"name": F.col("host_name"), "mac": F.col("host_mac"),
                  "ip": F.when(F.col("host_ip").isNotNull(), F.array(F.col("host_ip")))}
    host = F.when(F.col("host_name").isNull() & F.col("host_mac").isNull(), F.col("e.host")).otherwise(
        F.struct(*[F.coalesce(F.col(f"e.host.{f.name}"), attributed[f.name]).alias(f.name) if f.name in attributed
                   else F.col(f"e.host.{f.name}").alias(f.name) for f in host_type.fields]))
    destination = F.when(F.col("dest_domain").isNotNull() & F.col("e.destination.domain").isNull(),
                         F.col("e.destination").withField("domain", F.col("dest_domain"))
                         ).otherwise(F.col("e.destination"))
    replaced = {"host": host, "destination": destination}
    return ecs.select(*[replaced.get(c, F.col(f"e.`{c}`")).alias(c) for c in ECS_COLUMNS])


def sessions_from(unified: DataFrame) -> DataFrame:
    """The ``session`` rows: the ``dhcp_sessions`` table (an append-only log of session state changes)."""
    ts = {"lease_start", "lease_end", "updated_at"}
    return unified.where(F.col("kind") == KIND_SESSION).select(
        *[(F.timestamp_micros((F.col(f"s_{c}") * 1e6).cast("long")) if c in ts else F.col(f"s_{c}")).alias(c)
          for c in SESSION_FIELDS])


def quarantine_from(unified: DataFrame, schema: StructType = QUARANTINE_SCHEMA) -> DataFrame:
    """The ``quarantine`` rows (raw bytes travel base64-encoded in the JSON and come back as binary)."""
    rows = unified.where(F.col("kind") == KIND_QUARANTINE)
    return rows.select(F.from_json("payload", schema, JSON_OPTIONS).alias("q")).select(*[F.col(f"q.{c}") for c in QUARANTINE_COLUMNS])
