"""The rule pack's metadata, read without Spark: what each alerting rule is, for the detail and coverage pages.

``alerts.rule_loader.load_rules`` compiles every rule against the events schema and builds the windowed specs,
which needs a Spark session (measured: without one the Python rules' windowed specs fail to build). The dashboard
only needs the metadata, so it reads it directly: Sigma YAML documents (title, name/id, description, level,
tags, the ``nightjar`` block) and the Python rule modules' declared metadata (``alerts.python_rules``), with the
rule loader's own helpers for the ATT&CK ids and the level names. Which YAML rules alert follows the loader:
a correlation alerts; a base rule alerts when it names an entity and is not a correlation's quiet input.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import yaml

# The rule loader's modules (pyspark, pySigma) are imported inside the functions that need them: the dashboard's
# pages import this module, and importing it must not load them.
from alerts.rule_sources import is_builtin, rule_sources
from core.config import settings_from_env

log = logging.getLogger(__name__)

_LEVELS = {"informational": "low", "low": "low", "medium": "medium", "high": "high", "critical": "critical"}


@dataclass(frozen=True)
class RuleInfo:
    rule_id: str
    title: str
    description: str
    level: str  # severity: low|medium|high|critical
    tags: tuple[str, ...]  # ATT&CK technique ids (T1110.001)
    tactics: tuple[str, ...]  # ATT&CK tactic names (credential_access)
    kind: str  # sigma | correlation | python
    source: Path
    enabled: bool = True

    @property
    def source_text(self) -> str:
        try:
            return self.source.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return f"(cannot read {self.source}: {exc.strerror})"


def rule_paths(paths: tuple[Path, ...] | list[Path] = ()) -> list[Path]:
    """``paths``, else what the pipeline runs: the built-in pack beside the configured rules (``NIGHTJAR_RULES``;
    without the pack when ``NIGHTJAR_BUILTIN_RULES=0``)."""
    if paths:
        return list(paths)
    settings = settings_from_env()
    return rule_sources(settings.rules, settings.builtin_rules)


def _tactics(tags) -> tuple[str, ...]:
    out = []
    for t in tags or ():
        ns, _, name = str(t).lower().partition(".")
        # technique (t1110.001), group (g0016) and software (s0002) ids are not tactics
        if ns == "attack" and name and not re.fullmatch(r"[tgs]\d{4}(\.\d{3})?", name) and name not in out:
            out.append(name)
    return tuple(out)


def _applicable(logsource: object) -> bool:
    """Whether a Sigma ``logsource`` mapping reads events Nightjar parses (:mod:`alerts.logsource_map`)."""
    from alerts.logsource_map import NotApplicable, logsource_scope

    if not isinstance(logsource, dict):
        return False
    try:
        logsource_scope(SimpleNamespace(**{k: logsource.get(k) for k in ("product", "service", "category")}))
    except NotApplicable:
        return False
    return True


def load_catalog(paths: tuple[Path, ...] | list[Path] = ()) -> list[RuleInfo]:
    """Every alerting rule under ``paths`` (default: :func:`rule_paths`), disabled ones included
    (``enabled=False``); a file that cannot be read is logged and skipped."""
    from alerts.rule_loader import attack_tags, rule_files

    out: list[RuleInfo] = []
    for f in rule_files(rule_paths(paths)):
        if f.suffix == ".py":
            try:
                from alerts.python_rules import load_python_rules

                for pr in load_python_rules(f):
                    out.append(RuleInfo(pr.id, pr.name, pr.description or "", pr.severity, attack_tags(pr.tags),
                                        _tactics(pr.tags), "python", f))
            except Exception as exc:  # a broken Python rule: the pipeline reports it; skip it here
                log.warning("rule file %s: %s", f, exc)
            continue
        try:
            docs = [d for d in yaml.safe_load_all(f.read_text(encoding="utf-8", errors="replace"))
                    if isinstance(d, dict)]
        except yaml.YAMLError as exc:
            log.warning("rule file %s is not valid YAML: %s", f, exc)
            continue
        quiet: set[str] = set()
        for d in docs:
            corr = d.get("correlation")
            if isinstance(corr, dict) and not corr.get("generate"):
                quiet.update(str(r) for r in corr.get("rules") or [])
        for d in docs:
            nj = d.get("nightjar") if isinstance(d.get("nightjar"), dict) else {}
            rid = str(d.get("name") or d.get("id") or d.get("title") or "?")
            is_corr = "correlation" in d
            if not is_corr:
                # A rule without a `nightjar:` block (a stock SigmaHQ rule) runs with an inferred entity, as the
                # loader does, when its logsource is one Nightjar parses; one that is not applicable never runs
                # and must not count as coverage.
                if not nj.get("entity") and not _applicable(d.get("logsource")):
                    continue
                if (rid in quiet or str(d.get("id")) in quiet) and not nj.get("alert"):
                    continue
            level = _LEVELS.get(str(d.get("level") or "medium").lower(), "medium")
            tags = [str(t) for t in d.get("tags") or []]
            out.append(RuleInfo(rid, str(d.get("title") or rid), " ".join(str(d.get("description") or "").split()),
                                level, attack_tags(tags), _tactics(tags), "correlation" if is_corr else "sigma", f,
                                enabled=nj.get("enabled", True) is not False))
    return _without_replaced(out)


def _without_replaced(rules: list[RuleInfo]) -> list[RuleInfo]:
    """The rules as the loader runs them: a rule outside the pack replaces the built-in rule of its id."""
    mine = {r.rule_id for r in rules if not is_builtin(r.source)}
    return [r for r in rules if not (is_builtin(r.source) and r.rule_id in mine)]


def rule_by_id(rule_id: str, paths: tuple[Path, ...] | list[Path] = ()) -> RuleInfo | None:
    return next((r for r in load_catalog(paths) if r.rule_id == rule_id), None)
