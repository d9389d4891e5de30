"""``Fields``: a parser's output, ``{ECS dotted path: Column}``, and how several are combined into one."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

Fields = dict[str, Column]


def merge_cases(cases: list[tuple[Column, Fields]]) -> Fields:
    """One ``Fields`` from ``[(condition, fields), ...]``: per path, the first case whose condition holds *and*
    which defines the path wins (``CASE WHEN c1 THEN e1 WHEN c2 THEN e2 … END``).

    A specific case (``sshd accepted``) listed before a general one (``any syslog line``) overrides only the
    paths it defines. Branches are evaluated lazily, so a parser's regular expressions only run on the rows
    its condition selects.
    """
    merged: dict[str, Column] = {}
    for condition, fields in cases:
        for path, expr in fields.items():
            merged[path] = F.when(condition, expr) if path not in merged else merged[path].when(condition, expr)
    return merged


def literals(**paths: object) -> dict[str, object]:
    """Literal field values by path; keyword ``a__b`` means path ``a.b`` (lists become arrays)."""
    return {key.replace("__", "."): value for key, value in paths.items()}


def constant(**paths: object) -> Fields:
    """Like :func:`literals`, as Columns."""
    out: Fields = {}
    for path, value in literals(**paths).items():
        out[path] = F.array(*[F.lit(v) for v in value]) if isinstance(value, list | tuple) else F.lit(value)
    return out


def non_empty(values: Column) -> Column:
    """``values`` without nulls and duplicates, or null when nothing is left (ECS: absent, not ``[]``)."""
    kept = F.array_distinct(F.filter(values, lambda v: v.isNotNull() & (v != F.lit(""))))
    return F.when(F.size(kept) > 0, kept)


def coalesce_fields(*layers: Fields) -> Fields:
    """One ``Fields`` from layers, per path the first non-null value (earlier layers win).

    For layers that are null on each other's rows (Zeek fields on syslog rows and vice versa) this is the
    same as a ``CASE`` on the row's format, with less generated code.
    """
    merged: dict[str, list[Column]] = {}
    for layer in layers:
        for path, expr in layer.items():
            merged.setdefault(path, []).append(expr)
    return {path: exprs[0] if len(exprs) == 1 else F.coalesce(*exprs) for path, exprs in merged.items()}
