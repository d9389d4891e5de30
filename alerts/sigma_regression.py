"""SigmaHQ's regression tests, run through Nightjar: does each rule, loaded unmodified, raise a candidate on the
event SigmaHQ recorded for it?

SigmaHQ (https://github.com/SigmaHQ/sigma, Detection Rule License 1.1) ships, per rule, a Windows event the rule
must match: ``regression_data/rules/<…>/<rule>/info.yml`` names the rule id and the test (``type: evtx``,
``match_count``), beside the ``.evtx`` file and its evtx JSON rendering ``<id>.json``. This module reads them in place
and, in batch, takes each event through the pipeline's steps — the Windows source's parse (``.evtx`` records via
:mod:`ingest.capture_files`, the JSON compacted to one line), the static enrichment, :func:`detection_input` — and
runs the rules' compiled predicates as ``nightjar backtest`` and the stream do (:mod:`alerts.single_event_pass`).

Per test and input form (``evtx`` / ``json``) the verdict is ``matched``, ``not_matched`` (with why: the event did
not parse, or it is outside the rule's logsource scope, or the detection is false on it), or ``not_compiled`` (the
rule's status and reason from the loader: not applicable, refused).

``python -m alerts.sigma_regression --rules SIGMAHQ/rules --regression SIGMAHQ/regression_data [--json]`` prints
one line per test and form (``--json``: one object each) and the counts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

# The pipeline's stages (pyspark, pySigma) are imported in the functions that run the cases: `nightjar bench
# regression` imports this module for its case list, and its --help or a bad argument must not wait for them.
from core.config import Settings
from ingest.capture_files import capture_lines

FORMS = ("evtx", "json")
_ID_LINE = re.compile(r"^id:\s*['\"]?([0-9a-fA-F-]{36})", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    """One regression test in one input form: the rule it is for, and the file holding its event(s)."""

    rule_id: str
    title: str
    form: str  # evtx | json
    path: Path
    match_count: int


@dataclass
class Verdict:
    rule_id: str
    title: str
    form: str
    path: str
    status: str  # matched | not_matched | not_compiled
    reason: str = ""
    events: int = 0  # events parsed from the file
    matched_events: int = 0
    # events of the other rules' tests (same form) this rule matched: its specificity on SigmaHQ's other events
    other_matches: int = 0
    logsource: str = ""


def cases(regression_root: Path) -> list[Case]:
    """Every evtx test of ``regression_root`` (``regression_data``) in both forms, where the file exists."""
    out: list[Case] = []
    repo_root = regression_root.parent
    for info_path in sorted(regression_root.rglob("info.yml")):
        info = yaml.safe_load(info_path.read_text(encoding="utf-8")) or {}
        rules = info.get("rule_metadata") or []
        if not rules:
            continue
        rule_id, title = str(rules[0].get("id")), str(rules[0].get("title") or "")
        for test in info.get("regression_tests_info") or []:
            if test.get("type") != "evtx":
                continue
            evtx = repo_root / str(test["path"])
            if not evtx.is_file():  # the path as written, else the file of the same name beside info.yml
                evtx = info_path.parent / Path(str(test["path"])).name
            count = int(test.get("match_count") or 1)
            for form, path in (("evtx", evtx), ("json", evtx.with_suffix(".json"))):
                if path.is_file():
                    out.append(Case(rule_id, title, form, path, count))
    return out


def rule_files_by_id(rules_root: Path, ids: Iterable[str]) -> dict[str, Path]:
    """The rule file of each id under ``rules_root`` (its ``id:`` line; ids not found are left out)."""
    wanted, found = set(ids), {}
    for f in sorted(rules_root.rglob("*.yml")):
        m = _ID_LINE.search(f.read_text(encoding="utf-8", errors="replace"))
        if m and m.group(1) in wanted:
            found[m.group(1)] = f
    return found


def _lines(case: Case) -> list[str]:
    """The event records of ``case`` as single-line JSON texts (the form the Windows source parses)."""
    if case.form == "json":
        text, docs, at = case.path.read_text(encoding="utf-8"), [], 0
        decoder = json.JSONDecoder()
        while at < len(text):  # one or several pretty-printed objects one after the other
            if text[at].isspace():
                at += 1
                continue
            doc, at = decoder.raw_decode(text, at)
            docs.extend(doc if isinstance(doc, list) else [doc])
        return [json.dumps(d, ensure_ascii=False) for d in docs]
    return [line.value.decode("utf-8") if isinstance(line.value, bytes) else line.value
            for line in capture_lines(case.path)]


def run_cases(spark, rules_root: Path, regression_root: Path) -> list[Verdict]:
    """One :class:`Verdict` per test and form (see the module doc); one parse and one detection job for all."""
    from pyspark.sql import functions as F

    from alerts.detection_input import contract_schema, detection_input
    from alerts.logsource_map import NotApplicable, logsource_scope
    from alerts.rule_loader import load_rules
    from alerts.single_event_pass import collect_candidates
    from enrich.reference_data import reference_from_tables
    from enrich.static_joins import enrich_static
    from ingest.arrow_parse import events_of, parse_bronze, quarantine_of
    from ingest.file_source import records_table

    all_cases = cases(regression_root)
    files = rule_files_by_id(rules_root, {c.rule_id for c in all_cases})
    rules, errors = load_rules(sorted(set(files.values())), contract_schema())
    by_id = {r.rule_id: r for r in rules}
    problems = {e.file: e.problem for e in errors}

    records = [(i, n, line) for i, c in enumerate(all_cases) for n, line in enumerate(_lines(c), 1)]
    now = dt.datetime.now(dt.UTC)
    bronze = spark.createDataFrame(records_table([(p, o, v, None, now) for p, o, v in records]))
    parsed = parse_bronze(bronze).localCheckpoint(eager=True)
    bad = {(r["partition"]): f"{r['parser']}: {r['error']}" for r in quarantine_of(parsed).collect()}
    events = events_of(parsed)
    enriched = detection_input(enrich_static(events, reference_from_tables({})))
    enriched = enriched.cache()
    rows = parsed.where(F.col("_error").isNull()).select("partition", "event.id", "event.dataset",
                                                         "event.code").collect()
    case_of = {r["id"]: r["partition"] for r in rows}
    seen = Counter(r["partition"] for r in rows)
    kinds = {r["partition"]: f"{r['dataset']} {r['code']}" for r in rows}

    hits: Counter[tuple[str, int]] = Counter()
    applicable = [by_id[c.rule_id] for c in all_cases if c.rule_id in by_id]
    for r in collect_candidates(enriched, list({r.rule_id: r for r in applicable}.values())):
        for eid in r["evidence"]:
            if eid in case_of:
                hits[(r["rule_id"], case_of[eid])] += 1
    enriched.unpersist()

    out: list[Verdict] = []
    for i, c in enumerate(all_cases):
        v = Verdict(c.rule_id, c.title, c.form, str(c.path), "not_matched", events=seen.get(i, 0))
        f = files.get(c.rule_id)
        rule = by_id.get(c.rule_id)
        if f is None:
            v.status, v.reason = "not_compiled", "no rule with this id under the rules folder"
        elif rule is None:
            v.status, v.reason = "not_compiled", problems.get(str(f), "not loaded")
        else:
            v.matched_events = hits.get((c.rule_id, i), 0)
            v.other_matches = sum(n for (rid, j), n in hits.items()
                                  if rid == c.rule_id and all_cases[j].rule_id != c.rule_id and all_cases[j].form == c.form)
            try:
                from sigma.rule import SigmaRule

                scope = logsource_scope(SigmaRule.from_yaml(f.read_text(encoding="utf-8")).logsource)
                v.logsource = "every event" if scope is None else ", ".join(
                    f"{d}{' ' + '/'.join(codes) if codes else ''}" for d, codes in scope.codes.items())
            except NotApplicable:
                v.logsource = "-"
            if v.matched_events:
                v.status = "matched"
            elif i in bad and not v.events:
                v.reason = f"the event did not parse ({bad[i]})"
            else:
                v.reason = (f"the detection is false on the event ({kinds.get(i, '?')}; rule reads "
                            f"{v.logsource})")
        out.append(v)
    return out


def counts(verdicts: list[Verdict]) -> dict[str, dict[str, int]]:
    """Status counts per form (``evtx``, ``json``)."""
    out: dict[str, dict[str, int]] = {}
    for form in FORMS:
        c = Counter(v.status for v in verdicts if v.form == form)
        out[form] = {**{s: c[s] for s in ("matched", "not_matched", "not_compiled")},
                     "rules_matching_other_tests_events": sum(1 for v in verdicts if v.form == form and v.other_matches)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m alerts.sigma_regression", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rules", type=Path, required=True, help="SigmaHQ's rules/ folder")
    parser.add_argument("--regression", type=Path, required=True, help="SigmaHQ's regression_data/ folder")
    parser.add_argument("--json", action="store_true", help="one JSON object per test and form")
    args = parser.parse_args(argv)
    from core.spark_session import build_spark

    spark = build_spark(Settings(spark_master="local[2]", shuffle_partitions=2), app_name="nightjar-sigma-regression")
    verdicts = run_cases(spark, args.rules, args.regression)
    for v in verdicts:
        if args.json:
            print(json.dumps(asdict(v)))
        else:
            print(f"{v.status:12} {v.form:4} {v.rule_id} {v.title} ({v.matched_events} of {v.events} event(s); "
                  f"{v.other_matches} of the other tests' events)" + (f" — {v.reason}" if v.reason else ""))
    print(json.dumps(counts(verdicts)), file=sys.stderr if args.json else sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
