"""``nightjar bench soak``: hours of steady live traffic — does every resource stay flat after warm-up? (issue #16)

One embedded broker on a free port and a fresh lake; the organization's reference tables written first (as a
deployment has them); ``nightjar run`` (every built-in rule, upkeep on its schedule) started and warmed up; then
``nightjar generate --speedup 1`` (event time = wall time, attacks injected every simulated hour) for ``--hours``.
Every ``--sample-seconds`` the benchmark records, from outside the pipeline as an operator would see it:

- RSS of the pipeline's Python driver, its JVM and its Python workers (and how many workers there are);
- ingest lag (raw topics' true end offsets - the ingest checkpoint's committed offsets) and windowed lag;
- state rows of every stateful operator of every query (newest ``pipeline_progress`` row per query);
- Delta files per table: active files, parquet files on disk (superseded ones wait for vacuum), log files;
- the checkpoints' size and file count;
- open alerts held in memory by each alert folder (the pipeline's "open alert(s) held" log lines).

It prints a table over time and, per figure, a verdict: **flat** when the mean of the last fifth of the samples is
at most ``--tolerance`` above the mean of the first fifth after warm-up (plus a small absolute allowance per kind
of figure, so that a table going from 3 to 5 files is not "growth"), else **grows**, with the least-squares slope
per hour. ``--json FILE`` writes every sample and verdict. Everything it started is stopped, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar bench
# soak`'s arguments, and --help or a bad argument must not wait for the generator (Faker) (nightjar/cli.py).
from core.config import TABLE_EVENTS, TABLE_PIPELINE_PROGRESS, Settings
from core.durations import parse_duration
from core.errors import UserError
from nightjar.benchmarks.bench_pipeline import (
    Bench,
    Out,
    Sampler,
    every,
    load_text,
    log_problems,
    run_bench,
    start_pipeline,
    table_rows,
    write_reference,
)
from nightjar.upkeep import PIPELINE_TABLES

STATUS_EVERY_S = 60.0
# The built-in rules' longest window is 1 hour and the detection watermark 10 minutes: windowed state grows for that
# long by design before windows start to close, so "flat" is judged only after it (plus a few minutes' margin).
WARMUP_MIN = 75.0
SOAK_TABLES = PIPELINE_TABLES  # the tables `nightjar run` writes (and its upkeep keeps compact)
# Absolute allowance per kind of figure on top of the relative tolerance (see the module doc).
SLACK = {"mib": 64.0, "rows": 2_000.0, "files": 25.0, "bytes": 4 * 2 ** 20, "count": 25.0}
_HELD = re.compile(r"(?P<query>\S+) batch \d+: \d+ alert revision\(s\).*?; (?P<held>\d+) open alert\(s\) held")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hours", type=float, default=1.75, help="hours of steady live traffic (default 1.75)")
    parser.add_argument("--hosts", type=int, default=1000,
                        help="hosts in the simulated organization: sets the rate at speedup 1 (default 1000)")
    parser.add_argument("--seed", type=int, default=1, help="generator seed (default 1)")
    parser.add_argument("--start", metavar="ISO", help="simulated start, in the past (default: now). The generator "
                        "follows the time of day (300 hosts: ~4 events/s at night, ~30 at 13:30 UTC on a weekday): "
                        "e.g. yesterday 11:00Z soaks at office-hours rates at any hour, paced in real time")
    parser.add_argument("--trigger", default="1s", help="the pipeline's trigger (default 1s)")
    parser.add_argument("--upkeep-every", default="10m", help="the pipeline's upkeep interval (default 10m)")
    parser.add_argument("--warmup-minutes", type=float, default=WARMUP_MIN,
                        help="minutes of traffic before the verdict's baseline starts: state fills until the longest "
                             f"rule window has passed the watermark (default {WARMUP_MIN:g})")
    parser.add_argument("--sample-seconds", type=float, default=60.0, help="sampling interval (default 60)")
    parser.add_argument("--table-minutes", type=float, default=5.0, help="one table row per this many minutes "
                        "(default 5)")
    parser.add_argument("--tolerance", type=float, default=0.25,
                        help="relative growth allowed between the first and the last fifth after warm-up "
                             "(default 0.25)")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="one JSON object with every sample and verdict: on stdout (tables go to stderr), or FILE")
    parser.add_argument("--keep-lake", action="store_true", help="keep the benchmark's lake and logs")


# -- what is sampled beside bench_pipeline's Sampler ------------------------------------------------------------------
def table_files(path: Path) -> dict[str, int]:
    """Active files and rows (from the Delta log), parquet files on disk and log files of one table."""
    from deltalake import DeltaTable

    out = {"active_files": 0, "rows": 0, "parquet_on_disk": 0, "log_files": 0}
    if not (path / "_delta_log").is_dir():
        return out
    try:
        import pyarrow as pa

        actions = pa.table(DeltaTable(str(path)).get_add_actions(flatten=True))
        out["active_files"] = actions.num_rows
        if actions.num_rows:
            out["rows"] = int(sum(c or 0 for c in actions.column("num_records").to_pylist()))
    except Exception:  # a commit in flight: the next sample sees it
        pass
    for _root, _dirs, files in os.walk(path):
        out["parquet_on_disk"] += sum(f.endswith(".parquet") for f in files)
    out["log_files"] = sum(1 for _ in (path / "_delta_log").iterdir())
    return out


def dir_size(path: Path) -> tuple[int, int]:
    """(bytes, files) under ``path``."""
    size = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                size += os.stat(os.path.join(root, name)).st_size
                files += 1
            except OSError:
                continue
    return size, files


def operator_state(lake: Path) -> dict[str, int]:
    """State rows per stateful operator (``query/operator#i``) from the newest progress row of every query."""
    rows = table_rows(lake, TABLE_PIPELINE_PROGRESS, ["query_name", "batch_id", "timestamp", "progress_json"])
    newest: dict[str, dict] = {}
    for r in rows:
        q = r["query_name"] or ""
        if r["progress_json"] and not q.startswith("rule:") and (q not in newest or r["batch_id"] >= newest[q]["batch_id"]):
            newest[q] = r
    out: dict[str, int] = {}
    for q, r in sorted(newest.items()):
        try:
            ops = json.loads(r["progress_json"]).get("stateOperators") or []
        except ValueError:
            continue
        for i, op in enumerate(ops):
            out[f"{q}/{op.get('operatorName', 'op')}#{i}"] = int(op.get("numRowsTotal") or 0)
    return out


def open_alerts_held(log_path: Path) -> dict[str, int]:
    """The newest "open alert(s) held" figure per alert folder, from the pipeline's log."""
    held: dict[str, int] = {}
    try:
        with open(log_path, errors="replace") as f:
            for line in f:
                if "open alert(s) held" in line and (m := _HELD.search(line)):
                    held[m["query"]] = int(m["held"])
    except OSError:
        pass
    return held


class SoakSampler(Sampler):
    """bench_pipeline's sampler plus files, checkpoints, per-operator state and open alerts."""

    def __init__(self, settings: Settings, lake: Path, pipeline_pid: int, log_path: Path) -> None:
        super().__init__(settings, lake, pipeline_pid)
        self.log_path = log_path
        self.missed: list[str] = []

    def sample(self) -> dict[str, Any] | None:
        """One sample, or None when the machine is too busy to answer in time (a broker metadata request timing out
        under load): the soak goes on and counts the missed samples instead of ending hours of run."""
        try:
            return self._sample()
        except Exception as exc:
            self.missed.append(f"{time.time() - self.t0:.0f}s: {str(exc).splitlines()[0][:200]}")
            Out.status(f"soak: sample missed ({self.missed[-1]})")
            return None

    def _sample(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"tables": {t: table_files(self.lake / t) for t in SOAK_TABLES}}
        extra["checkpoint_bytes"], extra["checkpoint_files"] = dir_size(self.lake / "_checkpoints")
        extra["state"] = operator_state(self.lake)
        extra["open_alerts"] = open_alerts_held(self.log_path)
        s = super().sample()  # appends to self.samples last: a failed sample leaves no half row behind
        s.update(extra)
        return s


# -- verdicts -------------------------------------------------------------------------------------------------------
def series(samples: list[dict[str, Any]]) -> dict[str, tuple[str, list[tuple[float, float]]]]:
    """Every figure over time: name -> (kind, [(t seconds, value)])."""
    out: dict[str, tuple[str, list[tuple[float, float]]]] = {}

    def put(name: str, kind: str, t: float, v: float | None) -> None:
        if v is not None:
            out.setdefault(name, (kind, []))[1].append((t, float(v)))

    for s in samples:
        t = s["t"]
        for k in ("driver_mib", "jvm_mib", "workers_mib"):
            put(f"rss {k[:-4]}", "mib", t, s.get(k))
        put("python workers", "count", t, s.get("workers"))
        put("ingest lag (records)", "rows", t, s.get("ingest_lag"))
        put("windowed lag (records)", "rows", t, s.get("windowed_lag"))
        for op, rows in (s.get("state") or {}).items():
            put(f"state {op}", "rows", t, rows)
        for table, f in (s.get("tables") or {}).items():
            if table in (TABLE_PIPELINE_PROGRESS,):
                continue  # an append-only log of the run itself: its rows grow by design
            put(f"files {table} (active)", "files", t, f["active_files"])
            put(f"files {table} (on disk)", "files", t, f["parquet_on_disk"])
            put(f"files {table} (log)", "files", t, f["log_files"])
        put("checkpoint bytes", "bytes", t, s.get("checkpoint_bytes"))
        put("checkpoint files", "files", t, s.get("checkpoint_files"))
        for q, n in (s.get("open_alerts") or {}).items():
            put(f"open alerts held {q}", "count", t, n)
    return out


def _slope_per_h(points: list[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if var == 0 else sum((t - mt) * (v - mv) for t, v in points) / var * 3600


def verdicts(samples: list[dict[str, Any]], warmup_s: float, tolerance: float) -> list[dict[str, Any]]:
    """Per figure: mean of the first and last fifth after warm-up, max, slope per hour, flat or grows."""
    out = []
    for name, (kind, points) in series(samples).items():
        after = [p for p in points if p[0] >= warmup_s]
        if len(after) < 5:
            continue
        k = max(1, len(after) // 5)
        first = sum(v for _, v in after[:k]) / k
        last = sum(v for _, v in after[-k:]) / k
        flat = last <= first * (1 + tolerance) + SLACK[kind]
        out.append({"figure": name, "kind": kind, "first": round(first, 1), "last": round(last, 1),
                    "max": round(max(v for _, v in after), 1), "slope_per_h": round(_slope_per_h(after), 1),
                    "flat": flat})
    return out


# -- output -----------------------------------------------------------------------------------------------------------
def _status(s: dict[str, Any]) -> str:
    files = sum(f["active_files"] for f in s["tables"].values())
    return (f"soak t={s['t'] / 60:.0f}min produced {s['produced']:,} lag {s['ingest_lag']:,}/{s['windowed_lag']:,} "
            f"rss driver {s['driver_mib']} jvm {s['jvm_mib']} workers {s['workers_mib']} MiB, state "
            f"{sum(s['state'].values()):,} rows, {files} active files, checkpoints {s['checkpoint_bytes'] / 2**20:.1f} "
            f"MiB, open alerts {sum(s['open_alerts'].values())}, load {s['load_1m']:.2f}")


def _print_table(out: Out, samples: list[dict[str, Any]], every_s: float) -> None:
    shown = every(samples, every_s)
    out.say(f"  {'t':>6} {'produced':>10} {'lag i/w':>11} {'driver':>7} {'jvm':>7} {'workers':>8} {'state':>9} "
            f"{'files a/d':>10} {'events a/d':>10} {'ckpt':>8} {'alerts held':>11} {'load1':>6}")
    for s in shown:
        active = sum(f["active_files"] for f in s["tables"].values())
        disk = sum(f["parquet_on_disk"] for f in s["tables"].values())
        ev = s["tables"][TABLE_EVENTS]
        out.say(f"  {s['t'] / 60:>4.0f}min {s['produced']:>10,} {s['ingest_lag']:>5,}/{s['windowed_lag']:<5,} "
                f"{s['driver_mib'] or 0:>6.0f}M {s['jvm_mib'] or 0:>6.0f}M {s['workers_mib'] or 0:>7.0f}M "
                f"{sum(s['state'].values()):>9,} {active:>4}/{disk:<5} {ev['active_files']:>4}/{ev['parquet_on_disk']:<5} "
                f"{s['checkpoint_bytes'] / 2**20:>6.1f}M {sum(s['open_alerts'].values()):>11,} {s['load_1m']:>6.2f}")
    out.say("  (lag i/w: records behind in the ingest / windowed query; RSS in MiB; state: rows over every stateful "
            "operator; files a/d: active / parquet on disk over the pipeline's tables; ckpt: checkpoints' size)")


def _print_verdicts(out: Out, rows: list[dict[str, Any]], warmup_min: float, tolerance: float) -> None:
    out.say(f"\nafter {warmup_min:.0f} min of warm-up: first fifth vs last fifth (flat = last <= first x "
            f"{1 + tolerance:.2f} + allowance)")
    out.say(f"  {'figure':<58} {'first':>12} {'last':>12} {'max':>12} {'slope/h':>10}  verdict")
    for r in rows:
        out.say(f"  {r['figure'][:58]:<58} {r['first']:>12,.1f} {r['last']:>12,.1f} {r['max']:>12,.1f} "
                f"{r['slope_per_h']:>10,.1f}  {'flat' if r['flat'] else 'GROWS'}")


# -- the run ----------------------------------------------------------------------------------------------------------
class SoakBench(Bench):
    """bench_pipeline's run harness; the pipeline also gets the soak's upkeep interval."""

    def run_args(self, settings: Settings, *extra: str) -> list[str]:
        return super().run_args(settings, "--upkeep-every", self.args.upkeep_every, *extra)


def soak(bench: Bench) -> dict[str, Any]:
    args, out = bench.args, bench.out
    settings, lake = bench.fresh("soak")
    sim_start = time.time() if args.start is None else start_time(args.start)
    write_reference(lake, args.seed, args.hosts, sim_start)
    Out.status(f"soak: starting the pipeline (trigger {args.trigger}, upkeep every {args.upkeep_every}) on "
               f"{settings.bootstrap_servers}; lake {lake}")
    pipe = start_pipeline(bench, settings, lake, "soak-run")
    sampler = SoakSampler(settings, lake, pipe.pid, bench.children.log("soak-run"))
    duration = args.hours * 3600
    stopped_early = False
    gen_t0 = time.time()
    try:
        Out.status(f"soak: generating at speedup 1, {args.hosts} hosts, for {args.hours:g} h")
        start_args = () if args.start is None else ("--start", args.start)
        gen = bench.children.start("soak-generate", bench.generate_args(
            settings, "--speedup", "1", "--hosts", str(args.hosts), "--duration", str(duration), *start_args))
        sampler.t0 = gen_t0
        last = 0.0
        try:
            while gen.poll() is None:
                s = sampler.sample()
                bench.children.remember()
                if s is not None and time.monotonic() - last >= STATUS_EVERY_S:
                    last = time.monotonic()
                    Out.status(_status(s))
                if pipe.poll() is not None:
                    bench.check_exit("soak-run", pipe.returncode)
                    raise UserError("the pipeline exited during the soak")
                time.sleep(args.sample_seconds)
            bench.check_exit("soak-generate", gen.returncode)
        except KeyboardInterrupt:
            # Ctrl-C or SIGTERM after hours of run: the samples so far are the result, so report them (marked)
            # instead of losing them; the children are stopped below as on a normal end.
            stopped_early = True
            Out.status(f"soak: stopped after {(time.time() - gen_t0) / 60:.1f} min; reporting what was sampled")
            bench.children.stop("soak-generate")
        gen_s = time.time() - gen_t0
        if not stopped_early:
            sampler.sample()
    finally:
        sampler.close()
        bench.children.remember()
        stop_rc = bench.children.stop("soak-run")
    result = soak_result(args, sampler.samples, gen_s, sampler.missed, stop_rc,
                         log_problems(bench.children.log("soak-run")), bench.load.summary(), stopped_early)
    print_soak(out, args, result)
    return result


def soak_result(args: argparse.Namespace, samples: list[dict[str, Any]], gen_s: float, missed: list[str],
                stop_rc: int | None, log_problems: list[str], load: dict[str, Any],
                stopped_early: bool = False) -> dict[str, Any]:
    """The soak's report: figures, samples and per-figure verdicts."""
    rows = verdicts(samples, args.warmup_minutes * 60, args.tolerance)
    return {
        "hours": args.hours, "hosts": args.hosts, "trigger": args.trigger, "upkeep_every": args.upkeep_every,
        "stopped_early": stopped_early, "generator_s": round(gen_s, 1),
        "events": samples[-1]["produced"] if samples else 0,
        "events_per_s": round((samples[-1]["produced"] if samples else 0) / max(gen_s, 1e-9), 1),
        "samples": [{k: v for k, v in s.items() if k != "at"} for s in samples],
        "verdicts": rows, "all_flat": all(r["flat"] for r in rows), "missed_samples": missed,
        "growing": [r["figure"] for r in rows if not r["flat"]],
        "pipeline_exit_code_on_sigterm": stop_rc,
        "log_problems": log_problems,
        "load_average": load,
    }


def print_soak(out: Out, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """The table over time, the verdicts and the run's facts, as printed at the end of a soak."""
    samples, rows = result["samples"], result["verdicts"]
    ran = (f"{result['generator_s'] / 3600:.2f} h of {args.hours:g} h (stopped early)" if result["stopped_early"]
           else f"{args.hours:g} h")
    out.say(f"\nsoak: {ran} at speedup 1, {args.hosts} hosts: {result['events']:,} events "
            f"({result['events_per_s']:,.1f} events/s), trigger {args.trigger}, upkeep every {args.upkeep_every}")
    if not samples:
        out.say("  no sample was taken")
        return
    _print_table(out, samples, args.table_minutes * 60)
    if not rows:
        out.say(f"\n  no verdict: fewer than 5 samples after the {args.warmup_minutes:g} min of warm-up")
    else:
        _print_verdicts(out, rows, args.warmup_minutes, args.tolerance)
        out.say(f"\n  all flat: {'yes' if result['all_flat'] else 'no: ' + ', '.join(result['growing'])}")
    out.say(f"  pipeline stopped with SIGTERM: exit code {result['pipeline_exit_code_on_sigterm']}")
    if result["missed_samples"]:
        out.say(f"  {len(result['missed_samples'])} sample(s) missed (the machine did not answer in time), first: "
                f"{result['missed_samples'][0]}")
    out.say(f"  {load_text(result['load_average'])}")
    if result["log_problems"]:
        out.say(f"  pipeline log: {len(result['log_problems'])} warning/error line(s), first: "
                f"{result['log_problems'][0][:200]}")


def start_time(text: str) -> float:
    """``--start`` as epoch seconds: an ISO 8601 time in the past (paced at speedup 1, a future start would idle)."""
    from generator.command import parse_start

    start = parse_start(text, to_files=False)
    if start > time.time():
        raise UserError(f"--start {text} is in the future: give a time in the past (e.g. yesterday 11:00Z)",
                        exit_code=2)
    return start


def _validate(args: argparse.Namespace) -> None:
    if args.start is not None:
        start_time(args.start)

    for flag in ("hours", "sample_seconds", "table_minutes"):
        if getattr(args, flag) <= 0:
            raise UserError(f"--{flag.replace('_', '-')} must be positive", exit_code=2)
    if args.warmup_minutes < 0 or args.tolerance < 0:
        raise UserError("--warmup-minutes and --tolerance must not be negative", exit_code=2)
    if args.warmup_minutes * 60 >= args.hours * 3600:
        raise UserError("--warmup-minutes must be shorter than --hours", exit_code=2)
    if args.hosts < 12:
        raise UserError("--hosts must be at least 12", exit_code=2)
    for flag, text in (("--trigger", args.trigger), ("--upkeep-every", args.upkeep_every)):
        try:
            parse_duration(text, flag)
        except ValueError as exc:
            raise UserError(str(exc), exit_code=2) from None
    if args.json not in (None, "-") and not Path(args.json).parent.exists():
        raise UserError(f"--json {args.json}: directory {Path(args.json).parent} does not exist", exit_code=2)


def run(args: argparse.Namespace, settings: Settings) -> int:
    _validate(args)

    stopped_early = False

    def body(bench: Bench, report: dict[str, Any]) -> None:
        nonlocal stopped_early
        report["soak"] = soak(bench)
        stopped_early = report["soak"]["stopped_early"]

    rc = run_bench(args, settings, "soak", body, SoakBench)
    return 130 if stopped_early else rc  # interrupted: the figures were printed, but the run is not the one asked for
