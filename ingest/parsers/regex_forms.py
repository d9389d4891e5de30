"""Matching a text column against regular expressions with named groups, all in the JVM.

A :class:`Pattern` is a Java regular expression whose captures are *named* groups ``(?<user>…)`` (plain
``(…)`` groups are not allowed: use ``(?:…)``), anchored to the whole text. A form is tried with
``rlike`` (only on text that starts with the form's literal prefix, if its pattern has one: a byte comparison,
no regex and no conversion to a Java string), and the groups of the matching form are extracted with
``regexp_replace`` to the groups joined by a separator (Java replacement syntax ``${name}``) and ``split``; if a
capture contains the separator, one ``regexp_extract`` per group instead, so the answer is the same either way.
(A single regex pass per form, its ``regexp_replace`` bound to a lambda variable before the test and the split, was
measured slower: Spark interprets lambdas instead of generating code; docs/performance.md, "Parse".)

A :class:`MessageForm` is a pattern plus the ECS fields it yields. :func:`match_forms` tries forms in order
(first match wins) and returns ``struct<form: int, g: array<string>>`` (the 1-based form number and the
groups, empty captures as null). :func:`form_fields` maps the matched groups onto ECS paths *by table*:
a form's field is a group reference (:class:`Ref`), a presence test (:class:`Flag`), a Python literal, or,
rarely, a computed Column. References and literals of all forms compile to one constant array per path,
indexed by the form number, so the generated code stays small however many forms there are (one ``CASE``
branch per form and path would overflow the JVM's 64 KB method limit of whole-stage code generation).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column
from pyspark.sql import functions as F

from ingest.parsers.field_map import Fields

SEPARATOR = "\u001f"  # ASCII unit separator: practically never inside a log line (and handled if it is)
_NAMED_GROUP = re.compile(r"\(\?<([a-zA-Z][a-zA-Z0-9]*)>")
_UNNAMED_GROUP = re.compile(r"(?<!\\)\((?!\?)")


@dataclass(frozen=True)
class Pattern:
    """A Java regex with named groups, matched against the whole text (``(?s)^(?:…)\\z``)."""

    name: str
    regex: str
    groups: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        groups = tuple(_NAMED_GROUP.findall(self.regex))
        unnamed = [m.start() for m in _UNNAMED_GROUP.finditer(self.regex)
                   if not _in_char_class(self.regex, m.start())]
        if unnamed:
            raise ValueError(f"pattern {self.name}: unnamed capturing group at {unnamed[0]} (use (?:...))")
        if len(set(groups)) != len(groups):
            raise ValueError(f"pattern {self.name}: a group name is used twice")
        object.__setattr__(self, "groups", groups)

    @property
    def anchored(self) -> str:
        return f"(?s)^(?:{self.regex})\\z"

    def matches(self, text: Column) -> Column:
        return text.rlike(self.anchored)

    def extract(self, text: Column) -> Column:
        """``array<string>`` of the groups in declaration order (null for a group that captured nothing), for a
        ``text`` this pattern matches; one ``regexp_extract`` per group, so :func:`match_forms` uses it only on
        the rare text that contains the separator."""
        if not self.groups:
            return F.array().cast("array<string>")
        return _nulls(F.array(*[F.regexp_extract(text, self.anchored, i + 1) for i in range(len(self.groups))]))

    def split_groups(self, text: Column) -> Column:
        """The groups of a ``text`` this pattern matches: ``regexp_replace`` to the groups joined by
        :data:`SEPARATOR`, then ``split``; one ``regexp_extract`` per group if a capture contained the separator."""
        if not self.groups:
            return F.array().cast("array<string>")
        parts = F.split(F.regexp_replace(text, self.anchored, SEPARATOR.join("${" + g + "}" for g in self.groups)),
                        SEPARATOR)
        return F.when(F.size(parts) == len(self.groups), _nulls(parts)).otherwise(self.extract(text))

    @property
    def literal_prefix(self) -> str:
        """Text every match starts with ("" when the pattern does not start with a literal): a cheap gate."""
        return literal_prefix(self.regex)


def _nulls(groups: Column) -> Column:
    """Empty captures as null."""
    return F.transform(groups, lambda v: F.nullif(v, F.lit("")))


_REGEX_META = frozenset("\\()[]{}?*+|.^$")


def literal_prefix(regex: str) -> str:
    """The literal text every match of ``regex`` starts with (``"Failed (?<m>\\S+)"`` -> ``"Failed "``); "" when
    the pattern starts with a group, a class, an escape, a flag, or has an alternative at its top level."""
    if _has_top_level_alternative(regex):
        return ""
    out: list[str] = []
    for ch in regex:
        if ch in _REGEX_META:
            if ch in "?*{" and out:
                out.pop()  # the character before an optional quantifier may be absent
            break
        out.append(ch)
    return "".join(out)


def _has_top_level_alternative(regex: str) -> bool:
    depth, i, in_class = 0, 0, False
    while i < len(regex):
        ch = regex[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            return True
        i += 1
    return False


def _in_char_class(regex: str, pos: int) -> bool:
    """True when ``regex[pos]`` is inside ``[...]`` (a literal parenthesis there is not a group)."""
    inside, i = False, 0
    while i < pos:
        ch = regex[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[" and not inside:
            inside = True
        elif ch == "]" and inside:
            inside = False
        i += 1
    return inside


@dataclass(frozen=True)
class Ref:
    """A field whose value is the text a named group captured (null when it captured nothing)."""

    group: str


@dataclass(frozen=True)
class Flag:
    """A boolean field: did the named group capture anything?"""

    group: str


FormValue = Ref | Flag | Column | str | int | bool | list
FormFields = dict[str, FormValue]


class Groups:
    """What a form's field function gets: ``g("user")`` refers to a group, ``g.flag("x")`` tests one, and
    ``g.col("x")`` is the group's value as a Column (for the rare computed field)."""

    def __init__(self, matched: Column | None, pattern: Pattern):
        self._matched = matched
        self._index = {name: i + 1 for i, name in enumerate(pattern.groups)}

    def __call__(self, name: str) -> Ref:
        self._check(name)
        return Ref(name)

    def flag(self, name: str) -> Flag:
        self._check(name)
        return Flag(name)

    def get(self, name: str) -> Ref | None:
        """``Ref`` to the group, or None (the field is left out) when the pattern has no such group."""
        return Ref(name) if name in self._index else None

    def __contains__(self, name: str) -> bool:
        return name in self._index

    def col(self, name: str) -> Column:
        self._check(name)
        if self._matched is None:
            raise ValueError("computed fields need a matched column")
        return F.try_element_at(self._matched.getField("g"), F.lit(self._index[name]))

    def index(self, name: str) -> int:
        return self._index[name]

    def _check(self, name: str) -> None:
        if name not in self._index:
            raise KeyError(f"no group {name!r} (groups: {', '.join(self._index)})")


@dataclass(frozen=True)
class MessageForm:
    """One shape of message (``Accepted publickey for …``) and the fields it yields."""

    pattern: Pattern
    fields: Callable[[Groups], FormFields]

    @property
    def name(self) -> str:
        return self.pattern.name


def match_forms(text: Column, forms: Sequence[MessageForm], first_id: int = 1) -> Column:
    """``struct<form: int, g: array<string>>`` for the first form matching ``text`` (forms are numbered from
    ``first_id`` in order); null if none matches. A form whose pattern starts with literal text is tried only on
    text starting with it."""
    result = None
    for number, form in enumerate(forms, start=first_id):
        pattern = form.pattern
        matched = F.struct(F.lit(number).alias("form"), pattern.split_groups(text).alias("g"))
        cond = pattern.matches(text)
        if pattern.literal_prefix:
            cond = text.startswith(pattern.literal_prefix) & cond
        result = F.when(cond, matched) if result is None else result.when(cond, matched)
    return result


def form_fields(matched: Column, forms: Sequence[MessageForm]) -> Fields:
    """The fields of whichever form matched (``matched`` is a :func:`match_forms` column numbered from 1)."""
    form_id = matched.getField("form")
    groups = matched.getField("g")
    refs: dict[str, dict[int, int]] = {}
    flags: dict[str, dict[int, int]] = {}
    literals: dict[str, dict[int, object]] = {}
    computed: dict[str, dict[int, Column]] = {}
    for number, form in enumerate(forms, start=1):
        g = Groups(matched, form.pattern)
        for path, value in form.fields(g).items():
            if value is None:
                continue
            if isinstance(value, Ref):
                refs.setdefault(path, {})[number] = g.index(value.group)
            elif isinstance(value, Flag):
                flags.setdefault(path, {})[number] = g.index(value.group)
            elif isinstance(value, Column):
                computed.setdefault(path, {})[number] = value
            else:
                literals.setdefault(path, {})[number] = value
    out: Fields = {}
    for path in {**refs, **flags, **literals, **computed}:
        parts: list[Column] = []
        if path in refs:
            parts.append(F.try_element_at(groups, F.try_element_at(_table(refs[path], len(forms)), form_id)))
        if path in flags:
            index = F.try_element_at(_table(flags[path], len(forms)), form_id)
            parts.append(F.when(index.isNotNull(), F.try_element_at(groups, index).isNotNull()))
        if path in literals:
            parts.append(F.try_element_at(_table(literals[path], len(forms)), form_id))
        if path in computed:
            case = None
            for number, expr in computed[path].items():
                cond = form_id == F.lit(number)
                case = F.when(cond, expr) if case is None else case.when(cond, expr)
            parts.append(case)
        out[path] = parts[0] if len(parts) == 1 else F.coalesce(*parts)
    return out


def _table(values: dict[int, object], size: int) -> Column:
    """A constant array of ``size`` entries, ``values[i]`` at 1-based position ``i``, null elsewhere."""
    sample = next(iter(values.values()))
    null = F.lit(None).cast(_spark_type(sample))
    return F.array(*[_literal(values[i]) if i in values else null for i in range(1, size + 1)])


def _literal(value: object) -> Column:
    if isinstance(value, list | tuple):
        return F.array(*[F.lit(v) for v in value])
    return F.lit(value)


def _spark_type(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int"
    if isinstance(value, list | tuple):
        return "array<string>"
    return "string"
