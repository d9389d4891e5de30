"""`nightjar run`: raw topics -> bronze exactly once, progress recording, crash/replay/data-loss recovery."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from core.config import (
    RAW_TOPICS,
    TABLE_BRONZE,
    TABLE_EVENTS,
    TABLE_PIPELINE_PROGRESS,
    TABLE_QUARANTINE,
    TOPIC_RAW_SYSLOG,
    TOPIC_RAW_ZEEK,
)
from core.errors import DataLossError
from core.lake import is_delta_table, row_count, table_dataset
from core.triggers import QUERY_AUTH_SESSIONS, QUERY_DETECT, QUERY_INGEST, Trigger, parse_interval
from ingest.embedded_broker import EmbeddedBroker, ensure_topics, free_port
from nightjar import pipeline
from nightjar.pipeline import run_pipeline
from tests.kafka_records import produce

REPO = Path(__file__).resolve().parent.parent


def nightjar(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nightjar.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, **kw)


def bronze_coordinates(lake: Path) -> list[tuple]:
    table = table_dataset(lake, TABLE_BRONZE).to_table(columns=["topic", "partition", "offset"])
    return list(zip(*(table[c].to_pylist() for c in ("topic", "partition", "offset")), strict=True))


@pytest.fixture
def own_broker():
    """A broker of this test's own (the data-loss and kill tests restart or load it)."""
    with EmbeddedBroker(port=free_port()) as b:
        yield b


@pytest.mark.e2e
def test_bronze_holds_every_record_exactly_once_and_progress_is_recorded(spark, own_broker, settings):
    settings = settings.with_(bootstrap=own_broker.bootstrap)
    ensure_topics(settings, RAW_TOPICS, partitions=4)
    sent = produce(own_broker.bootstrap, TOPIC_RAW_SYSLOG, 3000) | produce(own_broker.bootstrap, TOPIC_RAW_ZEEK, 1000)
    run_pipeline(settings, Trigger(available_now=True))
    coords = bronze_coordinates(settings.lake)
    assert len(coords) == 4000 and len(set(coords)) == 4000
    bronze = table_dataset(settings.lake, TABLE_BRONZE).to_table()
    assert set(bronze["value"].to_pylist()) == sent
    assert set(bronze["partition"].to_pylist()) == {0, 1, 2, 3}
    assert pc.min(bronze["ingested_at"]).as_py() >= pc.max(bronze["timestamp"]).as_py()
    progress = table_dataset(settings.lake, TABLE_PIPELINE_PROGRESS).to_table().to_pylist()
    queries = {p["query_name"] for p in progress if p["rule_id"] is None}
    assert QUERY_INGEST in queries and "windowed" in queries, queries
    # Kafka is read once, by the ingest query; the windowed rules read the events it wrote.
    assert sum(p["num_input_rows"] for p in progress if p["query_name"] == QUERY_INGEST) == 4000
    assert sum(p["num_input_rows"] for p in progress if p["query_name"] == "windowed") == \
        row_count(settings.lake, TABLE_EVENTS)
    # Every rule reports its health; none failed.
    health = {p["rule_id"]: p["status"] for p in progress if p["rule_id"] is not None}
    assert "ssh_brute_force" in health and "ioc_match" in health and set(health.values()) == {"running"}
    # Count in = events + quarantine.
    assert row_count(settings.lake, TABLE_EVENTS) + row_count(settings.lake, TABLE_QUARANTINE) == 4000
    assert all(p["batch_duration_ms"] > 0 for p in progress if p["num_input_rows"])
    # A second drain with nothing new adds nothing.
    run_pipeline(settings, Trigger(available_now=True))
    assert row_count(settings.lake, TABLE_BRONZE) == 4000


def _produce_lines(bootstrap: str, topic: str, lines: list[str]) -> set[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for line in lines:
        producer.produce(topic, value=line.encode())
    assert producer.flush(30) == 0
    return {line.encode() for line in lines}


@pytest.mark.e2e
@pytest.mark.timeout(900)  # its own waits add up to 860 s on a loaded machine (26 s in a quiet CI run)
def test_a_live_run_creates_its_tables_while_idle_and_writes_what_arrives_after_idle_batches(spark, own_broker,
                                                                                              settings, monkeypatch):
    """Idle micro-batches skip the table writes and rules (nightjar/pipeline.py): the run's first batch still creates
    the tables, and records that arrive after several idle batches are written, each once, and detected. The
    auth_sessions query, off the alert path, starts only once the events table has a first batch."""
    settings = settings.with_(bootstrap=own_broker.bootstrap, upkeep_interval_s=0)
    ensure_topics(settings, RAW_TOPICS, partitions=4)
    monkeypatch.setattr(pipeline, "AUX_START_CAP_S", 3600.0)  # its cap: not within this test's idle phase
    monkeypatch.setattr(pipeline, "DETECTION_POLL", "100 milliseconds")  # below the run's trigger: they look sooner
    stop = threading.Event()
    run = threading.Thread(target=run_pipeline, args=(settings, Trigger(interval="200 milliseconds")),
                           kwargs={"queries": [QUERY_INGEST, QUERY_DETECT, QUERY_AUTH_SESSIONS], "stop_event": stop})
    run.start()
    try:
        def ingest_batches() -> int:
            if not is_delta_table(settings.table_path(TABLE_PIPELINE_PROGRESS)):
                return 0
            rows = table_dataset(settings.lake, TABLE_PIPELINE_PROGRESS).to_table().to_pylist()
            return len({r["batch_id"] for r in rows if r["query_name"] == QUERY_INGEST and r["rule_id"] is None})

        deadline = time.monotonic() + 400
        while ingest_batches() < 3:  # batch 0 and at least two idle ones after it
            assert run.is_alive() and time.monotonic() < deadline, "the idle pipeline ran fewer than 3 batches"
            time.sleep(0.5)
        for table in (TABLE_BRONZE, TABLE_EVENTS, TABLE_QUARANTINE):
            assert is_delta_table(settings.table_path(table)) and row_count(settings.lake, table) == 0, table
        auth_checkpoint = settings.checkpoint(QUERY_AUTH_SESSIONS)
        assert not auth_checkpoint.exists(), "auth_sessions started before the events table had a batch"
        sent = produce(own_broker.bootstrap, TOPIC_RAW_SYSLOG, 300) | produce(own_broker.bootstrap, TOPIC_RAW_ZEEK, 200)
        sent |= _produce_lines(own_broker.bootstrap, TOPIC_RAW_SYSLOG, [  # and some that parse: events
            f"<38>Nov 25 04:00:0{i} bastion-01 sshd[12{i}]: Failed password for root from 203.0.113.{i + 1} port "
            f"4242 ssh2" for i in range(5)])
        def parsed() -> int:  # events and quarantine are written after bronze, in the same batch
            return row_count(settings.lake, TABLE_EVENTS) + row_count(settings.lake, TABLE_QUARANTINE)

        while parsed() < len(sent):
            assert run.is_alive() and time.monotonic() < deadline + 200, "records sent after idle batches not written"
            time.sleep(0.5)
        # Its start follows the events' first batch. Waited for among the active queries, not by its checkpoint's
        # metadata: Spark writes that file a moment before it registers the query (seen: the file there, the query
        # not yet in spark.streams.active).
        while QUERY_AUTH_SESSIONS not in {q.name for q in spark.streams.active}:
            assert run.is_alive() and time.monotonic() < deadline + 260, "auth_sessions never started"
            time.sleep(0.5)
        # The windowed query (update mode) runs no micro-batch only to move the watermark: it would emit nothing,
        # and live it held a core every other batch while new events waited (core.spark_session.
        # NO_DATA_BATCHES_OFF). The queries that emit when the watermark passes keep them (auth_sessions here).
        no_data = {q.name: _stream_conf(q, "spark.sql.streaming.noDataMicroBatches.enabled")
                   for q in spark.streams.active}
        assert no_data.get("windowed") == "false" and no_data.get(QUERY_AUTH_SESSIONS) == "true", no_data
        # The detection queries look for new events commits every DETECTION_POLL, the others keep the run's trigger.
        every_ms = {q.name: q._jsq.streamingQuery().trigger().intervalMs() for q in spark.streams.active}
        assert every_ms.get("windowed") == 100 and every_ms.get(QUERY_INGEST) == 200, every_ms
    finally:
        stop.set()
        run.join(300)
    bronze = table_dataset(settings.lake, TABLE_BRONZE).to_table()
    assert sorted(bronze["value"].to_pylist()) == sorted(sent)
    assert parsed() == len(sent) and row_count(settings.lake, TABLE_EVENTS) == 5
    progress = table_dataset(settings.lake, TABLE_PIPELINE_PROGRESS).to_table().to_pylist()
    ioc = max((p for p in progress if p["rule_id"] == "ioc_match"), key=lambda p: p["timestamp"])
    assert ioc["status"] == "running" and ioc["last_batch_at"] is not None  # idle batches count as batches run


def test_detection_queries_look_for_new_events_sooner_than_a_slow_trigger_and_a_drain_stays_a_drain():
    """Downstream of the ingest query, a detection query runs a batch only when events has a new commit; with a slow
    --trigger it still looks every DETECTION_POLL (a 1-s trigger noticed a commit 0.46 s late on average)."""
    from core.config import DETECTION_POLL

    assert DETECTION_POLL == "250 milliseconds"
    assert Trigger(interval="1 second").polling(DETECTION_POLL) == Trigger(interval=DETECTION_POLL)
    assert Trigger(interval="200 milliseconds").polling(DETECTION_POLL) == Trigger(interval="200 milliseconds")
    assert Trigger(available_now=True).polling(DETECTION_POLL) == Trigger(available_now=True)


def _stream_conf(query, key: str) -> str:
    """A SQL setting as a running query's micro-batches see it (the session copy Spark took at ``start()``)."""
    return query._jsq.streamingQuery().sparkSessionForStream().conf().get(key)


@pytest.mark.e2e
def test_a_batch_replayed_after_a_crash_between_delta_commit_and_spark_commit_writes_nothing(
        spark, own_broker, settings):
    settings = settings.with_(bootstrap=own_broker.bootstrap, max_offsets_per_trigger=500)
    ensure_topics(settings, RAW_TOPICS, partitions=4)
    produce(own_broker.bootstrap, TOPIC_RAW_SYSLOG, 1200)
    run_pipeline(settings, Trigger(available_now=True), [QUERY_INGEST])
    assert row_count(settings.lake, TABLE_BRONZE) == 1200
    commits = settings.checkpoint(QUERY_INGEST) / "commits"
    offsets = settings.checkpoint(QUERY_INGEST) / "offsets"
    planned = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    if not (commits / str(planned)).exists():  # planned when the drain was stopped, never run: as if never planned
        (offsets / str(planned)).unlink()
        (offsets / f".{planned}.crc").unlink(missing_ok=True)
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    # Spark "crashed" after Delta committed batch `last`, before its own commit log entry (and checksum).
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    version = DeltaTable(str(settings.table_path(TABLE_BRONZE))).version()
    run_pipeline(settings, Trigger(available_now=True), [QUERY_INGEST])  # Spark re-runs batch `last`
    assert (commits / str(last)).exists(), sorted(p.name for p in commits.iterdir())
    assert DeltaTable(str(settings.table_path(TABLE_BRONZE))).version() == version
    coords = bronze_coordinates(settings.lake)
    assert len(coords) == 1200 == len(set(coords))


@pytest.mark.e2e
def test_data_loss_fails_by_default_naming_the_partition_and_the_option_and_lenient_mode_resumes(
        spark, settings, tmp_path):
    port = free_port()
    broker = EmbeddedBroker(port=port).start()
    try:
        settings = settings.with_(bootstrap=broker.bootstrap)
        ensure_topics(settings, RAW_TOPICS, partitions=4)
        produce(broker.bootstrap, TOPIC_RAW_SYSLOG, 800)
        # Data loss is the Kafka reader's concern: the in-process runs are the ingest query alone.
        run_pipeline(settings, Trigger(available_now=True), [QUERY_INGEST])
        assert row_count(settings.lake, TABLE_BRONZE) == 800
        broker.stop()  # an in-memory broker loses its topics on restart
        broker = EmbeddedBroker(port=port).start()
        ensure_topics(settings, RAW_TOPICS, partitions=4)
        produce(broker.bootstrap, TOPIC_RAW_SYSLOG, 40, prefix="after")

        result = nightjar("run", "--available-now", "--bootstrap", broker.bootstrap, "--lake", str(settings.lake))
        assert result.returncode != 0, result.stderr[-4000:]
        error_lines = [ln for ln in result.stderr.splitlines() if ln.startswith("nightjar run: error:")]
        assert len(error_lines) == 1, result.stderr[-3000:]
        assert "data loss" in error_lines[0] and f"{TOPIC_RAW_SYSLOG} partition" in error_lines[0]
        assert "failOnDataLoss=false" in error_lines[0] and "--no-fail-on-data-loss" in error_lines[0]
        assert "Traceback" not in result.stderr
        # No JVM start-up noise on the user's terminal: it goes to the lake's logs.
        assert "Using incubator modules" not in result.stderr and "default log level" not in result.stderr
        assert "Using incubator modules" in (settings.lake / "_logs" / "spark-nightjar-pipeline.log").read_text()
        assert row_count(settings.lake, TABLE_BRONZE) == 800

        with pytest.raises(DataLossError):
            run_pipeline(settings, Trigger(available_now=True), [QUERY_INGEST])
        run_pipeline(settings.with_(fail_on_data_loss=False), Trigger(available_now=True), [QUERY_INGEST])
        values = table_dataset(settings.lake, TABLE_BRONZE).to_table(columns=["value"])["value"].to_pylist()
        assert len(values) == 840 and sum(v.startswith(b"after") for v in values) == 40
    finally:
        broker.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--nope"], "unrecognized arguments: --nope"),
        (["run", "--trigger", "banana"], "--trigger must be a duration like"),
        (["run", "--max-offsets-per-trigger", "0"], "--max-offsets-per-trigger must be a positive number"),
        (["run", "--available-now", "--bootstrap", "127.0.0.1:1"], "cannot reach Kafka at 127.0.0.1:1"),
        (["run", "--available-now", "--create", "--lake", "/proc/nightjar-lake"], "is not writable"),
        (["tables", "--lake", "/nonexistent/lake"], "does not exist"),
    ],
)
def test_bad_cli_input_gets_one_line_and_a_non_zero_exit(args, message):
    result = nightjar(*args, timeout=60)
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.strip() and " INFO " not in ln]
    assert len(lines) == 1, result.stderr
    assert message in lines[0]


def test_tables_lists_tables_with_row_counts(spark, settings):
    settings.lake.mkdir(exist_ok=True)
    from ingest.delta_sink import write_batch

    write_batch(spark.range(0, 42), settings.table_path(TABLE_BRONZE), "t", 0)
    result = nightjar("tables", "--lake", str(settings.lake), "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    assert '"table": "bronze", "rows": 42' in result.stdout


def test_one_duration_syntax_for_flags_rule_files_and_config():
    from alerts.rule_loader import parse_duration as rule_duration
    from core.durations import parse_duration

    assert parse_interval("1s") == "1 seconds"
    assert parse_interval("500ms") == "500 milliseconds"
    assert parse_interval("2 minutes") == "120 seconds"
    for text, seconds in (("90", 90), ("1h", 3600), ("10 minutes", 600), ("1.5m", 90), ("2 days", 172800)):
        assert parse_duration(text) == seconds == rule_duration(text, "suppress")
    with pytest.raises(ValueError, match="suppress must be a duration like"):
        rule_duration("soon", "suppress")
