"""``nightjar rules test``: every rule's inline sample logs through the real parse -> enrich -> detect path.

For each rule: the positive samples must raise at least one candidate for the rule's entity, the negative samples
none, and every sample line must parse (a sample that lands in quarantine is a broken sample, reported as such).
Samples are raw log lines exactly as they arrive on Kafka; ``{line, repeat: N}`` repeats a line N times with
``{i}`` (or ``{i:03d}``, any Python format spec) replaced by 0..N-1, so a correlation's threshold can be shown at
N and N-1 without pages of YAML. Enrichment uses the generator's ``networks`` table plus the rule's own
``samples.reference`` rows (users, assets, iocs, networks replace the defaults table by table).

Exit status 0 when every rule passes, 1 when one fails, 2 when a rule file does not load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar
# rules`'s arguments, and --help or a bad argument must not wait for pyspark and pandas (nightjar/cli.py).
from alerts import rules_check
from alerts.rule_sources import add_rules_arguments, rules_from_args
from core.address_plan import network_rows
from core.config import Settings
from core.errors import UserError

SAMPLE_INGESTED = dt.datetime(2026, 3, 9, 12, 0, tzinfo=dt.UTC)  # after every sample's own time
_PLACEHOLDER = re.compile(r"\{i(?::([^{}]*))?\}")


@dataclass
class RuleTestResult:
    rule_id: str
    source: str
    kind: str
    positives: int = 0  # candidates raised by the positive samples
    negatives: int = 0  # candidates raised by the negative samples (must be 0)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.problems


def expand(samples) -> list[str]:
    """Sample entries -> raw lines (``repeat`` and ``{i}`` placeholders expanded)."""
    lines: list[str] = []
    for s in samples:
        for i in range(s.repeat):
            lines.append(_PLACEHOLDER.sub(lambda m, i=i: format(i, m.group(1) or ""), s.line))
    return lines


def default_reference() -> dict[str, list[dict]]:
    """The reference tables every sample set starts from: the address plan the samples are written against."""
    return {"networks": network_rows()}


def sample_sets(rules) -> dict[tuple[str, str], tuple[list[str], dt.datetime]]:
    """(rule id, "positive"/"negative") -> (raw lines, ingested_at) of every rule's samples: what
    :class:`alerts.parsed_samples.ParsedSamples` parses in one job."""
    sets: dict[tuple[str, str], tuple[list[str], dt.datetime]] = {}
    for rule in rules:
        if rule.origin is not None:  # a Python rule: plain lines, its own ingestion time
            s = rule.origin.samples
            sets.update({(rule.rule_id, kind): (list(getattr(s, kind)), s.ingested_at)
                         for kind in ("positive", "negative")})
        else:
            sets.update({(rule.rule_id, kind): (expand(getattr(rule.samples, kind)), SAMPLE_INGESTED)
                         for kind in ("positive", "negative") if getattr(rule.samples, kind)})
    return sets


def sample_events(spark, lines: list[str], reference: dict[str, list[dict]], parsed=None, key=None):
    """(enriched events ready for detection, one message per line no rule will see: quarantined, or left out as
    future-dated); from ``parsed[key]`` when given (a :class:`~alerts.parsed_samples.ParsedSamples`), else ``lines``
    are parsed here."""
    from alerts.detection_input import detection_input
    from alerts.python_rules import dhcp_networks, enriched_events
    from enrich.reference_data import reference_from_tables
    from ingest.file_source import lines_dataframe

    tables = {**default_reference(), **reference}
    ref, dhcp = reference_from_tables(tables), dhcp_networks(tables)
    # the pipeline's own steps: parse -> DHCP attribution -> reference joins, materialized (as the events table
    # is) so that a rule's plan does not sit on top of the whole enrichment plan
    if parsed is not None and key in parsed:
        events, unparsed = parsed.enriched(key, ref, dhcp)
    else:
        events, unparsed = enriched_events(lines_dataframe(spark, lines, ingested_at=SAMPLE_INGESTED), ref, dhcp)
    return detection_input(events), unparsed


def check_rules(spark, rules) -> Iterator[RuleTestResult]:
    """:func:`check_rule` for each of ``rules``, in order, with all their samples parsed in one job first."""
    from alerts.parsed_samples import ParsedSamples

    rules = list(rules)
    parsed = ParsedSamples(spark, sample_sets(rules))
    for rule in rules:
        yield check_rule(spark, rule, parsed)


def check_rule(spark, rule, parsed=None) -> RuleTestResult:
    """Run ``rule`` on its samples; ``parsed``: the samples already parsed (see :func:`check_rules`)."""
    started = time.monotonic()
    res = RuleTestResult(rule.rule_id, str(rule.source), rule.kind)
    if rule.origin is not None:  # a Python rule: its own harness (same steps, plus its expected entity)
        from alerts.python_rules import run_samples

        out = run_samples(spark, rule.origin, parsed)
        res.positives, res.negatives, res.problems = len(out.positive), len(out.negative), list(out.problems)
        res.seconds = time.monotonic() - started
        return res
    s = rule.samples
    if not s.positive:
        res.problems.append("no positive samples")
    if not s.negative:
        res.problems.append("no negative samples")
    for label, entries in (("positive", s.positive), ("negative", s.negative)):
        if not entries:
            continue
        events, bad = sample_events(spark, expand(entries), s.reference, parsed, (rule.rule_id, label))
        res.problems += [f"{label} sample {problem}" for problem in bad]  # lines that test nothing
        rows = rule.detect(events).collect()
        wrong = [r for r in rows if r["rule_id"] != rule.rule_id or r["entity"]["type"] != rule.entity_type]
        if wrong:
            res.problems.append(f"candidate with rule_id/entity type {wrong[0]['rule_id']}/"
                                f"{wrong[0]['entity']['type']}, expected {rule.rule_id}/{rule.entity_type}")
        if label == "positive":
            res.positives = len(rows)
            if not rows:
                res.problems.append("positive samples raised nothing")
        else:
            res.negatives = len(rows)
            if rows:
                ents = sorted({r["entity"]["value"] for r in rows})
                res.problems.append(f"negative samples raised {len(rows)} candidate(s) for {', '.join(ents)}")
    res.seconds = time.monotonic() - started
    return res


def _when(ts) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S") if ts is not None else "-"


def print_rule_list(rules, health: dict[str, dict], as_json: bool = False) -> None:
    """The rules with the health the running (or last) pipeline reported in ``pipeline_progress``: running /
    restarting / failed / disabled, last batch, last alert, error. ``not run`` when no pipeline has reported it."""
    for r in rules:
        h = health.get(r.rule_id) or {}
        status = h.get("status") or "not run"
        if as_json:
            print(json.dumps({"rule_id": r.rule_id, "kind": r.kind, "severity": r.meta.severity,
                              "tags": list(r.meta.tags), "file": str(r.source), "status": status,
                              "last_batch_at": _iso(h.get("last_batch_at")), "last_alert_at": _iso(h.get("last_alert_at")),
                              "error": h.get("error")}))
            continue
        line = (f"{r.rule_id:28} {r.kind:11} {r.meta.severity:8} {','.join(r.meta.tags):24} {status:10} "
                f"last batch {_when(h.get('last_batch_at'))}  last alert {_when(h.get('last_alert_at'))}  "
                f"{r.source.name}")
        print(line)
        if h.get("error"):
            print(f"    error: {h['error']}")


def _iso(ts) -> str | None:
    return ts.isoformat() if ts is not None else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["test", "list", "check"],
                        help="test: run every rule's samples; list: the rules; check PATH…: compile without running "
                             "and say per rule compiled / not_applicable / refused (alerts/rules_check.py)")
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                        help="check: rule files or folders (e.g. a SigmaHQ checkout); test/list: same as --rules")
    parser.add_argument("--strict", action="store_true", help="check: exit 1 when a rule was refused")
    add_rules_arguments(parser)
    parser.add_argument("-k", dest="only", metavar="RULE_ID", action="append", help="only these rule ids")
    parser.add_argument("--json", action="store_true",
                        help="list, check: one JSON object per rule (list: with its health)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from alerts.detection_input import events_schema
    from alerts.detection_stream import read_rule_health
    from alerts.rule_loader import load_rules, not_applicable_line
    from core.spark_session import build_spark

    if args.action == "check":  # compile only: no Spark session
        return rules_check.run(list(args.paths or []) + list(args.rules or []), args.json, args.strict, settings)
    args.rules = (args.rules or []) + (args.paths or [])
    paths = rules_from_args(args, settings)
    spark = build_spark(settings.with_(shuffle_partitions=2), app_name="nightjar-rules-test")
    rules, errors = load_rules(paths, events_schema(spark))
    for e in errors:
        if not e.not_applicable:
            print(f"ERROR {e}", file=sys.stderr)
    if line := not_applicable_line(errors):
        print(line, file=sys.stderr)
    errors = [e for e in errors if not e.not_applicable]
    if args.only:
        rules = [r for r in rules if r.rule_id in set(args.only)]
        if not rules:
            raise UserError(f"no rule with id {', '.join(args.only)} under {', '.join(map(str, paths))}", exit_code=2)
    if args.action == "list":
        print_rule_list(rules, read_rule_health(settings.lake), as_json=args.json)
        return 2 if errors else 0
    failed = 0
    print(f"parsing the samples of {len(rules)} rule(s)", flush=True)
    for i, (rule, res) in enumerate(zip(rules, check_rules(spark, rules), strict=True), 1):
        status = "PASS" if res.passed else "FAIL"
        print(f"[{i:>2}/{len(rules)}] {status} {rule.rule_id:28} {rule.kind:11} positive -> {res.positives} "
              f"candidate(s), negative -> {res.negatives} ({res.seconds:.1f}s)", flush=True)
        for p in res.problems:
            print(f"        {rule.source.name}: {p}")
        failed += not res.passed
    print(f"{len(rules) - failed} of {len(rules)} rules passed"
          + (f", {len(errors)} rule file problem(s)" if errors else ""))
    if errors:
        return 2
    return 1 if failed else 0
