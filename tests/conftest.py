"""Shared fixtures: one real Tansu broker and one real local Spark session per test run."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus"

# scripts/test runs the suite in two pytest-xdist workers that take whole files in collection order. The longest
# files go first, so the last file handed out is a short one: started last (xdist orders files by their number of
# tests by default), the kill storm alone was the run's last 8 minutes. Seconds per file, clean clones on 2 cores in
# two workers: chaos ~1,000 (storm, disk full, broker cut), dashboard_pages 210, pipeline 135, cluster
# 130, ml_pipeline 85, detections 81, security 72, clean_exits 65, demo 58, rule_pack 58. The rest keep their order.
LONGEST_FIRST = ("test_chaos.py", "test_dashboard_pages.py", "test_pipeline.py", "test_cluster.py",
                 "test_ml_pipeline.py", "test_detections.py", "test_security.py", "test_clean_exits.py",
                 "test_demo.py", "test_rule_pack.py")


# Markers of tests that take minutes (end-to-end runs, a browser, a Spark cluster, held faults, benchmarks): each also
# counts as slow, so that -m "not slow" (scripts/test --quick) is the quick tier however a test is marked.
HEAVY_MARKERS = ("e2e", "browser", "cluster", "chaos", "storm", "outage", "bench")


@pytest.hookimpl(tryfirst=True)  # before pytest's -m deselection, which then sees the added slow marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every heavy test slow too, and run the longest test files first (a stable sort: tests keep their order
    within a file)."""
    for item in items:
        if any(item.get_closest_marker(name) for name in HEAVY_MARKERS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session", autouse=True)
def default_lake_outside_checkout(tmp_path_factory) -> Iterator[None]:
    """A command a test runs without ``--lake`` (``nightjar parse``, argument errors) gets a temp lake, not
    ``./lake``: the subprocesses run in the checkout, and a demo's ``./lake`` there then collected their JVM logs."""
    with pytest.MonkeyPatch.context() as mp:
        if not os.environ.get("NIGHTJAR_LAKE"):
            mp.setenv("NIGHTJAR_LAKE", str(tmp_path_factory.mktemp("default-lake")))
        yield


@pytest.fixture(scope="session")
def broker() -> Iterator[object]:
    """A real Kafka-protocol broker (Tansu) on a free loopback port."""
    from ingest.embedded_broker import EmbeddedBroker

    with EmbeddedBroker() as b:
        yield b


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole run (start-up costs seconds; share it)."""
    from core.config import Settings
    from core.spark_session import build_spark
    from ingest.delta_source import DeltaDataSource
    from ingest.kafka_source import KafkaDataSource

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = build_spark(Settings(spark_master="local[2]", shuffle_partitions=2), app_name="nightjar-tests",
                          data_sources=(KafkaDataSource, DeltaDataSource))
    yield session
    session.stop()


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory) -> Path:
    """A rules directory the dashboard's rule lab may save into: a copy of the pack (as an operator's own directory
    would be), never the pack itself."""
    import shutil

    from alerts.rule_loader import BUILTIN_RULES

    path = tmp_path_factory.mktemp("rules") / "rules"
    shutil.copytree(BUILTIN_RULES, path, ignore=shutil.ignore_patterns("__pycache__"))
    return path


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    path = tmp_path / "lake"
    path.mkdir()
    return path


@pytest.fixture
def settings(broker, lake: Path):
    """Settings pointing at the session broker and a fresh lake."""
    from core.config import Settings

    return Settings(bootstrap=broker.bootstrap, lake=lake, shuffle_partitions=2)


@pytest.fixture
def unique_topic() -> str:
    """A topic name no other test uses (the broker is shared by the whole run)."""
    return f"test.{uuid.uuid4().hex[:10]}"
