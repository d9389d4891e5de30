"""The registry's Python parsers give the same answers as the Spark SQL parse they replace (``ingest.normalize``).

Compared on every golden fixture line and on the real corpus in ``../shared/corpus`` (skipped when absent): the
same records become events or quarantine (with the same parser and reason), and every field the old parse filled
is found with the same value where the new contract puts it — a core column of the same path, or the ``detail``
key whose field list entry names the old path (its ``name`` or one of its ``aliases``). Old map-valued fields
(``syslog.json``, ``winlog.event_data``) compare entry by entry with detail keys of the same name. Both ways on the
core: a core field the new parse fills must have been filled alike by the old one.

This test goes with the old parse (ingest/normalize.py) once the stream reads the new contract.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from ingest.ecs_schema import ECS_FIELDS
from ingest.events_contract import CORE_TYPES, DETAIL, iso_micros
from ingest.file_source import FILE_TOPIC
from ingest.sources import FIXTURES, datasets, sources
from ingest.sources.record_parser import parse_record
from ingest.sources.values import detail_text, micros
from tests.parse_helpers import INGESTED, parse_lines

# Minutes on a loaded 2-core machine (the old parse plans its 412 fields for each call): not in the quick tier.
pytestmark = pytest.mark.slow
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
# Old fields that the new contract drops on purpose: the address as written (now validated into ip/domain only).
DROPPED = {"source.address", "destination.address"}
MAP_FIELDS = {"syslog.json", "winlog.event_data"}
CORPUS_LINES = 400  # per corpus file: enough for every shape in them, small enough for the quick tier
# Sources that replace no Spark SQL parser (new in the registry): nothing to compare with. windows: Windows events as
# JSON records (issue #40; the old parse read Windows events only inside syslog lines).
NO_OLD_PARSER = {"windows"}


def _fixture_lines(source: str) -> list[bytes]:
    folder = next(s.folder for s in sources() if s.name == source) / FIXTURES
    lines: list[bytes] = []
    for log in sorted(folder.glob("*.log")):
        lines.extend(raw for raw in log.read_bytes().split(b"\n") if raw)
    return lines


def _corpus_files() -> list[Path]:
    folder = CORPUS / "zeek-wrccdc-2018"
    return sorted(folder.glob("*")) if folder.exists() else []


def _plain(value: object) -> object:
    """An old (Spark) value in the new parse's Python types."""
    if isinstance(value, dt.datetime):
        return micros(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _leaves(row: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in row.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path not in MAP_FIELDS and path != "log.syslog.structured_data":
            out.update(_leaves(value, path + "."))
        elif value is not None and value != []:
            out[path] = value
    return out


def _detail_key(dataset: str, old_path: str) -> str | None:
    for _source, d in datasets().get(dataset, []) + datasets().get("system.syslog", []):
        for f in d.fields:
            if f.core is None and (f.name == old_path or old_path in f.aliases):
                return f.name
    return None


def compare(lines: list[bytes], spark) -> list[str]:
    """The differences between the old and the new parse of ``lines``, one text per difference."""
    old_rows = parse_lines(spark, lines)
    ingested_us = micros(INGESTED)
    problems: list[str] = []
    for number, (raw, old) in enumerate(zip(lines, old_rows, strict=True), start=1):
        new = parse_record(raw, topic=FILE_TOPIC, partition=0, offset=number, ingested_us=ingested_us)
        where = f"line {number} {raw[:100]!r}"
        old_error = old["_error"]
        if old_error is not None or new.error is not None:
            got = None if new.error is None else list(new.error)
            want = None if old_error is None else [old_error["parser"], old_error["reason"]]
            if got != want:
                problems.append(f"{where}: quarantine {got} != old {want}")
            continue
        event = new.event
        detail = event.get(DETAIL) or {}
        dataset = event.get("event.dataset")
        old_leaves = _leaves({k: v for k, v in old.items()
                              if k not in ("_error", "key", "value", "topic", "partition", "offset", "timestamp",
                                           "headers", "ingested_at")})
        for path, value in old_leaves.items():
            value = _plain(value)
            if path in DROPPED or path == "event.ingested":
                continue
            if path in CORE_TYPES:
                if event.get(path) != value:
                    problems.append(f"{where}: {path} = {event.get(path)!r}, old {value!r}")
            elif path in MAP_FIELDS:
                for k, v in value.items():
                    # An empty string is no value in the new detail map (values.detail_text leaves it out).
                    if v is not None and v != "" and detail.get(k) != v:
                        problems.append(f"{where}: detail[{k}] = {detail.get(k)!r}, old {path}[{k}] {v!r}")
            else:
                key = _detail_key(dataset, path)
                want = json.dumps(value, separators=(",", ":")) if path == "log.syslog.structured_data" else (
                    iso_micros(value) if isinstance(value, int) and _is_timestamp(path) else detail_text(value))
                got = detail.get(key)
                if path == "log.syslog.structured_data" and got is not None:  # a JSON object: key order is free
                    got, want = json.loads(got), value
                if key is None:
                    problems.append(f"{where}: old field {path} has no place in {dataset}'s fields.yml")
                elif got != want:
                    problems.append(f"{where}: detail[{key}] = {detail.get(key)!r}, old {path} {want!r}")
        for path in CORE_TYPES:
            if path not in DROPPED and path != DETAIL and event.get(path) is not None and path not in old_leaves \
                    and not path.startswith("event.ingested"):
                problems.append(f"{where}: {path} = {event.get(path)!r}, old parse had none")
    return problems


def _is_timestamp(path: str) -> bool:
    return ECS_FIELDS.get(path) == "timestamp"


@pytest.mark.parametrize("source", [s.name for s in sources() if s.name not in NO_OLD_PARSER])
def test_fixtures_parse_as_before(spark, source: str):
    problems = compare(_fixture_lines(source), spark)
    assert not problems, "\n".join(problems[:40])


@pytest.mark.parametrize("path", _corpus_files(), ids=[p.name for p in _corpus_files()])
def test_corpus_parses_as_before(spark, path: Path):
    lines = [raw for raw in path.read_bytes().split(b"\n") if raw][:CORPUS_LINES]
    problems = compare(lines, spark)
    assert not problems, "\n".join(problems[:40])
