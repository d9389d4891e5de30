"""Rule files -> runnable rules: Sigma YAML (single-event and correlation) and Python rule modules.

A rules directory holds ``*.yml``/``*.yaml`` Sigma files (one or several YAML documents each: a base rule and the
correlation built on it may share a file; a correlation may also reference a rule in another file) and ``*.py``
Python rule modules (see ``alerts/python_rules.py``). :func:`load_rules` reads them all and returns the rules that
compiled plus one :class:`RuleError` per problem — a broken file or rule is reported (file, rule, problem) and
skipped; the others still run.

Nightjar reads a few keys of its own from a Sigma rule's ``nightjar:`` block (Sigma keeps unknown keys as
custom attributes)::

    nightjar:
      entity: {type: ip, field: source.ip}   # what the alert is about (default: first group-by field)
      suppress: 1h                           # no second alert for the same rule + entity within this span
      enabled: false                         # keep the file, run nothing
      samples:                               # `nightjar rules test` runs them
        positive: ["<raw log line>", {line: "<raw log line>", repeat: 20}]
        negative: [...]
        reference: {users: [{name: alice, is_admin: false, ...}], iocs: [...]}   # rows for the enrichment

A base rule that a correlation references alerts on its own only if the correlation says ``generate: true``
(Sigma's semantics) or its own ``nightjar`` block says ``alert: true``.

Rules from outside (``--rules PATH``, ``NIGHTJAR_RULES``) run beside the built-in pack (:func:`rule_sources`). A rule
whose id is also a built-in rule's replaces that built-in rule (one INFO line says which): an operator tunes a
built-in rule by copying it into their own directory. Two rules with the same id outside the pack are an error naming
both files.

A Sigma rule's ``logsource`` decides which events it reads (:mod:`alerts.logsource_map`): its fields, its entity
field and a correlation's group-by fields resolve within those datasets (:mod:`ingest.field_resolver`), and the
rule matches only their events; a logsource no dataset serves is a RuleError, not a rule run over everything.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

# The compilers (pySigma, pandas) and the field resolver (pyarrow) are imported inside the functions that use them:
# the dashboard imports this module to list the rules, and a page view must not load them.
from alerts.alert_builder import DEFAULT_SUPPRESS_S, RuleMeta
from alerts.alert_schema import ENTITY_TYPES, SEVERITIES, conform_candidates
from alerts.rule_sources import BUILTIN_RULES, is_builtin  # noqa: F401 (BUILTIN_RULES: re-exported)
from core.durations import parse_duration as parse

log = logging.getLogger(__name__)

RULE_SUFFIXES = (".yml", ".yaml", ".py")
DEFAULT_CORRELATION_WATERMARK = "10 minutes"

_LEVELS = {"informational": "low", "low": "low", "medium": "medium", "high": "high", "critical": "critical"}


class RuleError(Exception):
    """A rule file or rule that cannot run: names the file, the rule (when known) and the problem."""

    def __init__(self, file: Path | str, rule: str | None, problem: str) -> None:
        self.file, self.rule, self.problem = str(file), rule, problem
        where = f"{self.file}: rule {rule!r}" if rule else self.file
        super().__init__(f"{where}: {problem}")

    @property
    def not_applicable(self) -> bool:
        """The rule's logsource is not a log Nightjar parses: nothing is wrong with it, it has nothing to read."""
        # imports pySigma: not at module import (see the note above the imports)
        from alerts.logsource_map import NOT_APPLICABLE_PREFIX

        return self.problem.startswith(NOT_APPLICABLE_PREFIX)


def not_applicable_line(errors: Iterable[RuleError]) -> str | None:
    """One line for the rules whose logsource Nightjar does not parse (None when there is none): a SigmaHQ checkout
    holds hundreds (macOS, cloud, auditd …), which are not errors and are not listed one by one."""
    n = sum(e.not_applicable for e in errors)
    return (f"{n} rule(s) not applicable: their logsource is not a log Nightjar parses "
            "(`nightjar rules check PATH` lists them)") if n else None


@dataclass(frozen=True)
class Sample:
    line: str
    repeat: int = 1


@dataclass(frozen=True)
class Samples:
    positive: tuple[Sample, ...] = ()
    negative: tuple[Sample, ...] = ()
    reference: dict[str, list[dict]] = field(default_factory=dict)


@dataclass(frozen=True)
class SingleMatch:
    """A single-event Sigma rule's compiled SQL, so that many rules run over a batch in one projection
    (:mod:`alerts.single_event_pass`) instead of one plan branch each."""

    scope: str | None  # the logsource's events (``event.dataset IN (...)``); None: every event
    predicate: str  # the whole match, scope included; never NULL
    entity_sql: str  # the alert's entity value


@dataclass(frozen=True)
class Rule:
    """One runnable rule. ``detect`` maps an events DataFrame (static or streaming) to candidates."""

    meta: RuleMeta
    kind: str  # "sigma" | "correlation" | "python"
    source: Path
    digest: str  # changes whenever the rule's definition (its file) changes
    entity_type: str
    detect: Callable[[DataFrame], DataFrame]
    samples: Samples
    stateful: bool  # needs its own streaming query (windowed aggregation / state)
    description: str = ""
    origin: object = None  # the PythonRule of a Python rule (its samples run through its own harness)
    output_mode: str = "update"  # streaming output mode of a stateful rule's query
    # Stateful rules the shared windowed aggregation runs (alerts/window_aggregator.py); None for a Python rule
    # with its own detect(), which runs in a query of its own.
    windowed: object = None
    match: SingleMatch | None = None  # a single-event Sigma rule's SQL (None for the other kinds)

    @property
    def rule_id(self) -> str:
        return self.meta.rule_id


def parse_duration(text: str | int | float, what: str) -> float:
    """``90`` / ``"90s"`` / ``"5m"`` / ``"1h"`` / ``"1d"`` / ``"10 minutes"`` -> seconds (:mod:`core.durations`)."""
    return parse(text, what)


def attack_tags(tags: Iterable[object]) -> tuple[str, ...]:
    """Sigma ``attack.t1110.001`` -> ``T1110.001``; tactic names and other namespaces are dropped."""
    out = []
    for t in tags:
        ns, name = getattr(t, "namespace", None), getattr(t, "name", None)
        if ns is None:
            ns, _, name = str(t).partition(".")
        if ns == "attack" and re.fullmatch(r"t\d{4}(\.\d{3})?", str(name).lower()):
            out.append(str(name).upper())
    return tuple(out)


def infer_entity_type(field_name: str) -> str:
    f = field_name.lower()
    if f.endswith(".ip") or f.endswith("_ip") or f in ("ip",):
        return "ip"
    if f.startswith("user") or f.endswith(".user") or f.endswith("user.name"):
        return "user"
    if f.endswith(".mac"):
        return "mac"
    if "domain" in f or f.endswith("question.name"):
        return "domain"
    return "host"


def default_entity(datasets: Iterable[str] | None) -> tuple[str, str]:
    """(entity type, field) of a Sigma rule without ``nightjar.entity`` (a stock SigmaHQ rule), from what its
    logsource's datasets always fill: network logs (Zeek) the source address, hosts' own logs (Windows, syslog)
    the host. A user is not the default: many events (a Sysmon image load, a service start) carry none, and an
    event whose entity is null raises no alert. ``nightjar.entity`` overrides it."""
    if datasets and all(d.startswith("zeek.") for d in datasets):
        return "ip", "source.ip"
    return "host", "host.name"


def _samples(raw: object, file: Path, rule: str) -> Samples:
    if raw is None:
        return Samples()
    if not isinstance(raw, dict):
        raise RuleError(file, rule, "nightjar.samples must be a mapping with positive/negative lists")

    def items(key: str) -> tuple[Sample, ...]:
        out = []
        for i, item in enumerate(raw.get(key) or []):
            if isinstance(item, str):
                out.append(Sample(item))
            elif isinstance(item, dict) and isinstance(item.get("line"), str):
                out.append(Sample(item["line"], int(item.get("repeat", 1))))
            else:
                raise RuleError(file, rule, f"nightjar.samples.{key}[{i}] must be a log line or {{line, repeat}}")
        return tuple(out)

    reference = raw.get("reference") or {}
    if not isinstance(reference, dict):
        raise RuleError(file, rule, "nightjar.samples.reference must map table names to lists of rows")
    return Samples(items("positive"), items("negative"), {str(k): list(v) for k, v in reference.items()})


def _nightjar(rule: object) -> dict:
    attrs = getattr(rule, "custom_attributes", None) or {}
    block = attrs.get("nightjar") or {}
    return block if isinstance(block, dict) else {}


def _rule_name(rule: object) -> str:
    return str(getattr(rule, "name", None) or getattr(rule, "id", None) or getattr(rule, "title", "?"))


def _meta(rule: object, rule_id: str, nj: dict, file: Path, count_merge: str) -> RuleMeta:
    level = getattr(rule, "level", None)
    level_name = getattr(level, "name", None) or (str(level) if level else "medium")
    severity = _LEVELS.get(level_name.lower())
    if severity is None or severity not in SEVERITIES:
        raise RuleError(file, rule_id, f"level {level_name!r} is not one of {', '.join(_LEVELS)}")
    try:
        suppress = parse_duration(nj.get("suppress", DEFAULT_SUPPRESS_S), "nightjar.suppress")
    except ValueError as exc:
        raise RuleError(file, rule_id, str(exc)) from exc
    return RuleMeta(rule_id=rule_id, name=str(getattr(rule, "title", rule_id)), severity=severity,
                    tags=attack_tags(getattr(rule, "tags", None) or ()), suppress_s=suppress, count_merge=count_merge)


def _entity(nj: dict, default_field: str | None, file: Path, rule_id: str) -> tuple[str, str]:
    spec = nj.get("entity") or {}
    if isinstance(spec, str):
        spec = {"field": spec}
    field_name = spec.get("field") or default_field
    if not field_name:
        raise RuleError(file, rule_id, "no entity: set nightjar.entity.field (e.g. source.ip)")
    etype = spec.get("type") or infer_entity_type(field_name)
    if etype not in ENTITY_TYPES:
        raise RuleError(file, rule_id, f"nightjar.entity.type {etype!r} is not one of {', '.join(ENTITY_TYPES)}")
    return etype, field_name


def single_event_candidates(matched: DataFrame, rule_id: str, entity_type: str,
                            entity_field: str | Column) -> DataFrame:
    """Every event that matched a single-event rule -> one candidate (window = the event's instant).

    ``entity_field``: a field name (read through :func:`ingest.field_resolver.column`) or the Column to read."""
    from ingest.field_resolver import column

    ts = F.col("`@timestamp`")
    value = (column(entity_field) if isinstance(entity_field, str) else entity_field).cast("string")
    host = F.coalesce(F.col("host.name"), F.col("host.hostname")) if "host" in matched.columns else F.lit(None)
    user = F.col("user.name") if "user" in matched.columns else F.lit(None)
    out = matched.where(value.isNotNull() & ts.isNotNull()).select(
        F.lit(rule_id).alias("rule_id"),
        F.struct(F.lit(entity_type).alias("type"), value.alias("value")).alias("entity"),
        ts.alias("window_start"), ts.alias("window_end"), ts.alias("first_seen"), ts.alias("last_seen"),
        F.lit(1).cast("long").alias("event_count"),
        F.array(F.col("event.id")).alias("evidence"),
        host.cast("string").alias("host_name"), user.cast("string").alias("user_name"),
        F.lit(None).cast("string").alias("detail"),
    )
    return conform_candidates(out)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:12]


def rule_files(paths: Iterable[Path]) -> list[Path]:
    """The rule files under ``paths`` (files or directories, recursively), sorted."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out.extend(sorted(f for f in p.rglob("*") if f.suffix in RULE_SUFFIXES and f.is_file()
                              and not f.name.startswith(("_", "."))))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"rules path {p} does not exist")
    return out


def load_rules(paths: Iterable[Path], schema: StructType,
               correlation_watermark: str = DEFAULT_CORRELATION_WATERMARK) -> tuple[list[Rule], list[RuleError]]:
    """All rules under ``paths`` compiled against the events ``schema``; problems are returned, not raised."""
    from sigma.correlations import SigmaCorrelationRule
    from sigma.rule import SigmaRule

    from alerts.correlation_compiler import compile_correlation, correlation_rule, update_mode_safe
    from alerts.logsource_map import NotApplicable, Scope, logsource_scope
    from alerts.sigma_compiler import compile_detection, compile_scope, resolve_field

    def scope_of(rule: SigmaRule, file: Path) -> Scope | None:
        """The events of ``rule``'s logsource (None: every one); a logsource no dataset serves is a RuleError."""
        try:
            return logsource_scope(rule.logsource)
        except NotApplicable as exc:
            raise RuleError(file, _rule_name(rule), str(exc)) from exc

    def compile_scoped(rule: SigmaRule, file: Path) -> tuple[str, tuple[str, ...] | None]:
        """(the rule's predicate limited to its logsource's events, its datasets)."""
        scope = scope_of(rule, file)
        datasets = None if scope is None else scope.datasets
        return compile_detection(rule, schema, datasets, None if scope is None else scope.codes), datasets

    def scope_sql(rule: SigmaRule, file: Path) -> str | None:
        scope = scope_of(rule, file)
        return None if scope is None else compile_scope(rule, schema, scope.datasets, scope.codes)

    errors: list[RuleError] = []
    rules: list[Rule] = []
    overridden: list[tuple[str, Path]] = []  # (rule id, the file whose copy replaced the built-in rule)
    base: dict[str, tuple[SigmaRule, Path, str]] = {}  # name or id -> (rule, file, file digest)
    correlations: list[tuple[SigmaCorrelationRule, Path, str]] = []
    for f in rule_files(paths):
        text = f.read_text(encoding="utf-8", errors="replace")
        digest = _digest(str(f.name), text)
        if f.suffix == ".py":
            rules.extend(_load_python(f, digest, errors))
            continue
        try:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as exc:  # the whole file is unusable
            errors.append(RuleError(f, None, f"not valid YAML: {_one_line(exc)}"))
            continue
        for doc in docs:
            # One document at a time (not SigmaCollection): a broken rule must not take its file's other rules
            # down, and a correlation may reference a rule in another file (resolved below, across files).
            label = str(doc.get("name") or doc.get("id") or doc.get("title") or "?") if isinstance(doc, dict) else "?"
            if not isinstance(doc, dict):
                errors.append(RuleError(f, None, "a YAML document is not a mapping (a Sigma rule)"))
                continue
            try:
                item = (SigmaCorrelationRule.from_dict(doc, collect_errors=True) if "correlation" in doc
                        else SigmaRule.from_dict(doc, collect_errors=True))
            except Exception as exc:
                errors.append(RuleError(f, label, _one_line(exc)))
                continue
            problems = getattr(item, "errors", None) or []
            if problems:
                errors.append(RuleError(f, label, "; ".join(_one_line(p) for p in problems)))
                continue
            if isinstance(item, SigmaCorrelationRule):
                correlations.append((item, f, digest))
            elif isinstance(item, SigmaRule):
                keys = {str(item.name) if item.name else None, str(item.id) if item.id else None} - {None}
                clash = next((base[k] for k in sorted(keys) if k in base), None)
                if clash is not None and is_builtin(clash[1]) and not is_builtin(f):
                    overridden.append((label, f))  # an operator's copy replaces the built-in rule
                    for k in [k for k, v in base.items() if v[0] is clash[0]]:
                        del base[k]
                elif clash is not None and is_builtin(f) and not is_builtin(clash[1]):
                    overridden.append((label, clash[1]))  # the operator's copy was read first
                    continue
                elif clash is not None:  # the first one loaded stays; the second is reported, never swapped in
                    errors.append(RuleError(f, label, f"duplicate rule id or name (also in {clash[1]})"))
                    continue
                for key in keys:
                    base[key] = (item, f, digest)

    referenced_quiet: set[int] = set()
    for corr, f, digest in correlations:
        rid = _rule_name(corr)
        nj = _nightjar(corr)
        if nj.get("enabled", True) is False:
            log.info("rule %s (%s) is disabled", rid, f)
            continue
        try:
            refs = [str(getattr(r, "reference", r)) for r in corr.rules]
            missing = [r for r in refs if r not in base]
            if missing:
                raise RuleError(f, rid, f"references unknown rule(s) {', '.join(missing)}")
            predicates = {}
            digests = [digest]
            scopes = []
            for r in refs:
                b, bf, bd = base[r]
                predicates[r], datasets = compile_scoped(b, bf)
                scopes.append(datasets)
                digests.append(bd)
                if not getattr(corr, "generate", False):
                    referenced_quiet.add(id(b))
            group_by = list(corr.group_by or [])
            etype, efield = _entity(nj, group_by[0] if group_by else None, f, rid)
            meta = _meta(corr, rid, nj, f, count_merge="max")
            # Group-by fields resolve within the base rules' datasets together (every dataset if one is unscoped).
            datasets = None if any(d is None for d in scopes) else sorted({x for d in scopes for x in d})
            detect = compile_correlation(corr, predicates, entity_type=etype, entity_field=efield,
                                         watermark=correlation_watermark, datasets=datasets)
            digest_all = _digest(*digests)
            windowed = correlation_rule(corr, predicates, etype, schema, key=f"{rid}@{digest_all}",
                                        entity_field=efield, watermark=correlation_watermark, datasets=datasets)
            rules.append(Rule(meta, "correlation", f, digest_all, etype, detect,
                              _samples(nj.get("samples"), f, rid), stateful=True,
                              description=str(getattr(corr, "description", "") or ""),
                              # a "fewer than" condition is only true once the window has closed
                              output_mode="update" if update_mode_safe(corr) else "append", windowed=windowed))
        except RuleError as exc:
            errors.append(exc)
        except Exception as exc:  # a compile error names the problem; the file and rule are added here
            errors.append(RuleError(f, rid, _one_line(exc)))

    seen: set[int] = set()
    for b, f, digest in base.values():
        if id(b) in seen:
            continue
        seen.add(id(b))
        nj = _nightjar(b)
        rid = _rule_name(b)
        if nj.get("enabled", True) is False or (id(b) in referenced_quiet and not nj.get("alert", False)):
            continue
        try:
            predicate, datasets = compile_scoped(b, f)
            etype, efield = _entity(nj, None, f, rid) if nj.get("entity") else default_entity(datasets)
            meta = _meta(b, rid, nj, f, count_merge="sum")
            entity_sql = resolve_field(b, efield, schema, datasets).sql
            rules.append(Rule(meta, "sigma", f, digest, etype, _single_event_detect(predicate, rid, etype, entity_sql),
                              _samples(nj.get("samples"), f, rid), stateful=False,
                              description=str(getattr(b, "description", "") or ""),
                              match=SingleMatch(scope_sql(b, f), predicate, entity_sql)))
        except RuleError as exc:
            errors.append(exc)
        except Exception as exc:
            errors.append(RuleError(f, rid, _one_line(exc)))

    ids: dict[str, Rule] = {}
    for r in rules:
        first = ids.get(r.rule_id)
        if first is None:
            ids[r.rule_id] = r
        elif is_builtin(first.source) and not is_builtin(r.source):  # a Python or correlation rule's copy
            overridden.append((r.rule_id, r.source))
            ids[r.rule_id] = r
        elif not is_builtin(first.source) and is_builtin(r.source):
            overridden.append((first.rule_id, first.source))
        else:
            errors.append(RuleError(r.source, r.rule_id, f"duplicate rule id (also in {first.source})"))
    if overridden:
        log.info("%d built-in rule(s) replaced by rules of the same id: %s", len(set(overridden)),
                 ", ".join(f"{rid} ({f})" for rid, f in sorted(set(overridden))))
    return list(ids.values()), errors


def _single_event_detect(predicate: str, rule_id: str, entity_type: str, entity_sql: str
                         ) -> Callable[[DataFrame], DataFrame]:
    def detect(events: DataFrame) -> DataFrame:
        return single_event_candidates(events.where(F.expr(predicate)), rule_id, entity_type, F.expr(entity_sql))

    return detect


def _load_python(f: Path, digest: str, errors: list[RuleError]) -> list[Rule]:
    from alerts.python_rules import load_python_rules

    try:
        loaded = load_python_rules(f)
    except Exception as exc:  # PythonRuleError names the problem (and the rule when known)
        errors.append(RuleError(f, getattr(exc, "rule_id", None), getattr(exc, "problem", None) or _one_line(exc)))
        return []
    out = []
    for pr in loaded:
        meta = RuleMeta(rule_id=pr.id, name=pr.name, severity=pr.severity, tags=attack_tags(pr.tags),
                        suppress_s=float(getattr(pr, "suppress_s", DEFAULT_SUPPRESS_S)), count_merge="max")
        samples = Samples(tuple(Sample(x) for x in pr.samples.positive), tuple(Sample(x) for x in pr.samples.negative),
                          {k: list(v) for k, v in pr.samples.reference.items()})
        # Python rules aggregate over windows: stateful. A windowed one joins the shared aggregation.
        try:
            windowed = pr.windowed_rule(key=f"{pr.id}@{digest}")
        except Exception as exc:
            errors.append(RuleError(f, pr.id, f"its windowed spec does not build: {_one_line(exc)}"))
            continue
        out.append(Rule(meta, "python", f, digest, pr.entity_type, pr.detect, samples, stateful=True,
                        description=pr.description or "", origin=pr, output_mode=pr.output_mode,
                        windowed=windowed))
    return out


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
