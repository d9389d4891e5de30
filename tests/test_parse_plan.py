"""The shape of the parse plan: planning barriers keep the stacked projections short, and change no row.

Why it matters: Spark's scan patterns walk every stacked projection from every node, so a streaming query's
per-micro-batch planning grows with the square of the stack's depth (ingest/normalize.py, PLANNING_BARRIER_EVERY).
"""

from __future__ import annotations

import datetime as dt

from ingest.file_source import lines_dataframe
from ingest.arrow_parse import PLANNING_BARRIER_EVERY, parse_bronze

LINES = [
    "<38>Mar 10 11:59:01 web-01 sshd[411]: Failed password for invalid user admin from 203.0.113.9 port 52113 ssh2",
    "<86>1 2024-03-10T11:59:02.5Z web-02 sudo - - - alice : TTY=pts/0 ; PWD=/home/alice ; USER=root ; "
    "COMMAND=/bin/cat /etc/shadow",
    '{"_path":"conn","ts":1710071943.1,"uid":"C1","id.orig_h":"10.0.0.5","id.orig_p":50000,'
    '"id.resp_h":"198.51.100.7","id.resp_p":443,"proto":"tcp","orig_bytes":10,"resp_bytes":20}',
    '{"_path":"dns","ts":1710071944.0,"uid":"C2","id.orig_h":"10.0.0.5","id.orig_p":5353,'
    '"id.resp_h":"10.0.0.1","id.resp_p":53,"proto":"udp","query":"example.org","qtype_name":"A"}',
    "not syslog at all",
    '{"_path":"conn","ts":15219',
]
INGESTED = dt.datetime(2024, 3, 10, 12, 0, 0, tzinfo=dt.UTC)


def _longest_projection_stack(jplan) -> int:
    """The most ``Project`` nodes stacked directly on each other anywhere in a JVM logical plan."""
    best, stack = 0, [(jplan, 0)]
    while stack:
        node, above = stack.pop()
        run = above + 1 if node.nodeName() == "Project" else 0
        best = max(best, run)
        children = node.children()
        stack.extend((children.apply(i), run) for i in range(children.size()))
    return best


def _bronze(spark, lines: list[str]):
    # Stored rows, not the in-memory relation lines_dataframe gives: the optimizer would evaluate projections over
    # that at planning time (ConvertToLocalRelation), and a stream's source is never one.
    return lines_dataframe(spark, lines, ingested_at=INGESTED).localCheckpoint(eager=True)


def _rows(df) -> list[dict]:
    return [r.asDict(recursive=True) for r in df.orderBy("offset").collect()]


def test_the_optimized_parse_plan_stacks_few_projections(spark):
    parsed = parse_bronze(_bronze(spark, LINES), planning_barriers=True)
    optimized = parsed._jdf.queryExecution().optimizedPlan()
    depth = _longest_projection_stack(optimized)
    # The barrier follows every PLANNING_BARRIER_EVERY-th step; the optimizer may add one projection of its own.
    assert 1 <= depth <= PLANNING_BARRIER_EVERY + 1, optimized.toString()[:2000]
    assert "CollectMetrics" in optimized.toString()


def test_a_stream_gets_the_barriers_by_default(spark, tmp_path):
    (tmp_path / "in").mkdir()
    stream = spark.readStream.schema("value binary, topic string, partition int, offset long").parquet(
        str(tmp_path / "in"))
    analyzed = parse_bronze(stream)._jdf.queryExecution().analyzed().toString()
    assert "CollectMetrics" in analyzed


def test_the_barriers_change_no_row(spark):
    with_barriers = _rows(parse_bronze(_bronze(spark, LINES), planning_barriers=True))
    plain = parse_bronze(_bronze(spark, LINES))  # a batch frame: no barriers by default
    plain_plan = plain._jdf.queryExecution().optimizedPlan()
    assert "CollectMetrics" not in plain_plan.toString()
    assert _longest_projection_stack(plain_plan) > 2 * (PLANNING_BARRIER_EVERY + 1)  # what the barriers cut
    assert _rows(plain) == with_barriers
    assert len(with_barriers) == len(LINES)
    # The sample holds good and bad lines of both formats, so the comparison covers events and quarantine alike.
    assert sum(r["_error"] is None for r in with_barriers) == 4


def test_two_parsed_frames_meet_in_one_plan(spark):
    """Each call names its observations apart: Spark rejects two observations of one name in a plan."""
    first = parse_bronze(_bronze(spark, LINES[:3]), planning_barriers=True)
    second = parse_bronze(_bronze(spark, LINES[3:]), planning_barriers=True)
    both = first.unionByName(second)
    assert both.count() == len(LINES)
    assert both.where("_error IS NULL").count() == 4
