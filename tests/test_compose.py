"""compose.yaml and docker/Dockerfile cannot run on this machine (no Docker); check what can be checked:
the services and their wiring, and that every Nightjar command they run is accepted by the real CLI parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from core.config import ALL_TOPICS, ENV_BOOTSTRAP, ENV_LAKE, ENV_SPARK_MASTER
from nightjar.cli import build_parser

REPO = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]


def test_services_present() -> None:
    assert {"kafka", "kafka-topics", "spark-master", "spark-worker", "pipeline", "dashboard"} <= set(SERVICES)


def test_kafka_is_apache_kafka_in_kraft_mode() -> None:
    kafka = SERVICES["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert "kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]


def test_topics_created_are_the_contract_topics() -> None:
    script = SERVICES["kafka-topics"]["command"][0]
    listed = re.search(r"for t in (.*?); do", script).group(1).split()
    assert sorted(listed) == sorted(ALL_TOPICS)


def test_pipeline_is_submitted_to_the_spark_master() -> None:
    master = SERVICES["spark-master"]["command"]
    assert "org.apache.spark.deploy.master.Master" in master
    port = master[master.index("--port") + 1]
    assert f"spark://spark-master:{port}" in SERVICES["spark-worker"]["command"]
    env = SERVICES["pipeline"]["environment"]
    assert env[ENV_SPARK_MASTER] == f"spark://spark-master:{port}"
    assert env[ENV_BOOTSTRAP] == "kafka:9092"


@pytest.mark.parametrize("service", ["pipeline", "dashboard", "producer"])
def test_nightjar_commands_parse(service: str) -> None:
    argv = SERVICES[service]["command"]
    assert argv[0] == "nightjar"
    args = build_parser(argv[1:]).parse_args(argv[1:])  # SystemExit (exit 2) on an unknown flag
    assert args.command == argv[1]


def test_lake_is_shared_by_driver_executors_and_dashboard() -> None:
    for name in ("spark-worker", "pipeline", "dashboard"):
        service = SERVICES[name]
        assert any(v.split(":")[:2] == ["lake", "/lake"] for v in service["volumes"]), name
        assert service["environment"][ENV_LAKE] == "/lake"
    assert SERVICES["dashboard"]["volumes"] == ["lake:/lake:ro"]  # the dashboard never writes the lake


def test_dockerfile_copies_existing_paths() -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    sources = [line.split()[1:-1] for line in dockerfile.splitlines() if line.startswith("COPY ")]
    assert sources
    for group in sources:
        for src in group:
            assert (REPO / src).exists(), f"Dockerfile copies {src}, which does not exist"
    build = COMPOSE["x-nightjar"]["build"]
    assert (REPO / build["context"] / build["dockerfile"]).is_file()
