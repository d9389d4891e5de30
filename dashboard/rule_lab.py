"""Rule lab: check a Sigma rule file as it is being edited and try its selections on the lake, without Spark.

:func:`check_rule_text` parses every YAML document with pySigma (as ``alerts.rule_loader`` does), checks the
``nightjar`` block the loader needs (an entity for a rule that alerts, a known level), flags correlations that
reference rules found neither in the text nor in the rule pack, and compiles each single-event rule to its Spark
SQL predicate with the pipeline's own compiler (``alerts.sigma_compiler.compile_detection``; compiling needs no
Spark session, only the events schema).

:func:`try_on_lake` runs such a predicate over the lake's ``events`` with DuckDB (the predicate's Spark SQL
transpiled by sqlglot, Java regex flags RE2 lacks dropped); a predicate that uses Spark-only SQL is reported as such — the
authoritative checks stay ``nightjar rules test`` and ``nightjar backtest``. Nothing here writes a rule file:
the dashboard never changes what the pipeline runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

# Spark-side modules and the compilers are imported inside the functions that need them: the dashboard's pages
# import this module, and a page view must not load pyspark or pySigma until a rule is checked.
from core.config import TABLE_EVENTS
from core.lake import table_dataset
from dashboard.lakedb import has_table, query
from ingest.events_contract import CORE_FIELDS, ENRICHMENT_FIELDS, arrow_schema

_LEVELS = ("informational", "low", "medium", "high", "critical")


@dataclass
class DocReport:
    name: str
    kind: str  # sigma | correlation | ?
    title: str = ""
    level: str = ""
    tags: tuple[str, ...] = ()
    entity: str = ""
    alerts: bool = False
    predicate: str | None = None
    problems: list[str] = field(default_factory=list)


def events_schema(lake: Path | None):
    """The Spark schema of the lake's ``events`` (enriched columns included), or, without a lake, the events
    contract's (core, enrichment and ``detail`` columns, :mod:`ingest.events_contract`), built without Spark."""
    if lake is not None and has_table(lake, TABLE_EVENTS):
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(table_dataset(lake, TABLE_EVENTS).schema)
    return contract_schema()


def contract_schema():
    """The ``events`` columns the contract declares (core + enrichment), as a Spark StructType, with no session."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema((*CORE_FIELDS, *ENRICHMENT_FIELDS)))


def _pack_rule_names() -> set[str]:
    from alerts.rule_loader import BUILTIN_RULES

    names: set[str] = set()
    for f in BUILTIN_RULES.glob("*.y*ml"):
        try:
            for d in yaml.safe_load_all(f.read_text(encoding="utf-8")):
                if isinstance(d, dict):
                    names.update(str(d[k]) for k in ("name", "id") if d.get(k))
        except yaml.YAMLError:
            continue
    return names


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def check_rule_text(text: str, schema=None, compile_predicates: bool = True) -> list[DocReport]:
    """One report per YAML document of a Sigma rule file (a file-level problem gives a single report).

    ``schema``: the events schema to compile against (:func:`events_schema`). A rule compiles as the loader
    compiles it: fields resolved within its logsource's datasets, a logsource no dataset serves reported."""
    from sigma.correlations import SigmaCorrelationRule
    from sigma.rule import SigmaRule

    from alerts.logsource_map import logsource_scope
    from alerts.rule_loader import attack_tags, default_entity
    from alerts.sigma_compiler import compile_detection

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        return [DocReport("(file)", "?", problems=[f"not valid YAML: {_one_line(exc)}"])]
    if not docs:
        return [DocReport("(file)", "?", problems=["no rule in the text"])]
    schema = schema if schema is not None else events_schema(None)
    local = {str(d[k]) for d in docs if isinstance(d, dict) for k in ("name", "id") if d.get(k)}
    known = local | _pack_rule_names()
    quiet = {str(r) for d in docs if isinstance(d, dict) and isinstance(d.get("correlation"), dict)
             and not d["correlation"].get("generate") for r in d["correlation"].get("rules") or []}
    out = []
    for d in docs:
        if not isinstance(d, dict):
            out.append(DocReport("?", "?", problems=["a YAML document is not a mapping (a Sigma rule)"]))
            continue
        name = str(d.get("name") or d.get("id") or d.get("title") or "?")
        is_corr = "correlation" in d
        nj = d.get("nightjar") if isinstance(d.get("nightjar"), dict) else {}
        rep = DocReport(name, "correlation" if is_corr else "sigma", str(d.get("title") or ""),
                        str(d.get("level") or ""), attack_tags([str(t) for t in d.get("tags") or []]))
        ent = nj.get("entity")
        rep.entity = (f"{ent.get('type', '?')}: {ent.get('field', '?')}" if isinstance(ent, dict) else str(ent or ""))
        # a base rule alerts unless only its correlation does; without nightjar.entity the loader infers one
        # (alerts.rule_loader.default_entity), as for a stock SigmaHQ rule
        rep.alerts = nj.get("enabled", True) is not False and (
            is_corr or name not in quiet or bool(nj.get("alert")))
        if rep.level and rep.level.lower() not in _LEVELS:
            rep.problems.append(f"level {rep.level!r} is not one of {', '.join(_LEVELS)}")
        try:
            item = (SigmaCorrelationRule.from_dict(d, collect_errors=True) if is_corr
                    else SigmaRule.from_dict(d, collect_errors=True))
            rep.problems += [_one_line(p) for p in (getattr(item, "errors", None) or [])]
        except Exception as exc:
            rep.problems.append(_one_line(exc))
            item = None
        if is_corr:
            corr = d.get("correlation") if isinstance(d.get("correlation"), dict) else {}
            missing = [str(r) for r in corr.get("rules") or [] if str(r) not in known]
            if missing:
                rep.problems.append(f"references unknown rule(s) {', '.join(missing)}")
            if not ent and not corr.get("group-by"):
                rep.problems.append("no entity: set nightjar.entity or group-by")
        else:
            if compile_predicates and item is not None and not rep.problems:
                try:
                    scope = logsource_scope(item.logsource)
                    rep.predicate = compile_detection(item, schema, None if scope is None else scope.datasets,
                                                      None if scope is None else scope.codes)
                    if not ent:
                        etype, efield = default_entity(None if scope is None else scope.datasets)
                        rep.entity = f"{etype}: {efield} (inferred)"
                except Exception as exc:
                    rep.problems.append(f"does not compile: {_one_line(exc)}")
        out.append(rep)
    return out


# Java's inline regex flags that RE2 (DuckDB's regex engine) does not know: `u` (Unicode case folding, which RE2's
# case-insensitive matching does anyway). The compiler writes `(?iu)` for Sigma's `|re|i`.
_RE2_UNKNOWN_FLAGS = re.compile(r"^\(\?([a-zA-Z]*)\)")


def _re2_pattern(pattern: str) -> str:
    def flags(m: re.Match) -> str:
        kept = m.group(1).replace("u", "")
        return f"(?{kept})" if kept else ""

    return _RE2_UNKNOWN_FLAGS.sub(flags, pattern, count=1)


def to_duckdb(predicate: str) -> str:
    """A Spark SQL predicate in DuckDB's spelling, by sqlglot's Spark -> DuckDB transpiler (identifiers, RLIKE over
    any expression, string escapes, map lookups), with regex flags RE2 does not know dropped."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(predicate, read="spark")
    for node in tree.find_all(exp.RegexpLike):
        pattern = node.expression
        if isinstance(pattern, exp.Literal) and pattern.is_string:
            node.set("expression", exp.Literal.string(_re2_pattern(pattern.this)))
    return tree.sql(dialect="duckdb")


@dataclass
class TryResult:
    matches: int | None
    sample: pd.DataFrame
    note: str = ""


def try_on_lake(lake: Path, predicate: str, limit: int = 50) -> TryResult:
    """How many ``events`` the predicate matches, and the newest ``limit`` of them with their raw lines."""
    if not has_table(lake, TABLE_EVENTS):
        return TryResult(None, pd.DataFrame(), "the lake has no events yet")
    where = to_duckdb(predicate)
    try:
        counted = query(lake, [TABLE_EVENTS], f"SELECT count(*) AS n FROM events WHERE {where}")
        sample = query(lake, [TABLE_EVENTS], f"""
            SELECT "@timestamp" AS "timestamp", "event".dataset AS dataset, coalesce("host".name, "host".hostname)
                   AS host, "user".name AS "user", "source".ip AS source_ip, "destination".ip AS destination_ip,
                   "event".original AS original
            FROM events WHERE {where} ORDER BY "@timestamp" DESC LIMIT {int(limit)}""")
    except Exception as exc:
        return TryResult(None, pd.DataFrame(), "this predicate uses Spark-only SQL that DuckDB does not run "
                         f"({_one_line(exc)[:120]}); use `nightjar backtest`")
    return TryResult(int(counted["n"].iloc[0]), sample)
