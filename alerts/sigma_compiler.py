"""Sigma single-event detections -> one Spark SQL boolean expression over the ``events`` table.

:func:`compile_detection` walks the condition tree that pySigma has already parsed and resolved
(``rule.detection.parsed_condition``: selections, ``1 of sel*``, ``all of them``, ``not``, modifiers applied
to the values) and emits a predicate for ``events.where(F.expr(sql))``. It is a small tree walker rather
than a pySigma ``TextQueryBackend`` because the output must depend on each column's Spark type, which a text
backend does not see: an ``array<string>`` column matches when any element matches (``exists(col, x -> …)``),
a number compares numerically on a numeric column and textually on a string column, ``cidr`` needs address
arithmetic on a string column, and an unknown field or a value that cannot match its column must fail when
the rule is loaded, not silently never match. Everything is plain Spark SQL (no Python UDF), so the
predicate runs on executors inside the streaming plan. Semantics, supported modifiers and limits:
``docs/sigma_compiler.md``.

Two properties every generated expression has:

* it is two-valued: a missing (NULL) field makes a comparison false, never NULL, so ``not filter`` matches an
  event that lacks the filter's field (Sigma's meaning) and the result can be negated safely;
* every value from the rule reaches the SQL text only through :func:`sql_string` (escaped quotes, backslashes,
  control characters and ``${`` variable references), every field through :func:`resolve_field` — the events
  contract's resolver (:mod:`ingest.field_resolver`) places it, :func:`sql_column` quotes it: a rule cannot inject
  SQL.

Field names (ECS's, a source's own, Sigma's taxonomy) resolve through :mod:`ingest.field_resolver`, the one
resolver the correlation compiler, Python rules and the dashboard use too: a core column reads typed, a source's
own field (a key of ``detail``) reads as the text the log wrote.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    MapType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from sigma.conditions import (
    ConditionAND,
    ConditionFieldEqualsValueExpression,
    ConditionNOT,
    ConditionOR,
    ConditionValueExpression,
)
from sigma.exceptions import SigmaError
from sigma.modifiers import reverse_modifier_mapping
from sigma.rule import SigmaRule
from sigma.rule.detection import SigmaDetection, SigmaDetectionItem
from sigma.types import (
    CompareOperators,
    Placeholder,
    SigmaBool,
    SigmaCasedString,
    SigmaCIDRExpression,
    SigmaCompareExpression,
    SigmaExists,
    SigmaExpansion,
    SigmaFieldReference,
    SigmaNull,
    SigmaNumber,
    SigmaRegularExpression,
    SigmaRegularExpressionFlag,
    SigmaString,
    SigmaTimestampPart,
    SigmaType,
    SpecialChars,
    TimestampPart,
)

from ingest.events_contract import DETAIL
from ingest.field_resolver import ALL_COLUMN_TYPES, SIGMA_TAXONOMY, Place, Resolved, UnknownField, resolve
from ingest.sources import dataset_fields
from ingest.sources import datasets as registry_datasets

# Modifiers (Sigma names) this compiler implements. pySigma itself rejects names it does not know.
SUPPORTED_MODIFIERS: frozenset[str] = frozenset({
    "all", "contains", "startswith", "endswith", "cased", "neq", "exists", "fieldref",
    "re", "i", "ignorecase", "m", "multiline", "s", "dotall",
    "cidr", "gt", "gte", "lt", "lte",
    "base64", "base64offset", "windash",
    "minute", "hour", "day", "week", "month", "year",
    "wide", "utf16", "utf16be",  # only in front of base64/base64offset, see _check_modifiers
})
# Why the rest is refused (named in the error, so a rule author knows what to change).
_UNSUPPORTED_WHY: dict[str, str] = {
    "expand": "placeholders (%name%) need a processing pipeline that defines them; Nightjar has none",
}
_UTF16 = ("wide", "utf16", "utf16be")
_BASE64 = ("base64", "base64offset")

# Columns searched by keyword detections (values without a field), first one present in the schema wins.
KEYWORD_COLUMNS: tuple[str, ...] = ("event.original", "message")

_IPV4_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
# Canonical dotted quad (no leading zeros, as Python's ipaddress); [.] rather than an escaped dot keeps the
# SQL free of backslashes.
_IPV4_RE = f"^{_IPV4_OCTET}([.]{_IPV4_OCTET}){{3}}$"
_HEX_GROUP = "[0-9a-f]{1,4}"
_HEX_GROUPS = f"{_HEX_GROUP}(:{_HEX_GROUP})*"
# Eight groups, or groups around one "::". Embedded IPv4 (::ffff:1.2.3.4) and zone ids (%eth0) do not match.
_IPV6_RE = f"^({_HEX_GROUP}(:{_HEX_GROUP}){{7}}|({_HEX_GROUPS})?::({_HEX_GROUPS})?)$"

_TIMESTAMP_PARTS: dict[TimestampPart, str] = {
    TimestampPart.MINUTE: "minute", TimestampPart.HOUR: "hour", TimestampPart.DAY: "dayofmonth",
    TimestampPart.WEEK: "weekofyear", TimestampPart.MONTH: "month", TimestampPart.YEAR: "year",
}
_COMPARE_OPS: dict[CompareOperators, str] = {
    CompareOperators.LT: "<", CompareOperators.LTE: "<=",
    CompareOperators.GT: ">", CompareOperators.GTE: ">=",
    CompareOperators.NEQ: "!=",
}
_REGEX_FLAGS: dict[SigmaRegularExpressionFlag, str] = {
    # Java's (?i) folds ASCII only; u makes it Unicode-aware like Python's re (which pySigma validated with).
    SigmaRegularExpressionFlag.IGNORECASE: "iu",
    SigmaRegularExpressionFlag.MULTILINE: "m",
    SigmaRegularExpressionFlag.DOTALL: "s",
}


class RuleCompileError(Exception):
    """A rule that cannot be compiled: ``rule`` names it (title, id, name), ``problem`` says why, in one line.

    ``str(error)`` is ``rule '<title>' (id …): <problem>``; the caller adds the file name.
    """

    def __init__(self, rule: str, problem: str) -> None:
        self.rule = rule
        self.problem = " ".join(problem.split())  # one line, whatever pySigma's message looked like
        super().__init__(f"rule {self.rule}: {self.problem}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable despite the two-argument constructor
        return (type(self), (self.rule, self.problem))


def rule_label(rule: Any) -> str:
    """``'<title>' (id <uuid>, name <name>)`` — how errors name a rule (id and name only when set)."""
    title = getattr(rule, "title", None) or "<untitled>"
    extra = [f"{key} {value}" for key in ("id", "name") if (value := getattr(rule, key, None))]
    return repr(str(title)) + (f" ({', '.join(extra)})" if extra else "")


def sql_string(value: str) -> str:
    """``value`` as a Spark SQL string literal (default parser settings), safe for any input.

    Backslash and quote are backslash-escaped (Spark concatenates adjacent literals, so ``''`` would not be an
    escaped quote); control characters become ``\\n``/``\\uXXXX`` so the SQL stays on one line; ``$`` before
    ``{`` becomes ``\\u0024`` because Spark substitutes ``${var}`` in SQL text before parsing it, even inside
    literals (a rule about ``${jndi:…}`` must match that text, not a configuration value).
    """
    out = []
    for i, ch in enumerate(value):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F or (ch == "$" and value[i + 1:i + 2] == "{"):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "'" + "".join(out) + "'"


def sql_column(path: tuple[str, ...]) -> str:
    """A column reference for the schema path ``path`` (field names, outermost first), every part quoted."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in path)


@dataclass(frozen=True)
class ResolvedField:
    """A Sigma field as :mod:`ingest.field_resolver` placed it: the name the resolver found, the SQL that reads it
    and its Spark type.

    A core column reads as its schema says (a path through an array of structs reads as an array of the leaf
    type, as in Spark). A key of ``detail`` reads as text — detail values are strings, and Sigma compares values
    as the log wrote them — except a list, which reads as ``array<string>`` so that any element can match. A name
    several datasets place differently reads through a ``CASE`` on ``event.dataset``.
    """

    sigma_field: str
    path: str
    sql: str
    data_type: DataType


def _field_paths(schema: StructType, prefix: str = "") -> Iterator[str]:
    for f in schema.fields:
        typ = f.dataType
        while isinstance(typ, ArrayType):
            typ = typ.elementType
        if isinstance(typ, StructType):
            yield from _field_paths(typ, f"{prefix}{f.name}.")
        yield f"{prefix}{f.name}"


def _schema_path(schema: StructType, path: str) -> tuple[str, DataType] | None:
    """The quoted SQL reference and Spark type of column ``path`` (dotted) in ``schema``, or None if absent."""
    segments = path.split(".")
    names: list[str] = []
    typ: DataType = schema
    array_depth = 0
    i = 0
    while i < len(segments):
        while isinstance(typ, ArrayType):  # a struct field inside an array reads as an array of that field
            typ = typ.elementType
            array_depth += 1
        if not isinstance(typ, StructType):
            return None
        # Longest match first, so a field name that itself contains dots is found too.
        for j in range(len(segments), i, -1):
            name = ".".join(segments[i:j])
            if name in typ.fieldNames():
                names.append(name)
                typ = typ[name].dataType
                i = j
                break
        else:
            return None
    for _ in range(array_depth):
        typ = ArrayType(typ)
    return sql_column(tuple(names)), typ


def _place_sql(rule: Any, sigma_field: str, place: Place, schema: StructType) -> tuple[str, DataType]:
    """SQL and type of one place the resolver gave: a core column checked against ``schema``, or detail text."""
    if place.core is not None:
        found = _schema_path(schema, place.core)
        if found is None:
            mapped = f" (resolved to '{place.core}')" if place.core != sigma_field else ""
            raise RuleCompileError(rule_label(rule), f"unknown field '{sigma_field}'{mapped}: not a column of "
                                   "the events table")
        return found
    if DETAIL not in schema.fieldNames():
        raise RuleCompileError(rule_label(rule), f"field '{sigma_field}' is a detail key, and the events have no "
                               f"'{DETAIL}' column")
    text = f"{sql_column((DETAIL,))}[{sql_string(place.detail_key or '')}]"
    if place.type.startswith("array<"):
        return f"from_json({text}, 'array<string>')", ArrayType(StringType())
    return text, StringType()


@functools.cache
def known_field_names() -> frozenset[str]:
    """Every name some source defines: core and enrichment columns, Sigma's taxonomy, and each dataset's fields
    and their aliases (``ingest/sources/*/fields.yml``).

    The resolver takes any name as a key of an open dataset's detail (a Windows event's or a JSON payload's own
    data cannot be listed), so a typo would resolve and never match. A name no source defines is therefore only
    taken when every dataset in the rule's scope is open (:func:`_all_open`): a Windows Security rule may name
    any EventData key, a rule over every dataset or over sshd's lines may not.
    """
    names = set(ALL_COLUMN_TYPES) | set(SIGMA_TAXONOMY)
    for dataset in registry_datasets():
        for fields in dataset_fields(dataset):
            for f in fields.fields:
                names.add(f.name)
                names.update(f.aliases)
    names.discard(DETAIL)
    return frozenset(names)


def _all_open(datasets: tuple[str, ...] | None) -> bool:
    """True when every dataset of the scope may hold keys its field lists do not name (False for no scope)."""
    return datasets is not None and all(any(d.open for d in dataset_fields(ds)) for ds in datasets)


def resolve_field(rule: Any, sigma_field: str, schema: StructType,
                  datasets: tuple[str, ...] | None = None) -> ResolvedField:
    """Place ``sigma_field`` for events of ``datasets`` (all when None) with :func:`ingest.field_resolver.resolve`
    and read it from ``schema``, else RuleCompileError naming the field.

    ``rule`` is only used to name the rule in the error. The resolver knows ECS names, each source's own names
    and their aliases, and Sigma's taxonomy (``User``, ``DestinationPort``), so a rule compiles and a correlation
    groups by the same names (docs/fields.md lists them).
    """
    try:
        if sigma_field not in known_field_names() and not _all_open(datasets):
            raise UnknownField(sigma_field, datasets)
        resolved: Resolved = resolve(sigma_field, datasets)
    except UnknownField as e:
        close = difflib.get_close_matches(sigma_field, list(_field_paths(schema)), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        scope = f"datasets {', '.join(datasets)}" if datasets else "any source"
        raise RuleCompileError(rule_label(rule), f"unknown field '{sigma_field}': not a core column of the events "
                               f"table and not a field of {scope} (see docs/fields.md){hint}") from e
    reads = [(place, *_place_sql(rule, sigma_field, place, schema)) for place in resolved.places]
    first = resolved.places[0]
    # One place: read it directly when it holds for every event, or for every dataset in scope (a scoped rule
    # only sees those datasets' events).
    if len(reads) == 1 and (first.datasets is None or (datasets is not None and set(first.datasets) >= set(datasets))):
        _, sql, typ = reads[0]
        return ResolvedField(sigma_field, first.core or f"{DETAIL}.{first.detail_key}", sql, typ)
    types = {typ.simpleString() for _, _, typ in reads}
    if len(types) > 1 and any(isinstance(typ, ArrayType) for _, _, typ in reads):
        raise RuleCompileError(rule_label(rule), f"field '{sigma_field}' is a list for some datasets and a single "
                               f"value for others ({'; '.join(p.describe() for p in resolved.places)}): "
                               "narrow the rule's logsource")
    typ = reads[0][2] if len(types) == 1 else StringType()
    dataset = sql_column(("event", "dataset"))
    branches = []
    for place, sql, place_type in reads:
        value = sql if len(types) == 1 or isinstance(place_type, StringType) else f"CAST({sql} AS STRING)"
        quoted = ", ".join(sql_string(d) for d in place.datasets or ())
        branches.append(f"WHEN {dataset} IN ({quoted}) THEN {value}" if place.datasets else f"WHEN true THEN {value}")
    return ResolvedField(sigma_field, sigma_field, f"CASE {' '.join(branches)} END", typ)


def compile_detection(rule: SigmaRule, schema: StructType, datasets: tuple[str, ...] | None = None,
                      event_codes: Mapping[str, tuple[str, ...] | None] | None = None) -> str:
    """The rule's detection as a Spark SQL boolean expression over a DataFrame with ``schema``.

    Field names resolve for events of ``datasets`` (every dataset when None, see :func:`resolve_field`), and with
    ``datasets`` the expression only matches their events (``event.dataset IN (...)`` first): the datasets of the
    rule's logsource, :func:`alerts.logsource_map.logsource_datasets`.

    ``event_codes`` (dataset -> event codes, None for every code; :class:`alerts.logsource_map.Scope`'s
    ``codes``) narrows a dataset to those codes (``event.code IN (...)``): a Sysmon ``process_creation`` rule sees
    Sysmon's event 1 only, not its network connections.

    Use it as ``df.where(F.expr(sql))``. The expression is never NULL. Several ``condition`` entries are
    OR-ed (Sigma's meaning of a condition list). Raises :class:`RuleCompileError` for a rule pySigma
    reported errors for, an unknown field, an unsupported modifier, or a value that cannot match its column.
    """
    if not isinstance(rule, SigmaRule):
        raise RuleCompileError(rule_label(rule), f"a {type(rule).__name__} is not a single-event Sigma rule")
    return _Compiler(rule, schema, datasets, dict(event_codes or {})).compile()


def compile_scope(rule: SigmaRule, schema: StructType, datasets: tuple[str, ...],
                  event_codes: Mapping[str, tuple[str, ...] | None] | None = None) -> str:
    """The part of :func:`compile_detection`'s expression that selects the logsource's events: rules with the same
    scope read the same events, so a batch evaluates them together (:mod:`alerts.single_event_pass`)."""
    return _Compiler(rule, schema, datasets, dict(event_codes or {}))._scope()


def _type_name(typ: DataType) -> str:
    return typ.simpleString()


@dataclass
class _Context:
    """What a leaf needs besides its value: the Sigma field (for messages) and its item's modifiers."""

    sigma_field: str | None
    modifiers: tuple[str, ...] = ()

    @property
    def cased(self) -> bool:
        # base64 output is case-sensitive data: matching it case-insensitively would be a different string.
        return "cased" in self.modifiers or any(m in self.modifiers for m in _BASE64)


@dataclass
class _Compiler:
    rule: SigmaRule
    schema: StructType
    datasets: tuple[str, ...] | None = None
    event_codes: dict[str, tuple[str, ...] | None] = field(default_factory=dict)
    _items: dict[int, SigmaDetectionItem] = field(default_factory=dict)
    _next_var: int = 0

    # ---------------------------------------------------------------- driver

    def fail(self, problem: str) -> RuleCompileError:
        return RuleCompileError(rule_label(self.rule), problem)

    def compile(self) -> str:
        if self.rule.errors:
            raise self.fail("; ".join(str(e) for e in self.rule.errors))
        for detection in self.rule.detection.detections.values():
            self._index(detection)
        parts = []
        for condition in self.rule.detection.parsed_condition:
            try:
                tree = condition.parsed
            except SigmaError as e:
                raise self.fail(f"condition '{condition.condition}': {e}") from e
            if tree is None:
                raise self.fail(f"condition '{condition.condition}' selects nothing")
            parts.append(self._node(tree))
        body = parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"
        if self.datasets is not None:
            body = f"({self._scope()} AND {body})"
        return f"coalesce({body}, false)"

    def _scope(self) -> str:
        """``event.dataset IN (...)``, with the datasets limited to event codes OR-ed in one by one."""
        dataset = resolve_field(self.rule, "event.dataset", self.schema).sql
        anycode = [d for d in self.datasets if not self.event_codes.get(d)]
        parts = [f"{dataset} IN ({', '.join(sql_string(d) for d in anycode)})"] if anycode else []
        if any(self.event_codes.get(d) for d in self.datasets):
            code = resolve_field(self.rule, "event.code", self.schema).sql
            parts += [f"({dataset} = {sql_string(d)} AND {code} IN ({', '.join(map(sql_string, codes))}))"
                      for d in self.datasets if (codes := self.event_codes.get(d))]
        return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"

    def _index(self, detection: SigmaDetection) -> None:
        """Remember each value's detection item (for its modifiers) and check the modifiers once per item.

        pySigma's condition tree carries values, not items (a value list becomes an OR of bare values), but
        the value objects are the items' own, so their ids lead back to the item.
        """
        for item in detection.detection_items:
            if isinstance(item, SigmaDetection):
                self._index(item)
                continue
            self._check_modifiers(item)
            for value in item.value:
                self._items[id(value)] = item

    def _check_modifiers(self, item: SigmaDetectionItem) -> None:
        names = [reverse_modifier_mapping[m.__name__] for m in item.modifiers]
        where = f"field '{item.field}'" if item.field else "a keyword"
        for i, name in enumerate(names):
            if name not in SUPPORTED_MODIFIERS:
                why = _UNSUPPORTED_WHY.get(name, "not implemented by the Spark SQL compiler")
                raise self.fail(f"unsupported modifier '{name}' on {where}: {why}")
            if name in _UTF16 and not any(m in _BASE64 for m in names[i + 1:]):
                raise self.fail(f"unsupported modifier '{name}' on {where} without base64/base64offset after "
                                "it: events hold decoded text, in which a UTF-16 byte pattern never occurs")

    def _context(self, value: SigmaType, sigma_field: str | None) -> _Context:
        item = self._items.get(id(value))
        names = tuple(reverse_modifier_mapping[m.__name__] for m in item.modifiers) if item else ()
        return _Context(sigma_field, names)

    def _var(self) -> str:
        """A fresh lambda variable name (unique in the whole expression, so nested lambdas never shadow)."""
        self._next_var += 1
        return f"_x{self._next_var}"

    def _node(self, node: Any) -> str:
        if isinstance(node, ConditionAND | ConditionOR):
            op = " AND " if isinstance(node, ConditionAND) else " OR "
            args = [self._node(arg) for arg in node.args if arg is not None]
            return args[0] if len(args) == 1 else "(" + op.join(args) + ")"
        if isinstance(node, ConditionNOT):
            # Without coalesce, NOT of a NULL comparison (field missing) would stay NULL, i.e. not match.
            return f"NOT coalesce({self._node(node.args[0])}, false)"
        if isinstance(node, ConditionFieldEqualsValueExpression):
            return self._field_value(node.field, node.value)
        if isinstance(node, ConditionValueExpression):
            return self._keyword(node.value)
        raise self.fail(f"unsupported condition element {type(node).__name__}")

    # ---------------------------------------------------------------- field = value

    def _field_value(self, sigma_field: str, value: SigmaType) -> str:
        ctx = self._context(value, sigma_field)
        resolved = resolve_field(self.rule, sigma_field, self.schema, self.datasets)
        if isinstance(value, SigmaExists):
            return self._presence(resolved, value.exists)
        if isinstance(value, SigmaNull):
            return self._presence(resolved, False)
        return self._match(resolved.sql, resolved.data_type, value, ctx)

    @staticmethod
    def _presence(resolved: ResolvedField, exists: bool) -> str:
        """``exists``/``null``: a fixed-schema table has every column, so "present" means non-NULL (and an
        array non-empty: parsers leave an absent list NULL or empty)."""
        col = resolved.sql
        if isinstance(resolved.data_type, ArrayType):
            if exists:
                return f"({col} IS NOT NULL AND size({col}) > 0)"
            return f"({col} IS NULL OR size({col}) = 0)"
        return f"{col} IS NOT NULL" if exists else f"{col} IS NULL"

    def _match(self, expr: str, typ: DataType, value: SigmaType, ctx: _Context) -> str:
        """``expr`` (of Spark type ``typ``) matches ``value``; arrays match when any element does."""
        if isinstance(value, SigmaExpansion):  # windash/base64offset variants: always OR-ed (Sigma spec)
            alternatives = [self._match(expr, typ, v, ctx) for v in value.values]
            return alternatives[0] if len(alternatives) == 1 else "(" + " OR ".join(alternatives) + ")"
        if isinstance(typ, ArrayType):
            var = self._var()
            return f"exists({expr}, {var} -> {self._match(var, typ.elementType, value, ctx)})"
        if isinstance(typ, StructType | MapType):
            raise self.fail(f"field '{ctx.sigma_field}' is a {_type_name(typ)}: name one of its fields")
        if isinstance(value, SigmaTimestampPart):  # before SigmaNumber: it is one
            return self._timestamp_part(expr, typ, value, ctx)
        if isinstance(value, SigmaCompareExpression):
            return self._compare(expr, typ, value, ctx)
        if isinstance(value, SigmaCIDRExpression):
            return self._cidr(expr, typ, value.network, ctx)
        if isinstance(value, SigmaRegularExpression):
            return self._regex(expr, typ, value, ctx)
        if isinstance(value, SigmaFieldReference):
            return self._fieldref(expr, typ, value, ctx)
        if isinstance(value, SigmaString):
            return self._string(expr, typ, value, ctx)
        if isinstance(value, SigmaBool):
            return self._bool(expr, typ, value, ctx)
        if isinstance(value, SigmaNumber):
            return self._number(expr, typ, value, ctx)
        raise self.fail(f"value of type {type(value).__name__} on field '{ctx.sigma_field}' is not supported")

    def _as_string(self, expr: str, typ: DataType, what: str, ctx: _Context) -> str:
        """``expr`` as text: strings as they are, numbers/booleans/timestamps by their Spark text form."""
        if isinstance(typ, StringType):
            return expr
        if isinstance(typ, NumericType | BooleanType | TimestampType | TimestampNTZType | DateType):
            return f"CAST({expr} AS STRING)"
        raise self.fail(f"{what} cannot match field '{ctx.sigma_field}' of type {_type_name(typ)}")

    def _string(self, expr: str, typ: DataType, value: SigmaString, ctx: _Context) -> str:
        text = self._as_string(expr, typ, f"string '{value}'", ctx)
        cased = isinstance(value, SigmaCasedString) or ctx.cased
        if not value.contains_special():
            literal = sql_string(self._plain(value, ctx))
            return f"{text} = {literal}" if cased else f"lower({text}) = lower({literal})"
        pattern = sql_string(self._like_pattern(value, ctx))
        return f"{text} LIKE {pattern}" if cased else f"lower({text}) LIKE lower({pattern})"

    def _plain(self, value: SigmaString, ctx: _Context) -> str:
        parts = []
        for part in value.s:
            if isinstance(part, Placeholder):
                raise self.fail(f"placeholder %{part.name}% on field '{ctx.sigma_field}' is not supported")
            parts.append(part)
        return "".join(parts)

    def _like_pattern(self, value: SigmaString, ctx: _Context) -> str:
        """Sigma wildcards -> LIKE (``*`` -> ``%``, ``?`` -> ``_``); literal ``%``, ``_``, ``\\`` escaped."""
        out = []
        for part in value.s:
            if part is SpecialChars.WILDCARD_MULTI:
                out.append("%")
            elif part is SpecialChars.WILDCARD_SINGLE:
                out.append("_")
            elif isinstance(part, Placeholder):
                raise self.fail(f"placeholder %{part.name}% on field '{ctx.sigma_field}' is not supported")
            else:
                out.append(re.sub(r"([\\%_])", r"\\\1", part))
        return "".join(out)

    def _number(self, expr: str, typ: DataType, value: SigmaNumber, ctx: _Context) -> str:
        if isinstance(typ, NumericType):
            return f"{expr} = {_sql_number(value.number)}"
        if isinstance(typ, StringType):  # Sigma numbers on text fields compare as text ("4624")
            return f"{expr} = {sql_string(str(value.number))}"
        raise self.fail(f"number {value.number} cannot match field '{ctx.sigma_field}' "
                        f"of type {_type_name(typ)}")

    def _bool(self, expr: str, typ: DataType, value: SigmaBool, ctx: _Context) -> str:
        literal = "true" if value.boolean else "false"
        if isinstance(typ, BooleanType):
            return f"{expr} = {literal}"
        if isinstance(typ, StringType):
            return f"lower({expr}) = '{literal}'"
        raise self.fail(f"boolean {literal} cannot match field '{ctx.sigma_field}' of type {_type_name(typ)}")

    def _compare(self, expr: str, typ: DataType, value: SigmaCompareExpression, ctx: _Context) -> str:
        op = _COMPARE_OPS[value.op]
        number = _sql_number(value.number.number)
        if isinstance(typ, NumericType):
            return f"{expr} {op} {number}"
        if isinstance(typ, StringType):  # a numeric string compares by value; any other string never matches
            return f"try_cast({expr} AS DOUBLE) {op} {number}"
        raise self.fail(f"numeric comparison cannot apply to field '{ctx.sigma_field}' "
                        f"of type {_type_name(typ)}")

    def _timestamp_part(self, expr: str, typ: DataType, value: SigmaTimestampPart, ctx: _Context) -> str:
        if not isinstance(typ, TimestampType | TimestampNTZType | DateType):
            raise self.fail(f"modifier '{value.timestamp_part.name.lower()}' needs a timestamp field, "
                            f"'{ctx.sigma_field}' is {_type_name(typ)}")
        return f"{_TIMESTAMP_PARTS[value.timestamp_part]}({expr}) = {int(value.number)}"

    def _regex(self, expr: str, typ: DataType, value: SigmaRegularExpression, ctx: _Context) -> str:
        text = self._as_string(expr, typ, "regular expression", ctx)
        return f"{text} RLIKE {sql_string(self._java_regex(value, ctx))}"

    def _java_regex(self, value: SigmaRegularExpression, ctx: _Context) -> str:
        """The Sigma regex for Spark's RLIKE (Java, unanchored search), with its flags and anchoring."""
        if value.regexp.contains_placeholder():
            raise self.fail(f"placeholder in the regular expression on '{ctx.sigma_field}' is not supported")
        pattern = str(value.regexp)
        if "(?P" in pattern:
            raise self.fail(f"regular expression '{pattern}' uses Python's (?P…) group syntax, which Java "
                            "rejects; write (?<name>…) or a plain group")
        # RLIKE searches like Sigma's re; pySigma expresses re|startswith / re|endswith by appending or
        # prepending ".*", which only anchors under full-match semantics, so anchor explicitly here.
        if "startswith" in ctx.modifiers:
            pattern = f"^(?:{pattern})"
        if "endswith" in ctx.modifiers:
            pattern = f"(?:{pattern})$"
        flags = "".join(sorted(set("".join(_REGEX_FLAGS[f] for f in value.flags))))
        return f"(?{flags}){pattern}" if flags else pattern

    def _fieldref(self, expr: str, typ: DataType, value: SigmaFieldReference, ctx: _Context) -> str:
        other = resolve_field(self.rule, value.field, self.schema, self.datasets)
        if isinstance(other.data_type, ArrayType | StructType | MapType):
            raise self.fail(f"fieldref to '{value.field}' ({_type_name(other.data_type)}) is not supported: "
                            "only single-valued fields can be compared")
        partial = value.starts_with or value.ends_with
        same_kind = (isinstance(typ, NumericType) and isinstance(other.data_type, NumericType)) or (
            type(typ) is type(other.data_type) and not isinstance(typ, StringType))
        if same_kind and not partial:
            return f"{expr} = {other.sql}"
        left = self._as_string(expr, typ, "fieldref", ctx)
        right = self._as_string(other.sql, other.data_type, "fieldref", _Context(value.field))
        if not ctx.cased:
            left, right = f"lower({left})", f"lower({right})"
        if value.starts_with and value.ends_with:
            return f"contains({left}, {right})"
        if value.starts_with:  # pySigma sets starts_with for |startswith: the field starts with the other one
            return f"startswith({left}, {right})"
        if value.ends_with:
            return f"endswith({left}, {right})"
        return f"{left} = {right}"

    def _cidr(self, expr: str, typ: DataType, network: IPv4Network | IPv6Network, ctx: _Context) -> str:
        if not isinstance(typ, StringType):
            raise self.fail(f"cidr needs an IP address (string) field, "
                            f"'{ctx.sigma_field}' is {_type_name(typ)}")
        if isinstance(network, IPv4Network):
            return _ipv4_in(expr, network)
        return self._ipv6_in(expr, network)

    def _ipv6_in(self, expr: str, network: IPv6Network) -> str:
        """IPv6 CIDR by prefix on the address expanded to 32 hex digits (``::`` filled in, groups padded)."""
        addr = f"lower({expr})"
        g = self._var()

        def groups(text: str) -> str:
            return f"filter(split({text}, ':'), {g} -> {g} != '')"

        def padded(text: str) -> str:
            p = self._var()
            return f"concat_ws('', transform({groups(text)}, {p} -> lpad({p}, 4, '0')))"

        head = f"substring_index({addr}, '::', 1)"
        tail = f"CASE WHEN {addr} LIKE '%::%' THEN substring_index({addr}, '::', -1) ELSE '' END"
        hex32 = (f"concat({padded(head)}, repeat('0000', 8 - size({groups(head)}) - size({groups(tail)})), "
                 f"{padded(tail)})")
        # "::" stands for at least one zero group, so it leaves room for at most seven written ones.
        valid = (f"{addr} RLIKE {sql_string(_IPV6_RE)} "
                 f"AND ({addr} NOT LIKE '%::%' OR size({groups(addr)}) <= 7)")
        bits = network.prefixlen
        if bits == 0:
            return f"({valid})"
        nibbles, rest = divmod(bits, 4)
        net_hex = network.network_address.exploded.replace(":", "")
        if rest == 0:
            prefixes = [net_hex[:nibbles]]
        else:  # the partly covered nibble may take 2**(4-rest) values
            first = int(net_hex[nibbles], 16)
            prefixes = [net_hex[:nibbles] + f"{n:x}" for n in range(first, first + (1 << (4 - rest)))]
            nibbles += 1
        allowed = ", ".join(sql_string(p) for p in prefixes)
        return f"({valid} AND substring({hex32}, 1, {nibbles}) IN ({allowed}))"

    # ---------------------------------------------------------------- keywords

    def _keyword(self, value: SigmaType) -> str:
        """A value without a field: a case-insensitive substring of the raw line (``event.original``)."""
        ctx = self._context(value, None)
        column = next((c for c in KEYWORD_COLUMNS if _has_path(self.schema, c)), None)
        if column is None:
            raise self.fail(f"keyword detection needs one of the columns {', '.join(KEYWORD_COLUMNS)}")
        resolved = resolve_field(self.rule, column, self.schema, self.datasets)
        ctx = _Context(column, ctx.modifiers)
        return self._keyword_value(resolved.sql, value, ctx)

    def _keyword_value(self, expr: str, value: SigmaType, ctx: _Context) -> str:
        if isinstance(value, SigmaExpansion):
            alternatives = [self._keyword_value(expr, v, ctx) for v in value.values]
            return alternatives[0] if len(alternatives) == 1 else "(" + " OR ".join(alternatives) + ")"
        if isinstance(value, SigmaNumber) and not isinstance(value, SigmaTimestampPart):
            value = SigmaString(str(value.number))
        if isinstance(value, SigmaString):
            if not value.startswith(SpecialChars.WILDCARD_MULTI):
                value = SpecialChars.WILDCARD_MULTI + value
            if not value.endswith(SpecialChars.WILDCARD_MULTI):
                value = value + SpecialChars.WILDCARD_MULTI
            return self._string(expr, StringType(), value, ctx)
        if isinstance(value, SigmaRegularExpression):
            return self._regex(expr, StringType(), value, ctx)
        raise self.fail(f"keyword value of type {type(value).__name__} is not supported: bind it to a field")


def _has_path(schema: StructType, path: str) -> bool:
    typ: DataType = schema
    for part in path.split("."):
        if not isinstance(typ, StructType) or part not in typ.fieldNames():
            return False
        typ = typ[part].dataType
    return True


def _sql_number(number: int | float) -> str:
    """A numeric literal: ints as written (Spark picks int/bigint/decimal), floats as doubles."""
    if isinstance(number, bool):  # not a Sigma number, but never render True as 1
        raise TypeError("boolean is not a number")
    return str(number) if isinstance(number, int) else f"{number!r}D"


def _ipv4_in(expr: str, network: IPv4Network) -> str:
    """IPv4 CIDR: the dotted quad as a number (a·2²⁴ + b·2¹⁶ + c·2⁸ + d) within the network's range.

    The regex admits only canonical addresses, so the arithmetic never sees garbage, and ``try_`` functions
    keep ANSI mode from raising on a value that slipped through (they give NULL, i.e. no match).
    """
    valid = f"{expr} RLIKE {sql_string(_IPV4_RE)}"
    if network.prefixlen == 0:
        return valid
    if network.prefixlen == 32:  # canonical text, so equality is exact
        return f"({valid} AND {expr} = {sql_string(str(network.network_address))})"
    octets = [f"try_cast(try_element_at(split({expr}, '[.]'), {i}) AS BIGINT)" for i in range(1, 5)]
    number = f"{octets[0]} * 16777216 + {octets[1]} * 65536 + {octets[2]} * 256 + {octets[3]}"
    start, end = int(network.network_address), int(network.broadcast_address)
    return f"({valid} AND {number} BETWEEN {start} AND {end})"
