"""Python rules: detections that Sigma cannot express, as plain ``events DataFrame -> candidates DataFrame``
functions with their metadata and their own sample logs.

Why: Sigma covers single-event conditions and simple correlations; beaconing (statistics over the gaps between
connections), baselines and anything needing arithmetic over groups need code. A Python rule is still a Spark
plan — no Python runs per event unless the rule itself adds a UDF — so it runs in batch (rule tests, backtests)
and in Structured Streaming alike, and it returns :data:`alerts.alert_schema.CANDIDATE_SCHEMA` like every other
rule, so suppression, alert ids and the sinks treat it like a Sigma rule.

A rule file is a module in the rules directory (``alerts/rule_pack/`` for the built-in ones)::

    from alerts.python_rules import python_rule

    @python_rule(id="c2_beaconing", name="Periodic C2 beaconing", severity="high",
                 tags=["attack.command_and_control", "attack.t1071"], entity_type="ip",
                 samples={"positive": [...raw lines...], "negative": [...], "reference": {"networks": [...]},
                          "entity": "10.10.0.57"})
    def detect(events: DataFrame) -> DataFrame:
        ...

``@python_rule`` replaces the function with a :class:`PythonRule` (still callable like the function); a
module-level ``PythonRule(id=..., detect=fn, ...)`` is the dataclass spelling of the same thing. Every
module-level :class:`PythonRule` a file defines is one of its rules. :func:`load_python_rules` imports a file (fresh
code on every call, nothing left in ``sys.modules``) and returns them; :func:`run_samples` runs a rule on its
samples exactly as the rule-test harness does: lines -> ``parse_bronze`` -> DHCP attribution ->
``enrich_static`` with the samples' reference rows -> ``detect``.

Contract of ``detect(events)``:

* ``events``: enriched events (static or streaming) of the events contract v2 (docs/events_contract.md), as in
  the ``events`` table; read fields with :func:`field` (the resolver), never ``detail`` keys by hand; materialized (read from the
  table or checkpointed: a rule planned directly on top of the parse + enrichment plan exhausts the driver's
  heap in the optimizer). The caller may give them ``_event_time`` (:data:`EVENT_TIME`) and a watermark on it;
  :func:`with_event_time` keeps those, and otherwise derives the column from ``@timestamp`` and, for a
  streaming frame, adds a watermark.
* returns: exactly :data:`CANDIDATE_SCHEMA` (:func:`conform_candidates` casts and orders the columns); ``rule_id``
  is the rule's id, ``entity.type`` its ``entity_type``.
* streaming: stateful rules aggregate over windows of ``_event_time`` so that the watermark bounds their state;
  ``output_mode`` says which output mode the rule is written for (``update``: a window emits a new, larger
  candidate in each micro-batch it grows in; the alert builder merges them by alert id).

Sample format (``samples=``), see docs/python_rules.md:

* ``positive``: raw log lines exactly as they arrive on Kafka (syslog lines or Zeek JSON lines), one record per
  line; all of them together must give at least one candidate (with entity ``entity`` when given);
* ``negative``: lines that together must give no candidate;
* ``reference`` (optional): rows of the reference tables the rule needs — ``{"networks": [...], "users": [...],
  "assets": [...], "iocs": [...]}`` with the lake tables' columns (:data:`enrich.reference_data.SCHEMAS`;
  missing columns are null); the same rows serve both runs;
* ``entity`` (optional): the entity value a positive candidate must have;
* ``ingested_at`` (optional, ISO 8601): the ingestion time given to the lines (RFC 3164 syslog has no year:
  the parser takes the year of ingestion). Default :data:`DEFAULT_SAMPLE_INGESTED_AT`, fixed, so that a
  sample's result never depends on the day it runs.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from alerts.alert_schema import CANDIDATE_SCHEMA, ENTITY_TYPES, MAX_EVIDENCE, SEVERITIES, conform_candidates
from alerts.detection_input import unusable_lines
from alerts.window_aggregator import build, run_windowed
from core.config import DEFAULT_DETECTION_WATERMARK, TABLE_ASSETS, TABLE_IOCS, TABLE_NETWORKS, TABLE_USERS
from enrich.dhcp_sessions import attribute_batch, events_from
from enrich.reference_data import SCHEMAS as REFERENCE_SCHEMAS
from enrich.reference_data import reference_from_tables
from enrich.static_joins import enrich_static
from ingest.arrow_parse import EVENT_TIME_COLUMN, parse_bronze
from ingest.field_resolver import column
from ingest.file_source import lines_dataframe

EVENT_TIME = EVENT_TIME_COLUMN  # the watermarked event-time column of the streaming pipeline
WATERMARK_METADATA_KEY = "spark.watermarkDelayMs"  # Spark marks the watermarked column with this metadata
DEFAULT_WATERMARK_DELAY = DEFAULT_DETECTION_WATERMARK  # the pipeline's own lateness bound
OUTPUT_MODES = ("update", "append")
REFERENCE_TABLE_NAMES = (TABLE_NETWORKS, TABLE_ASSETS, TABLE_USERS, TABLE_IOCS)
# Fixed, so that RFC 3164 lines (no year) in samples are dated the same whatever day the tests run.
DEFAULT_SAMPLE_INGESTED_AT = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)
MODULE_PREFIX = "nightjar_python_rule_"

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TAG = re.compile(r"^\S+$")
_SAMPLE_KEYS = ("positive", "negative", "reference", "entity", "ingested_at")


class PythonRuleError(Exception):
    """A rule file that cannot be loaded or a rule with invalid metadata. ``str()`` is one line naming the file,
    the rule (when known) and the problem, with its line when known: ``rules/x.py: rule 'x': line 12: severity …``.
    ``problem`` (with the line), ``text`` (without), ``rule_id``, ``path`` and ``line`` are attributes for callers
    that format it themselves."""

    def __init__(self, problem: str, *, path: Path | str | None = None, rule_id: str | None = None,
                 line: int | None = None) -> None:
        self.text = " ".join(str(problem).split())  # one line, whatever the exception text held
        self.problem = f"line {line}: {self.text}" if line else self.text  # the line travels with the problem
        self.path = Path(path) if path is not None else None
        self.rule_id = rule_id
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [str(self.path)] if self.path is not None else []
        if self.rule_id:
            parts.append(f"rule {self.rule_id!r}")
        return ": ".join([*parts, self.problem])


# -- metadata --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Samples:
    """A rule's own test data (see the module doc for the format)."""

    positive: tuple[str, ...]
    negative: tuple[str, ...]
    reference: Mapping[str, tuple[dict, ...]] = dataclass_field(default_factory=dict)
    entity: str | None = None
    ingested_at: dt.datetime = DEFAULT_SAMPLE_INGESTED_AT

    @classmethod
    def parse(cls, value: Samples | Mapping[str, Any]) -> Samples:
        """Validated :class:`Samples` from the ``samples=`` mapping; :class:`ValueError` says what is wrong."""
        if isinstance(value, Samples):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(f"samples must be a mapping with 'positive' and 'negative' lines, not {type(value).__name__}")
        unknown = sorted(set(value) - set(_SAMPLE_KEYS))
        if unknown:
            raise ValueError(f"samples: unknown key(s) {', '.join(map(repr, unknown))} (known: {', '.join(_SAMPLE_KEYS)})")
        lines = {kind: _lines(value.get(kind), kind) for kind in ("positive", "negative")}
        reference = _reference(value.get("reference") or {})
        entity = value.get("entity")
        if entity is not None and not (isinstance(entity, str) and entity):
            raise ValueError("samples: 'entity' must be a non-empty string (the expected entity value)")
        return cls(lines["positive"], lines["negative"], reference, entity, _instant(value.get("ingested_at")))


def _lines(value: Any, kind: str) -> tuple[str, ...]:
    if value is None or (isinstance(value, Sequence) and not isinstance(value, str | bytes) and not value):
        raise ValueError(f"samples: no {kind} lines (every rule ships at least one {kind} sample)")
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValueError(f"samples: {kind} must be a list of log lines, not {type(value).__name__}")
    out = []
    for i, line in enumerate(value, start=1):
        if not isinstance(line, str) or not line.strip():
            raise ValueError(f"samples: {kind} line {i} is not a non-empty string")
        if "\n" in line.rstrip("\n"):
            raise ValueError(f"samples: {kind} line {i} holds a line break (one record per line)")
        out.append(line.rstrip("\n"))
    return tuple(out)


def _reference(value: Any) -> dict[str, tuple[dict, ...]]:
    if not isinstance(value, Mapping):
        raise ValueError("samples: 'reference' must map table names to lists of rows")
    out = {}
    for table, rows in value.items():
        if table not in REFERENCE_TABLE_NAMES:
            raise ValueError(f"samples: reference table {table!r} is not one of {', '.join(REFERENCE_TABLE_NAMES)}")
        schema = REFERENCE_SCHEMAS[table]
        if isinstance(rows, Mapping) or not isinstance(rows, Sequence):
            raise ValueError(f"samples: reference {table!r} must be a list of rows (dicts)")
        checked = []
        for i, row in enumerate(rows, start=1):
            if not isinstance(row, Mapping):
                raise ValueError(f"samples: reference {table!r} row {i} is not a dict")
            unknown = sorted(set(row) - set(schema.names))
            if unknown:
                raise ValueError(f"samples: reference {table!r} row {i}: unknown column(s) {', '.join(unknown)} "
                                 f"(columns: {', '.join(schema.names)})")
            checked.append({k: (_instant(v) if pa.types.is_timestamp(schema.field(k).type) and isinstance(v, str)
                                else v) for k, v in row.items()})
        try:  # types are checked now, not when the harness runs
            pa.Table.from_pylist(checked, schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise ValueError(f"samples: reference {table!r}: {exc}") from None
        out[table] = tuple(checked)
    return out


def _instant(value: Any) -> dt.datetime:
    if value is None:
        return DEFAULT_SAMPLE_INGESTED_AT
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"samples: {value!r} is not an ISO 8601 time") from None
    if not isinstance(value, dt.datetime):
        raise ValueError(f"samples: expected an ISO 8601 time, not {type(value).__name__}")
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


@dataclass(frozen=True)
class Windowed:
    """A Python rule's windowed aggregation, run by the pipeline's shared aggregation with every other windowed
    rule (:mod:`alerts.window_aggregator`): one pass over the events for all of them, and the same code in
    backtests and rule samples.

    ``where``: the events the rule reads; ``group_by``: the entity (and any further group values, as strings);
    windows of ``window`` every ``slide`` (default: tumbling) of event time; ``item``: a column collected per
    event into ``items`` (read it back with :func:`alerts.window_aggregator.items_of`); ``finish(aggregated)``:
    row-wise, the aggregated rows (``_g`` group values, ``_w`` window, ``n``, ``first``, ``last``, ``ev``, ``host``,
    ``user``, ``items`` …) to candidates, typically with :func:`alerts.window_aggregator.candidates`. ``finish``
    runs in every windowed micro-batch: a rule whose expressions are many (lambdas) builds them once per Spark context
    with :class:`core.spark_session.PerContext` and applies them with
    :func:`alerts.window_aggregator.candidates_from` (``alerts/rule_pack/c2_beaconing.py`` does).
    """

    window: str
    where: Column
    group_by: tuple[Column, ...]
    finish: Callable[[DataFrame], DataFrame]
    slide: str | None = None
    item: Column | None = None

    def to_rule(self, rule_id: str, key: str | None = None, output_mode: str = "update"):
        return build(key or rule_id, rule_id, self.window, self.slide, matches=(self.where,),
                     group=tuple(self.group_by), finish=self.finish, item=self.item, output_mode=output_mode)


@dataclass(frozen=True, eq=False)
class PythonRule:
    """One Python rule: metadata + ``detect(events) -> candidates`` + samples. Validated when created.

    Calling the rule calls ``detect``. ``source`` is the file it was loaded from (set by the loader).
    """

    id: str
    name: str
    severity: str
    tags: tuple[str, ...]
    entity_type: str
    detect: Callable[[DataFrame], DataFrame]
    samples: Samples
    description: str = ""
    output_mode: str = "update"
    source: Path | None = None
    # A windowed rule: a zero-argument function returning its Windowed spec (called when Spark runs, not at import,
    # so rule files import without a Spark session); ``detect`` then runs that spec alone.
    windowed: Callable[[], Windowed] | None = None

    def __post_init__(self) -> None:
        rule_id = self.id if isinstance(self.id, str) and self.id else None

        def fail(problem: str) -> None:
            raise PythonRuleError(problem, rule_id=rule_id)

        if not isinstance(self.id, str) or not self.id:
            fail("missing id")
        if not _ID.match(self.id):
            fail(f"id {self.id!r} must be letters, digits, '_', '.', '-' (it is part of every alert id)")
        if not isinstance(self.name, str) or not self.name.strip():
            fail("missing name")
        if self.severity not in SEVERITIES:
            fail(f"severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")
        if self.entity_type not in ENTITY_TYPES:
            fail(f"entity_type {self.entity_type!r} is not one of {', '.join(ENTITY_TYPES)}")
        if isinstance(self.tags, str) or not isinstance(self.tags, Iterable):
            fail("tags must be a list of strings (ATT&CK tags such as 'attack.t1071')")
        tags = tuple(self.tags)
        bad = [t for t in tags if not isinstance(t, str) or not _TAG.match(t)]
        if bad:
            fail(f"tag {bad[0]!r} is not a non-empty string without spaces")
        object.__setattr__(self, "tags", tags)
        if self.windowed is not None:
            if not callable(self.windowed):
                fail("windowed must be a function returning the rule's Windowed spec")
            object.__setattr__(self, "detect", _windowed_detect(self.id, self.windowed, self.output_mode))
        if not callable(self.detect):
            fail(f"detect is not callable (got {type(self.detect).__name__})")
        try:
            inspect.signature(self.detect).bind(None)
        except TypeError:
            fail("detect must take exactly one argument: the events DataFrame")
        except ValueError:  # builtins without a signature: accept
            pass
        if self.output_mode not in OUTPUT_MODES:
            fail(f"output_mode {self.output_mode!r} is not one of {', '.join(OUTPUT_MODES)}")
        if not isinstance(self.description, str):
            fail("description must be a string")
        try:
            object.__setattr__(self, "samples", Samples.parse(self.samples))
        except ValueError as exc:
            fail(str(exc))
        object.__setattr__(self, "_defined_in", _calling_module())

    def __call__(self, events: DataFrame) -> DataFrame:
        return self.detect(events)

    def windowed_rule(self, key: str | None = None):
        """The :class:`~alerts.window_aggregator.WindowedRule` of a windowed rule (state key ``key``), else None."""
        if self.windowed is None:
            return None
        spec = self.windowed()
        if not isinstance(spec, Windowed):
            raise PythonRuleError(f"windowed() returned {type(spec).__name__}, not a Windowed spec", rule_id=self.id)
        return spec.to_rule(self.id, key, self.output_mode)

    def __repr__(self) -> str:
        return f"PythonRule(id={self.id!r}, severity={self.severity!r}, source={self.source})"


def _unset_detect(events: DataFrame) -> DataFrame:  # replaced in __post_init__ for windowed rules
    raise NotImplementedError


def _windowed_detect(rule_id: str, spec: Callable[[], Windowed], output_mode: str) -> Callable[[DataFrame], DataFrame]:
    def detect(events: DataFrame) -> DataFrame:
        return run_windowed(with_event_time(events), [spec().to_rule(rule_id, output_mode=output_mode)])

    return detect


def _calling_module() -> str | None:
    """``__name__`` of the module whose code created the rule (the first frame outside this module and
    ``dataclasses``): the loader keeps the rules a file defines, not those it imports from another rule file."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in (__name__, "dataclasses"):
        frame = frame.f_back
    return frame.f_globals.get("__name__") if frame is not None else None


def python_rule(*, id: str, name: str, severity: str, tags: Iterable[str], entity_type: str,  # noqa: A002
                samples: Samples | Mapping[str, Any], description: str | None = None,
                output_mode: str = "update", windowed: bool = False
                ) -> Callable[[Callable[..., Any]], PythonRule]:
    """Decorator: turn ``detect(events) -> candidates`` into a :class:`PythonRule` (description defaults to the
    function's docstring). With ``windowed=True`` the decorated function takes no argument and returns the rule's
    :class:`Windowed` spec: the pipeline then runs it in its shared windowed aggregation."""

    def wrap(fn: Callable[..., Any]) -> PythonRule:
        doc = description if description is not None else (inspect.getdoc(fn) or "")
        if windowed:
            return PythonRule(id=id, name=name, severity=severity, tags=tags, entity_type=entity_type,
                              detect=_unset_detect, samples=samples, description=doc, output_mode=output_mode,
                              windowed=fn)
        return PythonRule(id=id, name=name, severity=severity, tags=tags, entity_type=entity_type, detect=fn,
                          samples=samples, description=doc, output_mode=output_mode)

    return wrap


# -- loading ---------------------------------------------------------------------------------------------------
def module_name(path: Path) -> str:
    """The module name a rule file is executed under: readable (its stem) and unique per absolute path."""
    resolved = Path(path).resolve()
    stem = re.sub(r"\W", "_", resolved.stem)
    return f"{MODULE_PREFIX}{stem}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:8]}"


def load_python_rules(path: Path | str) -> list[PythonRule]:
    """Execute the rule file ``path`` afresh and return its rules: every module-level :class:`PythonRule` the
    file defines (one it imports from another rule file is that file's).

    The source is compiled from the file each time (no bytecode cache, which could be stale for a file changed
    twice within a second), and the module is in ``sys.modules`` only while it runs (dataclasses and typing look
    it up there) — so a changed file reloads with its new code, nothing accumulates over reloads, and Spark's
    cloudpickle ships any function of the rule by value (executors need not import the rules directory).
    Raises :class:`PythonRuleError` (file, rule, problem, one line) for unreadable files, syntax errors,
    exceptions while importing, invalid metadata, duplicate ids and files that define no rule.
    """
    path = Path(path)
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise PythonRuleError(f"cannot read the rule file: {exc.strerror or exc}", path=path) from None
    try:
        code = compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise PythonRuleError(f"SyntaxError: {exc.msg}", path=path, line=exc.lineno) from None
    except ValueError as exc:  # e.g. null bytes
        raise PythonRuleError(f"cannot compile: {exc}", path=path) from None
    name = module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)  # noqa: S102 — executing the rule file is the point
    except PythonRuleError as exc:  # invalid metadata: the line of the decorator / PythonRule(...) call
        raise PythonRuleError(exc.text, path=path, rule_id=exc.rule_id,
                              line=exc.line or _line_in(exc, path)) from None
    except Exception as exc:
        raise PythonRuleError(f"{type(exc).__name__} while importing: {exc}", path=path,
                              line=_line_in(exc, path)) from None
    finally:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
    rules: list[PythonRule] = []
    for value in list(vars(module).values()):  # module-level, defined by this file, each once
        if (isinstance(value, PythonRule) and getattr(value, "_defined_in", None) == name
                and all(value is not r for r in rules)):
            rules.append(value)
    if not rules:
        raise PythonRuleError("defines no rule (no module-level PythonRule / @python_rule)", path=path)
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise PythonRuleError("id defined twice in the file", path=path, rule_id=rule.id)
        seen.add(rule.id)
    loaded = [replace(rule, source=path) for rule in rules]
    for rule in loaded:
        object.__setattr__(rule, "_defined_in", name)  # replace() ran __post_init__ from here, not from the file
    return loaded


def load_python_rules_dir(directory: Path | str) -> list[PythonRule]:
    """The rules of every ``*.py`` file in ``directory`` (not recursive; files starting with ``_`` are helpers),
    in file-name order. Raises on the first bad file or on an id defined in two files."""
    rules: list[PythonRule] = []
    where: dict[str, Path] = {}
    for path in sorted(Path(directory).glob("*.py")):
        if path.name.startswith("_"):
            continue
        for rule in load_python_rules(path):
            if rule.id in where:
                raise PythonRuleError(f"id already defined in {where[rule.id]}", path=path, rule_id=rule.id)
            where[rule.id] = path
            rules.append(rule)
    return rules


def _line_in(exc: BaseException, path: Path) -> int | None:
    """The line of ``path`` nearest to where ``exc`` was raised (None when no frame is in that file)."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename) == path:
            line = frame.lineno
    return line


# -- helpers for rule authors ----------------------------------------------------------------------------------
def field(name: str, datasets: Iterable[str] | None = None) -> Column:
    """A field of the events by name, for a Python rule: :func:`ingest.field_resolver.column`.

    The same resolver the Sigma and correlation compilers use: a core column (``source.ip``) reads as itself, a
    source's own field (``conn_state``, an old wide path such as ``zeek.connection.state``) as a typed read of
    ``detail`` for ``datasets`` (every dataset when None); a name no source defines raises
    :class:`ingest.field_resolver.UnknownField` when the rule's spec is built, i.e. when the rule is loaded."""
    return column(name, datasets)


def with_event_time(events: DataFrame, delay: str = DEFAULT_WATERMARK_DELAY) -> DataFrame:
    """``events`` with :data:`EVENT_TIME` and, when streaming, a watermark on it.

    The streaming pipeline's events already carry ``_event_time`` (``@timestamp``, see
    ``alerts.detection_input``) and its watermark: both are kept. Events read back from the lake, file
    streams and batch frames have neither: ``_event_time`` is then ``@timestamp`` and a streaming frame gets a
    watermark of ``delay`` (a stateful rule without one would keep its state forever).
    """
    if EVENT_TIME not in events.columns:
        events = events.withColumn(EVENT_TIME, F.col("`@timestamp`"))
    if events.isStreaming and WATERMARK_METADATA_KEY not in events.schema[EVENT_TIME].metadata:
        events = events.withWatermark(EVENT_TIME, delay)
    return events


def evidence_ids(pairs: Column) -> Column:
    """The event ids of the first :data:`MAX_EVIDENCE` elements of an ``array<struct<ts, id>>`` by time."""
    return F.transform(F.slice(F.array_sort(pairs), 1, MAX_EVIDENCE), lambda p: p["id"])


# -- samples -----------------------------------------------------------------------------------------------------
@dataclass
class SampleResult:
    """What a rule did on its samples: the candidates of each run, unparsed lines, and the problems found."""

    rule_id: str
    positive: list[dict] = dataclass_field(default_factory=list)  # candidate rows of the positive lines
    negative: list[dict] = dataclass_field(default_factory=list)  # ... of the negative lines (should be none)
    problems: list[str] = dataclass_field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = f"{self.rule_id}: {len(self.positive)} positive / {len(self.negative)} negative candidate(s)"
        return head + ("" if self.passed else ": " + "; ".join(self.problems))


def reference_data(reference: Mapping[str, Iterable[Mapping]] | None = None):
    """A :class:`enrich.reference_data.ReferenceData` from small in-memory tables (rows with the lake tables'
    columns, e.g. the generator's ``*.jsonl``; times may be ISO strings; a table not given is empty), prepared
    exactly as :class:`~enrich.reference_data.ReferenceCache` prepares the lake's. ValueError on unknown tables,
    columns or mistyped values."""
    tables = _reference({name: list(rows) for name, rows in (reference or {}).items()})  # checked, ISO times parsed
    return reference_from_tables({name: list(rows) for name, rows in tables.items()})


def dhcp_networks(reference: Mapping[str, Iterable[Mapping]] | None) -> list[str]:
    """The CIDRs flagged ``dhcp`` among the ``networks`` rows (what DHCP attribution waits for)."""
    return [r["cidr"] for r in (reference or {}).get(TABLE_NETWORKS, ()) if r.get("dhcp")]


def enriched_events(bronze: DataFrame, reference, dhcp: list[str]) -> tuple[DataFrame, list[str]]:
    """Bronze-shaped records -> (the enriched events of the ``events`` table, one "line N does not parse (…)"
    per quarantined record and one "line N is dated …" per record detection leaves out), in batch, by the pipeline's own steps: ``parse_bronze`` -> ``attribute_batch``
    (DHCP lease holder in ``host.*``, DNS names in ``destination.domain``) -> ``enrich_static``.

    The parsed records and the events are materialized (``localCheckpoint``): the parse and enrichment plans
    are large, and a rule's aggregation planned on top of them makes the optimizer's constraint propagation
    exhaust the driver's heap — rules must run on materialized events (the ``events`` table, a checkpointed
    frame), never directly on the enrichment plan.
    """
    parsed = parse_bronze(bronze).localCheckpoint(eager=True)
    unparsed = [f"line {r['offset']} {r['problem']}" for r in unusable_lines(parsed).orderBy("offset").collect()]
    return enrich_parsed(parsed, reference, dhcp), unparsed


def enrich_parsed(parsed: DataFrame, reference, dhcp: list[str]) -> DataFrame:
    """Parsed records (``parse_bronze``' output) -> the enriched events, materialized: the second half of
    :func:`enriched_events`."""
    return enrich_static(events_from(attribute_batch(parsed, dhcp)), reference).localCheckpoint(eager=True)


def sample_events(spark: SparkSession, lines: Sequence[str], samples: Samples,
                  reference=None) -> tuple[DataFrame, list[str]]:
    """(enriched events, unparsed-line messages) of sample ``lines``; ``reference``: a prepared
    ReferenceData, built from ``samples.reference`` when None."""
    ref = reference if reference is not None else reference_data(samples.reference)
    bronze = lines_dataframe(spark, list(lines), ingested_at=samples.ingested_at)
    return enriched_events(bronze, ref, dhcp_networks(samples.reference))


def schema_problem(df: DataFrame) -> str | None:
    """None when ``df`` has CANDIDATE_SCHEMA's column names and types (in order), else what differs."""
    want = [(f.name, f.dataType.simpleString()) for f in CANDIDATE_SCHEMA.fields]
    got = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
    if want == got:
        return None
    return f"detect returned columns {got}, not CANDIDATE_SCHEMA {want}"


def run_samples(spark: SparkSession, rule: PythonRule, parsed=None) -> SampleResult:
    """Run ``rule`` on its samples as the rule-test harness does and report what went wrong.

    Each of the positive and the negative lines is run on its own: lines -> ``parse_bronze`` -> DHCP
    attribution -> ``enrich_static`` with the samples' reference rows -> ``rule.detect`` (batch) -> candidates.
    Problems: a line that does not parse, an exception in ``detect``, output that is not CANDIDATE_SCHEMA, a
    candidate with another rule id or entity type, no positive candidate (or none with the expected entity), any
    negative candidate. ``parsed``: an :class:`alerts.parsed_samples.ParsedSamples` holding this rule's lines
    under ``(rule.id, "positive")`` and ``(rule.id, "negative")`` (``nightjar rules test`` parses the whole pack
    at once); the lines are parsed here when None.
    """
    samples = rule.samples
    result = SampleResult(rule.id)
    ref = reference_data(samples.reference)
    for kind, lines in (("positive", samples.positive), ("negative", samples.negative)):
        if parsed is not None:
            events, unparsed = parsed.enriched((rule.id, kind), ref, dhcp_networks(samples.reference))
        else:
            events, unparsed = sample_events(spark, lines, samples, ref)
        result.problems += [f"{kind} {p}" for p in unparsed]
        try:
            out = rule.detect(events)
        except Exception as exc:  # the harness reports, it does not crash on one rule
            result.problems.append(f"{kind}: detect raised {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            continue
        if not isinstance(out, DataFrame):
            result.problems.append(f"{kind}: detect returned {type(out).__name__}, not a DataFrame")
            continue
        problem = schema_problem(out)
        if problem:
            result.problems.append(f"{kind}: {problem}")
            continue
        rows = [r.asDict(recursive=True) for r in out.collect()]
        setattr(result, kind, rows)
        for r in rows:
            if r["rule_id"] != rule.id or r["entity"]["type"] != rule.entity_type:
                result.problems.append(f"{kind}: candidate for rule {r['rule_id']!r} entity type "
                                       f"{r['entity']['type']!r}, expected {rule.id!r} / {rule.entity_type!r}")
                break
    if not result.positive:
        result.problems.append("positive lines gave no candidate")
    elif samples.entity and all(r["entity"]["value"] != samples.entity for r in result.positive):
        values = sorted({r["entity"]["value"] for r in result.positive})
        result.problems.append(f"no positive candidate for entity {samples.entity!r} (got {', '.join(values)})")
    if result.negative:
        values = sorted({r["entity"]["value"] for r in result.negative})
        result.problems.append(f"negative lines gave {len(result.negative)} candidate(s) for {', '.join(values)}")
    return result


__all__ = [
    "CANDIDATE_SCHEMA", "EVENT_TIME", "PythonRule", "PythonRuleError", "SampleResult", "Samples",
    "conform_candidates", "enrich_parsed", "evidence_ids", "load_python_rules", "load_python_rules_dir", "python_rule",
    "reference_data", "run_samples", "sample_events", "with_event_time",
]
