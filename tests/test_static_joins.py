"""Stream-static enrichment with the reference tables: real Delta tables in tmp_path, real Spark."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from core.config import TABLE_ASSETS, TABLE_IOCS, TABLE_NETWORKS, TABLE_USERS
from enrich.reference_data import SCHEMAS, ReferenceCache, prepare_networks
from enrich.static_joins import enrich_static, ipv4_to_int
from tests.parse_helpers import INGESTED, get


def zeek(path: str, uid: str, orig: str, resp: str, **fields) -> str:
    return json.dumps({"_path": path, "ts": 1710072000.0, "uid": uid, "id.orig_h": orig, "id.orig_p": 40000,
                       "id.resp_h": resp, "id.resp_p": 443, "proto": "tcp", **fields})


LINES = {
    "out_to_ioc_ip": zeek("conn", "C1", "10.1.1.50", "198.51.100.66"),
    "inbound": zeek("conn", "C2", "198.51.100.7", "10.20.5.7"),
    "internal_static_src": zeek("conn", "C3", "10.20.5.7", "10.20.9.9"),
    "external_unknown": zeek("conn", "C4", "203.0.113.5", "8.8.8.8"),
    "ipv6": zeek("conn", "C5", "2001:db8::1", "2001:db8::2"),
    "dns_ioc_upper": zeek("dns", "D1", "10.1.1.50", "10.20.5.7", query="EVIL.EXAMPLE", qtype_name="A"),
    "tls_ioc_trailing_dot": zeek("ssl", "S1", "10.1.1.99", "198.51.100.7", server_name="Bad.Example."),
    "dns_clean": zeek("dns", "D2", "10.1.1.50", "10.20.5.7", query="evil.example.org", qtype_name="A"),
    "sshd_known_host": "Mar 10 12:00:00 WEB-01 sshd[123]: Accepted password for alice from 198.51.100.7 port 5555 ssh2",
    "sshd_unknown_host": "Mar 10 12:00:01 gw-9 sshd[124]: Failed password for bob from 10.1.1.99 port 5556 ssh2",
}
TS = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def table(name: str, rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, SCHEMAS[name])


def ioc(indicator: str, kind: str, threat: str, first_seen: dt.datetime = TS, source: str = "tests") -> dict:
    return {"indicator": indicator, "type": kind, "threat": threat, "source": source, "first_seen": first_seen}


def net(cidr: str, zone: str, site: str | None, country: str, internal: bool) -> dict:
    return {"cidr": cidr, "zone": zone, "site": site, "country": country, "internal": internal, "dhcp": False}


def asset(host: str, ip: str, owner: str, role: str, dhcp: bool, scanner: bool = False) -> dict:
    return {"host": host, "mac": None, "ip": ip, "owner": owner, "zone": "z-" + host, "site": "hq", "role": role,
            "criticality": "high" if role == "web" else "low", "authorized_scanner": scanner, "dhcp": dhcp}


REFERENCE = {
    TABLE_NETWORKS: [
        net("10.0.0.0/8", "corp", "hq", "US", True),
        net("10.20.0.0/16", "branch", "london", "GB", True),
        net("10.20.5.0/24", "servers", "london-dc", "GB", True),  # inside 10.20.0.0/16 inside 10.0.0.0/8
        net("198.51.100.0/24", "internet", None, "NL", False),
        net("2001:db8::/32", "v6lab", "lab", "US", True),  # IPv6: not matched (IPv4 only)
    ],
    TABLE_ASSETS: [
        asset("web-01", "10.20.5.7", "ops", "web", dhcp=False),
        asset("laptop-7", "10.1.1.50", "alice", "workstation", dhcp=True),  # a DHCP address is not its identity
        asset("scanner-1", "10.1.1.99", "secops", "scanner", dhcp=False, scanner=True),
    ],
    TABLE_USERS: [
        {"name": "alice", "full_name": "Alice A", "department": "Engineering", "is_admin": False, "site": "hq",
         "country": "US", "uid": 1001, "workstation": "laptop-7"},
        {"name": "bob", "full_name": "Bob B", "department": "IT", "is_admin": True, "site": "london",
         "country": "GB", "uid": 1002, "workstation": None},
    ],
    TABLE_IOCS: [
        # The same indicator twice: one row per event, the earliest first_seen reported.
        ioc("198.51.100.66", "ip", "qakbot", TS + dt.timedelta(days=2), "misp-community"),
        ioc("198.51.100.66", "ip", "cobalt_strike", TS, "abuse.ch"),
        ioc("Evil.Example", "domain", "emotet"),
        ioc("bad.example", "domain", "phishing"),
    ],
}


def write_reference(lake, names=tuple(REFERENCE)) -> None:
    for name in names:
        write_deltalake(str(lake / name), table(name, REFERENCE[name]), mode="overwrite")


def events(spark, names=tuple(LINES)):
    from ingest.arrow_parse import events_of, parse_bronze
    from ingest.file_source import lines_dataframe

    return events_of(parse_bronze(lines_dataframe(spark, [LINES[n] for n in names], ingested_at=INGESTED)))


def by_name(df) -> dict[str, dict]:
    """name in LINES -> enriched row (nested dicts), matched back through event.original."""
    names = {line: name for name, line in LINES.items()}
    rows = [r.asDict(recursive=True) for r in df.collect()]
    out = {names[r["event"]["original"]]: r for r in rows}
    assert len(out) == len(rows)
    return out


@pytest.fixture(scope="module")
def enriched(spark, tmp_path_factory) -> dict[str, dict]:
    lake = tmp_path_factory.mktemp("lake")
    write_reference(lake)
    ev = events(spark)
    out = enrich_static(ev, ReferenceCache(lake).current())
    rows = by_name(out)
    assert len(rows) == len(LINES) == ev.count()  # exactly one row per input row, duplicate IOCs included
    return rows


def test_geo_and_zone_from_the_most_specific_network(enriched):
    r = enriched["internal_static_src"]
    assert get(r, "source.geo") == {"country_iso_code": "GB", "name": "london-dc"}  # /24 over /16 over /8
    assert get(r, "destination.geo") == {"country_iso_code": "GB", "name": "london"}  # /16 over /8
    assert get(r, "nightjar.source_zone") == "servers" and get(r, "nightjar.destination_zone") == "branch"
    r = enriched["out_to_ioc_ip"]
    assert get(r, "source.geo") == {"country_iso_code": "US", "name": "hq"}
    assert get(r, "destination.geo") == {"country_iso_code": "NL", "name": None}  # external: country, no site
    assert get(r, "nightjar.destination_zone") == "internet"


def test_unmatched_and_ipv6_addresses_have_no_geo(enriched):
    for name in ("external_unknown", "ipv6"):
        r = enriched[name]
        assert get(r, "source.geo") is None and get(r, "destination.geo") is None
        assert get(r, "nightjar.source_zone") is None and get(r, "nightjar.destination_zone") is None
    assert get(enriched["ipv6"], "source.ip") == "2001:db8::1"  # input fields untouched


@pytest.mark.parametrize(("name", "direction"), [
    ("out_to_ioc_ip", "outbound"), ("inbound", "inbound"), ("internal_static_src", "internal"),
    ("external_unknown", "external"), ("ipv6", "external"),  # in no (IPv4) network: the internet
    ("sshd_known_host", None),  # no destination address
])
def test_network_direction(enriched, name, direction):
    assert get(enriched[name], "network.direction") == direction


def test_direction_is_added_to_a_null_network_struct(spark, tmp_path):
    from pyspark.sql import functions as F

    write_reference(tmp_path, names=(TABLE_NETWORKS,))
    ev = events(spark, ["inbound"])
    # An event whose parser set no network.* field has network = null; it still gets a direction.
    ev = ev.withColumn("network", F.lit(None).cast(ev.schema["network"].dataType))
    r = by_name(enrich_static(ev, ReferenceCache(tmp_path).current()))["inbound"]
    assert r["network"] == {"transport": None, "protocol": None, "type": None, "bytes": None, "community_id": None,
                            "direction": "inbound"}


def test_parsed_network_fields_are_kept_beside_the_direction(enriched):
    assert get(enriched["inbound"], "network.transport") == "tcp"
    assert get(enriched["inbound"], "network.direction") == "inbound"


def test_asset_by_host_name_case_insensitive(enriched):
    a = get(enriched["sshd_known_host"], "nightjar.asset")
    assert a == {"host": "web-01", "owner": "ops", "role": "web", "criticality": "high", "zone": "z-web-01",
                 "authorized_scanner": False}


def test_asset_by_static_source_ip_only(enriched):
    assert get(enriched["internal_static_src"], "nightjar.asset.host") == "web-01"
    assert get(enriched["tls_ioc_trailing_dot"], "nightjar.asset.host") == "scanner-1"
    assert get(enriched["tls_ioc_trailing_dot"], "nightjar.asset.authorized_scanner") is True
    # 10.1.1.50 is a DHCP host's last address: not an identity.
    assert get(enriched["out_to_ioc_ip"], "nightjar.asset") is None


def test_asset_host_name_takes_precedence_over_source_ip(enriched):
    # gw-9 is not an asset; the source address (the ssh client, scanner-1) must not be taken for the host.
    assert get(enriched["sshd_unknown_host"], "host.name") == "gw-9"
    assert get(enriched["sshd_unknown_host"], "nightjar.asset") is None


def test_user_lookup(enriched):
    assert get(enriched["sshd_known_host"], "nightjar.user") == {"department": "Engineering", "is_admin": False,
                                                                 "country": "US"}
    assert get(enriched["sshd_unknown_host"], "nightjar.user") == {"department": "IT", "is_admin": True,
                                                                   "country": "GB"}
    assert get(enriched["inbound"], "nightjar.user") is None


def test_ioc_ip_match_picks_one_of_duplicate_indicators(enriched):
    assert get(enriched["out_to_ioc_ip"], "threat.indicator") == {
        "type": "ip", "value": "198.51.100.66", "description": "cobalt_strike", "provider": "abuse.ch",
        "first_seen": dt.datetime(2026, 1, 1), "matched_field": "destination.ip"}


def test_ioc_domain_match_is_case_insensitive(enriched):
    ind = get(enriched["dns_ioc_upper"], "threat.indicator")
    assert (ind["value"], ind["description"], ind["matched_field"]) == ("Evil.Example", "emotet", "dns.question.name")
    r = enriched["tls_ioc_trailing_dot"]
    assert get(r, "tls.client.server_name") == "Bad.Example."
    ind = get(r, "threat.indicator")
    # The Zeek ssl parser copies the SNI to destination.domain, which comes first in IOC_FIELDS.
    assert (ind["value"], ind["type"], ind["matched_field"]) == ("bad.example", "domain", "destination.domain")


@pytest.mark.parametrize("name", ["dns_clean", "inbound", "internal_static_src", "sshd_known_host", "ipv6"])
def test_no_ioc_match_gives_null_threat(enriched, name):
    assert enriched[name]["threat"] is None


def test_input_columns_are_unchanged_and_extras_appended(spark, enriched):
    plain = by_name(events(spark))
    added = {"source": "geo", "destination": "geo", "network": "direction"}
    for name, row in enriched.items():
        assert list(row)[-2:] == ["nightjar", "threat"]
        before = plain[name]
        assert list(row)[:-2] == list(before)
        for col, value in before.items():
            got = row[col]
            if col in added and got is not None:
                got = {k: v for k, v in got.items() if k != added[col]}
            assert got == value, (name, col)


def test_missing_reference_tables_give_nulls_not_errors(spark, tmp_path):
    out = enrich_static(events(spark), ReferenceCache(tmp_path / "empty-lake").current())
    rows = by_name(out)
    assert len(rows) == len(LINES)
    for r in rows.values():
        assert r["nightjar"] is None and r["threat"] is None
        assert get(r, "source.geo") is None and get(r, "destination.geo") is None
    # Without networks every address is outside the organization.
    assert get(rows["internal_static_src"], "network.direction") == "external"


def test_partial_lake_uses_the_tables_present(spark, tmp_path):
    write_reference(tmp_path, names=(TABLE_NETWORKS,))
    row = by_name(enrich_static(events(spark, ["internal_static_src"]), ReferenceCache(tmp_path).current()))
    r = row["internal_static_src"]
    assert get(r, "source.geo.name") == "london-dc" and get(r, "nightjar.asset") is None


def test_ioc_added_to_the_table_is_matched_at_the_next_call_without_restart(spark, tmp_path):
    write_reference(tmp_path)
    cache = ReferenceCache(tmp_path)
    ev = events(spark, ["external_unknown"])
    first = cache.current()
    assert cache.loads == 4 and first.versions[TABLE_IOCS] == 0
    # Through toArrow(), as the Delta sink reads a batch: a null struct with non-nullable fields would fail here.
    assert enrich_static(ev, first).toArrow().to_pylist()[0]["threat"] is None

    write_deltalake(str(tmp_path / TABLE_IOCS), table(TABLE_IOCS, [ioc("8.8.8.8", "ip", "test-c2")]), mode="append")
    second = cache.current()
    assert cache.loads == 5  # only the iocs table was read again
    assert second.versions[TABLE_IOCS] == DeltaTable(str(tmp_path / TABLE_IOCS)).version() == 1
    assert second.assets is first.assets and second.iocs is not first.iocs
    ind = get(by_name(enrich_static(ev, second))["external_unknown"], "threat.indicator")
    assert (ind["value"], ind["description"], ind["matched_field"]) == ("8.8.8.8", "test-c2", "destination.ip")

    third = cache.current()
    assert cache.loads == 5 and third.iocs is second.iocs  # unchanged: nothing re-read


def test_a_table_created_after_start_is_picked_up(spark, tmp_path):
    cache = ReferenceCache(tmp_path)
    assert cache.current().versions[TABLE_NETWORKS] is None
    write_reference(tmp_path, names=(TABLE_NETWORKS,))
    assert cache.current().versions[TABLE_NETWORKS] == 0
    assert cache.loads == 5


def test_network_flattening_gives_one_range_per_address():
    nets, ranges = prepare_networks(table(TABLE_NETWORKS, REFERENCE[TABLE_NETWORKS]))
    assert nets.num_rows == 4  # the IPv6 network is left out
    rows = sorted(ranges.to_pylist(), key=lambda r: r["start"])
    assert all(a["end"] < b["start"] for a, b in zip(rows, rows[1:], strict=False))  # no overlap
    covering = [r["cidr"] for r in rows if r["start"] <= (10 << 24) + (20 << 16) + (5 << 8) + 7 <= r["end"]]
    assert covering == ["10.20.5.0/24"]


def test_ipv4_to_int():
    values = ["10.20.5.7", "255.255.255.255", "0.0.0.0", "256.1.1.1", "1.2.3", "2001:db8::1", "01.2.3.4", None,
              " 10.0.0.1", "10.0.0.1\n"]
    assert [ipv4_to_int(v) for v in values] == [169084167, 4294967295, 0, None, None, None, None, None, None, None]


def _leaves(typ, prefix: str = "") -> dict[str, str]:
    """Dotted path -> Spark type (simpleString) of every leaf of a schema (structs descended into)."""
    from pyspark.sql.types import StructType

    if not isinstance(typ, StructType):
        return {prefix: typ.simpleString()}
    out: dict[str, str] = {}
    for f in typ.fields:
        out.update(_leaves(f.dataType, f"{prefix}.{f.name}" if prefix else f.name))
    return out


def test_enrichment_adds_exactly_the_contracts_enrichment_fields_with_their_types(spark, enriched, tmp_path):
    """What enrich_static adds is ENRICHMENT_FIELDS, no more and no less, typed and nested as the contract says;
    and the rows' values come out under those paths (provider and first_seen of the matched indicator included)."""
    from ingest.events_contract import ENRICHMENT_FIELDS

    before = _leaves(events(spark).schema)
    after = _leaves(enrich_static(events(spark), ReferenceCache(tmp_path).current()).schema)
    added = {p: t for p, t in after.items() if p not in before}
    assert added == {f.path: f.type for f in ENRICHMENT_FIELDS}
    assert {p: after[p] for p in before} == before  # input leaves unchanged
    assert get(enriched["out_to_ioc_ip"], "threat.indicator.provider") == "abuse.ch"


def test_the_rules_events_schema_holds_every_core_and_enrichment_path_with_its_contract_type(spark):
    """``alerts.detection_input.events_schema`` (what rules compile against) is the contract: every core and
    enrichment path at its place with its type, plus the event-time column."""
    from alerts.detection_input import events_schema
    from ingest.arrow_parse import EVENT_TIME_COLUMN
    from ingest.events_contract import CORE_FIELDS, ENRICHMENT_FIELDS

    got = _leaves(events_schema(spark))
    want = {f.path: f.type for f in (*CORE_FIELDS, *ENRICHMENT_FIELDS)}
    assert {p: got.get(p) for p in want} == want
    assert set(got) - set(want) == {EVENT_TIME_COLUMN}


def test_the_lookups_run_inside_the_batchs_own_job_without_broadcasts(spark, tmp_path):
    """The design's point (enrich/static_joins.py): no Spark job of its own per micro-batch. Eleven broadcast joins ran
    four to five broadcast jobs in every batch, whatever its size."""
    write_reference(tmp_path)
    ref = ReferenceCache(tmp_path).current()
    ev = events(spark).localCheckpoint()
    sc = spark.sparkContext
    sc.setJobGroup("enrich-jobs", "enrich-jobs")
    try:
        enrich_static(ev, ref).write.format("noop").mode("overwrite").save()
    finally:
        sc.setJobGroup("", "")
    assert len(sc.statusTracker().getJobIdsForGroup("enrich-jobs")) == 1


def test_each_batch_of_a_partition_and_a_new_reference_version_are_looked_up(spark, tmp_path):
    """Several Arrow batches per task (a small batch size) and a second reference version in the same Python workers:
    every row is looked up, with the version it was planned with."""
    write_reference(tmp_path)
    cache = ReferenceCache(tmp_path)
    ev = events(spark, ["external_unknown", "out_to_ioc_ip", "inbound"] * 3).repartition(1)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        first = [get(r.asDict(recursive=True), "threat.indicator.value")
                 for r in enrich_static(ev, cache.current()).collect()]
        write_deltalake(str(tmp_path / TABLE_IOCS), table(TABLE_IOCS, [ioc("8.8.8.8", "ip", "test-c2")]),
                        mode="append")
        second = [get(r.asDict(recursive=True), "threat.indicator.value")
                  for r in enrich_static(ev, cache.current()).collect()]
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert Counter(first) == {None: 6, "198.51.100.66": 3}
    assert Counter(second) == {None: 3, "198.51.100.66": 3, "8.8.8.8": 3}
