"""``nightjar rules check PATH… [--json] [--strict]``: compile rule files or folders (a SigmaHQ checkout) without
running them, and say per rule whether it compiled, does not apply to what Nightjar ingests, or was refused and why.

A detection engineer pointing Nightjar at a rule set needs to know, before deploying it, which rules will run, which
never can (their logsource is not a log Nightjar parses: ``not_applicable``) and which would but cannot be compiled
(an unknown field, a modifier the compiler refuses by name, a duplicate id, a YAML error: ``refused``). The rules go
through exactly the loader the pipeline uses (:func:`alerts.rule_loader.load_rules`), compiled against the events
schema built from the contract (:func:`alerts.detection_input.contract_schema`), so no Spark session is started.

Output: one line per rule (``--json``: one JSON object per rule with ``path``, ``id``, ``title``, ``logsource``,
``status``, ``reason``, ``kind``), then a summary of the counts per status and per logsource product (on stderr with
``--json``, so stdout stays JSON lines). Exit 0; 2 when a path does not exist; with ``--strict``, 1 when a rule was
refused.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

# The loader and compilers (pyspark, pySigma) are imported in check(): `nightjar rules` imports this module at start
# (alerts/rules_test.py), and its --help or a bad argument must not wait for them (nightjar/cli.py).
from core.config import Settings
from core.errors import UserError

STATUSES = ("compiled", "not_applicable", "refused")


@dataclass(frozen=True)
class RuleCheck:
    """The verdict on one rule (one YAML document, or one Python rule)."""

    path: str
    id: str | None
    title: str | None
    logsource: dict[str, str]
    kind: str  # sigma | correlation | python
    status: str  # one of STATUSES
    reason: str

    @property
    def product(self) -> str:
        """The logsource's product, or ``-`` (correlations and product-less logsources such as ``category: dns``)."""
        return self.logsource.get("product") or "-"


@dataclass(frozen=True)
class _Doc:
    path: Path
    label: str
    id: str | None
    title: str | None
    logsource: dict[str, str]
    kind: str


def _docs(files: Iterable[Path]) -> tuple[list[_Doc], dict[str, str]]:
    """Every rule document of ``files`` with what the report shows; plus files that are not YAML (file -> reason)."""
    docs: list[_Doc] = []
    broken: dict[str, str] = {}
    for f in files:
        if f.suffix == ".py":
            docs.append(_Doc(f, "", None, f.stem, {}, "python"))
            continue
        try:
            parsed = [d for d in yaml.safe_load_all(f.read_text(encoding="utf-8", errors="replace")) if d is not None]
        except yaml.YAMLError as exc:
            broken[str(f)] = " ".join(str(exc).split())
            continue
        for d in parsed:
            if not isinstance(d, dict):
                continue
            ls = d.get("logsource") if isinstance(d.get("logsource"), dict) else {}
            logsource = {k: str(ls[k]) for k in ("product", "service", "category") if ls.get(k)}
            label = str(d.get("name") or d.get("id") or d.get("title") or "?")
            docs.append(_Doc(f, label, str(d["id"]) if d.get("id") else None,
                             str(d["title"]) if d.get("title") else None, logsource,
                             "correlation" if "correlation" in d else "sigma"))
    return docs, broken


def check(paths: Iterable[Path], settings: Settings | None = None) -> list[RuleCheck]:
    """Compile every rule under ``paths`` and return one :class:`RuleCheck` per rule, in file order.

    Single-event Sigma rules compile to SQL text with no Spark session. Correlation and Python rules build Spark
    Columns when they load, which needs a session: one (local, per ``settings``) is started only when the paths
    hold such a rule. Raises FileNotFoundError for a path that does not exist."""
    from alerts.detection_input import contract_schema
    from alerts.logsource_map import NOT_APPLICABLE_PREFIX
    from alerts.rule_loader import load_rules, rule_files

    paths = [Path(p) for p in paths]
    files = rule_files(paths)
    docs, broken = _docs(files)
    if any(d.kind != "sigma" for d in docs):
        from core.spark_session import build_spark

        build_spark((settings or Settings()).with_(shuffle_partitions=2), app_name="nightjar-rules-check")
    rules, errors = load_rules(paths, contract_schema())
    compiled = {(str(r.source), r.rule_id): r for r in rules}
    problems: dict[tuple[str, str | None], list[str]] = {}
    for e in errors:
        problems.setdefault((e.file, e.rule), []).append(e.problem)
    out: list[RuleCheck] = []
    for f, reason in broken.items():
        out.append(RuleCheck(f, None, None, {}, "sigma", "refused", f"not valid YAML: {reason}"))
    for d in docs:
        key = (str(d.path), d.label)
        if d.kind == "python":
            found = [r for r in rules if str(r.source) == str(d.path)]
            errs = problems.get((str(d.path), None), []) + [p for (file, rid), ps in problems.items()
                                                             if file == str(d.path) and rid for p in ps]
            status = "refused" if errs or not found else "compiled"
            reason = "; ".join(errs) or ", ".join(r.rule_id for r in found)
            out.append(RuleCheck(str(d.path), None, d.title, {}, "python", status, reason))
            continue
        errs = problems.get(key, [])
        if errs:
            na = all(p.startswith(NOT_APPLICABLE_PREFIX) for p in errs)
            out.append(RuleCheck(str(d.path), d.id, d.title, d.logsource, d.kind,
                                 "not_applicable" if na else "refused", "; ".join(errs)))
        elif key in compiled:
            out.append(RuleCheck(str(d.path), d.id, d.title, d.logsource, d.kind, "compiled", _scope(compiled[key])))
        else:  # loaded but not run on its own: disabled, or a base rule only its correlation alerts on
            out.append(RuleCheck(str(d.path), d.id, d.title, d.logsource, d.kind, "compiled",
                                 "does not alert on its own (disabled, or the base rule of a correlation)"))
    return out


def _scope(rule: object) -> str:
    entity = getattr(rule, "entity_type", "?")
    return f"entity {entity}"


def summary(checks: list[RuleCheck]) -> dict[str, object]:
    """Counts per status, overall and per logsource product."""
    per_product: dict[str, Counter[str]] = {}
    for c in checks:
        per_product.setdefault(c.product, Counter())[c.status] += 1
    return {"rules": len(checks), **{s: sum(c.status == s for c in checks) for s in STATUSES},
            "per_product": {p: {s: n[s] for s in STATUSES} for p, n in sorted(per_product.items())}}


def format_summary(s: dict[str, object]) -> str:
    per = "; ".join(f"{p} {n['compiled']}/{n['not_applicable']}/{n['refused']}"
                    for p, n in s["per_product"].items())  # type: ignore[union-attr]
    return (f"{s['rules']} rules: {s['compiled']} compiled, {s['not_applicable']} not_applicable, "
            f"{s['refused']} refused (per product compiled/not_applicable/refused: {per})")


def run(paths: list[Path], as_json: bool, strict: bool = False, settings: Settings | None = None) -> int:
    """The ``check`` action of ``nightjar rules`` (dispatched from :mod:`alerts.rules_test`)."""
    if not paths:
        raise UserError("nightjar rules check: give rule files or folders (PATH…)", exit_code=2)
    for p in paths:
        if not p.exists():
            raise UserError(f"rules path {p} does not exist", exit_code=2)
    checks = check(paths, settings)
    for c in checks:
        if as_json:
            print(json.dumps(asdict(c)))
        else:
            title = c.title or "?"
            print(f"{c.status:14} {c.id or '-':36} {c.path}: {title}" + (f" — {c.reason}" if c.reason else ""))
    s = summary(checks)
    print(format_summary(s), file=sys.stderr if as_json else sys.stdout, flush=True)
    return 1 if strict and s["refused"] else 0
