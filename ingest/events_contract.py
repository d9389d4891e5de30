"""The ``events`` contract, version 2: a narrow typed ECS core plus one per-source ``detail`` column.

Why (docs/architecture.md, decision 6): one struct of every field of every source (412 leaves) cost 400–500 µs of core
time per event to parse and seconds to plan per micro-batch; any one event fills a few dozen of them. Here:

* the **core** holds the ECS fields that cross-source consumers read — rules, correlations, DHCP attribution,
  enrichment, ML features, entity pages, alert evidence — nested as ECS nests them (``source.ip`` is field ``ip``
  of the top-level struct ``source``), typed, null when a source does not fill them;
* **detail** (``map<string, string>``) holds each source's own fields under their own names (Zeek's ``conn_state``,
  a Windows event's ``GrantedAccess``, sshd's ``system.auth.ssh.method``); every value is text (arrays and objects
  as JSON). Each source's ``fields.yml`` gives the type of every detail key and says which of its fields land in
  the core (:mod:`ingest.sources`); the typed per-source views and :mod:`ingest.field_resolver` read it.

This module owns the core's field list (:data:`CORE_FIELDS`), its Spark and Arrow schemas, and
:func:`to_arrow`, which turns parsed events (flat ``{dotted path: value}`` dicts) into an Arrow record batch of
that schema. Enrichment adds its own columns after the parse (:data:`ENRICHMENT_FIELDS`).

Python value types per Spark type: ``timestamp`` — int microseconds since the epoch, UTC; ``int``/``bigint`` — int;
``double`` — float; ``boolean`` — bool; ``array<string>`` — list of str; ``map<string,string>`` — dict of str.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

DETAIL = "detail"


@dataclass(frozen=True)
class CoreField:
    path: str
    type: str  # Spark DDL
    description: str


def _fields(*rows: tuple[str, str, str]) -> tuple[CoreField, ...]:
    return tuple(CoreField(*row) for row in rows)


# Order is column order (a struct's leaves in the order of their first appearance).
CORE_FIELDS: tuple[CoreField, ...] = _fields(
    ("@timestamp", "timestamp", "When the event happened, as the source logged it (UTC)."),
    ("message", "string", "The log message as a human reads it (the syslog MSG, Zeek's notice text, ...)."),
    ("tags", "array<string>", "Markers set by the parse (e.g. syslog_timestamp_missing)."),
    ("event.id", "string", "Deterministic id: the first 128 bits of SHA-256 of topic/partition/offset[/file]."),
    ("event.kind", "string", "ECS event.kind: event."),
    ("event.module", "string", "The family of the source (system, zeek, windows, dhcpd)."),
    ("event.dataset", "string", "The source's dataset: system.auth, dhcpd, zeek.conn, windows.security, ..."),
    ("event.provider", "string", "The software that logged it, where the source names one (Windows provider)."),
    ("event.code", "string", "The source's own event code (Windows event id)."),
    ("event.category", "array<string>", "ECS categories: authentication, network, process, iam, ..."),
    ("event.type", "array<string>", "ECS types: start, end, info, connection, protocol, creation, ..."),
    ("event.action", "string", "What happened, in the source's vocabulary (ssh_login, dhcpack, ...)."),
    ("event.outcome", "string", "success or failure, where the event says."),
    ("event.duration", "bigint", "Duration in nanoseconds (Zeek's duration)."),
    ("event.created", "timestamp", "When the record reached Kafka (the record's timestamp)."),
    ("event.ingested", "timestamp", "When the pipeline ingested the record."),
    ("event.original", "string", "The raw log line, always."),
    ("host.name", "string", "The host the event is about: the reporting host, or the DHCP lease holder."),
    ("host.hostname", "string", "The hostname the log line itself names (syslog HOSTNAME, Windows Computer)."),
    ("host.ip", "array<string>", "The host's addresses (from DHCP attribution)."),
    ("host.mac", "string", "The host's MAC address (from DHCP attribution)."),
    ("source.ip", "string", "Source address, a valid IPv4/IPv6 (IPv6 lower-cased)."),
    ("source.port", "int", "Source port."),
    ("source.mac", "string", "Source MAC address in ECS spelling (00-0C-29-AA-0B-01)."),
    ("source.domain", "string", "Source host name, lower-cased (a name where the log gave no address)."),
    ("source.bytes", "bigint", "Bytes sent by the source."),
    ("destination.ip", "string", "Destination address, a valid IPv4/IPv6."),
    ("destination.port", "int", "Destination port."),
    ("destination.mac", "string", "Destination MAC address in ECS spelling."),
    ("destination.domain", "string", "Destination host name, lower-cased."),
    ("destination.bytes", "bigint", "Bytes sent by the destination."),
    ("network.transport", "string", "tcp, udp, icmp, ..."),
    ("network.protocol", "string", "Application protocol (Zeek's service: ssh, dns, http, ...)."),
    ("network.type", "string", "ipv4 or ipv6, from the addresses."),
    ("network.bytes", "bigint", "Bytes in both directions."),
    ("network.community_id", "string", "Community ID flow hash, where the source gives it."),
    ("user.name", "string", "The user the event is about (logged on, authenticating, acting)."),
    ("user.id", "string", "The user's id (uid, SID)."),
    ("user.domain", "string", "The user's domain (Windows)."),
    ("user.effective.name", "string", "The user an action ran as (sudo's target user)."),
    ("user.target.name", "string", "The account an action was done to (created, changed, added to a group)."),
    ("group.name", "string", "The group the event is about (created, changed, a member added)."),
    ("process.name", "string", "The process's name (the syslog program, the image's file name)."),
    ("process.pid", "bigint", "The process id."),
    ("process.executable", "string", "Full path of the process's executable."),
    ("process.command_line", "string", "The process's full command line."),
    ("process.parent.pid", "bigint", "The parent process's id."),
    ("process.parent.name", "string", "The parent process's name."),
    ("process.parent.executable", "string", "Full path of the parent's executable."),
    ("process.parent.command_line", "string", "The parent's full command line."),
    ("file.path", "string", "Full path of the file the event is about."),
    ("file.name", "string", "The file's name."),
    ("dns.question.name", "string", "The name queried."),
    ("dns.question.type", "string", "The query type (A, AAAA, TXT, ...)."),
    ("dns.response_code", "string", "The response code (NOERROR, NXDOMAIN, ...)."),
    ("dns.resolved_ip", "array<string>", "Addresses in the answers."),
    ("url.original", "string", "The URL as requested."),
    ("url.domain", "string", "The URL's host."),
    ("url.path", "string", "The URL's path."),
    ("http.request.method", "string", "HTTP method."),
    ("http.response.status_code", "int", "HTTP status code."),
    ("user_agent.original", "string", "The HTTP User-Agent."),
    ("tls.version", "string", "TLS version (1.2, 1.3)."),
    ("tls.client.server_name", "string", "The SNI the client asked for."),
    ("tls.client.ja3", "string", "JA3 fingerprint of the client hello."),
    ("tls.server.ja3s", "string", "JA3S fingerprint of the server hello."),
    ("related.ip", "array<string>", "Every address the event names (for search)."),
    ("related.user", "array<string>", "Every user the event names."),
    ("related.hosts", "array<string>", "Every host name the event names, lower-cased."),
    (DETAIL, "map<string,string>", "The source's own fields by their own names, as text (see fields.yml)."),
)

# Added by enrichment (enrich/), after the parse: network zones and geo, asset and user context, threat intel.
ENRICHMENT_FIELDS: tuple[CoreField, ...] = _fields(
    ("source.geo.country_iso_code", "string", "Country of the source's network."),
    ("source.geo.name", "string", "Site of the source's network."),
    ("destination.geo.country_iso_code", "string", "Country of the destination's network."),
    ("destination.geo.name", "string", "Site of the destination's network."),
    ("network.direction", "string", "inbound, outbound, internal or external, from the networks table."),
    ("nightjar.source_zone", "string", "Zone of the source's network."),
    ("nightjar.destination_zone", "string", "Zone of the destination's network."),
    ("nightjar.asset.host", "string", "The asset's host name."),
    ("nightjar.asset.owner", "string", "The asset's owner."),
    ("nightjar.asset.role", "string", "The asset's role (server, workstation, backup, ...)."),
    ("nightjar.asset.criticality", "string", "The asset's criticality."),
    ("nightjar.asset.zone", "string", "The asset's zone."),
    ("nightjar.asset.authorized_scanner", "boolean", "The asset may scan the network."),
    ("nightjar.user.department", "string", "The user's department."),
    ("nightjar.user.is_admin", "boolean", "The user is an administrator."),
    ("nightjar.user.country", "string", "The user's home country."),
    ("threat.indicator.type", "string", "Kind of the matched indicator (ip, domain)."),
    ("threat.indicator.value", "string", "The matched indicator."),
    ("threat.indicator.description", "string", "What the indicator stands for."),
    ("threat.indicator.provider", "string", "Who published the indicator (the iocs table's source)."),
    ("threat.indicator.first_seen", "timestamp", "When the indicator was first seen (the iocs table's first_seen)."),
    ("threat.indicator.matched_field", "string", "The event field that matched."),
)

CORE_PATHS: tuple[str, ...] = tuple(f.path for f in CORE_FIELDS)
CORE_TYPES: Mapping[str, str] = {f.path: f.type for f in CORE_FIELDS}

_ARROW_ATOMIC: dict[str, pa.DataType] = {
    "string": pa.string(), "int": pa.int32(), "bigint": pa.int64(), "double": pa.float64(),
    "boolean": pa.bool_(), "timestamp": pa.timestamp("us", tz="UTC"),
    "array<string>": pa.list_(pa.string()), "map<string,string>": pa.map_(pa.string(), pa.string()),
}


def arrow_type(ddl: str) -> pa.DataType:
    try:
        return _ARROW_ATOMIC[ddl.replace(" ", "")]
    except KeyError:
        raise ValueError(f"type {ddl!r} is not one the events contract uses ({', '.join(_ARROW_ATOMIC)})") from None


def path_tree(paths: Sequence[str]) -> dict[str, Any]:
    """``{"source": {"ip": "source.ip", ...}, "@timestamp": "@timestamp", ...}`` (leaves are the dotted paths)."""
    root: dict[str, Any] = {}
    for path in paths:
        parts = [path] if path.startswith("@") else path.split(".")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"events contract: {path} nests under a leaf")
        if parts[-1] in node:
            raise ValueError(f"events contract: {path} declared twice")
        node[parts[-1]] = path
    return root


_CORE_TREE = path_tree(CORE_PATHS)
CORE_COLUMNS: tuple[str, ...] = tuple(_CORE_TREE)


def arrow_schema(fields: Iterable[CoreField]) -> pa.Schema:
    """``fields`` nested as ECS nests them, as an Arrow schema (a Spark one: ``from_arrow_schema`` of it)."""
    fields = tuple(fields)
    types = {f.path: arrow_type(f.type) for f in fields}

    def field(name: str, node: dict[str, Any] | str) -> pa.Field:
        if isinstance(node, str):
            return pa.field(name, types[node])
        return pa.field(name, pa.struct([field(n, child) for n, child in node.items()]))

    return pa.schema([field(n, node) for n, node in path_tree([f.path for f in fields]).items()])


CORE_ARROW_SCHEMA: pa.Schema = arrow_schema(CORE_FIELDS)


def spark_ddl(fields: Iterable[CoreField] = CORE_FIELDS) -> str:
    """The Spark DDL schema string (``` `@timestamp` timestamp, event struct<id: string, ...>, ...```)."""
    tree = path_tree([f.path for f in fields])
    types = {f.path: f.type for f in fields}

    def ddl(name: str, node: dict[str, Any] | str) -> str:
        if isinstance(node, str):
            return f"`{name}` {types[node]}"
        return f"`{name}` struct<{', '.join(ddl(n, c) for n, c in node.items())}>"

    return ", ".join(ddl(n, node) for n, node in tree.items())


def to_arrow(events: Sequence[Mapping[str, Any]]) -> pa.StructArray:
    """The core columns of ``events`` (flat ``{dotted path: Python value}``; absent paths are null) as one struct
    array whose fields are :data:`CORE_COLUMNS`. A nested struct whose leaves are all null is itself null (as ECS
    JSON leaves such an object out, and so that ``source IS NULL`` means "no source fields")."""
    n = len(events)
    # One pass over the events filling only the paths each one has (a dozen or two of the ~70): cheaper than asking
    # every event for every path.
    columns: dict[str, list[Any]] = {path: [None] * n for path in CORE_PATHS}
    for i, event in enumerate(events):
        for path, value in event.items():
            column = columns.get(path)
            if column is not None:
                column[i] = value

    def build(node: dict[str, Any] | str) -> pa.Array:
        if isinstance(node, str):
            return pa.array(columns[node], type=_LEAF_TYPES[node], size=n)
        children = {name: build(child) for name, child in node.items()}
        valid = None
        for arr in children.values():
            if arr.null_count == n:
                continue
            present = arr.is_valid()
            valid = present if valid is None else pc.or_(valid, present)
        mask = pa.array([True] * n) if valid is None else pc.invert(valid)
        return pa.StructArray.from_arrays(list(children.values()), names=list(children), mask=mask)

    arrays = [build(node) for node in _CORE_TREE.values()]
    return pa.StructArray.from_arrays(arrays, names=list(_CORE_TREE))


_LEAF_TYPES: dict[str, pa.DataType] = {path: arrow_type(typ) for path, typ in CORE_TYPES.items()}


def as_ecs_json(event: Mapping[str, Any]) -> dict[str, Any]:
    """One flat event as nested ECS JSON (what ``nightjar parse`` prints and the golden fixtures hold): nulls and
    empty structs left out, timestamps as ISO 8601 UTC with microseconds."""
    out: dict[str, Any] = {}
    for path in CORE_PATHS:
        value = event.get(path)
        if value is None or value == {} or value == []:
            continue
        if CORE_TYPES[path] == "timestamp":
            value = iso_micros(value)
        elif path == DETAIL:
            value = dict(sorted(value.items()))
        parts = [path] if path.startswith("@") else path.split(".")
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def iso_micros(micros: int) -> str:
    """``2026-02-21T21:54:44.000000Z`` for epoch microseconds (UTC)."""
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=micros)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
