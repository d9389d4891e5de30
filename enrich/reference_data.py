"""The reference tables (assets, users, networks, iocs) as small Arrow tables, reloaded when they change.

The streaming pipeline looks every micro-batch's events up in these tables (see :mod:`enrich.static_joins`). They
are small and change rarely (an analyst adds an IOC, the generator re-seeds the lake), so :class:`ReferenceCache`
reads each one through ``deltalake`` -> Arrow on the driver, and on each later call only asks Delta for the
table's version: an unchanged table costs one log check, a new version is read again, so a new IOC is matched from
the next micro-batch on without a restart.

The tables are prepared for lookups that cannot duplicate an event: every lookup table holds at most one
row per join key (duplicates are resolved here, deterministically), and the networks are flattened into
non-overlapping IPv4 ranges in which each address belongs to its most specific network.
"""

from __future__ import annotations

import hashlib
import heapq
import ipaddress
import logging
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from core.config import TABLE_ASSETS, TABLE_IOCS, TABLE_NETWORKS, TABLE_USERS, Settings

log = logging.getLogger(__name__)

_TS = pa.timestamp("us", tz="UTC")
# The columns enrichment reads, as the generator writes them (generator/reference_tables.py). A table that
# lacks a column gets it as nulls, extra columns are ignored: a hand-edited table still loads.
SCHEMAS: dict[str, pa.Schema] = {
    TABLE_ASSETS: pa.schema([("host", pa.string()), ("mac", pa.string()), ("ip", pa.string()),
                             ("owner", pa.string()), ("zone", pa.string()), ("site", pa.string()),
                             ("role", pa.string()), ("criticality", pa.string()),
                             ("authorized_scanner", pa.bool_()), ("dhcp", pa.bool_())]),
    TABLE_USERS: pa.schema([("name", pa.string()), ("full_name", pa.string()), ("department", pa.string()),
                            ("is_admin", pa.bool_()), ("site", pa.string()), ("country", pa.string()),
                            ("uid", pa.int32()), ("workstation", pa.string())]),
    TABLE_NETWORKS: pa.schema([("cidr", pa.string()), ("zone", pa.string()), ("site", pa.string()),
                               ("country", pa.string()), ("internal", pa.bool_()), ("dhcp", pa.bool_())]),
    TABLE_IOCS: pa.schema([("indicator", pa.string()), ("type", pa.string()), ("threat", pa.string()),
                           ("source", pa.string()), ("first_seen", _TS)]),
}
REFERENCE_TABLES: tuple[str, ...] = (TABLE_ASSETS, TABLE_USERS, TABLE_NETWORKS, TABLE_IOCS)

# Join keys added to the prepared tables (read by enrich.static_joins).
KEY = "key"  # assets: lower(host); static assets: ip; users: name; iocs: ip or lower(domain)
IOC_KIND = "kind"  # iocs: "ip" or "domain" (every IOC type other than ip is matched against domain fields)
IOC_KIND_IP = "ip"
IOC_KIND_DOMAIN = "domain"
RANGE_START, RANGE_END, PREFIX_LEN, BUCKET = "start", "end", "prefix_len", "bucket"
# Networks are split at /8 boundaries so that the range join has an equality on the first octet: Spark then
# plans a broadcast hash join (plus a range filter) instead of a nested loop over every range per event.
BUCKET_SHIFT = 24

_NETWORK_RANGE_SCHEMA = pa.schema([(BUCKET, pa.int64()), (RANGE_START, pa.int64()), (RANGE_END, pa.int64()),
                                   (PREFIX_LEN, pa.int32()), *SCHEMAS[TABLE_NETWORKS]])
_NETWORKS_SCHEMA = pa.schema([*SCHEMAS[TABLE_NETWORKS], (RANGE_START, pa.int64()), (RANGE_END, pa.int64()),
                              (PREFIX_LEN, pa.int32())])


@dataclass(frozen=True)
class ReferenceData:
    """The reference tables of one moment, prepared for :func:`enrich.static_joins.enrich_static`.

    Every lookup table has at most one row per key, so a lookup never multiplies an event.
    """

    assets: pa.Table  # asset columns + KEY = lower(host), one row per host name
    static_assets: pa.Table  # asset columns + KEY = ip, one row per address of a non-DHCP host
    users: pa.Table  # user columns + KEY = name
    networks: pa.Table  # as stored (valid IPv4 CIDRs only) + RANGE_START, RANGE_END (longs), PREFIX_LEN
    network_ranges: pa.Table  # non-overlapping: each IPv4 address in at most one row, its most specific network
    iocs: pa.Table  # ioc columns + IOC_KIND + KEY, one row per (kind, key)
    versions: dict[str, int | None] = field(default_factory=dict)  # Delta version per table (None: missing)

    @cached_property
    def serialized(self) -> tuple[str, dict[str, bytes]]:
        """(digest, the lookup tables as Arrow IPC bytes): what travels to the executors with the enrichment, once
        per reference version; the digest names the version in the workers' cache."""
        blobs = {name: _ipc(getattr(self, name)) for name in LOOKUP_TABLES}
        digest = hashlib.sha256(b"".join(hashlib.sha256(blobs[k]).digest() for k in sorted(blobs))).hexdigest()
        return digest, blobs


LOOKUP_TABLES: tuple[str, ...] = ("assets", "static_assets", "users", "network_ranges", "iocs")


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns (missing ones null, types cast), in that order."""
    columns = []
    for f in schema:
        if f.name in table.column_names:
            columns.append(table.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _first_per_key(table: pa.Table, keys: list[str], order: list[tuple[str, str]]) -> pa.Table:
    """One row per distinct ``keys`` (rows with a null key dropped): the first in ``order`` (deterministic)."""
    for k in keys:
        table = table.filter(pc.is_valid(table.column(k)))
    if table.num_rows == 0:
        return table
    table = table.sort_by([(k, "ascending") for k in keys] + order)
    first = pa.array([True] + [False] * (table.num_rows - 1))
    for k in keys:
        col = table.column(k).combine_chunks()
        first = pc.or_(first, pa.concat_arrays([pa.array([True]), pc.not_equal(col[1:], col[:-1])]))
    return table.filter(first)


def _normalize_domain(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Domains compare case-insensitively and without a trailing root dot (same rule as static_joins)."""
    return pc.replace_substring_regex(pc.utf8_lower(pc.utf8_trim_whitespace(values)), r"\.$", "")


def prepare_assets(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(assets keyed by lower(host), static assets keyed by ip). DHCP hosts' ``ip`` is not theirs for long."""
    by_host = table.append_column(KEY, pc.utf8_lower(table.column("host")))
    by_host = _first_per_key(by_host, [KEY], [("ip", "ascending"), ("mac", "ascending")])
    static = table.filter(pc.invert(pc.fill_null(table.column("dhcp"), False)))
    by_ip = static.append_column(KEY, static.column("ip"))
    by_ip = _first_per_key(by_ip, [KEY], [("host", "ascending")])
    return by_host, by_ip


def prepare_users(table: pa.Table) -> pa.Table:
    keyed = table.append_column(KEY, table.column("name"))
    return _first_per_key(keyed, [KEY], [("uid", "ascending"), ("department", "ascending")])


def prepare_iocs(table: pa.Table) -> pa.Table:
    """Keyed IOCs; duplicates of one indicator keep the earliest ``first_seen`` (then threat, source)."""
    is_ip = pc.equal(pc.utf8_lower(pc.fill_null(table.column("type"), "")), IOC_KIND_IP)
    kind = pc.if_else(is_ip, IOC_KIND_IP, IOC_KIND_DOMAIN)
    ip_key = pc.utf8_lower(pc.utf8_trim_whitespace(table.column("indicator")))
    key = pc.if_else(is_ip, ip_key, _normalize_domain(table.column("indicator")))
    keyed = table.append_column(IOC_KIND, kind).append_column(KEY, key)
    keyed = keyed.filter(pc.not_equal(pc.fill_null(keyed.column(KEY), ""), ""))
    return _first_per_key(keyed, [IOC_KIND, KEY],
                          [("first_seen", "ascending"), ("threat", "ascending"), ("source", "ascending")])


def _parse_networks(table: pa.Table) -> list[tuple[int, int, int, dict]]:
    """(start, end, prefix_len, row) of each valid IPv4 CIDR; others (IPv6, typos) are skipped with a warning."""
    out = []
    for row in table.to_pylist():
        try:
            net = ipaddress.ip_network(str(row["cidr"]).strip(), strict=False)
        except ValueError:
            log.warning("networks: skipping invalid cidr %r", row["cidr"])
            continue
        if net.version != 4:
            continue  # enrichment matches IPv4 only (documented); IPv6 events get null network fields
        out.append((int(net.network_address), int(net.broadcast_address), net.prefixlen, row))
    return out


def prepare_networks(table: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(networks with their ranges, non-overlapping ranges each labelled with its most specific network).

    Flattening here (tens of rows, on the driver) is what lets the join give exactly one network per
    address: overlapping networks would otherwise match an event several times and need a per-event
    de-duplication (a shuffle) in every micro-batch.
    """
    parsed = _parse_networks(table)
    networks = pa.Table.from_pylist(
        [{**row, RANGE_START: s, RANGE_END: e, PREFIX_LEN: p} for s, e, p, row in parsed], _NETWORKS_SCHEMA)
    # Sweep over every boundary (network starts and ends, plus /8 bucket edges inside a network); between
    # two boundaries the set of covering networks is constant, the heap's top is the most specific one.
    bounds: set[int] = set()
    for s, e, _, _ in parsed:
        bounds.update((s, e + 1))
        bounds.update(range(((s >> BUCKET_SHIFT) + 1) << BUCKET_SHIFT, e + 1, 1 << BUCKET_SHIFT))
    order = sorted(range(len(parsed)), key=lambda i: parsed[i][0])
    heap: list[tuple[int, str, int, int]] = []  # (-prefix, cidr, end, index): ties go to the smaller cidr text
    ranges = []
    points = sorted(bounds)
    nxt = 0
    for lo, hi in zip(points, points[1:], strict=False):
        while nxt < len(order) and parsed[order[nxt]][0] <= lo:
            s, e, p, row = parsed[order[nxt]]
            heapq.heappush(heap, (-p, str(row["cidr"]), e, order[nxt]))
            nxt += 1
        while heap and heap[0][2] < lo:
            heapq.heappop(heap)
        if heap:
            _, _, _, i = heap[0]
            ranges.append({BUCKET: lo >> BUCKET_SHIFT, RANGE_START: lo, RANGE_END: hi - 1,
                           PREFIX_LEN: parsed[i][2], **parsed[i][3]})
    return networks, pa.Table.from_pylist(ranges, _NETWORK_RANGE_SCHEMA)


class ReferenceCache:
    """The current :class:`ReferenceData` of a lake; a table is read again only when its Delta version changed.

    Call :meth:`current` at the start of every micro-batch (on the driver, e.g. inside ``foreachBatch``).
    A missing table is an empty table of the right schema, and is picked up once it appears.
    """

    def __init__(self, lake: Path | str | Settings) -> None:
        self._settings = lake if isinstance(lake, Settings) else Settings(lake=Path(lake))
        self._versions: dict[str, int | None] = {}
        self._frames: dict[str, dict[str, pa.Table]] = {}
        self._tables: dict[str, object] = {}  # open deltalake.DeltaTable per table: updated, not re-opened
        self.loads = 0  # number of table (re)loads so far: lets tests and metrics see what a call cost

    def _version(self, name: str) -> int | None:
        """The table's latest Delta version, or None when there is no table (yet)."""
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        path = self._settings.table_path(name)
        if not os.path.isdir(path / "_delta_log"):
            self._tables.pop(name, None)
            return None
        table = self._tables.get(name)
        try:
            if table is not None:
                table.update_incremental()  # reads only the log entries after the known version
            else:
                table = self._tables[name] = DeltaTable(str(path))
            return table.version()
        except TableNotFoundError:
            self._tables.pop(name, None)
            return None
        except Exception:  # e.g. the table was deleted and re-created under the same path: open it afresh
            self._tables[name] = table = DeltaTable(str(path))
            return table.version()

    def _read(self, name: str, version: int | None) -> pa.Table:
        schema = SCHEMAS[name]
        if version is None:
            return schema.empty_table()
        table = self._tables[name]
        return _conform(table.to_pyarrow_table(), schema)

    def _build(self, name: str, table: pa.Table) -> dict[str, pa.Table]:
        return prepared_tables(name, table)

    def current(self) -> ReferenceData:
        """The reference data as of now: re-reads only the tables whose version changed since the last call."""
        for name in REFERENCE_TABLES:
            version = self._version(name)
            if name in self._frames and self._versions.get(name) == version:
                continue
            table = self._read(name, version)
            self._frames[name] = self._build(name, table)
            self._versions[name] = version
            self.loads += 1
            log.info("reference table %s loaded: version %s, %d rows", name,
                     "none (missing)" if version is None else version, table.num_rows)
        frames = {k: v for per_table in self._frames.values() for k, v in per_table.items()}
        return ReferenceData(**frames, versions=dict(self._versions))


def prepared_tables(name: str, table: pa.Table) -> dict[str, pa.Table]:
    """One reference table (lake columns) -> its prepared :class:`ReferenceData` table(s), by field name."""
    if name == TABLE_ASSETS:
        assets, static_assets = prepare_assets(table)
        return {"assets": assets, "static_assets": static_assets}
    if name == TABLE_USERS:
        return {"users": prepare_users(table)}
    if name == TABLE_NETWORKS:
        networks, ranges = prepare_networks(table)
        return {"networks": networks, "network_ranges": ranges}
    if name == TABLE_IOCS:
        return {"iocs": prepare_iocs(table)}
    raise ValueError(f"not a reference table: {name!r} (one of {', '.join(REFERENCE_TABLES)})")


def reference_from_tables(tables: dict[str, pa.Table | list[dict]]) -> ReferenceData:
    """:class:`ReferenceData` from in-memory tables (rule samples, tests, backfills without a lake), prepared
    exactly as :class:`ReferenceCache` prepares the lake's.

    Each table may be a pyarrow Table or a list of row dicts; missing tables and columns are empty / null.
    """
    frames: dict[str, pa.Table] = {}
    for name in REFERENCE_TABLES:
        raw = tables.get(name)
        schema = SCHEMAS[name]
        if raw is None:
            table = schema.empty_table()
        elif isinstance(raw, pa.Table):
            table = _conform(raw, schema)
        else:
            table = pa.Table.from_pylist([{f.name: row.get(f.name) for f in schema} for row in raw], schema=schema)
        frames.update(prepared_tables(name, table))
    return ReferenceData(**frames, versions={})
