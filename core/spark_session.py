"""The one place that builds Spark sessions, so every command and test runs with the same settings."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession

from core import class_archive
from core.config import OWNER_ONLY_UMASK, SECRET_SETTING_WORDS, Settings
from core.jvm_lookups import remember_jvm_lookups

log = logging.getLogger(__name__)
T = TypeVar("T")

LOG4J_CONFIG = Path(__file__).parent / "resources" / "log4j2.properties"
# FAIR scheduler pools: "default" for the alert path (ingest, rules); "ml" (scoring) and "enrichment"
# (auth_sessions) are served only when "default" waits for nothing.
FAIR_POOLS_FILE = Path(__file__).parent / "resources" / "fairscheduler.xml"
POOL_PROPERTY = "spark.scheduler.pool"
REPO_ROOT = Path(__file__).resolve().parent.parent  # the import root of core, ingest, alerts, …
# Spark's default (secret|password|token|access key) plus every word that marks a Kafka credential setting.
REDACTION_REGEX = "(?i)" + "|".join(["access[.]?key", *(re.escape(w) for w in SECRET_SETTING_WORDS)])


def build_spark(settings: Settings, app_name: str = "nightjar", ui: bool = False,
                data_sources: Iterable[type] = (), java_options: str = "") -> SparkSession:
    """Return a Spark session configured for Nightjar, with the given Python data sources registered.

    The stages register their own sources where they read them (``ingest.kafka_source.read_kafka``,
    ``ingest.delta_source.read_delta_stream``); this module imports none of them.

    UTC everywhere (log timestamps and Delta files must not depend on the machine's zone); few shuffle
    partitions because micro-batches are small; the Python workers use this interpreter so that the
    project's modules (installed into ``.venv``) import on executors. The driver JVM maps the class archive
    ``scripts/setup`` made, when it fits (``core/class_archive.py``); ``java_options`` adds driver JVM options.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    on_loopback = settings.spark_master.startswith(("local", "spark://127.0.0.1:", "spark://localhost:"))
    if on_loopback:  # local mode or `nightjar cluster up`: executors reach the driver on loopback
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "hostname resolves to loopback" warning
    java_opts = " ".join(opt for opt in (f"-Duser.timezone=UTC -Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}",
                                          class_archive.driver_java_options(), java_options) if opt)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(settings.spark_master)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.default.parallelism", str(max(2, settings.shuffle_partitions)))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Off: PySpark's DataFrame call-site capture costs ~6 Py4J round trips per column operation (conf reads,
        # set/clear of the origin): half of the 154,000 round trips of building the ingest plan, ~10 s of every
        # pipeline start. Engine errors still name the failing expression; they lose the Python file:line.
        .config("spark.python.sql.dataFrameDebugging.enabled", "false")
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", "-Duser.timezone=UTC")
        # The Python data source's latestOffset runs in a Python worker: keep workers alive.
        .config("spark.python.worker.reuse", "true")
        # FAIR between pools, FIFO inside each: the ML scoring query's tasks (pool "ml") start only when no ingest or
        # rule task waits for a core, so scoring does not delay the rule path (docs/ml.md, "Cost in the live
        # pipeline"). The driver reads the file: the same on a standalone cluster.
        .config("spark.scheduler.mode", "FAIR")
        .config("spark.scheduler.allocation.file", FAIR_POOLS_FILE.as_uri())
        .config("spark.sql.streaming.metricsEnabled", "true")
        # Off: constraint propagation (inferring not-null and equality facts through every projection) is for
        # filter push-down before joins; over the ingest plan's ~430 fields of CASE WHENs and aliases it was 45 % of
        # the ingest query's driver thread in a live run (JFR), paid again wherever a plan becomes rows
        # (foreachBatch's LogicalRDD, localCheckpoint). Spark documents it as expensive for such plans; the rows
        # are the same without it (docs/performance.md, "Ingest query: planning").
        .config("spark.sql.constraintPropagation.enabled", "false")
        # The Kafka source's options carry librdkafka credentials (NIGHTJAR_KAFKA_*): Spark redacts option and
        # conf values whose key matches this in plans, logs, error messages and the UI.
        .config("spark.redaction.regex", REDACTION_REGEX)
        # Hadoop's file system (checkpoints) applies its own umask, not the process's: owner-only like the lake.
        .config("spark.hadoop.fs.permissions.umask-mode", f"{OWNER_ONLY_UMASK:03o}")
    )
    if not settings.spark_master.startswith("local"):
        # Executors run in other JVMs with their own Python workers, which unpickle the project's data sources and
        # sinks: they need the repository importable. Where the workers' environment already provides it (an
        # installed package, `nightjar cluster up`), this path is simply one more entry.
        builder = builder.config("spark.executorEnv.PYTHONPATH", os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p))
    remember_jvm_lookups()  # class and static-method names resolved once per process, not per call: jvm_lookups.py
    jvm_log = _jvm_log_path(settings, app_name)
    with _stderr_to(jvm_log):  # the JVM inherits this stderr for its whole life; ours is restored at once
        _start_jvm_in_own_group(builder._options)  # pyspark 4.3's builder keeps its options there
        spark = builder.getOrCreate()
    log.debug("Spark's own output (JVM start-up, engine errors): %s", jvm_log)
    for source in data_sources:
        spark.dataSource.register(source)
    log.info("spark session ready: master=%s version=%s", settings.spark_master, spark.version)
    return spark



# No micro-batch without input for the windowed query in update mode (start_windowed). After each batch that moves
# the watermark Spark runs one more, without data, only to evict the windows the watermark passed: in update mode
# it emits nothing (alerts come from updated windows, never from closed ones), yet live it cost 0.8-1.2 s every
# other batch, on the cores the ingest query needs, and new events waited for it. The next batch with input evicts
# the same windows, and late rows are dropped by the same watermark either way. The append-mode query keeps them
# (it emits a window when the watermark closes it), and so do auth_sessions (unmatched logins) and ML scoring.
NO_DATA_BATCHES_OFF = {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}


class PerContext(Generic[T]):
    """A value built once per Spark context, for expressions a micro-batch applies again and again.

    A ``Column`` is an unresolved expression held by the JVM of one Spark context; any DataFrame of that context can
    use it, and building one costs a Py4J round trip per function call (~0.1 ms, more under load). The windowed
    query's batch rebuilt every rule's candidate columns: ~4,800 round trips, 0.5-0.8 s of each batch
    (docs/performance.md, "Windowed query"). Built again when the active context changes (a stopped and
    restarted session). Driver-side only, like the Columns themselves.
    """

    def __init__(self, build: Callable[[], T]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._context: SparkContext | None = None
        self._value: T | None = None

    def get(self) -> T:
        context = SparkContext._active_spark_context
        with self._lock:
            if context is None or self._context is not context:
                self._value, self._context = self._build(), context
            return self._value  # type: ignore[return-value]


@contextlib.contextmanager
def session_conf(spark: SparkSession, values: dict[str, str]) -> Iterator[None]:
    """Set SQL ``values`` on ``spark`` for the block, then restore them.

    A streaming query started inside keeps them for its whole life (it runs on a copy of the session taken at
    ``start()``), and so do its ``foreachBatch`` DataFrames and their tasks; the session itself goes back."""
    saved = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def materialized(df: DataFrame, eager: bool = True) -> DataFrame:
    """``df`` computed once and kept (memory, then disk) as a DataFrame whose plan is just the stored rows.

    Why not ``persist()``: a ``foreachBatch`` DataFrame read by a union of several plans (one per windowed rule) was
    served from the cache by the first branch only; the others recomputed the whole micro-batch (source read, rule
    explode, stateful aggregation): Spark's cache lookup did not recognize the branches' copies of the batch's
    relation. Measured on 40,000 events (13 of 14 branches recomputing): the windowed query's batch 23.5-27.2 JVM
    CPU-s with ``persist()``, 9.2-9.5 with this. Plans over the result read the stored blocks whatever the cache does.
    Release with :func:`release`. ``eager=False`` stores the rows when the first job reads them, which saves a job
    where that first reader reads every row anyway (a table write); plans built before it still read the stored rows.
    """
    return df.localCheckpoint(eager=eager)


def materialized_rows(df: DataFrame) -> tuple[DataFrame, int]:
    """:func:`materialized` ``df`` and its number of rows, from one Spark job.

    Why: ``materialized(df).count()`` is two jobs, the eager checkpoint's own row count (whose result Spark drops) and
    then a DataFrame count of the stored rows (two stages, a shuffle to one partition). Here the checkpoint is lazy and
    the stored RDD's count is what computes and stores it.
    """
    stored = materialized(df, eager=False)
    return stored, int(_stored_rdd(stored).count())


@contextlib.contextmanager
def scheduler_pool(spark: SparkSession, pool: str) -> Iterator[None]:
    """Streaming queries started inside this block run every micro-batch's jobs in FAIR pool ``pool`` (one of
    :data:`FAIR_POOLS_FILE`): a query's thread copies the starting thread's local properties when it is created. The
    property is removed on leaving, so queries started later from this thread stay in "default"."""
    sc = spark.sparkContext
    sc.setLocalProperty(POOL_PROPERTY, pool)
    try:
        yield
    finally:
        sc.setLocalProperty(POOL_PROPERTY, None)  # type: ignore[arg-type]  # None removes it: back to "default"


class PoolCheck:
    """Called from a query's ``foreachBatch``: says once (INFO) which FAIR pool its micro-batches run in, or warns
    when it is not ``expected`` (a query started outside :func:`scheduler_pool`)."""

    def __init__(self, spark: SparkSession, query: str, expected: str) -> None:
        self.spark, self.query, self.expected, self.done = spark, query, expected, False

    def __call__(self) -> None:
        if self.done:
            return
        self.done = True
        pool = self.spark.sparkContext.getLocalProperty(POOL_PROPERTY)
        (log.info if pool == self.expected else log.warning)(
            "%s query: micro-batches run in scheduler pool %r (%s mode)", self.query, pool,
            self.spark.sparkContext.getConf().get("spark.scheduler.mode", "FIFO"))


def in_this_query(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` made to run in another thread as part of the caller's Spark jobs: it starts with a copy of the calling
    thread's local properties (a streaming query's job group, its scheduler pool, its SQL execution), so stopping the
    query cancels its jobs, and each call gets its own copy (two threads setting their SQL execution ids in one
    ``Properties`` would overwrite each other's; ``pyspark.inheritable_thread_target`` shares one).

    Why threads at all: a ``foreachBatch`` body that writes four tables runs four small jobs and four commits one
    after the other, each too small to use both cores; run side by side they overlap (docs/performance.md)."""
    sc = SparkContext._active_spark_context
    if sc is None:
        return fn
    snapshot = sc._jsc.sc().getLocalProperties().clone()

    def run(*args: object, **kwargs: object) -> T:
        sc._jsc.sc().setLocalProperties(snapshot.clone())
        return fn(*args, **kwargs)

    return run


def _stored_rdd(df: DataFrame):  # type: ignore[no-untyped-def]  # a Py4J handle of the JVM's RDD
    """The RDD that holds a :func:`materialized` DataFrame's rows (its plan is a scan of it)."""
    return df._jdf.queryExecution().logical().rdd()


def release(df: DataFrame) -> None:
    """Drop the stored blocks of a :func:`materialized` DataFrame now (Spark's cleaner would only after a GC)."""
    try:
        _stored_rdd(df).unpersist(False)
    except Exception as exc:  # the JVM is stopping: nothing to free, and the batch must not fail for it
        log.debug("could not release a materialized batch: %s", exc)


def _start_jvm_in_own_group(options: dict[str, str]) -> None:
    """Start the driver JVM (and its SparkContext) in a process group of its own, before the builder would start it
    in ours; nothing to do when this process already has a JVM.

    Why: a signal to our process group (``nightjar demo`` stopping its children, ``kill -- -PGID``, a service
    manager, a terminal's Ctrl-C) otherwise reaches the JVM too. Its own SIGTERM hook then stops Spark under the
    running queries while Python is still stopping them in order: Py4J tracebacks on stderr ("Answer from Java side
    is empty", ``EOFError``) and ERROR lines in the JVM log (TaskSchedulerImpl statusUpdate, "Python worker crashed",
    tasks rejected). Out of the group the JVM stops when Python stops it (``SparkContext.stop`` at exit) or when
    Python is gone (the gateway exits at the end of its stdin, a pipe from us). It stays in our session, so a kill
    of the whole session still takes it.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or SparkContext._active_spark_context is not None:
        return
    conf = SparkConf()
    for key, value in options.items():
        conf.set(key, value)
    SparkContext(conf=conf, gateway=launch_gateway(conf, popen_kwargs={"process_group": 0}))


def _jvm_log_path(settings: Settings, app_name: str) -> Path:
    """Where the JVM's own stderr goes: ``<lake>/_logs/spark-<app>.log`` when the lake exists, else a temp file.

    Why: the JVM prints start-up noise ("Using incubator modules", log-level hints) that means nothing to a user,
    and Nightjar reports every failure itself in one line; the engine's text stays available in this file.
    """
    logs = settings.lake / "_logs"
    if settings.lake.is_dir():
        with contextlib.suppress(OSError):
            logs.mkdir(exist_ok=True)
            if os.access(logs, os.W_OK):
                return logs / f"spark-{app_name}.log"
    return Path(tempfile.gettempdir()) / f"nightjar-spark-{app_name}-{os.getpid()}.log"


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while a child process (the JVM) is started, then restore it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as f:
            os.dup2(f.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
