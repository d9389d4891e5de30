"""alerts.parsed_samples: many sample sets parsed in one job, each enriched on its own, the same as parsed alone."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import functions as F

from alerts.parsed_samples import ParsedSamples
from alerts.python_rules import dhcp_networks, enriched_events, reference_data
from generator import formats as fmt
from ingest.file_source import lines_dataframe

T0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC).timestamp()
INGESTED = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)
LAPTOP = "10.10.0.50"
REFERENCE = {"networks": [
    {"cidr": "10.10.0.0/22", "zone": "corp", "site": "hq", "country": "US", "internal": True, "dhcp": True},
    {"cidr": "142.250.0.0/15", "zone": "internet", "country": "US", "internal": False, "dhcp": False},
]}
LEASE = fmt.dhcp(T0, ["C1"], LAPTOP, "10.10.0.1", "00:0c:29:aa:0b:01", "laptop-7", ["REQUEST", "ACK"],
                 assigned_addr=LAPTOP, lease_time=3600.0)
CONN = fmt.conn(T0 + 60, "CAbcdefghijklmnopq", LAPTOP, 50000, "142.250.1.1", 443, "tcp", service="ssl",
                duration=0.5, orig_bytes=400, resp_bytes=300)


def hosts(events) -> list[tuple]:
    return sorted((r["d"], r["h"]) for r in events.select(F.col("event.dataset").alias("d"), F.col("host.name").alias("h")).collect())


def test_each_set_is_enriched_alone_leases_and_bad_lines_stay_in_their_set(spark):
    sets = {
        "leased": ([LEASE, CONN], INGESTED),  # the lease names the laptop that made the connection
        "no_lease": ([CONN, "not a log line at all", CONN], INGESTED),  # the same connection twice, no lease
    }
    parsed = ParsedSamples(spark, sets)
    ref, dhcp = reference_data(REFERENCE), dhcp_networks(REFERENCE)

    leased, leased_bad = parsed.enriched("leased", ref, dhcp)
    alone, alone_bad = enriched_events(lines_dataframe(spark, sets["leased"][0], ingested_at=INGESTED), ref, dhcp)
    assert leased_bad == alone_bad == []
    assert ("zeek.conn", "laptop-7") in hosts(leased)
    assert hosts(leased) == hosts(alone)

    # The other set holds the same connection but no lease: the first set's lease must not name its host.
    no_lease, no_lease_bad = parsed.enriched("no_lease", ref, dhcp)
    assert [h for d, h in hosts(no_lease) if d == "zeek.conn"] == [None, None]
    assert len(no_lease_bad) == 1 and no_lease_bad[0].startswith("line 2 does not parse (")
    _, alone_bad = enriched_events(lines_dataframe(spark, sets["no_lease"][0], ingested_at=INGESTED), ref, dhcp)
    assert no_lease_bad == alone_bad
    assert "leased" in parsed and "other" not in parsed
