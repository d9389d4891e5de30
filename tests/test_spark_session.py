"""core/spark_session.py: per-query SQL settings (the windowed query's no-data batches off) stay with that query;
work started for a query from other threads stays in its job group."""

from __future__ import annotations

from core.spark_session import NO_DATA_BATCHES_OFF, PerContext, session_conf

NO_DATA = "spark.sql.streaming.noDataMicroBatches.enabled"


def test_a_query_started_inside_session_conf_keeps_it_in_its_batches_and_tasks_and_the_session_goes_back(
        spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    (source / "0.json").write_text('{"k": "a"}\n{"k": "b"}\n')
    assert spark.conf.get(NO_DATA, None) in (None, "true")
    before = spark.conf.get(NO_DATA, None)
    seen: dict[str, object] = {}

    def batch(df, _batch_id):
        seen["driver"] = df.sparkSession.conf.get(NO_DATA)
        # What the tasks see: SQL settings travel to executors with each job (SQLConf.get there reads them).
        seen["tasks"] = df.rdd.mapPartitions(lambda _rows: [_task_conf(NO_DATA)]).collect()

    stream = spark.readStream.schema("k string").json(str(source))
    with session_conf(spark, NO_DATA_BATCHES_OFF):
        query = (stream.writeStream.trigger(availableNow=True).foreachBatch(batch)
                 .option("checkpointLocation", str(tmp_path / "cp")).start())
    assert spark.conf.get(NO_DATA, None) == before  # the session went back at once, the query runs on
    query.awaitTermination(120)
    assert query.exception() is None
    assert seen["driver"] == "false"
    assert seen["tasks"] and set(seen["tasks"]) == {"false"}


def _task_conf(key: str) -> str:
    from pyspark import TaskContext

    return TaskContext.get().getLocalProperty(key)


def test_in_this_query_runs_in_another_thread_with_its_own_copy_of_the_callers_job_group_and_properties(spark):
    """The ingest batch writes three tables from other threads: their jobs must belong to the query's job group
    (stopping the query cancels them), and two such threads must not share one set of properties."""
    from concurrent.futures import ThreadPoolExecutor

    from core.spark_session import in_this_query

    sc = spark.sparkContext
    group = f"nightjar-test-{id(spark)}"

    def job(mark: str) -> tuple[str | None, str | None]:
        seen = sc.getLocalProperty("nightjar.test.owner")
        sc.setLocalProperty("nightjar.test.owner", mark)  # must not reach the caller or the other call
        spark.range(10).count()
        return seen, sc.getLocalProperty("spark.jobGroup.id")

    sc.setJobGroup(group, "in_this_query test")
    sc.setLocalProperty("nightjar.test.owner", "query")
    try:
        with ThreadPoolExecutor(1) as fresh:  # a thread that never ran a wrapped call
            plain = fresh.submit(job, "plain").result()
        with ThreadPoolExecutor(2) as pool:
            wrapped = [pool.submit(in_this_query(job), f"thread-{i}") for i in range(2)]
            results = [f.result() for f in wrapped]
        assert results == [("query", group), ("query", group)]
        assert plain[1] != group  # a bare thread's jobs would not be the query's
        assert sc.getLocalProperty("nightjar.test.owner") == "query"
        assert len(sc.statusTracker().getJobIdsForGroup(group)) >= 2
    finally:
        sc.setLocalProperty("nightjar.test.owner", None)
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
        sc.setLocalProperty("spark.job.interruptOnCancel", None)


def test_a_per_context_value_is_built_once_and_its_columns_serve_every_frame(spark):
    """The windowed query's rules build their candidate columns once (PerContext) and apply them to every batch:
    each frame gets its own rows, the expression is not rebuilt."""
    from pyspark.sql import functions as F

    built: list[int] = []

    def build():
        built.append(1)
        return (F.col("x") * 2).alias("y")

    doubled = PerContext(build)
    first = spark.createDataFrame([(1,), (2,)], "x int")
    second = spark.createDataFrame([(5,)], "x int")
    assert [r.y for r in first.select(doubled.get()).collect()] == [2, 4]
    assert [r.y for r in second.select(doubled.get()).collect()] == [10]
    assert doubled.get() is doubled.get() and built == [1]


def _counted(spark, n: int):
    """``n`` rows through a Python UDF that adds 1 to an accumulator per row it computes."""
    from pyspark.sql import functions as F

    computed = spark.sparkContext.accumulator(0)

    @F.udf("long")
    def touch(x):
        computed.add(1)
        return x

    return spark.range(n).repartition(3).select(touch("id").alias("id")), computed


def test_materialized_rows_counts_and_stores_in_one_pass_and_later_plans_read_the_stored_rows(spark):
    """The ingest batch's stored rows and their count (one job, not two): each row is computed once, for the count,
    and every later plan over the result (the writes, the rules) reads what was stored."""
    from core.spark_session import materialized_rows, release

    df, computed = _counted(spark, 50)
    stored, rows = materialized_rows(df)
    try:
        assert rows == 50 and computed.value == 50
        assert sorted(r.id for r in stored.collect()) == list(range(50))
        assert stored.filter("id % 2 = 0").count() == 25
        assert computed.value == 50  # no recomputation after the count
    finally:
        release(stored)


def test_a_lazily_materialized_frame_is_stored_by_its_first_reader(spark):
    """``materialized(df, eager=False)`` (the batch's events): nothing runs until the first reader (the events
    write), which stores the rows; the rules after it read them, not the plan."""
    from core.spark_session import materialized, release

    df, computed = _counted(spark, 40)
    stored = materialized(df, eager=False)
    try:
        assert computed.value == 0
        assert stored.count() == 40 and computed.value == 40
        assert sorted(r.id for r in stored.filter("id < 3").collect()) == [0, 1, 2]
        assert computed.value == 40
    finally:
        release(stored)
