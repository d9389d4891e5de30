"""The real Zeek logs of ../shared/corpus/zeek-wrccdc-2018 parse completely through ``parse_bronze`` (the stream's
parse, contract v2): every line an event of its log's dataset with valid addresses (skipped when absent)."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from tests.conftest import CORPUS

# NIGHTJAR_CORPUS: the corpus elsewhere than ../shared/corpus (a worktree beside the main checkout).
ZEEK_DIR = Path(os.environ.get("NIGHTJAR_CORPUS") or CORPUS) / "zeek-wrccdc-2018"
FILES = sorted(ZEEK_DIR.glob("*.ndjson")) if ZEEK_DIR.is_dir() else []

pytestmark = pytest.mark.skipif(not FILES, reason=f"corpus {ZEEK_DIR} not present")


def valid_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def test_every_corpus_line_is_an_event_with_valid_addresses(spark):
    from ingest.arrow_parse import parse_bronze
    from ingest.file_source import read_files

    parsed = parse_bronze(read_files(spark, FILES)).cache()
    try:
        per_file = {r["partition"]: r for r in parsed.groupBy("partition").agg(
            F.count("*").alias("n"),
            F.sum(F.col("_error").isNotNull().cast("int")).alias("bad"),
            F.collect_set("event.dataset").alias("datasets")).collect()}
        errors = parsed.where(F.col("_error").isNotNull()).select("offset", "_error").limit(5).collect()
        assert not errors, errors
        for index, path in enumerate(FILES):
            lines = sum(1 for _ in Path(path).open("rb"))
            assert per_file[index]["n"] == lines, path
            assert per_file[index]["bad"] == 0, path
            assert per_file[index]["datasets"] == [f"zeek.{path.stem}"], path
        # Every source.ip is a valid IP address; each line that has id.orig_h gets it as source.ip.
        ips = parsed.select("source.ip", "destination.ip", "event.original").collect()
        with_orig = 0
        for row in ips:
            original = json.loads(row["original"])
            if "id.orig_h" in original:
                with_orig += 1
                assert row["ip"] == ipaddress.ip_address(original["id.orig_h"]).compressed \
                    or row["ip"] == original["id.orig_h"].lower()
            assert row["ip"] is None or valid_ip(row["ip"])
            assert row[1] is None or valid_ip(row[1])
        assert with_orig == len(ips)
        # Spot checks of real values.
        dns = parsed.where((F.col("event.dataset") == "zeek.dns") & (F.col("dns.question.name") == "ise.wrccdc.org"))
        first = dns.orderBy("@timestamp").first()
        assert first["dns"]["question"]["type"] == "A" and first["dns"]["response_code"] == "NOERROR"
        ssh = parsed.where(F.col("event.dataset") == "zeek.ssh").count()
        assert ssh == sum(1 for _ in (ZEEK_DIR / "ssh.ndjson").open()) if (ZEEK_DIR / "ssh.ndjson").exists() else True
    finally:
        parsed.unpersist()
