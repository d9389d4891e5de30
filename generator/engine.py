"""The simulation loop: background windows, scheduled scenarios, ground truth, time-ordered events.

Scenarios are placed so that they finish inside the run: with ``--duration`` at fractions of the simulated
span; with ``--events N`` when the emitted count reaches fractions of N (their time budget estimated from
the background rate seen so far); in an unbounded (paced, live) run, every ``EPOCH`` simulated seconds.
An incident enters the ground truth only when every one of its events was emitted.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from generator.benign import Background, Network
from generator.organization import Organization, build_organization
from generator.scenarios import SCENARIOS as RULE_SCENARIOS
from generator.scenarios import Incident
from generator.stealth_scenarios import STEALTH_BUDGETS, STEALTH_SCENARIOS
from generator.timeline import Emitter

WINDOW = 10.0
EPOCH = 3600.0
MAX_BUDGET = {"ssh_brute_force": 600, "ssh_brute_force_success": 900, "password_spraying": 1800,
              "port_scan_horizontal": 300, "port_scan_vertical": 300, "dns_tunnelling": 900, "dns_dga": 600,
              "c2_beaconing": 3600, "ioc_match": 600, "exfiltration": 1800, "dhcp_starvation": 180,
              "sudo_non_admin": 900, "new_country_login": 1800, "mistype_3": 600, "authorized_scanner": 600,
              "backup_beat": 1800}
MIN_BUDGET = 60.0
# The stealth scenarios (no rule catches them; the ML models do) run only when asked for by name.
MAX_BUDGET.update(STEALTH_BUDGETS)
SCENARIOS = {**RULE_SCENARIOS, **{s.name: s for s in STEALTH_SCENARIOS}}


@dataclass
class Options:
    seed: int = 1
    hosts: int = 500
    users: int = 300
    start: float = 0.0
    events: int | None = None  # stop after this many events
    duration: float | None = None  # ... or this many simulated seconds
    scenarios: dict[str, int] = field(default_factory=dict)  # name -> count (per run; per hour when unbounded)


@dataclass
class Planned:
    name: str
    incident_id: str
    trigger: float  # simulated time, or an event count (see Simulation)
    incident: Incident | None = None
    start: float | None = None


def iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Simulation:
    def __init__(self, opts: Options, org: Organization | None = None) -> None:
        self.opts = opts
        self.org = org or build_organization(opts.seed, opts.hosts, opts.users)
        self.rng = random.Random(f"sim/{opts.seed}")
        self.em = Emitter()
        self.net = Network(self.org, self.rng, self.em, opts.start)
        self.bg = Background(self.org, self.net, self.rng, self.em, opts.seed)
        self.used_ips: set[str] = set()
        self.planned: list[Planned] = []
        self.emitted_background = 0
        self.emitted_by_tag: dict[str, int] = {}
        self.now = opts.start
        self._counter = 0
        self._pending: list[tuple[float, int, Planned]] = []  # time-triggered
        self._by_count: list[tuple[float, int, Planned]] = []  # count-triggered
        self._next_epoch = opts.start
        if opts.duration is not None:
            self._plan(opts.start, opts.duration, by_count=False)
            self._next_epoch = float("inf")
        elif opts.events is not None:
            self._plan(0, opts.events, by_count=True)
            self._next_epoch = float("inf")

    def _new(self, name: str, trigger: float) -> Planned:
        self._counter += 1
        digest = hashlib.sha256(f"{self.opts.seed}/{self.opts.start}/{name}/{self._counter}".encode()).hexdigest()
        p = Planned(name, f"{name}-{digest[:10]}", trigger)
        self.planned.append(p)
        return p

    def _plan(self, origin: float, extent: float, by_count: bool) -> None:
        rng = random.Random(f"plan/{self.opts.seed}/{origin}")
        for name in sorted(self.opts.scenarios):
            for _ in range(self.opts.scenarios[name]):
                if by_count:
                    frac = rng.uniform(0.03, 0.5)
                    p = self._new(name, origin + frac * extent)
                    heapq.heappush(self._by_count, (p.trigger, self._counter, p))
                else:
                    budget = self._budget(name, extent)
                    off = rng.uniform(0.03 * extent, max(0.03 * extent, 0.85 * extent - budget))
                    p = self._new(name, origin + off)
                    heapq.heappush(self._pending, (p.trigger, self._counter, p))

    @staticmethod
    def _budget(name: str, span: float) -> float:
        return max(MIN_BUDGET, min(MAX_BUDGET.get(name, 600), 0.3 * span))

    def _remaining_span(self) -> float:
        """Simulated seconds left in an ``--events N`` run, from the background rate so far."""
        elapsed = self.now - self.opts.start
        if elapsed <= 0 or self.emitted_background < 50:
            return 3600.0
        rate = self.emitted_background / elapsed
        outstanding = sum(s[2] for s in self.em.spans.values()) - sum(self.emitted_by_tag.values())
        left = self.opts.events - self.emitted_background - sum(self.emitted_by_tag.values()) - outstanding
        return max(0.0, left / rate)

    def _run(self, p: Planned, t: float, budget: float) -> None:
        scenario = SCENARIOS[p.name]
        self.em.tag = p.incident_id
        try:
            p.incident = scenario.fn(self, t, budget)
        finally:
            self.em.tag = None
        p.start = t

    def events(self) -> Iterator[tuple]:
        """Endless time-ordered events ``(ts, seq, topic, key, line, source, tag)``."""
        t = self.opts.start
        while True:
            t1 = t + WINDOW
            self.now = t
            if t >= self._next_epoch:
                self._plan(self._next_epoch, EPOCH, by_count=False)
                self._next_epoch += EPOCH
            while self._pending and self._pending[0][0] < t1:
                trig, _, p = heapq.heappop(self._pending)
                self._run(p, max(t, trig), self._budget(p.name, self.opts.duration or EPOCH))
            emitted = self.emitted_background + sum(self.emitted_by_tag.values())
            while self._by_count and self._by_count[0][0] <= emitted:
                _, _, p = heapq.heappop(self._by_count)
                span = self._remaining_span()
                budget = min(MAX_BUDGET.get(p.name, 600), 0.5 * span)
                if budget >= 30:
                    self._run(p, self.rng.uniform(t, t1), budget)
            self.bg.window(t, t1)
            for ev in self.em.pop_until(t1):
                tag = ev[6]
                if tag is None:
                    self.emitted_background += 1
                else:
                    self.emitted_by_tag[tag] = self.emitted_by_tag.get(tag, 0) + 1
                yield ev
            t = t1

    def ground_truth(self) -> tuple[list[dict], list[dict], list[str]]:
        """(attack rows, hard-negative rows, ids of incidents cut off by the end of the run)."""
        attacks, negatives, cut = [], [], []
        for p in self.planned:
            if p.incident is None:
                continue
            span = self.em.spans.get(p.incident_id)
            if span is None:
                continue
            if self.emitted_by_tag.get(p.incident_id, 0) < span[2]:
                cut.append(p.incident_id)
                continue
            s = SCENARIOS[p.name]
            inc = p.incident
            row = {"incident_id": p.incident_id, "scenario": p.name,
                   "expected_rule_id": s.rule_id if s.attack else None,
                   "entity": {"type": inc.entity_type, "value": inc.entity_value},
                   "start": iso(span[0]), "end": iso(span[1]), "host_name": inc.host_name,
                   "user_name": inc.user_name, "event_count": span[2], "is_attack": s.attack,
                   "description": s.description, "details": inc.details}
            if s.attack:
                attacks.append(row)
            else:
                row["must_not_fire"] = s.rule_id
                negatives.append(row)
        return attacks, negatives, cut
