"""The source registry: one folder per log source, each with its parser, its field list and golden fixtures.

A source is a sub-package ``ingest/sources/<name>/`` holding

* ``__init__.py`` — the parser, exposed as ``SOURCE = Source(...)`` (below);
* ``fields.yml`` (or ``fields/*.yml``, one per dataset) — the source's field list: per field its name, type, a
  one-line description and where it lands (a core column of ``ingest.events_contract`` or the ``detail`` map);
* ``fixtures/<case>.log`` + ``fixtures/<case>-expected.json`` — raw lines and the events they must parse to,
  checked for every source by ``tests/test_sources.py``;
* ``README.md`` — what the source is, with an example line and its event.

Adding a source is adding a folder: the registry discovers it (:func:`sources`), ``nightjar parse`` and the stream
parse with it (:mod:`ingest.sources.record_parser`), and the field resolver, the typed views and the fields
reference read its field list. The how-to is docs/architecture.md, "Adding a log source".

Two transports exist. A **json** source gets each record that is one JSON object and says whether it is its own
(``detect``); a **syslog** source parses the message of a syslog line after the header (``ingest/sources/syslog``
parses the header), for the programs it names, in one of three layers merged per field, later layers winning:
``program`` (the writing program's message forms: sshd, sudo, dhcpd, PAM of any program), ``payload`` (a JSON
payload: ``@cee:``), ``event`` (a whole event carried in the message: a Windows event forwarded by an agent).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ingest.events_contract import CORE_TYPES, DETAIL, arrow_type

SOURCES_DIR = Path(__file__).resolve().parent
FIXTURES = "fixtures"
Transport = Literal["json", "syslog"]
Layer = Literal["program", "payload", "event"]
LAYERS: tuple[Layer, ...] = ("program", "payload", "event")
# A parsed event: flat {dotted core path: value} plus DETAIL -> {own field name: text}. See ingest.events_contract.
Event = dict[str, Any]


class ParseFailure(Exception):
    """A record that cannot be an event: it goes to ``quarantine`` with ``parser`` and ``reason``."""

    def __init__(self, parser: str, reason: str):
        super().__init__(f"{parser}: {reason}")
        self.parser = parser
        self.reason = reason


@dataclass(frozen=True)
class Field:
    """One field of a source's dataset: its own name, its type, and where it lands."""

    name: str  # the source's own name for it: the detail key, or the core path when core is the same name
    type: str  # Spark DDL of the events contract's types (string, int, bigint, double, boolean, timestamp, ...)
    description: str
    core: str | None = None  # the core column it lands in; None: detail[name]
    aliases: tuple[str, ...] = ()  # other names that resolve to it (Elastic's, ECS's, Sigma's)

    @property
    def location(self) -> str:
        return self.core if self.core is not None else f"{DETAIL}[{self.name}]"


@dataclass(frozen=True)
class Dataset:
    name: str  # event.dataset
    description: str
    fields: tuple[Field, ...]
    open: bool = False  # detail may hold keys the list does not name (a JSON payload's keys, a Windows event's data)


@dataclass(frozen=True)
class Source:
    """A log source's parser. ``parse`` returns an :data:`Event` (or None: "not mine", for syslog layers) and raises
    :class:`ParseFailure` for a record of its own that cannot be an event.

    json: ``parse(obj: dict, line: str) -> Event``; ``detect(obj) -> bool`` says whether a JSON record is its own;
    the source with ``json_fallback`` gets the JSON records no source detects, and the malformed ones.
    syslog: ``parse(envelope: ingest.sources.syslog.Envelope) -> Event | None`` for lines of ``programs`` (None: any
    program), in ``layer``; sources of one layer are tried by ``order`` and the first event wins.
    """

    title: str
    transport: Transport
    parse: Callable[..., Event | None]
    detect: Callable[[Any], bool] | None = None
    json_fallback: bool = False
    programs: tuple[str, ...] | None = None
    layer: Layer = "program"
    order: int = 100
    program_dataset: tuple[str, str] | None = None  # (event.module, event.dataset) of any line of its programs
    # filled in by the registry
    name: str = ""
    datasets: tuple[Dataset, ...] = field(default=())

    @property
    def folder(self) -> Path:
        return SOURCES_DIR / self.name


def _load_fields(source: str, path: Path) -> list[Dataset]:
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the field list: {exc}") from None
    if not isinstance(doc, dict) or "fields" not in doc:
        raise ValueError(f"{path}: a field list needs 'datasets' (or 'dataset') and 'fields'")
    names = doc.get("datasets") or [doc.get("dataset")]
    if not all(isinstance(n, str) and n for n in names):
        raise ValueError(f"{path}: 'datasets' must name the event.dataset values the fields belong to")
    fields: list[Field] = []
    seen: set[str] = set()
    for i, row in enumerate(doc["fields"] or []):
        where = f"{path}: field {i + 1}"
        if not isinstance(row, dict) or not row.get("name") or not row.get("type") or not row.get("description"):
            raise ValueError(f"{where}: needs name, type and description")
        name, typ = str(row["name"]), str(row["type"]).replace(" ", "")
        core = row.get("core")
        core_path = name if core is True else (str(core) if core else None)
        if core_path is not None and core_path not in CORE_TYPES:
            raise ValueError(f"{where} ({name}): core column {core_path!r} is not in ingest/events_contract.py")
        if core_path is None:
            arrow_type(typ)  # a detail field's type must be one the contract knows
        if name in seen:
            raise ValueError(f"{where}: {name} listed twice")
        seen.add(name)
        aliases = row.get("aliases") or []
        fields.append(Field(name, typ, str(row["description"]), core_path, tuple(str(a) for a in aliases)))
    return [Dataset(n, str(doc.get("description", "")), tuple(fields), bool(doc.get("open", False))) for n in names]


def _datasets(name: str, folder: Path) -> tuple[Dataset, ...]:
    files = [folder / "fields.yml"] if (folder / "fields.yml").exists() else sorted((folder / "fields").glob("*.yml"))
    if not files:
        raise ValueError(f"source {name}: no fields.yml (nor fields/*.yml) in {folder}")
    return tuple(d for f in files for d in _load_fields(name, f))


@functools.cache
def sources() -> tuple[Source, ...]:
    """Every source folder under ``ingest/sources``, loaded once per process."""
    found = []
    for info in sorted(pkgutil.iter_modules([str(SOURCES_DIR)]), key=lambda m: m.name):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        source = getattr(module, "SOURCE", None)
        if not isinstance(source, Source):
            raise ValueError(f"ingest/sources/{info.name}: a source package must define SOURCE = Source(...)")
        found.append(_named(source, info.name, _datasets(info.name, SOURCES_DIR / info.name)))
    return tuple(found)


def _named(source: Source, name: str, datasets: tuple[Dataset, ...]) -> Source:
    return Source(**{**source.__dict__, "name": name, "datasets": datasets})


def source(name: str) -> Source:
    for s in sources():
        if s.name == name:
            return s
    raise KeyError(f"no source {name!r} (known: {', '.join(s.name for s in sources())})")


def datasets() -> Mapping[str, list[tuple[Source, Dataset]]]:
    """event.dataset -> the sources (and their field lists) that produce it."""
    out: dict[str, list[tuple[Source, Dataset]]] = {}
    for s in sources():
        for d in s.datasets:
            out.setdefault(d.name, []).append((s, d))
    return out


HEADER_SOURCE = "syslog"  # its field list (the syslog header's fields) belongs to every syslog-transport dataset


def dataset_fields(dataset: str) -> list[Dataset]:
    """The field lists an event of ``dataset`` may carry: its sources' lists, and the syslog header's when a
    syslog-transport source produces it."""
    found = datasets().get(dataset, [])
    lists = [d for _s, d in found]
    if any(s.transport == "syslog" for s, _d in found) and dataset not in {d.name for d in source(HEADER_SOURCE).datasets}:
        lists += list(source(HEADER_SOURCE).datasets)
    return lists
