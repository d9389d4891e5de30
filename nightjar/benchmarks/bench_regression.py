"""``nightjar bench regression``: SigmaHQ's regression tests through the whole pipeline, as a user would run them.

SigmaHQ ships, per rule, the Windows event(s) the rule must match (``regression_data/…/info.yml`` beside an
``.evtx`` file and its evtx JSON rendering; :mod:`alerts.sigma_regression` reads them). That module runs each rule's
compiled predicate over its parsed event in batch, as ``nightjar backtest`` does. This benchmark takes the stream's
road instead: per input form (``evtx``, then ``json``), every test's file is replayed with ``nightjar replay``'s code
into a fresh lake on an embedded broker, ``nightjar run --available-now`` runs the rules under test (loaded
unmodified from the checkout, without the built-in pack), and a test passes when its rule raised an alert whose
evidence holds one of the test's events. The two forms go to two lakes: the same event twice would be one alert
(same rule, entity and instant), and its second copy would not show which form raised it.

    nightjar bench regression --sigmahq ../shared/corpus/sigmahq [--json FILE]

Per test and form: ``passed``, ``missed`` (the rule compiled but raised nothing on the test's events) or
``not_compiled`` (the rule is not applicable or refused: ``nightjar rules check``'s reason), with the run's
events/s.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from alerts.rules_check import check
from alerts.sigma_regression import FORMS, Case, cases, rule_files_by_id
from core.config import TABLE_ALERTS, TABLE_EVENTS, TABLE_QUARANTINE, Settings
from core.errors import UserError
from nightjar.benchmarks.bench_attacks import add_drain_arguments, attribute, drain, replay_each
from nightjar.benchmarks.bench_pipeline import (
    Bench,
    Out,
    load_text,
    log_problems,
    run_bench,
    table_count,
    table_rows,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sigmahq", type=Path, required=True, metavar="DIR",
                        help="a SigmaHQ checkout: rules/ and regression_data/ (e.g. ../shared/corpus/sigmahq)")
    parser.add_argument("--form", choices=FORMS, action="append", dest="forms",
                        help="only this input form (repeatable; default: both)")
    add_drain_arguments(parser, run_timeout_s=1800.0)


@dataclass
class CaseResult:
    rule_id: str
    title: str
    form: str
    path: str
    status: str  # passed | missed | not_compiled
    reason: str = ""
    records: int = 0  # records the test's file sent
    alerts: int = 0  # alerts of its rule whose evidence holds one of its events


def checkout(root: Path) -> tuple[Path, Path]:
    """(rules/, regression_data/) of a SigmaHQ checkout; a UserError naming what is missing otherwise."""
    rules, regression = root / "rules", root / "regression_data"
    for p in (rules, regression):
        if not p.is_dir():
            raise UserError(f"{p} is not a directory: --sigmahq takes a SigmaHQ checkout (rules/ and "
                            "regression_data/)", exit_code=2)
    return rules, regression


def compile_status(files: dict[str, Path]) -> dict[str, str]:
    """Rule id -> '' when its file compiles, else ``nightjar rules check``'s status and reason, in one line."""
    out: dict[str, str] = {}
    by_path = {str(f): rid for rid, f in files.items()}
    for c in check(sorted(set(files.values()))):
        rid = by_path.get(c.path)
        if rid is not None and (c.id in (None, rid)):
            out[rid] = "" if c.status == "compiled" else f"{c.status}: {c.reason}"
    return out


def run_form(bench: Bench, form: str, tests: list[Case], files: dict[str, Path],
             status: dict[str, str]) -> dict[str, Any]:
    settings, lake = bench.fresh(f"regression-{form}")
    t0 = time.monotonic()
    ranges, delivered = replay_each(settings, [[c.path] for c in tests], f"regression {form}")
    replay_s = time.monotonic() - t0
    rules = sorted({files[c.rule_id] for c in tests if c.rule_id in files and not status.get(c.rule_id)})
    records = sum(delivered)
    run_s, wall0 = drain(bench, settings, lake, rules, records, f"regression-{form}-run", bench.args.run_timeout)
    alerts = table_rows(lake, TABLE_ALERTS, ["rule_id", "revision", "evidence"])
    results: list[CaseResult] = []
    for c, n, found in zip(tests, delivered, attribute(alerts, ranges), strict=True):
        res = CaseResult(c.rule_id, c.title, form, str(c.path), "missed", records=n,
                         alerts=len({id(a) for a in found if a["rule_id"] == c.rule_id}))
        if c.rule_id not in files:
            res.status, res.reason = "not_compiled", "no rule with this id under rules/"
        elif status.get(c.rule_id):
            res.status, res.reason = "not_compiled", status[c.rule_id]
        elif res.alerts:
            res.status = "passed"
        else:
            others = sorted({a["rule_id"] for a in found})
            res.reason = (f"no alert of its rule on its {n} record(s)"
                          + (f"; other rules fired: {', '.join(others)}" if others else ""))
        results.append(res)
    tally = Counter(r.status for r in results)
    return {
        "tests": len(results), **{s: tally.get(s, 0) for s in ("passed", "missed", "not_compiled")},
        "pass_rate": round(tally.get("passed", 0) / max(len(results), 1), 3),
        "records": records, "rules": len(rules), "replay_s": round(replay_s, 1), "run_s": round(run_s, 1),
        "events_per_s": round(records / run_s, 1),
        **{t: table_count(lake, t) for t in (TABLE_EVENTS, TABLE_QUARANTINE)},
        "alerts": sum(a["revision"] == 1 for a in alerts),
        "per_test": [asdict(r) for r in results],
        "log_problems": log_problems(bench.children.log(f"regression-{form}-run")),
        "load_average_run": bench.load.summary(wall0, wall0 + run_s),
    }


def regression(bench: Bench) -> dict[str, Any]:
    rules_root, regression_root = checkout(bench.args.sigmahq)
    all_tests = cases(regression_root)
    if not all_tests:
        raise UserError(f"no evtx regression test under {regression_root} (info.yml with type: evtx)", exit_code=2)
    files = rule_files_by_id(rules_root, {c.rule_id for c in all_tests})
    status = compile_status(files)
    return {form: run_form(bench, form, [c for c in all_tests if c.form == form], files, status)
            for form in (bench.args.forms or FORMS) if any(c.form == form for c in all_tests)}


def _print(out: Out, r: dict[str, Any]) -> None:
    for form, f in r.items():
        out.say(f"regression {form}: {f['passed']} of {f['tests']} tests passed = {f['pass_rate']:.0%} "
                f"({f['missed']} missed, {f['not_compiled']} not compiled); {f['records']:,} records, "
                f"{f['rules']} rules, nightjar run --available-now {f['run_s']:.0f}s = {f['events_per_s']:,.1f} "
                f"events/s ({f[TABLE_EVENTS]:,} events, {f[TABLE_QUARANTINE]:,} quarantined; "
                f"{load_text(f['load_average_run'])})")
        for t in f["per_test"]:
            if t["status"] != "passed":
                out.say(f"  {t['status']:12} {t['rule_id']} {t['title'][:60]} — {t['reason']}")
        for line in f["log_problems"]:
            out.say(f"  log: {line}")


def run(args: argparse.Namespace, settings: Settings) -> int:
    checkout(args.sigmahq)  # a wrong folder fails before a broker starts
    args.seed = 0  # Bench's generator arguments (unused here)

    def body(bench: Bench, report: dict[str, Any]) -> None:
        report["regression"] = result = regression(bench)
        _print(bench.out, result)

    return run_bench(args, settings, "regression", body)
