"""Every source in the registry: its field list loads, and its golden fixtures parse to exactly the expected events.

A fixture is ``ingest/sources/<source>/fixtures/<case>.log`` (raw lines) beside ``<case>-expected.json`` (one entry
per line: ``{"event": {...}}`` — the nested ECS JSON without ``event.id``/``event.ingested``/``event.original`` — or
``{"error": {"parser": ..., "reason": ...}}``). Lines are parsed as records of topic ``fixture``, partition 0, offset =
line number, ingested at :data:`INGESTED_AT` (BSD syslog timestamps take their year from it).

After a deliberate parser change, rewrite the expected files and review the diff::

    NIGHTJAR_WRITE_GOLDEN=1 .venv/bin/pytest tests/test_sources.py
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import pytest

from ingest.events_contract import CORE_TYPES, DETAIL, as_ecs_json
from ingest.sources import FIXTURES, sources
from ingest.sources.record_parser import parse_record
from ingest.sources.values import micros

INGESTED_AT = dt.datetime(2026, 3, 15, 12, 0, tzinfo=dt.UTC)
VOLATILE = ("id", "ingested", "original")
WRITE = os.environ.get("NIGHTJAR_WRITE_GOLDEN") == "1"


def _cases() -> list[tuple[str, Path]]:
    return [(s.name, log) for s in sources() for log in sorted((s.folder / FIXTURES).glob("*.log"))]


def parse_fixture(log: Path) -> list[dict]:
    out = []
    for number, raw in enumerate(log.read_bytes().split(b"\n"), start=1):
        if raw == b"" and number > 1:
            continue  # the file's final newline
        parsed = parse_record(raw, topic="fixture", partition=0, offset=number, ingested_us=micros(INGESTED_AT))
        if parsed.error is not None:
            out.append({"error": {"parser": parsed.error[0], "reason": parsed.error[1]}})
            continue
        assert parsed.event["event.original"] == parsed.line
        doc = as_ecs_json(parsed.event)
        for key in VOLATILE:
            doc["event"].pop(key, None)
        out.append({"event": doc})
    return out


def test_every_source_has_fields_and_fixtures():
    for s in sources():
        assert s.datasets, s.name
        assert list((s.folder / FIXTURES).glob("*.log")), f"source {s.name} has no golden fixtures"
        assert (s.folder / "README.md").exists(), f"source {s.name} has no README.md"
        for d in s.datasets:
            for f in d.fields:
                if f.core is not None:
                    assert f.core in CORE_TYPES, (s.name, f.name)
                else:
                    assert f.core != DETAIL


@pytest.mark.parametrize(("source", "log"), _cases(), ids=[f"{s}/{p.stem}" for s, p in _cases()])
def test_golden_fixture(source: str, log: Path):
    expected_path = log.with_name(f"{log.stem}-expected.json")
    got = parse_fixture(log)
    if WRITE:
        expected_path.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    assert expected_path.exists(), f"{expected_path} is missing (NIGHTJAR_WRITE_GOLDEN=1 writes it)"
    expected = json.loads(expected_path.read_text())
    assert len(got) == len(expected), f"{log}: {len(got)} lines parsed, {len(expected)} expected"
    for number, (g, e) in enumerate(zip(got, expected, strict=True), start=1):
        assert g == e, f"{log}:{number}"


def test_detail_keys_are_declared():
    """Every detail key a fixture produces is in its dataset's field list (the views and the resolver need it)."""
    declared: dict[str, set[str]] = {}
    open_datasets = {d.name for s in sources() for d in s.datasets if d.open}
    for s in sources():
        for d in s.datasets:
            declared.setdefault(d.name, set()).update(f.name for f in d.fields if f.core is None)
    header = {f.name for d in next(s for s in sources() if s.name == "syslog").datasets for f in d.fields}
    for _source, log in _cases():
        for entry in parse_fixture(log):
            event = entry.get("event")
            if not event or DETAIL not in event:
                continue
            dataset = event["event"]["dataset"]
            if dataset in open_datasets:
                continue
            undeclared = set(event[DETAIL]) - declared.get(dataset, set()) - header
            assert not undeclared, f"{log}: detail keys of {dataset} not in any fields.yml: {sorted(undeclared)}"
