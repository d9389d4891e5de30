"""DHCP sessions and host attribution with ``applyInPandasWithState``, plus DNS names on connections.

Why one stateful operator keyed by the internal IP, and not stream-stream joins: the three questions asked here
— who held this address at the event's time, which name did this client resolve to the address it connects to,
and which DHCP sessions opened and closed — all key on the same internal address, and each needs "the latest
match before t", which a Spark join cannot pick (it emits every match, so a renewed lease or a repeated lookup
would duplicate the event). A left outer stream-stream join would also hold every unmatched event (internal
traffic, scans) until the watermark before writing it. Keyed state answers at once when the lease is known, holds
an event only while its lease has not arrived, and keeps state bounded: sessions and DNS answers are pruned by log
time, an idle key is dropped after :attr:`Limits.history_s` of processing time.

The functions (``DataFrame -> DataFrame``)::

    unified = attribute_stream(parsed, dhcp_networks)   # streaming: applyInPandasWithState
    unified = attribute_batch(parsed, dhcp_networks)    # batch: applyInPandas, same per-key code
    events_from(unified), quarantine_from(unified), sessions_from(unified), records_from(unified)

``parsed`` is :func:`ingest.arrow_parse.parse_bronze` output with ``raw_record=True`` (good and bad rows, each with
its whole Kafka record). The DHCP fields are read through the field resolver (dhcpd's ``dhcp.message_types``,
Zeek's ``msg_types``: one name, each source's own place).
``unified`` carries two kinds of rows: ``record`` (one per input record, with the raw Kafka record for ``bronze``,
the event's core and detail as JSON or the quarantine reason, and the attribution) and ``session`` (the ``dhcp_sessions`` log),
so that one micro-batch writes every table from one read of Kafka.

How long an event waits for its lease (events whose address is in a DHCP zone and that name no host):

* until a DHCPACK covering its time arrives (attributed), or until the key's log time is :attr:`Limits.wait_s` past
  it (released unattributed);
* at most ``hold_s`` of processing time (``GroupStateTimeout.ProcessingTimeTimeout``): a lease that never comes
  cannot hold an event forever. A drained run (``--available-now``) uses a hold of one micro-batch, and the
  pipeline stops it only after a batch with no input has run — by then every waiting event has been released, so
  a backfill always ends with all of its events written, whatever the micro-batch split.

Costs, measured (docs/performance.md): the operator is the one place where every record crosses into Python, so
the Python side is kept to what needs state. Rows without an internal address pass through a few stateless bucket
keys as whole pandas columns (no per-row Python); rows of an internal address become small dicts for the lease
logic, and their payload is gathered back by position.
"""

from __future__ import annotations

import base64
import ipaddress
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema
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
from ingest.arrow_parse import ERROR_COLUMN, HEADERS_TYPE, QUARANTINE_COLUMNS
from ingest.events_contract import CORE_ARROW_SCHEMA, CORE_COLUMNS
from ingest.field_resolver import column

log = logging.getLogger(__name__)

KIND_RECORD = "record"
KIND_SESSION = "session"
# Rows with no internal address are spread over this many stateless keys (prefix cannot start an IP address).
PASS_KEY_PREFIX = "~"
PASS_BUCKETS = 16
# Rows cross the operator as JSON; the default timestamp format would cut microseconds to milliseconds.
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
QUARANTINE_SCHEMA = StructType([
    StructField("value", BinaryType()), StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("offset", LongType()), StructField("timestamp", TimestampType()),
    StructField("ingested_at", TimestampType()), StructField("parser", StringType()),
    StructField("error", StringType()),
])
BRONZE_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers", "ingested_at")

# RFC 1918 and IPv6 unique-local addresses: the organization's own hosts.
_INTERNAL_V4 = r"^(10\.|192\.168\.|172\.(1[6-9]|2[0-9]|3[01])\.)"
_INTERNAL_V6 = r"^[fF][cdCD][0-9a-fA-F]{2}:"

SESSION_FIELDS = ("session_id", "ip", "mac", "hostname", "lease_start", "lease_end", "end_reason", "state",
                  "updated_at", "dataset")
# The record as it came from Kafka, carried through the operator for `bronze` (times as epoch microseconds:
# pandas would otherwise convert them through the session time zone).
_RAW = ("r_key", "r_value", "r_topic", "r_partition", "r_offset", "r_timestamp_us", "r_ingested_us", "r_headers")
_RECORD_OUT = ("event_id", "payload", "err_parser", "err_reason", *_RAW)
_ATTRIBUTION = ("host_name", "host_mac", "host_ip", "dest_domain")
_OUTPUT_SCHEMA = (
    "kind string, event_id string, payload string, err_parser string, err_reason string, host_name string, "
    "host_mac string, host_ip string, dest_domain string, r_key binary, r_value binary, r_topic string, "
    "r_partition int, r_offset long, r_timestamp_us long, r_ingested_us long, r_headers string, "
    "s_session_id string, s_ip string, s_mac string, s_hostname string, s_lease_start double, s_lease_end double, "
    "s_end_reason string, s_state string, s_updated_at double, s_dataset string"
)
_OUTPUT_COLUMNS = tuple(f.split()[0] for f in _OUTPUT_SCHEMA.split(", "))
_STATE_SCHEMA = "book string"
_BYTES = ("r_key", "r_value")  # stored base64-encoded while an event waits in the (JSON) state
DEFAULT_LIMITS = Limits()
CORE_SCHEMA = from_arrow_schema(CORE_ARROW_SCHEMA)


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


def _micros(col: str) -> Column:
    return F.unix_micros(F.col(col)) if col else F.lit(None).cast("long")


def _operator_input(parsed: DataFrame) -> DataFrame:
    """Every parsed row (events and quarantine) -> the flat columns the operator reads, plus the raw record.

    ``key`` is the event's internal address; rows without one (events between outside addresses, quarantine)
    get a bucket key starting with :data:`PASS_KEY_PREFIX` and pass through without state. One linear plan, no
    union: a union of branches of the same stream would read Kafka and parse once per branch."""
    src, dst = F.col("source.ip"), F.col("destination.ip")
    types = column("dhcp.message_types")
    bad = F.col(ERROR_COLUMN).isNotNull()
    bucket = F.concat(F.lit(PASS_KEY_PREFIX),
                      F.pmod(F.xxhash64("topic", "partition", "offset"), F.lit(PASS_BUCKETS)).cast("string"))
    key = F.when(bad, bucket).when(is_internal(src), src).when(is_internal(dst), dst).otherwise(bucket)
    payload = F.when(~bad, F.to_json(F.struct(*[F.col(f"`{c}`") for c in CORE_COLUMNS]), JSON_OPTIONS))
    cols = set(parsed.columns)
    headers = F.to_json(F.col("headers")) if "headers" in cols else F.lit(None).cast("string")
    return parsed.select(
        key.alias("key"),
        F.coalesce(F.unix_micros(F.col("`@timestamp`")) / F.lit(1e6), F.lit(0.0)).alias("ts"),
        F.coalesce(F.col("event.id"), F.concat_ws(":", "topic", "partition", "offset")).alias("event_id"),
        F.col("host.hostname").isNotNull().alias("has_host"),
        F.when(F.array_contains(types, "ACK"), F.lit(ACK))
         .when(F.array_contains(types, "RELEASE"), F.lit(RELEASE)).alias("dhcp"),
        F.col("source.mac").alias("mac"),
        column("dhcp.client_hostname").alias("hostname"),
        column("dhcp.lease_seconds").cast("double").alias("lease_s"),
        F.col("event.dataset").alias("dataset"),
        F.lower(F.col("dns.question.name")).alias("dns_domain"),
        F.col("dns.resolved_ip").alias("dns_ips"),
        F.when(F.col("destination.domain").isNull(), dst).alias("dst_ip"),
        payload.alias("payload"),
        F.col(f"{ERROR_COLUMN}.parser").alias("err_parser"),
        F.col(f"{ERROR_COLUMN}.reason").alias("err_reason"),
        (F.col("key") if "key" in cols else F.lit(None).cast("binary")).alias("r_key"),
        F.col("value").alias("r_value"),
        F.col("topic").alias("r_topic"),
        F.col("partition").alias("r_partition"),
        F.col("offset").alias("r_offset"),
        _micros("timestamp" if "timestamp" in cols else "").alias("r_timestamp_us"),
        _micros("ingested_at").alias("r_ingested_us"),
        headers.alias("r_headers"),
    )


def _none(n: int) -> np.ndarray:
    return np.full(n, None, dtype=object)


def _passthrough(pdfs: Iterator[pd.DataFrame] | list[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """Rows of a bucket key: written as they are, no state, no per-row Python."""
    for pdf in pdfs:
        n = len(pdf)
        if n == 0:
            continue
        cols = {c: (pdf[c].to_numpy() if c in _RECORD_OUT else _none(n)) for c in _OUTPUT_COLUMNS}
        cols["kind"] = np.full(n, KIND_RECORD, dtype=object)
        yield pd.DataFrame(cols, columns=list(_OUTPUT_COLUMNS))


def _light_rows(pdf: pd.DataFrame, networks: list) -> list[dict[str, Any]]:
    """The fields the lease logic reads, one small dict per row; ``i`` is the row's position in ``pdf``."""
    needs_zone = {}
    rows = []
    cols = [pdf[c].tolist() for c in ("ts", "event_id", "has_host", "dhcp", "mac", "hostname", "lease_s",
                                      "dataset", "dns_domain", "dns_ips", "dst_ip", "key", "r_value")]
    for i, (ts, eid, has_host, dhcp, mac, hostname, lease_s, dataset, dns_domain, dns_ips, dst_ip, key,
            raw) in enumerate(zip(*cols, strict=True)):
        if lease_s is not None and lease_s != lease_s:  # NaN
            lease_s = None
        if dns_ips is not None:
            dns_ips = [str(x) for x in dns_ips] if len(dns_ips) else None
        if key not in needs_zone:
            needs_zone[key] = _in(key, networks)
        rows.append({"i": i, "ts": ts, "event_id": eid, "dhcp": dhcp, "mac": mac, "hostname": hostname,
                     "lease_s": lease_s, "dataset": dataset, "dns_domain": dns_domain, "dns_ips": dns_ips,
                     "dst_ip": dst_ip, "needs_host": not has_host and needs_zone[key],
                     # content order for same-timestamp messages (lease_book._order): the raw line
                     "original": raw.decode("utf-8", "replace") if raw is not None else ""})
    return rows


def _in(ip: str, networks: list) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(addr in n for n in networks)


def _stored(row: dict[str, Any], pdf: pd.DataFrame) -> dict[str, Any]:
    """A waiting row as kept in the JSON state: its light fields plus the whole record (bytes as base64)."""
    out = {k: v for k, v in row.items() if k != "i"}
    for c in _RECORD_OUT:
        v = pdf[c].iat[row["i"]]
        if c in _BYTES and v is not None:
            v = base64.b64encode(v).decode("ascii")
        elif isinstance(v, np.integer):
            v = int(v)
        elif isinstance(v, float):  # a nullable long column arrives in pandas as float64, null as NaN
            v = None if v != v else int(v)
        out[c] = v
    return out


def _from_stored(row: dict[str, Any]) -> dict[str, Any]:
    out = {c: row.get(c) for c in _RECORD_OUT}
    for c in _BYTES:
        if out[c] is not None:
            out[c] = base64.b64decode(out[c])
    return out


def _output(events: list[dict[str, Any]], sessions: list[dict[str, Any]], pdf: pd.DataFrame | None) -> pd.DataFrame:
    """Released events (rows of this invocation gathered from ``pdf`` by position, rows from state rebuilt) and
    session rows, in :data:`_OUTPUT_SCHEMA`."""
    fresh = [e for e in events if "i" in e]
    frames = []
    if fresh:
        idx = np.fromiter((e["i"] for e in fresh), dtype=np.int64, count=len(fresh))
        n = len(fresh)
        cols = {c: (pdf[c].to_numpy()[idx] if c in _RECORD_OUT else _none(n)) for c in _OUTPUT_COLUMNS}
        cols["kind"] = np.full(n, KIND_RECORD, dtype=object)
        for c in _ATTRIBUTION:
            cols[c] = np.array([e[c] for e in fresh], dtype=object)
        frames.append(pd.DataFrame(cols, columns=list(_OUTPUT_COLUMNS)))
    rows = [{"kind": KIND_RECORD, **_from_stored(e), **{c: e[c] for c in _ATTRIBUTION}}
            for e in events if "i" not in e]
    rows += [{"kind": KIND_SESSION, **{f"s_{k}": s[k] for k in SESSION_FIELDS}} for s in sessions]
    if rows:
        # dtype=object: an all-None string column would otherwise become float64 NaN, which Arrow cannot make a string.
        frames.append(pd.DataFrame(rows, columns=list(_OUTPUT_COLUMNS), dtype=object))
    if not frames:
        return pd.DataFrame(columns=list(_OUTPUT_COLUMNS), dtype=object)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


def _networks(dhcp_networks: list[str]) -> list:
    nets = []
    for cidr in dhcp_networks:
        try:
            nets.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError as exc:
            raise ValueError(f"DHCP network {cidr!r} is not a CIDR: {exc}") from None
    return nets


def _apply(book: LeaseBook, pdfs: Iterator[pd.DataFrame] | list[pd.DataFrame], networks: list, limits: Limits,
           flush: bool) -> pd.DataFrame:
    """One key's new rows through its lease book; rows left waiting are copied whole into the book."""
    frames = [p for p in pdfs if len(p)]
    pdf = frames[0] if len(frames) == 1 else (pd.concat(frames, ignore_index=True) if frames else None)
    rows = _light_rows(pdf, networks) if pdf is not None else []
    events, sessions = process(book, rows, limits, flush=flush)
    book.waiting = [_stored(r, pdf) if "i" in r else r for r in book.waiting]
    return _output(events, sessions, pdf)


def attribute_stream(parsed: DataFrame, dhcp_networks: list[str], limits: Limits = DEFAULT_LIMITS,
                     hold_s: float | None = None) -> DataFrame:
    """Streaming: ``parsed`` -> unified rows. An event waits for its lease at most ``hold_s`` seconds of processing
    time (default :attr:`Limits.wait_s`); 0 releases it at the next micro-batch (drained runs)."""
    networks = _networks(dhcp_networks)
    hold_ms = max(1, int((limits.wait_s if hold_s is None else hold_s) * 1000))
    idle_ms = max(1, int(limits.history_s * 1000))

    def step(key: tuple, pdfs: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
        (ip,) = key
        if ip.startswith(PASS_KEY_PREFIX):
            yield from _passthrough(pdfs)
            return
        book = LeaseBook.from_json(state.get[0]) if state.exists else LeaseBook(ip)
        if state.hasTimedOut:
            if not book.waiting:  # idle key: close what is open and forget it
                state.remove()
                yield _output([], book.close_all(limits), None)
                return
            out = _apply(book, [], networks, limits, flush=True)  # the hold is over: release, attributed or not
        else:
            out = _apply(book, pdfs, networks, limits, flush=False)
        state.update((book.to_json(),))
        state.setTimeoutDuration(hold_ms if book.waiting else idle_ms)
        yield out

    return _operator_input(parsed).groupBy("key").applyInPandasWithState(
        step, _OUTPUT_SCHEMA, _STATE_SCHEMA, "append", GroupStateTimeout.ProcessingTimeTimeout)


def attribute_batch(parsed: DataFrame, dhcp_networks: list[str], limits: Limits = DEFAULT_LIMITS) -> DataFrame:
    """Batch: the same per-key code over a static ``parsed`` (history, backfills, the parity test)."""
    networks = _networks(dhcp_networks)

    def step(key: tuple, pdf: pd.DataFrame) -> pd.DataFrame:
        (ip,) = key
        if ip.startswith(PASS_KEY_PREFIX):
            out = list(_passthrough([pdf]))
            return out[0] if out else pd.DataFrame(columns=list(_OUTPUT_COLUMNS), dtype=object)
        return _apply(LeaseBook(ip), [pdf], networks, limits, flush=True)

    return _operator_input(parsed).groupBy("key").applyInPandas(step, _OUTPUT_SCHEMA)


def events_from(unified: DataFrame) -> DataFrame:
    """The parsed records back as the core columns (with ``detail``), with the lease holder in ``host.*`` (events with no reporting host)
    and the resolved name in ``destination.domain``."""
    rows = unified.where((F.col("kind") == KIND_RECORD) & F.col("payload").isNotNull())
    ecs = rows.select(F.from_json("payload", CORE_SCHEMA, JSON_OPTIONS).alias("e"), "host_name", "host_mac", "host_ip",
                      "dest_domain")
    host_type = CORE_SCHEMA["host"].dataType
    attributed = {"name": F.col("host_name"), "mac": F.col("host_mac"),
                  "ip": F.when(F.col("host_ip").isNotNull(), F.array(F.col("host_ip")))}
    host = F.when(F.col("host_name").isNull() & F.col("host_mac").isNull(), F.col("e.host")).otherwise(
        F.struct(*[F.coalesce(F.col(f"e.host.{f.name}"), attributed[f.name]).alias(f.name) if f.name in attributed
                   else F.col(f"e.host.{f.name}").alias(f.name) for f in host_type.fields]))
    destination = F.when(F.col("dest_domain").isNotNull() & F.col("e.destination.domain").isNull(),
                         F.col("e.destination").withField("domain", F.col("dest_domain"))
                         ).otherwise(F.col("e.destination"))
    replaced = {"host": host, "destination": destination}
    return ecs.select(*[replaced.get(c, F.col(f"e.`{c}`")).alias(c) for c in CORE_COLUMNS])


def sessions_from(unified: DataFrame) -> DataFrame:
    """The ``session`` rows: the ``dhcp_sessions`` table (an append-only log of session state changes)."""
    ts = {"lease_start", "lease_end", "updated_at"}
    return unified.where(F.col("kind") == KIND_SESSION).select(
        *[(F.timestamp_micros((F.col(f"s_{c}") * 1e6).cast("long")) if c in ts else F.col(f"s_{c}")).alias(c)
          for c in SESSION_FIELDS])


def _raw_columns() -> dict[str, Column]:
    return {
        "key": F.col("r_key"), "value": F.col("r_value"), "topic": F.col("r_topic"),
        "partition": F.col("r_partition"), "offset": F.col("r_offset"),
        "timestamp": F.timestamp_micros(F.col("r_timestamp_us")),
        "headers": F.from_json(F.col("r_headers"), HEADERS_TYPE),
        "ingested_at": F.timestamp_micros(F.col("r_ingested_us")),
    }


def records_from(unified: DataFrame) -> DataFrame:
    """Every record as it came from Kafka (the ``bronze`` table: :data:`BRONZE_COLUMNS`)."""
    raw = _raw_columns()
    return unified.where(F.col("kind") == KIND_RECORD).select(*[raw[c].alias(c) for c in BRONZE_COLUMNS])


def quarantine_from(unified: DataFrame, schema: StructType = QUARANTINE_SCHEMA) -> DataFrame:
    """The records that could not be parsed: raw bytes, coordinates, the parser tried and the reason."""
    raw = _raw_columns()
    rows = unified.where((F.col("kind") == KIND_RECORD) & F.col("err_reason").isNotNull())
    named = {**raw, "parser": F.col("err_parser"), "error": F.col("err_reason")}
    return rows.select(*[named[c].cast(schema[c].dataType).alias(c) for c in QUARANTINE_COLUMNS])
