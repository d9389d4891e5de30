"""``nightjar generate``: synthetic security logs of a simulated organization, with labelled attacks.

Examples::

    nightjar generate --events 100000 --seed 7 --out /tmp/logs          # files + ground_truth.jsonl
    nightjar generate --events 100000 --seed 7 --bootstrap B --lake L   # raw topics + lake tables
    nightjar generate --rate 2000 --bootstrap B --lake L                 # the last hour fast, then live
    nightjar generate --duration 86400 --speedup 3600 --start 2026-01-05T00:00:00Z --out DIR

See docs/generator.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import signal
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from core.config import Settings
from core.durations import parse_time
from core.errors import UserError
from generator.engine import SCENARIOS as ALL_SCENARIOS
from generator.engine import Options, Simulation, iso
from generator.organization import build_organization
from generator.reference_tables import write_files, write_lake
from generator.scenarios import ATTACKS, HARD_NEGATIVES, SCENARIOS
from generator.sinks import FileSink, KafkaSink

log = logging.getLogger(__name__)
DEFAULT_EVENTS = 10_000
# A paced run to Kafka without --start (--rate, or --speedup above 1) begins this far in the past: it replays the
# recent past at its pace, then, caught up with the wall clock, goes on in real time (see ``generate``).
LIVE_LOOKBACK_S = 3600.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stop = parser.add_argument_group("how much")
    stop.add_argument("--events", type=int, metavar="N", help=f"stop after N events (default {DEFAULT_EVENTS} "
                      "unless --duration, --rate or --speedup is given)")
    stop.add_argument("--duration", type=float, metavar="S", help="stop after S simulated seconds")
    pace = parser.add_argument_group("pacing (default: as fast as possible)")
    pace.add_argument("--rate", type=float, metavar="EV/S", help="emit EV/S events per second, sustained (catches up "
                      "after a stall instead of drifting); to Kafka, never an event before its time: once the "
                      "simulation reaches the wall clock it goes on in real time")
    pace.add_argument("--speedup", type=float, metavar="X", help="run simulated time X times faster than real time "
                      "(to Kafka, until it reaches the wall clock)")
    parser.add_argument("--start", metavar="ISO", help="simulated start time, e.g. 2026-01-05T08:00:00Z (default, to "
                        "Kafka: an hour ago with --rate or --speedup above 1, now with --speedup 1, a period ending "
                        "now when unpaced; with --out the start of the current UTC day)")
    parser.add_argument("--seed", type=int, default=1, help="random seed: same seed and options => same output")
    parser.add_argument("--org-seed", type=int, metavar="SEED", help="build the organization (hosts, users, "
                        "addresses) from SEED instead of --seed: fresh activity of the same organization, e.g. a "
                        "day to evaluate a model trained on --seed SEED's history")
    parser.add_argument("--out", metavar="DIR", help="write log files (syslog.log, zeek.log, ground_truth.jsonl, "
                        "reference tables as JSONL) to DIR instead of Kafka")
    parser.add_argument("--hosts", type=int, default=500, help="hosts in the organization (default 500)")
    parser.add_argument("--users", type=int, default=300, help="users in the organization (default 300)")
    parser.add_argument("--scenarios", metavar="LIST", help="comma-separated scenarios, each optionally NAME=COUNT "
                        f"(default: all). Attacks: {', '.join(ATTACKS)}. Hard negatives: {', '.join(HARD_NEGATIVES)}")
    parser.add_argument("--count", type=int, default=1, metavar="N",
                        help="instances of each scenario (per run; per simulated hour when the run is unbounded)")
    parser.add_argument("--no-attacks", action="store_true", help="benign background (and hard negatives) only")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def parse_start(text: str | None, to_files: bool) -> float:
    if text is None:  # to Kafka, run() replaces it: paced_start or start_ending_now
        now = time.time()
        return float(int(now // 86400 * 86400)) if to_files else float(int(now))
    return parse_time(text, "--start").replace(tzinfo=dt.UTC).timestamp()


def start_ending_now(opts: Options, org, now: float, passes: int = 3) -> float:
    """The start of an unpaced run to Kafka whose simulated period ends at ``now``: a replay of the recent past.

    Starting at ``now`` would stamp the events up to hours into the future, and detection leaves out events stamped
    more than a few minutes after they were ingested. With ``--duration`` the span is known; with ``--events`` it
    depends on the diurnal load, so it is measured by simulating without output (deterministic for a given start)
    and refined until the run ends within a minute of ``now``.
    """
    if opts.duration is not None:
        return now - opts.duration
    start = now - max(60.0, (opts.events or DEFAULT_EVENTS) / 150_000 * 3600)  # a working hour's rate as first guess
    for _ in range(passes):
        span = simulated_span(replace(opts, start=start), org)
        if abs(start + span - now) <= 60:
            break
        start = now - span
    return float(int(start))


def simulated_span(opts: Options, org) -> float:
    """How many simulated seconds a run of ``opts`` over ``org`` covers (a dry run of the simulation, no output)."""
    sim = Simulation(opts, org)
    last = opts.start
    for n, (ts, *_rest) in enumerate(sim.events(), start=1):
        last = ts
        if n >= (opts.events or DEFAULT_EVENTS):
            break
    return last - opts.start


def parse_scenarios(text: str | None, count: int, no_attacks: bool) -> dict[str, int]:
    if count < 0:
        raise UserError("--count must be 0 or more", exit_code=2)
    if text is None:
        names = {n: count for n in SCENARIOS}
    else:
        names = {}
        for item in (p.strip() for p in text.split(",")):
            if not item:
                continue
            name, _, n = item.partition("=")
            # the stealth scenarios (generator/stealth_scenarios.py, for the ML models) run only when named
            if name not in ALL_SCENARIOS:
                raise UserError(f"unknown scenario {name!r}; known: {', '.join(ALL_SCENARIOS)}", exit_code=2)
            try:
                names[name] = int(n) if n else count
            except ValueError:
                raise UserError(f"scenario count in {item!r} is not a whole number", exit_code=2) from None
            if names[name] < 0:
                raise UserError(f"scenario count in {item!r} is negative", exit_code=2)
    if no_attacks:
        names = {n: c for n, c in names.items() if not ALL_SCENARIOS[n].attack}
    return {n: c for n, c in names.items() if c > 0}


def options_from_args(args: argparse.Namespace) -> Options:
    for flag in ("events", "duration", "rate", "speedup"):
        v = getattr(args, flag)
        if v is not None and v <= 0:
            raise UserError(f"--{flag} must be positive, not {v:g}", exit_code=2)
    if args.rate is not None and args.speedup is not None:
        raise UserError("give --rate or --speedup, not both", exit_code=2)
    if args.hosts < 12:
        raise UserError("--hosts must be at least 12", exit_code=2)
    if args.users < 5:
        raise UserError("--users must be at least 5", exit_code=2)
    events = args.events
    if events is None and args.duration is None and args.rate is None and args.speedup is None:
        events = DEFAULT_EVENTS
    return Options(seed=args.seed, hosts=args.hosts, users=args.users, start=parse_start(args.start, bool(args.out)),
                   events=events, duration=args.duration,
                   scenarios=parse_scenarios(args.scenarios, args.count, args.no_attacks))


class Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.started = self.last = time.monotonic()
        self.every = 0.5 if self.tty else 10.0

    def update(self, n: int, ts: float, total: int | None, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < self.every and not force):
            return
        self.last = now
        rate = n / max(now - self.started, 1e-9)
        pct = f" {100 * n / total:5.1f}%" if total else ""
        line = f"generated {n:,} events{pct}  {rate:,.0f} ev/s  simulated {dt.datetime.fromtimestamp(ts, tz=dt.UTC):%Y-%m-%d %H:%M:%S}Z"
        if self.tty:
            sys.stderr.write("\r" + line + "\033[K")
            if force:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def paced_start(rate: float | None, speedup: float | None, now: float) -> float:
    """The default simulated start of a paced run to Kafka.

    A run faster than real time that started now would stamp its events ahead of the wall clock (detection leaves
    out events from the future, so a demo would alert on its first minutes only); it starts an hour ago instead,
    replays that hour at its pace and continues live (``generate(..., live=True)``). Real time starts now.
    """
    fast = rate is not None or (speedup is not None and speedup > 1)
    return float(int(now - LIVE_LOOKBACK_S)) if fast else float(int(now))


def generate(opts: Options, sink, *, rate: float | None = None, speedup: float | None = None,
             progress: Progress | None = None, org=None,
             live: bool = False) -> tuple[Simulation, Counter, Counter, int, float]:
    """Drive the simulation into ``sink``; returns (sim, events per source, events per scenario, total, last ts).

    Pacing: with ``rate`` the n-th event is due n/rate seconds after the start (a stall is caught up, not carried as
    drift); with ``speedup`` an event is due when wall time has advanced (its time - start)/speedup. With ``live``
    (a paced run to Kafka) no event is sent before the wall clock reaches its timestamp, whatever the pace:
    consumers see live traffic, never the future. (An unpaced run to Kafka ends its period at now instead, see
    ``start_ending_now``.)
    """
    sim = Simulation(opts, org)
    by_source: Counter = Counter()
    by_scenario: Counter = Counter()
    n = 0
    last_ts = opts.start
    end_ts = opts.start + opts.duration if opts.duration is not None else float("inf")
    limit = opts.events if opts.events is not None else -1
    wall0 = time.monotonic()
    epoch0 = time.time()
    send = sink.send
    paced = bool(rate or speedup)
    check = 0
    caught_up = False
    try:
        for ts, _seq, topic, key, line, source, tag in sim.events():
            if ts >= end_ts or n == limit:
                break
            if paced:
                due = wall0 + (n / rate if rate else (ts - opts.start) / speedup)
                if live and wall0 + (ts - epoch0) > due:
                    due = wall0 + (ts - epoch0)
                    if not caught_up:
                        caught_up = True
                        log.info("caught up with the wall clock at %s after %d events: going on in real time",
                                 iso(ts), n)
                # Sleep in short slices: delivery callbacks keep flowing and Ctrl-C/SIGTERM stay prompt.
                while (ahead := due - time.monotonic()) > 0.002:
                    sink.poll()
                    time.sleep(min(ahead, 0.5))
                    if progress:
                        progress.update(n, ts, opts.events)
            send(topic, key, line)
            n += 1
            last_ts = ts
            by_source[source] += 1
            if tag is not None:
                by_scenario[tag.rsplit("-", 1)[0]] += 1
            check += 1
            if check >= 2000:
                check = 0
                sink.poll()
                if progress:
                    progress.update(n, ts, opts.events)
    except KeyboardInterrupt:
        log.info("interrupted: writing what was generated so far")
    if progress:
        progress.update(n, last_ts, opts.events, force=True)
    return sim, by_source, by_scenario, n, last_ts


def generate_files(out, *, seed: int, hosts: int, users: int, start: float, duration: float,
                   scenarios: dict[str, int], org_seed: int | None = None) -> tuple[list[dict], int]:
    """Run the simulation (with any scenario, stealth ones included) into log files + ground truth under ``out``,
    as ``nightjar generate --out`` does; returns (attack ground-truth rows, events written).

    ``org_seed`` builds the organization from another seed than the activity: a fresh day (``seed``) of the same
    organization a model was trained on."""
    out = Path(out)
    opts = Options(seed=seed, hosts=hosts, users=users, start=start, duration=duration, scenarios=scenarios)
    sink = FileSink(out)
    org = build_organization(seed if org_seed is None else org_seed, hosts, users)
    sim, _by_source, _by_scenario, n, _last = generate(opts, sink, org=org)
    sink.close()
    attacks, negatives, _cut = sim.ground_truth()
    write_files(out, sim.org, opts.start, attacks, negatives)
    return attacks, n


def summary(by_source: Counter, by_scenario: Counter, attacks: list, negatives: list, cut: list, n: int,
            seconds: float, start: float, last_ts: float) -> str:
    lines = [f"{n:,} events in {seconds:.1f}s ({n / max(seconds, 1e-9):,.0f} ev/s), simulated "
             f"{dt.datetime.fromtimestamp(start, tz=dt.UTC):%Y-%m-%d %H:%M:%S}Z .. "
             f"{dt.datetime.fromtimestamp(last_ts, tz=dt.UTC):%Y-%m-%d %H:%M:%S}Z", "events per source:"]
    for source, c in sorted(by_source.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {source:<12} {c:>10,}")
    lines.append(f"incidents: {len(attacks)} attacks, {len(negatives)} hard negatives (events per scenario):")
    per = Counter(r["scenario"] for r in attacks + negatives)
    for scen, c in sorted(by_scenario.items()):
        label = "" if ALL_SCENARIOS[scen].attack else "  (hard negative)"
        lines.append(f"  {scen:<26} {per.get(scen, 0):>3} incident(s) {c:>8,} events{label}")
    if cut:
        lines.append(f"not in the ground truth (cut off by the end of the run): {', '.join(cut)}")
    return "\n".join(lines)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace, settings: Settings) -> int:
    opts = options_from_args(args)
    # SIGTERM (``nightjar demo`` stopping its children, ``docker stop``) ends the run like Ctrl-C: what was
    # generated is flushed and its ground truth written.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    if args.out:
        out = Path(args.out)
        sink = FileSink(out)
    org = build_organization(opts.seed if args.org_seed is None else args.org_seed, opts.hosts, opts.users)
    if not args.out and args.start is None and args.rate is None and args.speedup is None:
        opts = replace(opts, start=start_ending_now(opts, org, time.time()))
        log.info("unpaced run: simulated period %s .. now (give --start to choose)", iso(opts.start))
    elif not args.out and args.start is None:
        opts = replace(opts, start=paced_start(args.rate, args.speedup, time.time()))
        log.info("paced run from %s, never ahead of the wall clock (give --start to choose)", iso(opts.start))
    if not args.out:
        sink = KafkaSink(settings)
        # Reference tables first: enrichment can use them while the events arrive.
        write_lake(settings.lake, org, opts.start, None, None)
    progress = Progress(not args.quiet)
    sim, by_source, by_scenario, n, last_ts = generate(opts, sink, rate=args.rate, speedup=args.speedup,
                                                       progress=progress, org=org, live=not args.out)
    sink.close()
    attacks, negatives, cut = sim.ground_truth()
    if args.out:
        write_files(out, sim.org, opts.start, attacks, negatives)
        if args.lake:
            write_lake(settings.lake, sim.org, opts.start, attacks, negatives)
        where = f"{out}" + (f" and lake {settings.lake}" if args.lake else "")
    else:
        write_lake(settings.lake, sim.org, opts.start, attacks, negatives, reference=False)
        where = f"{settings.bootstrap_servers} and lake {settings.lake}"
    print(summary(by_source, by_scenario, attacks, negatives, cut, n, time.monotonic() - started, opts.start, last_ts))
    print(f"written to {where}")
    return 0

