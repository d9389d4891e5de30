"""``nightjar bench attacks``: recorded attacks replayed through the whole pipeline — which are detected?

The OTRF Security Datasets (https://github.com/OTRF/Security-Datasets, MIT) are real Windows event logs of known
attacks (Mimikatz, Rubeus, PsExec, LOLBins, …), each a capture (``.zip``, ``.tar.gz``, ``.evtx`` …) listed in a
``manifest.json`` with its ATT&CK techniques and tactics. This benchmark replays every capture into one fresh lake
on an embedded broker (``nightjar replay``'s code, one capture after the other), runs ``nightjar run
--available-now`` with the built-in pack and the rules given (``--rules``; ``--no-builtin-rules`` for those alone), then reads the ``alerts`` table and reports:

- per dataset: its events, the alerts whose evidence holds one of its events, the rules that fired, and whether
  one of those alerts is tagged with the dataset's technique, its parent (``T1003`` for ``T1003.001``) or a
  sub-technique ("detected");
- the detected rate overall and per tactic, the alerts per rule, and the pipeline's events/s for the run.

An alert is traced to its dataset through its evidence: an event's id is a hash of its Kafka coordinates
(:func:`ingest.sources.record_parser.event_id`), and each capture's records occupy the offsets its replay added.

    nightjar bench attacks --otrf ../shared/corpus/otrf-security-datasets --rules ../shared/corpus/sigmahq/rules
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from alerts.rule_sources import add_rules_arguments, rules_from_args
from core.config import RAW_TOPICS, TABLE_ALERTS, TABLE_EVENTS, TABLE_QUARANTINE, Settings
from core.errors import UserError
from core.lake import late_for_windowed_rules
from ingest.replay import replay
from ingest.sources.record_parser import event_id
from nightjar.benchmarks.bench_pipeline import (
    Bench,
    KafkaEnds,
    Out,
    load_text,
    log_problems,
    log_tail,
    progress_rows,
    run_bench,
    table_count,
    table_rows,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--otrf", type=Path, required=True, metavar="DIR",
                        help="the datasets folder: manifest.json (file, title, attack_techniques, attack_tactics per "
                             "entry) beside the captures it names")
    add_rules_arguments(parser, "rule file or directory to run beside the built-in pack")
    parser.add_argument("--only", type=int, metavar="N", help="the manifest's first N datasets (a quick look)")
    add_drain_arguments(parser, run_timeout_s=3600.0)


def add_drain_arguments(parser: argparse.ArgumentParser, run_timeout_s: float) -> None:
    """The options of a benchmark that replays recordings and drains them (:func:`replay_each`, :func:`drain`)."""
    parser.add_argument("--run-timeout", type=float, default=run_timeout_s,
                        help=f"stop each `nightjar run --available-now` after this many seconds "
                             f"(default {run_timeout_s:.0f})")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="one JSON object with every figure: on stdout (tables go to stderr), or to FILE")
    parser.add_argument("--keep-lake", action="store_true", help="keep the benchmark's lakes and logs")


@dataclass
class DatasetResult:
    file: str
    title: str
    techniques: list[str]
    tactics: list[str]
    records: int = 0  # what the replay sent
    alerts: int = 0  # alerts with one of its events in evidence
    rules_fired: list[str] = field(default_factory=list)
    detecting_rules: list[str] = field(default_factory=list)  # fired rules tagged with one of its techniques
    detected: bool = False


def related(a: str, b: str) -> bool:
    """Same ATT&CK technique, or one is the other's parent (``T1003`` / ``T1003.001``)."""
    a, b = a.upper(), b.upper()
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def read_manifest(root: Path) -> list[dict[str, Any]]:
    path = root / "manifest.json"
    if not path.is_file():
        raise UserError(f"no manifest.json in {root}: --otrf takes the datasets folder (see --help)", exit_code=2)
    try:
        manifest = json.loads(path.read_text())
    except ValueError as exc:
        raise UserError(f"{path} is not valid JSON: {exc}", exit_code=2) from None
    missing = [e.get("file") for e in manifest if not (root / str(e.get("file"))).is_file()]
    if missing:
        raise UserError(f"{path} names {len(missing)} capture(s) not found under {root}, e.g. {missing[0]}",
                        exit_code=2)
    return manifest


Ranges = dict[str, dict[int, tuple[int, int]]]  # topic -> partition -> the offsets [start, end) a replay added


def attribute(alerts: list[dict], ranges: list[Ranges]) -> list[list[dict]]:
    """The alerts (first revisions) whose evidence holds an event of each dataset (``ranges``: per dataset, the
    offsets ``[start, end)`` its replay added per topic and partition)."""
    owner: dict[str, int] = {}
    for i, by_topic in enumerate(ranges):
        for topic, parts in by_topic.items():
            for partition, (start, end) in parts.items():
                for offset in range(start, end):
                    owner[event_id(topic, partition, offset)] = i
    out: list[list[dict]] = [[] for _ in ranges]
    for a in alerts:
        for i in sorted({owner[e] for e in a["evidence"] if e in owner}):
            out[i].append(a)
    return out


def replay_each(settings: Settings, captures: list[list[Path]], label: str) -> tuple[list[Ranges], list[int]]:
    """Replay each group of capture files one after the other (``nightjar replay``'s code) and return, per group,
    the Kafka offsets it added and the records it delivered: what :func:`attribute` needs to trace alerts back."""
    ends = KafkaEnds(settings, RAW_TOPICS)
    ranges: list[Ranges] = []
    delivered: list[int] = []
    try:
        before = ends.ends()
        for k, paths in enumerate(captures, 1):
            sent = replay(settings, paths, progress=False)
            after = ends.ends()
            ranges.append({t: {p: (before.get(t, {}).get(p, 0), end) for p, end in parts.items()
                               if end > before.get(t, {}).get(p, 0)} for t, parts in after.items()})
            before = after
            delivered.append(sent.delivered)
            Out.status(f"{label}: replayed {k}/{len(captures)} {paths[0].name} ({sent.delivered:,} records)")
    finally:
        ends.close()
    return ranges, delivered


def drain(bench: Bench, settings: Settings, lake: Path, rules: list[Path], records: int, name: str,
          timeout_s: float) -> tuple[float, float]:
    """``nightjar run --available-now --no-builtin-rules --rules …`` over what was replayed, as a child process
    with progress; returns (its seconds, its start as wall-clock time). A failure or timeout is a UserError
    quoting the child's log."""
    run_args = ["--available-now", "--no-builtin-rules"] + [x for p in rules for x in ("--rules", str(p))]
    Out.status(f"{name}: nightjar run --available-now over {records:,} records with {len(rules)} rule path(s)")
    t0, wall0 = time.monotonic(), time.time()
    proc = bench.children.start(name, bench.run_args(settings, *run_args))

    def status() -> str:
        rows = [p for p in progress_rows(lake) if p["query_name"] == "ingest" and p["num_input_rows"]]
        return (f"{time.monotonic() - t0:.0f}s, ingest {len(rows)} batches / "
                f"{sum(p['num_input_rows'] for p in rows):,} of {records:,} records")

    rc = bench.wait(name, proc, "pipeline", status, timeout_s=timeout_s)
    run_s = time.monotonic() - t0
    bench.children.procs.pop(name, None)
    if rc != 0:
        raise UserError(f"`nightjar run --available-now` {'timed out' if rc is None else f'exited with {rc}'}; "
                        f"its log ({bench.children.log(name)}) ends:\n{log_tail(bench.children.log(name))}")
    return run_s, wall0


def attacks(bench: Bench) -> dict[str, Any]:
    args = bench.args
    manifest = read_manifest(args.otrf)[:args.only]
    rules = [p.resolve() for p in rules_from_args(args, bench.base_settings)]
    settings, lake = bench.fresh("attacks")
    t0 = time.monotonic()
    ranges, delivered = replay_each(settings, [[args.otrf / e["file"]] for e in manifest], "attacks")
    results = [DatasetResult(e["file"], str(e.get("title", "")), list(e.get("attack_techniques") or []),
                             list(e.get("attack_tactics") or []), records=n) for e, n in zip(manifest, delivered,
                                                                                               strict=True)]
    replay_s = time.monotonic() - t0
    records = sum(delivered)
    run_s, wall0 = drain(bench, settings, lake, rules, records, "attacks-run", args.run_timeout)

    alerts = [a for a in table_rows(lake, TABLE_ALERTS, ["rule_id", "revision", "tags", "evidence"])
              if a["revision"] == 1]
    for res, found in zip(results, attribute(alerts, ranges), strict=True):
        res.alerts = len(found)
        res.rules_fired = sorted({a["rule_id"] for a in found})
        res.detecting_rules = sorted({a["rule_id"] for a in found
                                      if any(related(t, d) for t in a["tags"] or [] for d in res.techniques)})
        res.detected = bool(res.detecting_rules)
    tactics: dict[str, list[bool]] = defaultdict(list)
    for res in results:
        for tactic in res.tactics or ["(none)"]:
            tactics[tactic].append(res.detected)
    ingest = [p for p in progress_rows(lake) if p["query_name"] == "ingest" and p["num_input_rows"]]
    counts = {t: table_count(lake, t) for t in (TABLE_EVENTS, TABLE_QUARANTINE)}
    counts["late_for_windowed_rules"] = late_for_windowed_rules(lake)  # captures recorded years apart
    detected = sum(r.detected for r in results)
    return {
        "datasets": len(results), "detected": detected, "detected_rate": round(detected / max(len(results), 1), 3),
        "per_tactic": {t: {"datasets": len(v), "detected": sum(v), "rate": round(sum(v) / len(v), 3)}
                       for t, v in sorted(tactics.items())},
        "records": records, "replay_s": round(replay_s, 1), "run_s": round(run_s, 1),
        "events_per_s": round(records / run_s, 1), "ingest_batches": len(ingest), **counts,
        "alerts": len(alerts), "alerts_by_rule": dict(Counter(a["rule_id"] for a in alerts).most_common()),
        "rules": [str(p) for p in rules], "per_dataset": [asdict(r) for r in results],
        "log_problems": log_problems(bench.children.log("attacks-run")),
        "load_average_run": bench.load.summary(wall0, wall0 + run_s),
    }


def _print(out: Out, r: dict[str, Any]) -> None:
    out.say(f"attacks: {r['records']:,} records from {r['datasets']} captures; nightjar run --available-now "
            f"{r['run_s']:.0f}s = {r['events_per_s']:,.0f} events/s ({r['ingest_batches']} ingest batches; "
            f"{r[TABLE_EVENTS]:,} events, {r[TABLE_QUARANTINE]:,} quarantined, {r['late_for_windowed_rules']:,} late rows "
            f"left out of the windowed rules; {load_text(r['load_average_run'])})")
    out.say(f"  detected (an alert tagged with the dataset's technique): {r['detected']} of {r['datasets']} "
            f"= {r['detected_rate']:.0%}; {r['alerts']:,} alerts")
    out.say(f"  {'tactic':10} {'datasets':>8} {'detected':>8} {'rate':>6}")
    for tactic, t in r["per_tactic"].items():
        out.say(f"  {tactic:10} {t['datasets']:8} {t['detected']:8} {t['rate']:6.0%}")
    out.say(f"  {'':3} {'dataset':62} {'technique':16} {'records':>7} {'alerts':>6} {'rules':>5}")
    for d in r["per_dataset"]:
        out.say(f"  {'yes' if d['detected'] else '-':3} {d['file'][:62]:62} {','.join(d['techniques'])[:16]:16} "
                f"{d['records']:7,} {d['alerts']:6,} {len(d['rules_fired']):5}")
    for line in r["log_problems"]:
        out.say(f"  log: {line}")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.only is not None and args.only <= 0:
        raise UserError("--only must be a positive number", exit_code=2)
    read_manifest(args.otrf)  # a wrong folder fails before a broker starts
    args.seed = 0  # Bench's generator arguments (unused here)

    def body(bench: Bench, report: dict[str, Any]) -> None:
        report["attacks"] = result = attacks(bench)
        _print(bench.out, result)

    return run_bench(args, settings, "attacks", body)
