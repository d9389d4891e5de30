"""One field resolver: a field name — ECS's, a source's own, or Sigma's taxonomy — within a set of datasets, to
where the value lives in ``events`` (a core column, or a key of ``detail``), with its type.

Used by everything that names fields: the Sigma and correlation compilers, Python rules, the dashboard's hunt and
the typed per-source views. So a rule grouped by ``User``, a hunt on ``conn_state`` and a view column ``history``
all find the same value, and a name no source of the datasets defines is refused by name instead of silently
matching nothing.

Resolution order for ``name`` over ``datasets`` (all datasets when None):

1. a core column of the events contract (``source.ip``, ``event.code``) or an enrichment column;
then, per dataset (each may place a name differently, so a name can resolve to several places, one per group of
datasets, read with a ``CASE`` on ``event.dataset``):

2. a field of the dataset's field lists (``ingest/sources/*/fields.yml``) by its name or one of its aliases (Zeek's
   ``query`` is the core ``dns.question.name``; sshd's ``system.auth.ssh.method`` is a detail key);
3. Sigma's generic taxonomy (:data:`SIGMA_TAXONOMY`: ``User`` -> ``user.name``) where the dataset does not name it;
4. an open dataset (a JSON payload's or a Windows event's own data) takes any other name as a detail key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ingest.events_contract import CORE_TYPES, DETAIL, ENRICHMENT_FIELDS
from ingest.sources import dataset_fields
from ingest.sources import datasets as registry_datasets

ALL_COLUMN_TYPES: Mapping[str, str] = {**CORE_TYPES, **{f.path: f.type for f in ENRICHMENT_FIELDS}}

# Sigma's generic field names (its taxonomy for process_creation, network_connection, firewall, proxy, dns) -> ECS.
SIGMA_TAXONOMY: Mapping[str, str] = MappingProxyType({
    "User": "user.name",
    "Image": "process.executable",
    "CommandLine": "process.command_line",
    "ProcessId": "process.pid",
    "ParentImage": "process.parent.executable",
    "ParentCommandLine": "process.parent.command_line",
    "ParentProcessId": "process.parent.pid",
    "Hostname": "host.name",
    "ComputerName": "host.name",
    "SourceIp": "source.ip",
    "src_ip": "source.ip",
    "SourcePort": "source.port",
    "src_port": "source.port",
    "SourceHostname": "source.domain",
    "DestinationIp": "destination.ip",
    "dst_ip": "destination.ip",
    "DestinationPort": "destination.port",
    "dst_port": "destination.port",
    "DestinationHostname": "destination.domain",
    "Protocol": "network.transport",
    "QueryName": "dns.question.name",
    "record_type": "dns.question.type",
    "c-uri": "url.original",
    "cs-host": "url.domain",
    "c-useragent": "user_agent.original",
    "cs-method": "http.request.method",
    "sc-status": "http.response.status_code",
    "TargetFilename": "file.path",
})


@dataclass(frozen=True)
class Place:
    """Where a field's value lives for some datasets: a core column, or ``detail[key]`` read as ``type``."""

    type: str
    core: str | None = None
    detail_key: str | None = None
    datasets: tuple[str, ...] | None = None  # None: every dataset (a core column)

    def describe(self) -> str:
        where = self.core if self.core is not None else f"{DETAIL}['{self.detail_key}']"
        return where if self.datasets is None else f"{where} for {', '.join(self.datasets)}"


@dataclass(frozen=True)
class Resolved:
    name: str
    places: tuple[Place, ...]

    @property
    def type(self) -> str:
        """The type of the first place (places of one name agree on it in practice; a rule compares as text)."""
        return self.places[0].type

    @property
    def core(self) -> str | None:
        """The core column when the name is one column everywhere, else None."""
        return self.places[0].core if len(self.places) == 1 and self.places[0].datasets is None else None


class UnknownField(KeyError):
    def __init__(self, name: str, datasets: tuple[str, ...] | None):
        scope = f"datasets {', '.join(datasets)}" if datasets else "any source"
        super().__init__(f"unknown field {name!r}: not a core column of events and not a field of {scope} "
                         "(see docs/fields.md)")
        self.name = name


def resolve(name: str, datasets: Iterable[str] | None = None) -> Resolved:
    """Where ``name`` lives for events of ``datasets`` (see the module doc); :class:`UnknownField` when nowhere.

    Decided per dataset, so a source's own meaning wins where it has one: Sysmon's ``User`` is its own field
    (``DOMAIN\\name``), while for datasets that do not name ``User`` Sigma's taxonomy makes it ``user.name``."""
    scope = None if datasets is None else tuple(sorted(set(datasets)))
    if name in ALL_COLUMN_TYPES and name != DETAIL:
        return Resolved(name, (Place(ALL_COLUMN_TYPES[name], core=name),))
    registry = registry_datasets()
    taxonomy = SIGMA_TAXONOMY.get(name)
    by_place: dict[tuple[str | None, str | None, str], list[str]] = {}
    open_datasets: list[str] = []
    for dataset in scope if scope is not None else tuple(sorted(registry)):
        place = _declared(name, dataset)
        if place is None and taxonomy is not None:
            place = (taxonomy, None, ALL_COLUMN_TYPES[taxonomy]) if taxonomy in ALL_COLUMN_TYPES else \
                _declared(taxonomy, dataset)
        if place is not None:
            by_place.setdefault(place, []).append(dataset)
        elif any(d.open for d in dataset_fields(dataset)):
            open_datasets.append(dataset)
    # An open dataset's own data (a JSON payload, a Windows event's EventData) may hold any name, as text. Only
    # when no dataset in scope declares the name: a name some source defines means that source's field, and an
    # open dataset's same-named key is no evidence of the same thing.
    if not by_place and open_datasets:
        by_place[(None, name, "string")] = open_datasets
    if not by_place:
        raise UnknownField(name, scope)
    if len(by_place) == 1 and next(iter(by_place))[0] is not None:
        core, _key, typ = next(iter(by_place))
        return Resolved(name, (Place(typ, core=core),))
    return Resolved(name, tuple(Place(typ, core=core, detail_key=key, datasets=tuple(ds))
                                for (core, key, typ), ds in by_place.items()))


def _declared(name: str, dataset: str) -> tuple[str | None, str | None, str] | None:
    """(core column, detail key, type) of the field ``name`` (or alias) in ``dataset``'s field lists, or None."""
    for d in dataset_fields(dataset):
        for f in d.fields:
            if f.name == name or name in f.aliases:
                return f.core, None if f.core else f.name, f.type
    return None


# -- expressions ----------------------------------------------------------------------------------------------------
def spark_column(resolved: Resolved):
    """A Spark Column with the value (typed: detail text is cast with ``try_cast``; arrays read with ``from_json``)."""
    # Imported here: the dashboard resolves names too, and never starts (or imports) Spark.
    from pyspark.sql import functions as F

    def read(place: Place):
        if place.core is not None:
            return F.col(f"`{place.core}`") if place.core.startswith("@") else F.col(place.core)
        text = F.col(DETAIL).getItem(place.detail_key)
        if place.type == "string":
            return text
        if place.type.startswith("array<"):
            return F.from_json(text, place.type)
        return text.try_cast(place.type)

    if len(resolved.places) == 1 and resolved.places[0].datasets is None:
        return read(resolved.places[0])
    dataset = F.col("event.dataset")
    expr = None
    for place in resolved.places:
        value = read(place)
        if place.type != resolved.type:  # one CASE has one type: the first place's
            value = (F.to_json(value) if place.type.startswith("array<") else value).try_cast(resolved.type) \
                if not resolved.type.startswith("array<") else F.from_json(value.cast("string"), resolved.type)
        cond = dataset.isin(*place.datasets) if place.datasets else F.lit(True)
        expr = F.when(cond, value) if expr is None else expr.when(cond, value)
    return expr


def column(name: str, datasets: Iterable[str] | None = None):
    """``name``'s value over ``datasets`` as a Spark Column (:func:`resolve` then :func:`spark_column`)."""
    return spark_column(resolve(name, datasets))


_DUCKDB_TYPES = {"string": "VARCHAR", "int": "INTEGER", "bigint": "BIGINT", "double": "DOUBLE",
                 "boolean": "BOOLEAN", "timestamp": "TIMESTAMPTZ", "array<string>": "VARCHAR[]"}


def duckdb_sql(resolved: Resolved) -> str:
    """The same value as a DuckDB SQL expression over ``events`` (the dashboard's hunt and views)."""

    def read(place: Place) -> str:
        if place.core is not None:
            return ".".join(f'"{p}"' for p in ([place.core] if place.core.startswith("@") else place.core.split(".")))
        key = place.detail_key.replace("'", "''")
        text = f"{DETAIL}['{key}']"
        if place.type == "string":
            return text
        if place.type.startswith("array<"):
            return f"CAST(json({text}) AS VARCHAR[])"
        return f"TRY_CAST({text} AS {_DUCKDB_TYPES.get(place.type, 'VARCHAR')})"

    if len(resolved.places) == 1 and resolved.places[0].datasets is None:
        return read(resolved.places[0])
    branches = []
    for place in resolved.places:
        quoted = ", ".join("'" + d.replace("'", "''") + "'" for d in place.datasets or ())
        branches.append(f"WHEN event.dataset IN ({quoted}) THEN {read(place)}")
    return f"CASE {' '.join(branches)} END"
