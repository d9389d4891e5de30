"""Simulated time: the diurnal/weekly load curve and the event heap that keeps output in time order.

Every generated event is a tuple ``(ts, seq, topic, key, line, source, tag)``: ``ts`` is simulated epoch
seconds, ``seq`` a tie-breaker in creation order (so equal timestamps keep a deterministic order), ``topic``
0 for syslog and 1 for Zeek, ``key`` the Kafka key (emitting host or originating address), ``source`` the
program or Zeek log (``sshd``, ``zeek.conn``), ``tag`` the incident id of an injected scenario (else None).
"""

from __future__ import annotations

import datetime as dt
import heapq
import math
import random

from generator import formats as fmt

SYSLOG, ZEEK = 0, 1
DAY = 86400.0


def diurnal(ts: float) -> float:
    """Relative load at simulated time ``ts`` (1.0 = weekday early afternoon, UTC office hours).

    A night floor of 0.08 plus a Gaussian working-day bump centred on 13:30 (σ 3.2 h); weekends are 30 % of
    a weekday.
    """
    hour = (ts % DAY) / 3600.0
    level = 0.08 + 0.92 * math.exp(-(((hour - 13.5) / 3.2) ** 2))
    weekday = dt.datetime.fromtimestamp(ts, tz=dt.UTC).weekday()
    return level * (0.3 if weekday >= 5 else 1.0)


def poisson(rng: random.Random, lam: float) -> int:
    """A Poisson draw (Knuth for small means, a rounded normal for large ones)."""
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


class Emitter:
    """Collects events into a min-heap by simulated time; :meth:`pop_until` releases them in order."""

    def __init__(self) -> None:
        self.heap: list[tuple] = []
        self.seq = 0
        self.tag: str | None = None  # incident id stamped on events while a scenario is generating
        self.spans: dict[str, list[float]] = {}  # incident id -> [first ts, last ts, events]

    def push(self, ts: float, topic: int, key: str, line: str, source: str) -> None:
        self.seq += 1
        tag = self.tag
        if tag is not None:
            span = self.spans.get(tag)
            if span is None:
                self.spans[tag] = [ts, ts, 1]
            else:
                span[0] = min(span[0], ts)
                span[1] = max(span[1], ts)
                span[2] += 1
        heapq.heappush(self.heap, (ts, self.seq, topic, key, line, source, tag))

    def syslog(self, ts: float, host, program: str, pid: int, message: str, pri: int = fmt.PRI_AUTH_INFO) -> None:
        self.push(ts, SYSLOG, host.name, fmt.syslog(ts, host.name, program, pid, message, pri, host.syslog_5424),
                  program)

    def zeek(self, ts: float, key: str, line: str, path: str) -> None:
        self.push(ts, ZEEK, key, line, "zeek." + path)

    def pop_until(self, ts: float):
        heap = self.heap
        while heap and heap[0][0] < ts:
            yield heapq.heappop(heap)
