"""A paced generator run to Kafka is live traffic: it replays the recent past at its pace, then never sends an event
before the wall clock reaches the event's time (detection leaves out events from the future, so a demo whose
simulated clock ran ahead alerted on its first minutes only)."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from generator.command import LIVE_LOOKBACK_S, generate, paced_start
from generator.engine import Options
from tests.conftest import REPO


class _ClockSink:
    """Records (wall time at send, the event's simulated time) for every event sent."""

    def __init__(self) -> None:
        self.sent: list[float] = []

    def send(self, topic, key, line) -> None:
        self.sent.append(time.time())

    def poll(self) -> None:
        pass


def test_paced_runs_start_an_hour_ago_unless_they_run_in_real_time():
    now = 1_800_000_000.5
    assert paced_start(200.0, None, now) == now - LIVE_LOOKBACK_S - 0.5
    assert paced_start(None, 60.0, now) == now - LIVE_LOOKBACK_S - 0.5
    assert paced_start(None, 1.0, now) == now - 0.5
    assert paced_start(None, 0.5, now) == now - 0.5


def test_a_live_run_is_capped_at_the_wall_clock_and_a_run_to_files_is_not():
    now = time.time()
    # 40 simulated seconds from 30 s ago at a rate far above what 40 hosts produce: the first 30 s are the past,
    # sent at once; the last 10 s are the future and must wait for their time.
    opts = Options(seed=4, hosts=2000, users=300, start=now - 30.0, duration=40.0, scenarios={})
    sink = _ClockSink()
    t0 = time.time()
    _sim, _src, _scn, n, last = generate(opts, sink, rate=100_000.0, live=True)
    times = _sim_times(opts)
    assert n == len(sink.sent) == len(times) > 20
    early = [(s, t) for s, t in zip(sink.sent, times, strict=True) if s < t - 0.01]
    assert not early, f"{len(early)} event(s) sent before their time, e.g. {early[:3]}"
    assert last > t0 + 5, "the run reached simulated times after its own start (the capped part was exercised)"
    # Without the cap (a run to files), the same input goes out as fast as the rate allows.
    sink_files = _ClockSink()
    t1 = time.time()
    generate(opts, sink_files, rate=100_000.0, live=False)
    assert sink_files.sent[-1] - t1 < (last - t0) / 2


def _sim_times(opts: Options) -> list[float]:
    from generator.engine import Simulation

    out = []
    for ts, *_ in Simulation(opts).events():
        if ts >= opts.start + opts.duration:
            break
        out.append(ts)
    return out


@pytest.mark.slow
def test_generate_rate_to_kafka_replays_the_last_hour_then_goes_on_in_real_time(tmp_path):
    from ingest.embedded_broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        started = time.time()
        done = subprocess.run(
            [sys.executable, "-m", "nightjar.cli", "generate", "--rate", "20000", "--duration", str(LIVE_LOOKBACK_S + 15),
             "--hosts", "300", "--users", "100", "--seed", "3", "--bootstrap", broker.bootstrap,
             "--lake", str(tmp_path / "lake"), "-v", "--quiet"],
            cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        caught = re.search(r"caught up with the wall clock at (\S+)Z", done.stderr)
        assert caught, done.stderr[-2000:]
        records = _zeek_records(broker.bootstrap)
    assert len(records) > 200
    # (Kafka timestamp = when the generator produced it, event time from Zeek's ts)
    early = [(k, t) for k, t in records if k < t - 0.05]
    assert not early, f"{len(early)} record(s) produced before their event time, e.g. {early[:3]}"
    first_k, first_t = min(records, key=lambda r: r[1])
    assert first_t < started - LIVE_LOOKBACK_S + 120, "the run began about an hour in the past"
    assert first_k - first_t > LIVE_LOOKBACK_S - 120, "the past was replayed, not waited for"
    # Events between the test's start and the catch-up point were part of the replay, sent late by design.
    caught_up = dt.datetime.fromisoformat(caught.group(1)).replace(tzinfo=dt.UTC).timestamp()
    assert caught_up > started, "the replay ran until the wall clock, not to a point in the past"
    latest = [k - t for k, t in records if t > caught_up]
    assert latest and max(latest) < 5.0, "after catching up, events went out at their time"


def _zeek_records(bootstrap: str) -> list[tuple[float, float]]:
    from core.config import TOPIC_RAW_ZEEK

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "live-clock-test", "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 20})
    parts = [TopicPartition(TOPIC_RAW_ZEEK, p, 0) for p in range(4)]
    consumer.assign(parts)
    out, eof, deadline = [], set(), time.monotonic() + 60
    try:
        while len(eof) < len(parts) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                continue
            out.append((msg.timestamp()[1] / 1000.0, float(json.loads(msg.value())["ts"])))
    finally:
        consumer.close()
    return out
