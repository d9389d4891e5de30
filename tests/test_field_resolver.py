"""The one field resolver and the typed per-dataset views, over events parsed by the registry's parsers.

Spark and DuckDB must give the same typed values for the same names, whether a field is a core column or a key
of ``detail``; an unknown name is refused by name.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pytest

from ingest.arrow_parse import events_of, parse_bronze
from ingest.field_resolver import UnknownField, duckdb_sql, resolve, spark_column
from ingest.file_source import lines_dataframe
from ingest.source_views import duckdb_view_sql, fields_reference, spark_view_sql, view_name
from ingest.sources import datasets

LINES = [
    b"<38>Feb 21 21:54:44 bastion myapp[4242]: something happened",
    b"<165>1 2026-03-01T10:00:00.5Z web1 app 17 ID47 - plain message",
    b"Feb 21 21:54:45 bastion myapp: message repeated 3 times: [ hello]",
]
INGESTED = dt.datetime(2026, 3, 15, 12, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def events(spark):
    df = events_of(parse_bronze(lines_dataframe(spark, LINES, ingested_at=INGESTED))).cache()
    df.createOrReplaceTempView("events")
    yield df
    df.unpersist()


def test_core_names_and_sigma_taxonomy_resolve_to_core_columns():
    assert resolve("source.ip").core == "source.ip"
    assert resolve("User", ["system.auth", "dhcpd"]).core == "user.name"
    assert resolve("CommandLine", ["system.auth"]).core == "process.command_line"
    assert resolve("nightjar.user.is_admin").type == "boolean"


def test_a_sources_own_field_wins_over_the_taxonomy_for_its_datasets():
    """Sysmon's ``User`` is ``DOMAIN\\name`` as written; for the auth log, Sigma's ``User`` is ``user.name``."""
    sysmon = resolve("User", ["windows.sysmon_operational"])
    assert sysmon.core is None and sysmon.places[0].detail_key == "User"
    mixed = resolve("User", ["windows.sysmon_operational", "system.auth"])
    places = {p.datasets: (p.core, p.detail_key) for p in mixed.places}
    assert places == {("windows.sysmon_operational",): (None, "User"), ("system.auth",): ("user.name", None)}


def test_source_fields_resolve_per_dataset_with_their_type():
    priority = resolve("log.syslog.priority", ["system.syslog"])
    assert priority.core is None
    assert [(p.detail_key, p.type) for p in priority.places] == [("log.syslog.priority", "int")]
    # the syslog header's fields belong to every syslog-borne dataset, not only system.syslog
    syslog_borne = [name for name, found in datasets().items() if any(s.transport == "syslog" for s, _ in found)]
    assert set(resolve("log.syslog.msgid", syslog_borne).places[0].datasets or ()) == set(syslog_borne)


def test_unknown_names_are_refused_by_name():
    with pytest.raises(UnknownField, match="'no_such_field'"):
        resolve("no_such_field", ["system.auth", "dhcpd"])
    # an open dataset (a JSON payload's keys) takes any name as a key of detail
    assert resolve("no_such_field", ["system.syslog"]).places[0].detail_key == "no_such_field"


def test_spark_and_duckdb_read_the_same_typed_values(events):
    names = ["log.syslog.priority", "log.syslog.msgid", "system.auth.repeated", "process.pid", "host.name"]
    resolved = {n: resolve(n, ["system.syslog"]) for n in names}
    spark_rows = events.select(*[spark_column(r).alias(n) for n, r in resolved.items()]).collect()
    got_spark = sorted((tuple(r) for r in spark_rows), key=repr)
    con = duckdb.connect()
    con.register("events", events.toArrow())
    got_duck = sorted(con.sql(f"SELECT {', '.join(duckdb_sql(r) for r in resolved.values())} FROM events").fetchall(),
                      key=repr)
    assert got_spark == got_duck
    assert (38, None, None, 4242, "bastion") in got_spark  # priority typed int from detail, pid from the core
    assert (165, "ID47", None, 17, "web1") in got_spark
    assert (None, None, 3, None, "bastion") in got_spark


def test_typed_views_in_spark_and_duckdb(spark, events):
    spark.sql(spark_view_sql("system.syslog"))
    spark_rows = {r["original"]: r for r in spark.sql(f"SELECT * FROM {view_name('system.syslog')}").collect()}
    assert spark_rows[LINES[0].decode()]["log.syslog.priority"] == 38
    assert spark_rows[LINES[1].decode()]["log.syslog.msgid"] == "ID47"
    con = duckdb.connect()
    con.register("events", events.toArrow())
    con.sql(duckdb_view_sql("system.syslog"))
    duck = con.sql('SELECT original, "log.syslog.priority", "system.auth.repeated" FROM system_syslog').fetchall()
    assert sorted(duck, key=repr) == sorted(((r["original"], r["log.syslog.priority"], r["system.auth.repeated"])
                                             for r in spark_rows.values()), key=repr)


def test_every_dataset_has_a_view_that_duckdb_and_spark_accept(spark, events):
    con = duckdb.connect()
    con.register("events", events.toArrow())
    per_dataset = {r["dataset"]: r["count"] for r in events.groupBy("event.dataset").count().collect()}
    for dataset in datasets():
        con.sql(duckdb_view_sql(dataset))
        spark.sql(spark_view_sql(dataset))
        expected = per_dataset.get(dataset, 0)
        assert con.sql(f'SELECT count(*) FROM "{view_name(dataset)}"').fetchall()[0][0] == expected, dataset
        assert spark.sql(f"SELECT * FROM `{view_name(dataset)}`").count() == expected, dataset


def test_fields_reference_is_current():
    doc = Path(__file__).resolve().parents[1] / "docs" / "fields.md"
    assert doc.read_text() == fields_reference(), "docs/fields.md is stale: python -m ingest.source_views > docs/fields.md"
