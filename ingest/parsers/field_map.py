"""``Fields``: a parser's output, ``{ECS dotted path: Column}``, and how several are combined into one."""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

Fields = dict[str, Column]


def dispatch_cases(cases: list[tuple[Column, Fields]], prefix: str) -> tuple[list[Column], Fields]:
    """One ``Fields`` from ``[(condition, fields), ...]``, with the same values as ``CASE WHEN c1 THEN e1 WHEN c2
    THEN e2 … END`` per path (the first case whose condition holds *and* which defines the path wins), evaluated
    once per row instead of once per field.

    Returns the columns to materialize in a step before the fields are read (``<prefix><i>``: a struct of case
    ``i``'s fields where its condition holds, else null), and the ``Fields`` that read them. A specific case
    (``zeek conn``) listed before a general one (``any Zeek row``) overrides only the paths it defines. A row
    tests each condition once and evaluates only the expressions of the cases that hold for it; a per-field
    ``CASE`` re-tests the conditions for every field, and in interpreted evaluation those tests were most of the
    parse's per-row cost (docs/performance.md, "Parse").
    """
    structs: list[Column] = []
    readers: dict[str, list[tuple[Column, Column]]] = {}
    for i, (condition, fields) in enumerate(cases):
        name = f"{prefix}{i}"
        keys = {path: f"f{j}" for j, path in enumerate(fields)}
        structs.append(F.when(condition, F.struct(*[fields[p].alias(k) for p, k in keys.items()])).alias(name))
        case = F.col(name)
        for path, key in keys.items():
            readers.setdefault(path, []).append((case.isNotNull(), case.getField(key)))
    merged: dict[str, Column] = {}
    for path, reads in readers.items():
        # A field of an absent case reads as null, so the last case needs no test (and a path of one case none).
        value = reads[-1][1]
        for present, earlier in reversed(reads[:-1]):
            value = F.when(present, earlier).otherwise(value)
        merged[path] = value
    return structs, merged


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
