"""Fuzz ``parse_bronze`` (the stream's parse, contract v2): random bytes, truncated, mutated and oversized records
never make it raise, and each record gives exactly one row — an event or a quarantine row — with nothing lost.

Each Hypothesis example is a whole batch of records (one Spark job per example, not per record).
"""

from __future__ import annotations

import datetime as dt
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

INGESTED = dt.datetime(2024, 3, 10, 12, 0, 0, tzinfo=dt.UTC)

MAX_BYTES = 300
VALID = [
    b"<38>Feb 21 21:54:44 bastion sshd[4242]: Accepted publickey for bob from 10.0.0.5 port 50022 ssh2: "
    b"ED25519 SHA256:abc",
    b"Mar  9 10:00:01 db-01 sudo: mallory : user NOT in sudoers ; TTY=pts/1 ; PWD=/tmp ; USER=root ; COMMAND=/bin/id",
    b'<165>1 2023-10-11T22:14:15.003Z h app 1 ID [a@1 k="v"] msg',
    b"<30>Mar  9 10:00:00 dhcp-01 dhcpd[812]: DHCPACK on 10.0.0.50 to 00:0c:29:aa:0b:01 (laptop-7) via eth0",
    json.dumps({"_path": "dns", "ts": 1521911720.5, "id.orig_h": "10.0.0.1", "query": "a.example",
                "answers": ["1.2.3.4"], "TTLs": [1.0]}).encode(),
    json.dumps({"_path": "conn", "ts": "2018-03-24T17:15:20Z", "id.orig_h": "::1", "orig_bytes": 1e30}).encode(),
]

valid = st.sampled_from(VALID)
truncated = st.tuples(st.sampled_from(VALID), st.integers(min_value=0, max_value=120)).map(lambda t: t[0][:t[1]])
mutated = st.tuples(st.sampled_from(VALID), st.integers(min_value=0, max_value=100), st.binary(max_size=8)).map(
    lambda t: t[0][:t[1]] + t[2] + t[0][t[1] + len(t[2]):])
oversized = st.sampled_from(VALID).map(lambda v: v + b" " + b"x" * MAX_BYTES)
text = st.text(max_size=80).map(lambda s: s.encode("utf-8", "surrogatepass"))
record = st.one_of(st.binary(max_size=80), valid, truncated, mutated, oversized, text, st.none())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=40))
def test_parse_never_raises_and_count_in_equals_events_plus_quarantine(spark, records):
    import pyarrow as pa

    from ingest.arrow_parse import events_of, parse_bronze, quarantine_of
    from ingest.file_source import BRONZE_ARROW_SCHEMA

    n = len(records)
    table = pa.Table.from_pydict({
        "key": [None] * n, "value": records, "topic": ["fuzz"] * n, "partition": [0] * n,
        "offset": list(range(n)), "timestamp": [None] * n, "headers": [None] * n, "ingested_at": [INGESTED] * n,
    }, schema=BRONZE_ARROW_SCHEMA)
    parsed = parse_bronze(spark.createDataFrame(table), max_record_bytes=MAX_BYTES).cache()
    try:
        rows = parsed.select("offset", "_error", "`@timestamp`", F.col("event.id").alias("id"),
                             F.col("event.original").alias("original")).collect()
        events = events_of(parsed).count()
        quarantined = quarantine_of(parsed).collect()
    finally:
        parsed.unpersist()
    assert sorted(r["offset"] for r in rows) == list(range(n))
    assert events + len(quarantined) == n
    for r in rows:
        raw = records[r["offset"]]
        if r["_error"] is None:  # an event: has an id and a time, and keeps its line
            assert r["id"] is not None and r["@timestamp"] is not None
            assert r["original"] is not None and len(raw) <= MAX_BYTES
        else:  # a quarantine row: a reason, and no event fields (its coordinates name the record)
            assert r["_error"]["parser"] and r["_error"]["reason"]
            assert r["id"] is None and r["original"] is None
        if raw is None or len(raw) > MAX_BYTES:
            assert r["_error"] is not None and r["_error"]["parser"] == "decode"
    by_offset = {q["offset"]: q for q in quarantined}
    for offset, q in by_offset.items():
        assert q["value"] == records[offset]  # raw bytes kept exactly
        assert q["topic"] == "fuzz" and q["partition"] == 0 and q["error"]
    for i, raw in enumerate(records):
        if raw is not None and len(raw) > MAX_BYTES:
            assert by_offset[i]["error"].startswith("oversized record")
        if raw is not None and raw.strip() and len(raw) <= MAX_BYTES:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                assert by_offset[i]["error"] == "invalid UTF-8"


def test_the_valid_seeds_parse(spark):
    from ingest.arrow_parse import parse_bronze
    from ingest.file_source import lines_dataframe

    rows = parse_bronze(lines_dataframe(spark, VALID, ingested_at=INGESTED), max_record_bytes=MAX_BYTES) \
        .orderBy("offset").select("_error", "event.dataset").collect()
    assert [r["dataset"] for r in rows] == ["system.auth", "system.auth", "system.syslog", "dhcpd", "zeek.dns",
                                           "zeek.conn"]
    assert all(r["_error"] is None for r in rows)
