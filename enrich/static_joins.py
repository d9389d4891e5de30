"""Stream-static enrichment: network zones and geo, asset and user context, threat-intel matches.

:func:`enrich_static` is a plain DataFrame -> DataFrame function over ``events`` rows (contract v2: the core
columns of :mod:`ingest.events_contract`; the streaming pipeline calls it inside ``foreachBatch`` with the
:class:`~enrich.reference_data.ReferenceData` current for that micro-batch; batch code calls it the same way).

The joins are lookups in one ``mapInArrow`` node: the reference tables (hundreds to thousands of rows, at most one
per key, see :mod:`enrich.reference_data`) travel with the function as Arrow IPC bytes, each Python worker turns a
version of them into dictionaries once, and each event row gets its networks, asset, user and first IOC match from
those. Why not Spark joins: the eleven broadcast joins this replaced cost four to five broadcast jobs in *every*
micro-batch whatever its size (0.7–1.1 s for a 110-row batch on a quiet machine, more when the windowed query holds
the cores), a fixed cost that decided the live event→alert latency (docs/performance.md, "Reference joins").

Each input row gives exactly one output row. Input columns are kept as they are; what is added is exactly
:data:`ingest.events_contract.ENRICHMENT_FIELDS`, with the contract's types and nesting:

* ``source.geo.{country_iso_code,name}``, ``destination.geo.{…}`` — the network's country and site;
* ``network.direction`` — ECS ``inbound|outbound|internal|external`` from the networks' ``internal`` flag;
* ``nightjar.{source_zone, destination_zone, asset{…}, user{…}}`` — Nightjar's own context;
* ``threat.indicator.{type, value, description, provider, first_seen, matched_field}`` — the first IOC
  match in :data:`IOC_FIELDS` order.

A struct that enrichment builds is null when all its leaves are (``threat`` is null when nothing matched). An
existing struct column (``source``, ``network``, …) keeps its other fields and gets these set; a null one becomes a
struct of nulls with them set only when one of them is not null.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql.types import DataType, StructField, StructType, _parse_datatype_string

from enrich.reference_data import (
    BUCKET,
    BUCKET_SHIFT,
    IOC_KIND,
    IOC_KIND_DOMAIN,
    IOC_KIND_IP,
    KEY,
    RANGE_END,
    RANGE_START,
    ReferenceData,
)
from ingest.events_contract import ENRICHMENT_FIELDS, arrow_type, path_tree

ENRICHMENT_TYPES: dict[str, str] = {f.path: f.type for f in ENRICHMENT_FIELDS}
_TREE: dict[str, Any] = path_tree([f.path for f in ENRICHMENT_FIELDS])

DIRECTION_INBOUND, DIRECTION_OUTBOUND = "inbound", "outbound"
DIRECTION_INTERNAL, DIRECTION_EXTERNAL = "internal", "external"
ASSET_FIELDS: tuple[str, ...] = ("host", "owner", "role", "criticality", "zone", "authorized_scanner")
USER_FIELDS: tuple[str, ...] = ("department", "is_admin", "country")
NETWORK_FIELDS: tuple[str, ...] = ("country", "site", "zone", "internal")
MATCHED_FIELD = "matched_field"
# threat.indicator field -> iocs column
INDICATOR_FIELDS: dict[str, str] = {
    "type": "type", "value": "indicator", "description": "threat", "provider": "source", "first_seen": "first_seen",
}
# ECS fields checked against the IOCs, in priority order (the first match is reported) and the IOC kind each
# is compared with. IPs compare lower-cased (IPv6), domains lower-cased without a trailing root dot.
IOC_FIELDS: tuple[tuple[str, str], ...] = (
    ("destination.ip", IOC_KIND_IP),
    ("source.ip", IOC_KIND_IP),
    ("destination.domain", IOC_KIND_DOMAIN),
    ("dns.question.name", IOC_KIND_DOMAIN),
    ("url.domain", IOC_KIND_DOMAIN),
    ("tls.client.server_name", IOC_KIND_DOMAIN),
)
# The event fields the lookups read.
_INPUTS: tuple[str, ...] = ("source.ip", "destination.ip", "host.name", "host.hostname", "user.name",
                            *dict.fromkeys(path for path, _ in IOC_FIELDS))
_IPV4 = re.compile(r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}")


def ipv4_to_int(ip: str | None) -> int | None:
    """The IPv4 address as a number (a.b.c.d -> a·2²⁴ + b·2¹⁶ + c·2⁸ + d); None for IPv6 and non-addresses (a
    leading zero, as in ``01.2.3.4``, is not an address)."""
    if ip is None or not _IPV4.fullmatch(ip):
        return None
    a, b, c, d = (int(p) for p in ip.split("."))
    return (a << 24) | (b << 16) | (c << 8) | d


def _ip_key(value: str) -> str:
    return value.strip(" ").lower()  # Spark's trim() removes spaces only; kept so for the same keys as before


def _domain_key(value: str) -> str:
    # Same normalisation as reference_data._normalize_domain (the IOC side).
    key = value.strip(" ").lower()
    return key[:-1] if key.endswith(".") else key


# -- the output schema ------------------------------------------------------------------------------------------
def _node_type(node: dict[str, Any] | str) -> DataType:
    if isinstance(node, str):
        return _parse_datatype_string(ENRICHMENT_TYPES[node])
    return StructType([StructField(name, _node_type(child), True) for name, child in node.items()])


def _merged_type(typ: DataType, node: dict[str, Any], column: str) -> StructType:
    """An existing struct column with the enrichment's children set: replaced in place, new ones appended (as
    ``Column.withField`` does)."""
    if not isinstance(typ, StructType):
        raise TypeError(f"column {column} is {typ.simpleString()}, not a struct")
    fields = list(typ.fields)
    names = [f.name for f in fields]
    for name, child in node.items():
        new = StructField(name, _node_type(child), True)
        if name in names:
            fields[names.index(name)] = new
        else:
            fields.append(new)
    return StructType(fields)


def enriched_schema(schema: StructType) -> StructType:
    """The schema :func:`enrich_static` gives for input ``schema``."""
    fields = [StructField(f.name, _merged_type(f.dataType, _TREE[f.name], f.name), True) if f.name in _TREE else f
              for f in schema.fields]
    fields += [StructField(column, _node_type(node), True) for column, node in _TREE.items()
               if column not in schema.fieldNames()]
    return StructType(fields)


# -- the lookups (on the executors) ------------------------------------------------------------------------------
def _read_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(data).read_all()


class Lookups:
    """The reference tables as dictionaries: key -> payload, and the network ranges per /8 bucket."""

    def __init__(self, tables: dict[str, pa.Table]) -> None:
        def by_key(table: pa.Table, fields: tuple[str, ...]) -> dict[str, dict[str, Any]]:
            return {row[KEY]: {f: row[f] for f in fields} for row in table.to_pylist() if row[KEY] is not None}

        self.assets = by_key(tables["assets"], ASSET_FIELDS)
        self.static_assets = by_key(tables["static_assets"], ASSET_FIELDS)
        self.users = by_key(tables["users"], USER_FIELDS)
        self.iocs = {f"{row[IOC_KIND]}:{row[KEY]}": {n: row[c] for n, c in INDICATOR_FIELDS.items()}
                     for row in tables["iocs"].to_pylist() if row[KEY] is not None}
        buckets: dict[int, list[tuple[int, int, dict[str, Any]]]] = {}
        for row in tables["network_ranges"].to_pylist():
            buckets.setdefault(row[BUCKET], []).append(
                (row[RANGE_START], row[RANGE_END], {f: row[f] for f in NETWORK_FIELDS}))
        self._ranges = {b: sorted(rs, key=lambda r: r[0]) for b, rs in buckets.items()}
        self._starts = {b: [r[0] for r in rs] for b, rs in self._ranges.items()}

    def network(self, ip: str | None) -> dict[str, Any] | None:
        """The most specific network of an IPv4 address (the ranges do not overlap), or None."""
        value = ipv4_to_int(ip)
        if value is None:
            return None
        bucket = value >> BUCKET_SHIFT
        starts = self._starts.get(bucket)
        if not starts:
            return None
        i = bisect.bisect_right(starts, value) - 1
        if i < 0:
            return None
        start, end, payload = self._ranges[bucket][i]
        return payload if start <= value <= end else None

    def values(self, rows: dict[str, list[Any]], n: int) -> dict[str, list[Any]]:
        """Every enrichment leaf (ENRICHMENT_FIELDS path -> one value per row) for the input leaves ``rows``."""
        out: dict[str, list[Any]] = {path: [None] * n for path in ENRICHMENT_TYPES}
        src_ips, dst_ips = rows["source.ip"], rows["destination.ip"]
        host_names, hostnames, users = rows["host.name"], rows["host.hostname"], rows["user.name"]
        iocs = [(path, kind, rows[path]) for path, kind in IOC_FIELDS]
        for i in range(n):
            src_ip, dst_ip = src_ips[i], dst_ips[i]
            src, dst = self.network(src_ip), self.network(dst_ip)
            if src is not None:
                out["source.geo.country_iso_code"][i], out["source.geo.name"][i] = src["country"], src["site"]
                out["nightjar.source_zone"][i] = src["zone"]
            if dst is not None:
                out["destination.geo.country_iso_code"][i], out["destination.geo.name"][i] = dst["country"], dst["site"]
                out["nightjar.destination_zone"][i] = dst["zone"]
            if src_ip is not None and dst_ip is not None:
                src_in, dst_in = bool(src and src["internal"]), bool(dst and dst["internal"])
                out["network.direction"][i] = (DIRECTION_INTERNAL if src_in and dst_in else DIRECTION_OUTBOUND
                                               if src_in else DIRECTION_INBOUND if dst_in else DIRECTION_EXTERNAL)
            # Asset: by host.name when the event names its host (syslog host, DHCP attribution); otherwise by the
            # source address of a static host, then by host.hostname.
            name = host_names[i] if host_names[i] is not None else hostnames[i]
            by_name = self.assets.get(name.lower()) if name is not None else None
            asset = by_name if host_names[i] is not None else (
                self.static_assets.get(src_ip) if src_ip is not None else None) or by_name
            if asset is not None:
                for f in ASSET_FIELDS:
                    out[f"nightjar.asset.{f}"][i] = asset[f]
            user = self.users.get(users[i]) if users[i] is not None else None
            if user is not None:
                for f in USER_FIELDS:
                    out[f"nightjar.user.{f}"][i] = user[f]
            for path, kind, values in iocs:
                value = values[i]
                if value is None:
                    continue
                hit = self.iocs.get(f"{kind}:{_ip_key(value) if kind == IOC_KIND_IP else _domain_key(value)}")
                if hit is not None:
                    for f, v in hit.items():
                        out[f"threat.indicator.{f}"][i] = v
                    out[f"threat.indicator.{MATCHED_FIELD}"][i] = path
                    break
        return out


_LOOKUPS: dict[str, Lookups] = {}  # per Python worker: reference version (digest) -> its dictionaries


def _lookups(digest: str, blobs: dict[str, bytes]) -> Lookups:
    found = _LOOKUPS.get(digest)
    if found is None:
        _LOOKUPS.clear()  # one version at a time: the previous one is not asked for again
        found = _LOOKUPS[digest] = Lookups({name: _read_ipc(blob) for name, blob in blobs.items()})
    return found


def _leaf(batch: pa.RecordBatch, path: str) -> list[Any]:
    """The values of a dotted leaf of ``batch`` (nulls where a parent struct is null, or where the leaf is absent)."""
    head, *rest = path.split(".")
    if head not in batch.schema.names:
        return [None] * batch.num_rows
    array: pa.Array = batch.column(head)
    for part in rest:
        if not pa.types.is_struct(array.type) or array.type.get_field_index(part) < 0:
            return [None] * batch.num_rows
        array = pc.struct_field(array, [array.type.get_field_index(part)])  # one child, parent nulls kept
    return array.to_pylist()


def _build(node: dict[str, Any] | str, values: dict[str, list[Any]], n: int) -> pa.Array:
    """A leaf's values as an array of its contract type, or a struct of its children that is null where all of
    them are."""
    if isinstance(node, str):
        return pa.array(values[node], type=arrow_type(ENRICHMENT_TYPES[node]))
    children = {name: _build(child, values, n) for name, child in node.items()}
    return _struct(children, _all_null(children.values()))


def _all_null(children: Any) -> pa.BooleanArray:
    valid = None
    for child in children:
        valid = child.is_valid() if valid is None else pc.or_(valid, child.is_valid())
    return pc.invert(valid)


def _struct(children: dict[str, pa.Array], nulls: pa.BooleanArray) -> pa.StructArray:
    return pa.StructArray.from_arrays(list(children.values()), fields=[
        pa.field(name, child.type) for name, child in children.items()], mask=nulls)


def _merged(original: pa.StructArray, node: dict[str, Any], values: dict[str, list[Any]], n: int) -> pa.StructArray:
    """``original`` with the enrichment's children set; null where it was null and every new child is null."""
    children = dict(zip([f.name for f in original.type], original.flatten(), strict=True))
    new = {name: _build(child, values, n) for name, child in node.items()}
    for name, array in new.items():
        children[name] = array  # replaced in place or appended, as the schema says
    return _struct(children, pc.and_(original.is_null(), _all_null(new.values())))


def _enricher(blobs: dict[str, bytes], digest: str, target: pa.Schema) -> Callable[[Iterator[pa.RecordBatch]],
                                                                                    Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: a closure over plain values only (it is pickled to the executors)."""

    def enrich(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lookups = _lookups(digest, blobs)
        for batch in batches:
            n = batch.num_rows
            values = lookups.values({path: _leaf(batch, path) for path in _INPUTS}, n)
            columns: dict[str, pa.Array] = {name: batch.column(name) for name in batch.schema.names}
            for column, node in _TREE.items():
                original = columns.get(column)
                columns[column] = _build(node, values, n) if original is None else _merged(original, node, values, n)
            yield pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in target], schema=target)

    return enrich


def enrich_static(events: DataFrame, ref: ReferenceData) -> DataFrame:
    """``events`` with the reference-table fields added (see the module docstring); one row per input row.

    Works on batch and streaming DataFrames alike, with any mix of event sources.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = enriched_schema(events.schema)
    digest, blobs = ref.serialized
    target = to_arrow_schema(schema, timezone="UTC")
    return events.mapInArrow(_enricher(blobs, digest, target), schema)
