"""The driver remembers Py4J name lookups: the same answers, without the reflection round trips."""

from __future__ import annotations

import re
from contextlib import contextmanager

import py4j.clientserver as clientserver
from pyspark.sql import functions as F

from core.jvm_lookups import remember_jvm_lookups


@contextmanager
def _counted():
    """Count Py4J commands by kind (``r`` reflection, ``c`` call, …) sent while the block runs."""
    counts: dict[str, int] = {}
    send = clientserver.ClientServerConnection.send_command

    def counting(self, command):
        counts[command[:1]] = counts.get(command[:1], 0) + 1
        return send(self, command)

    clientserver.ClientServerConnection.send_command = counting
    try:
        yield counts
    finally:
        clientserver.ClientServerConnection.send_command = send


def _expression(spark):
    df = spark.createDataFrame([("GET /a?x=1 HTTP/1.1", 3)], "line string, n int")
    return df.select(F.regexp_extract("line", r"^(\w+) (\S+)", 2).alias("path"), F.upper(F.col("line")).alias("u"),
                     F.when(F.col("n") > 2, F.lit("big")).otherwise("small").alias("size"),
                     F.transform(F.array(F.col("n")), lambda v: v + 1).alias("t"))


def test_building_an_expression_again_asks_the_jvm_no_name_and_gives_the_same_plan_and_rows(spark):
    remember_jvm_lookups()
    remember_jvm_lookups()  # idempotent: a second install must not wrap the wrapper
    first = _expression(spark)
    with _counted() as counts:
        again = _expression(spark)
    assert counts.get("r", 0) == 0, f"reflection round trips on a rebuild: {counts}"
    assert counts.get("c", 0) > 0, "the calls themselves still go to the JVM"
    plan = lambda df: re.sub(r"x_\d+#\d+|#\d+", "#", df._jdf.queryExecution().analyzed().toString())  # noqa: E731 (ids differ)
    assert plan(again) == plan(first)
    assert [tuple(r) for r in again.collect()] == [("/a?x=1", "GET /A?X=1 HTTP/1.1", "big", [4])]


def test_a_static_field_is_read_each_time_and_an_unknown_name_still_fails(spark):
    import pytest
    from py4j.protocol import Py4JError

    remember_jvm_lookups()
    jvm = spark.sparkContext._jvm
    assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    with _counted() as counts:
        assert jvm.java.lang.Integer.MAX_VALUE == 2**31 - 1
    assert counts.get("r", 0) == 1, f"a field value is asked for, not remembered: {counts}"
    for _ in range(2):  # a miss is not remembered as anything: it fails again
        with pytest.raises(Py4JError):
            _ = jvm.java.lang.Integer.noSuchMember_


def test_sessions_are_built_without_dataframe_call_site_capture(spark):
    # Each column operation would otherwise cost ~6 extra round trips (conf reads, origin set/clear).
    assert spark.conf.get("spark.python.sql.dataFrameDebugging.enabled") == "false"
    with _counted() as counts:
        F.col("a").alias("b")
    assert sum(counts.values()) <= 3, counts
