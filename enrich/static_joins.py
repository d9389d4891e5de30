"""Stream-static enrichment: network zones and geo, asset and user context, threat-intel matches.

:func:`enrich_static` is a plain DataFrame -> DataFrame function over ``events`` rows (contract v2: the core
columns of :mod:`ingest.events_contract`; the streaming pipeline calls it inside ``foreachBatch`` with the
:class:`~enrich.reference_data.ReferenceData` current for that micro-batch; batch code calls it the same way).
Everything is Spark SQL: left joins against broadcast reference tables, no Python UDF, so it runs on executors at
Spark speed.

Each input row gives exactly one output row: every reference table is prepared with at most one row per
join key (see :mod:`enrich.reference_data`), and the networks are non-overlapping ranges, each labelled
with its most specific network. Input columns are kept as they are; what is added is exactly
:data:`ingest.events_contract.ENRICHMENT_FIELDS`, with the contract's types and nesting:

* ``source.geo.{country_iso_code,name}``, ``destination.geo.{…}`` — the network's country and site;
* ``network.direction`` — ECS ``inbound|outbound|internal|external`` from the networks' ``internal`` flag;
* ``nightjar.{source_zone, destination_zone, asset{…}, user{…}}`` — Nightjar's own context;
* ``threat.indicator.{type, value, description, provider, first_seen, matched_field}`` — the first IOC
  match in :data:`IOC_FIELDS` order.

A struct that enrichment builds is null when all its leaves are (``threat`` is null when nothing matched).
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructType

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
from ingest.events_contract import ENRICHMENT_FIELDS, path_tree

ENRICHMENT_TYPES: dict[str, str] = {f.path: f.type for f in ENRICHMENT_FIELDS}

# The paths of the values come from ENRICHMENT_FIELDS; these name the joins' payloads.
DIRECTION_INBOUND, DIRECTION_OUTBOUND = "inbound", "outbound"
DIRECTION_INTERNAL, DIRECTION_EXTERNAL = "internal", "external"
ASSET = "asset"
ASSET_FIELDS: tuple[str, ...] = ("host", "owner", "role", "criticality", "zone", "authorized_scanner")
USER = "user"
USER_FIELDS: tuple[str, ...] = ("department", "is_admin", "country")
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

_TMP = "_nj_"  # prefix of the helper columns that exist only during the joins
_IPV4 = r"^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$"


def ipv4_to_long(ip: Column) -> Column:
    """The IPv4 address as a number (a.b.c.d -> a·2²⁴ + b·2¹⁶ + c·2⁸ + d); null for IPv6 and non-addresses."""
    parts = F.split(ip, r"\.")
    value = reduce(lambda acc, i: acc * 256 + parts.getItem(i).try_cast("bigint"), range(1, 4),
                   parts.getItem(0).try_cast("bigint"))
    return F.when(ip.rlike(_IPV4), value)


def _ip_key(ip: Column) -> Column:
    return F.lower(F.trim(ip))


def _domain_key(domain: Column) -> Column:
    # Same normalisation as reference_data._normalize_domain (the IOC side).
    return F.regexp_replace(F.lower(F.trim(domain)), r"\.$", "")


def _field(df: DataFrame, path: str) -> Column:
    """``df``'s nested field at the dotted ``path``, or a string null when the input lacks it."""
    typ = df.schema
    for part in path.split("."):
        if not isinstance(typ, StructType) or part not in typ.fieldNames():
            return F.lit(None).cast(StringType())
        typ = typ[part].dataType
    return F.col(path)


def _nested(node: dict[str, Any] | str, values: dict[str, Column]) -> Column:
    """The value of a tree node: a leaf's column cast to its contract type, or a struct of its children that is
    null when all of them are (the contract's convention: "all null => null")."""
    if isinstance(node, str):
        return values[node].cast(ENRICHMENT_TYPES[node])
    children = {name: _nested(child, values) for name, child in node.items()}
    present = reduce(lambda a, b: a | b, [c.isNotNull() for c in children.values()])
    return F.when(present, F.struct(*[c.alias(n) for n, c in children.items()]))


def _merged(df: DataFrame, row: Column, column: str, children: dict[str, Column]) -> Column:
    """Input struct ``column`` (read from ``row``, its packed copy) with ``children`` set.

    ``Column.withField`` on a null struct gives null, which would drop a value computed for an event whose
    struct is null (``network`` is null when a parser set no ``network.*`` field, yet it may have a direction);
    so a null struct becomes a struct of nulls when, and only when, a child is not null.
    """
    typ = df.schema[column].dataType
    if not isinstance(typ, StructType):
        raise TypeError(f"column {column} is {typ.simpleString()}, not a struct")
    present = reduce(lambda a, b: a | b, [c.isNotNull() for c in children.values()])
    empty = F.struct(*[F.lit(None).cast(f.dataType).alias(f.name) for f in typ.fields])
    merged = F.coalesce(row[column], F.when(present, empty))
    for name, value in children.items():
        merged = merged.withField(name, value)
    return merged


def _left_join(df: DataFrame, ref: DataFrame, key: str, ref_key: str, payload: dict[str, Column], prefix: str,
               extra: Column | None = None) -> tuple[DataFrame, dict[str, Column]]:
    """Left broadcast join of ``df`` on ``df[key] == ref[ref_key]``; returns the joined frame and the payload.

    The reference side is reduced to its key and ``payload`` (renamed under ``prefix``), so repeated joins
    with the same table never clash and nothing of it but the payload reaches the output.
    """
    right = ref.select(F.col(ref_key).alias(f"{prefix}rkey"), *[c.alias(f"{prefix}{n}") for n, c in payload.items()])
    cond = F.col(key) == F.col(f"{prefix}rkey")
    if extra is not None:
        cond = cond & extra
    joined = df.join(F.broadcast(right), cond, "left")
    return joined, {n: F.col(f"{prefix}{n}") for n in payload}


def _network_join(df: DataFrame, ref: ReferenceData, ip_long: str, prefix: str) -> tuple[DataFrame, dict[str, Column]]:
    """The most specific network of the address in column ``ip_long``: equi-join on the /8 bucket + range."""
    payload = {"country": F.col("country"), "site": F.col("site"), "zone": F.col("zone"),
               "internal": F.col("internal"), "start": F.col(RANGE_START), "end": F.col(RANGE_END)}
    in_range = F.col(ip_long).between(F.col(f"{prefix}start"), F.col(f"{prefix}end"))
    return _left_join(df, ref.network_ranges, f"{ip_long}_bucket", BUCKET, payload, prefix, in_range)


def _direction(src_ip: Column, dst_ip: Column, src_internal: Column, dst_internal: Column) -> Column:
    """ECS network.direction; an address in no network counts as external (the internet)."""
    src_in = F.coalesce(src_internal, F.lit(False))
    dst_in = F.coalesce(dst_internal, F.lit(False))
    return (F.when(src_ip.isNull() | dst_ip.isNull(), F.lit(None).cast(StringType()))
            .when(src_in & dst_in, DIRECTION_INTERNAL)
            .when(src_in, DIRECTION_OUTBOUND)
            .when(dst_in, DIRECTION_INBOUND)
            .otherwise(DIRECTION_EXTERNAL))


def enrich_static(events: DataFrame, ref: ReferenceData) -> DataFrame:
    """``events`` with the reference-table fields added (see the module docstring); one row per input row.

    Works on batch and streaming DataFrames alike (stream-static joins), with any mix of event sources.
    """
    clash = [c for c in events.columns if c.startswith(_TMP)]
    if clash:
        raise ValueError(f"input columns {clash} use the reserved prefix {_TMP}")
    # The joins carry the input row as ONE struct column next to the join keys, so that the eleven joins never
    # re-analyse and re-project the row's leaves at each step (with the old 412-leaf row that cost seconds of
    # planning per batch). Unpacked again in the final select.
    row = f"{_TMP}row"
    src_ip, dst_ip = _field(events, "source.ip"), _field(events, "destination.ip")
    host_name, hostname = _field(events, "host.name"), _field(events, "host.hostname")
    keys: dict[str, Column] = {
        "src_ip": src_ip, "dst_ip": dst_ip, "src_long": ipv4_to_long(src_ip), "dst_long": ipv4_to_long(dst_ip),
        "has_host_name": host_name.isNotNull(),
        # Asset: by host.name when the event names its host (syslog host, DHCP attribution); otherwise by
        # the source address of a static host, then by host.hostname.
        "asset_name": F.lower(F.coalesce(host_name, hostname)),
        "asset_ip": F.when(host_name.isNull(), src_ip),
        "user": _field(events, "user.name"),
    }
    for i, (path, kind) in enumerate(IOC_FIELDS):
        value = _field(events, path)
        keys[f"ioc{i}"] = F.concat(F.lit(f"{kind}:"), _ip_key(value) if kind == IOC_KIND_IP else _domain_key(value))
    df = events.select(F.struct(*[F.col(f"`{c}`") for c in events.columns]).alias(row),
                       *[col.alias(f"{_TMP}{name}") for name, col in keys.items()])
    for end in ("src", "dst"):
        df = df.withColumn(f"{_TMP}{end}_long_bucket", F.shiftright(F.col(f"{_TMP}{end}_long"), BUCKET_SHIFT))

    # Networks: geo, zone, internal flag of both ends.
    df, src_net = _network_join(df, ref, f"{_TMP}src_long", f"{_TMP}srcnet_")
    df, dst_net = _network_join(df, ref, f"{_TMP}dst_long", f"{_TMP}dstnet_")

    asset_payload = {ASSET: F.struct(*ASSET_FIELDS)}
    df, by_name = _left_join(df, ref.assets, f"{_TMP}asset_name", KEY, asset_payload, f"{_TMP}assetname_")
    df, by_ip = _left_join(df, ref.static_assets, f"{_TMP}asset_ip", KEY, asset_payload, f"{_TMP}assetip_")
    asset = (F.when(F.col(f"{_TMP}has_host_name"), by_name[ASSET])
             .otherwise(F.coalesce(by_ip[ASSET], by_name[ASSET])))

    df, user = _left_join(df, ref.users, f"{_TMP}user", KEY, {USER: F.struct(*USER_FIELDS)}, f"{_TMP}user_")

    # Threat intel: one join per ECS field, the first match (in IOC_FIELDS order) wins. Every join uses the
    # same right side (kind-prefixed key), so Spark broadcasts the IOCs once and reuses the exchange.
    ioc_side = ref.iocs.withColumn(f"{_TMP}kind_key", F.concat_ws(":", IOC_KIND, KEY))
    ioc_payload = {name: F.col(col) for name, col in INDICATOR_FIELDS.items()}
    matches = []
    for i, (path, _kind) in enumerate(IOC_FIELDS):
        df, m = _left_join(df, ioc_side, f"{_TMP}ioc{i}", f"{_TMP}kind_key", ioc_payload, f"{_TMP}ioc{i}_")
        found = m["value"].isNotNull()
        # when() rather than a bare lit(): a non-nullable field inside a nullable struct makes toArrow()
        # (the Delta sink) fail on rows without a match.
        matches.append(F.when(found, F.struct(*[c.alias(n) for n, c in m.items()],
                                              F.when(found, F.lit(path)).alias(MATCHED_FIELD))))

    asset_leaves = {f"nightjar.asset.{f}": asset[f] for f in ASSET_FIELDS}
    user_leaves = {f"nightjar.user.{f}": user[USER][f] for f in USER_FIELDS}
    indicator = F.coalesce(*matches)
    values: dict[str, Column] = {
        "source.geo.country_iso_code": src_net["country"], "source.geo.name": src_net["site"],
        "destination.geo.country_iso_code": dst_net["country"], "destination.geo.name": dst_net["site"],
        "network.direction": _direction(F.col(f"{_TMP}src_ip"), F.col(f"{_TMP}dst_ip"), src_net["internal"],
                                        dst_net["internal"]),
        "nightjar.source_zone": src_net["zone"], "nightjar.destination_zone": dst_net["zone"],
        **asset_leaves, **user_leaves,
        **{f"threat.indicator.{n}": indicator[n] for n in (*INDICATOR_FIELDS, MATCHED_FIELD)},
    }
    if set(values) != set(ENRICHMENT_TYPES):  # the contract and this join must name the same fields
        raise AssertionError(f"enrichment fields differ from ENRICHMENT_FIELDS: "
                             f"{sorted(set(values) ^ set(ENRICHMENT_TYPES))}")
    original = F.col(row)
    added: dict[str, Column] = {}
    for column, node in path_tree([f.path for f in ENRICHMENT_FIELDS]).items():
        if column in events.columns:
            added[column] = _merged(events, original, column, {n: _nested(c, values) for n, c in node.items()})
        else:
            added[column] = _nested(node, values)
    out = [added.pop(c).alias(c) if c in added else original[c].alias(c) for c in events.columns]
    return df.select(*out, *[col.alias(name) for name, col in added.items()])
