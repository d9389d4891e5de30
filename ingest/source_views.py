"""Typed per-dataset views over ``events`` and the fields reference, both generated from the source registry.

A hunter knows a source by its own field names: ``zeek_dns`` has ``query``, ``qtype_name``, ``rtt``; ``system_auth``
has ``user.name`` and ``system.auth.ssh.method``. Each dataset of ``ingest/sources/*/fields.yml`` gets a view named
after it (``zeek.dns`` -> ``zeek_dns``) with the common columns (:data:`COMMON`) and every field of its list under its
own name, typed as the list says, wherever it lives (:mod:`ingest.field_resolver`). The same definitions serve
Spark (:func:`spark_view_sql`) and the dashboard's DuckDB (:func:`duckdb_view_sql`).

``python -m ingest.source_views`` prints the fields reference (docs/fields.md).
"""

from __future__ import annotations

import re

from ingest.events_contract import CORE_FIELDS, DETAIL, ENRICHMENT_FIELDS
from ingest.field_resolver import Place, Resolved, duckdb_sql, resolve
from ingest.sources import dataset_fields, sources

COMMON: tuple[tuple[str, str], ...] = (
    ("@timestamp", "@timestamp"), ("event_id", "event.id"), ("dataset", "event.dataset"),
    ("host_name", "host.name"), ("original", "event.original"),
)


def view_name(dataset: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", dataset)


def _columns(dataset: str) -> list[tuple[str, Resolved]]:
    cols = [(alias, resolve(path)) for alias, path in COMMON]
    seen = {alias for alias, _ in cols}
    for d in dataset_fields(dataset):
        for f in d.fields:
            if f.name in seen:
                continue
            seen.add(f.name)
            place = Place(f.type, core=f.core) if f.core else Place(f.type, detail_key=f.name)
            cols.append((f.name, Resolved(f.name, (place,))))
    return cols


def duckdb_view_sql(dataset: str, table: str = "events") -> str:
    select = ", ".join(f'{duckdb_sql(r)} AS "{alias}"' for alias, r in _columns(dataset))
    quoted = dataset.replace("'", "''")
    return f'CREATE OR REPLACE VIEW "{view_name(dataset)}" AS SELECT {select} FROM {table} ' \
           f"WHERE event.dataset = '{quoted}'"


def spark_view_sql(dataset: str, table: str = "events") -> str:
    """The view in Spark SQL (backquoted names; detail values cast with ``try_cast``)."""

    def expr(r: Resolved) -> str:
        place = r.places[0]
        if place.core is not None:
            return ".".join(f"`{p}`" for p in ([place.core] if place.core.startswith("@") else place.core.split(".")))
        text = f"{DETAIL}['{place.detail_key}']"
        if place.type == "string":
            return text
        if place.type.startswith("array<"):
            return f"from_json({text}, '{place.type}')"
        return f"try_cast({text} AS {place.type})"

    select = ", ".join(f"{expr(r)} AS `{alias}`" for alias, r in _columns(dataset))
    return f"CREATE OR REPLACE TEMP VIEW `{view_name(dataset)}` AS SELECT {select} FROM {table} " \
           f"WHERE event.dataset = '{dataset}'"


def fields_reference() -> str:
    """docs/fields.md: the core columns, then every source's datasets and fields."""
    lines = ["# Fields reference", "",
             "Generated from `ingest/events_contract.py` and `ingest/sources/*/fields.yml` by "
             "`python -m ingest.source_views > docs/fields.md` (a test checks it is current).", "",
             "## The core columns of `events`", "", "| column | type | description |", "| --- | --- | --- |"]
    lines += [f"| `{f.path}` | {f.type} | {f.description} |" for f in CORE_FIELDS]
    lines += ["", "Added by enrichment:", "", "| column | type | description |", "| --- | --- | --- |"]
    lines += [f"| `{f.path}` | {f.type} | {f.description} |" for f in ENRICHMENT_FIELDS]
    for s in sources():
        lines += ["", f"## Source `{s.name}`: {s.title}", ""]
        for d in s.datasets:
            more = " Other keys of the data are kept in `detail` under their own names." if d.open else ""
            lines += [f"### `{d.name}` (view `{view_name(d.name)}`)", "", (d.description + more).strip(), "",
                      "| field | type | where | description |", "| --- | --- | --- | --- |"]
            for f in d.fields:
                aliases = f" (also: {', '.join(f'`{a}`' for a in f.aliases)})" if f.aliases else ""
                lines.append(f"| `{f.name}`{aliases} | {f.type} | `{f.location}` | {f.description} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(fields_reference(), end="")
