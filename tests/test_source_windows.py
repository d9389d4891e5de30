"""The windows source (ingest/sources/windows) beyond its golden fixtures: the real corpus of
../shared/corpus parses completely (OTRF recordings, SigmaHQ regression events), ``.evtx`` files read with the
``evtx`` package give the same events as their JSON twins, and Zeek records are never taken for Windows ones.
Corpus tests are skipped when the corpus (or the ``evtx`` package) is absent."""

from __future__ import annotations

import json
import os
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.sources import windows
from ingest.sources.record_parser import parse_record
from tests.conftest import CORPUS

# NIGHTJAR_CORPUS: the corpus elsewhere than ../shared/corpus (a worktree beside the main checkout).
_CORPUS = Path(os.environ.get("NIGHTJAR_CORPUS") or CORPUS)
OTRF = _CORPUS / "otrf-security-datasets"
SIGMA_REGRESSION = _CORPUS / "sigmahq" / "regression_data"


def _otrf_lines() -> Iterator[bytes]:
    for archive in sorted(OTRF.rglob("*")):
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as z:
                members = [(n, z.read(n)) for n in z.namelist() if n.endswith(".json") and "__MACOSX" not in n]
        elif archive.name.endswith(".tar.gz"):
            with tarfile.open(archive) as t:
                members = [(m.name, t.extractfile(m).read()) for m in t.getmembers()
                           if m.isfile() and m.name.endswith(".json") and "/._" not in m.name]
        else:
            continue
        for _name, data in members:
            yield from (line for line in data.split(b"\n") if line.strip())


def _json_objects(path: Path) -> list[dict]:
    """The JSON objects of a file holding one or several (pretty-printed, concatenated) objects."""
    text, decoder, at, out = path.read_text(encoding="utf-8"), json.JSONDecoder(), 0, []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at >= len(text):
            return out
        obj, at = decoder.raw_decode(text, at)
        out.append(obj)


@pytest.mark.skipif(not OTRF.is_dir(), reason=f"corpus {OTRF} not present")
def test_every_otrf_record_is_a_windows_event():
    count, datasets = 0, set()
    for number, line in enumerate(_otrf_lines()):
        parsed = parse_record(line, topic="otrf", partition=0, offset=number, ingested_us=0)
        if parsed.error is not None and parsed.error[1] == "invalid UTF-8":
            continue  # a handful of the archives' lines are not UTF-8 (the corpus README says so)
        assert parsed.error is None, (parsed.error, line[:300])
        event = parsed.event
        assert event["event.module"] == "windows" and event["event.code"].isdigit()
        assert event["@timestamp"] is not None and event["host.hostname"]
        datasets.add(event["event.dataset"])
        count += 1
    assert count > 100_000
    assert {"windows.sysmon_operational", "windows.security", "windows.powershell_operational",
            "windows.powershell", "windows.system"} <= datasets


def _regression_json() -> list[Path]:
    return sorted(SIGMA_REGRESSION.rglob("*.json")) if SIGMA_REGRESSION.is_dir() else []


@pytest.mark.skipif(not _regression_json(), reason=f"corpus {SIGMA_REGRESSION} not present")
def test_every_sigmahq_regression_event_parses():
    for path in _regression_json():
        for obj in _json_objects(path):
            line = json.dumps(obj, separators=(",", ":"))
            assert windows.detect(obj), path
            parsed = parse_record(line.encode(), topic="sigma", partition=0, offset=0, ingested_us=0)
            assert parsed.error is None, (path, parsed.error)
            system = obj["Event"]["System"]
            assert parsed.event["event.code"] == str(system["EventID"])
            assert parsed.event["host.hostname"] == system["Computer"]
            data = obj["Event"].get("EventData") or {}
            for key, value in data.items():  # every event-data field kept under its Windows name
                if value not in (None, "") and key != "#attributes":
                    assert key in parsed.event["detail"], (path, key)


def _evtx_pairs() -> list[tuple[Path, Path]]:
    return [(p, p.with_suffix(".json")) for p in sorted(SIGMA_REGRESSION.rglob("*.evtx"))
            if p.with_suffix(".json").exists()] if SIGMA_REGRESSION.is_dir() else []


@pytest.mark.skipif(not _evtx_pairs(), reason=f"corpus {SIGMA_REGRESSION} not present")
def test_evtx_files_give_the_events_of_their_json_twins():
    pytest.importorskip("evtx")
    from ingest.sources.windows.evtx_files import evtx_events, evtx_records

    for evtx_path, json_path in _evtx_pairs():
        assert all("\n" not in text for text in evtx_records(evtx_path))
        got, want = list(evtx_events(evtx_path)), _json_objects(json_path)
        assert len(got) == len(want), evtx_path
        for g, w in zip(got, want, strict=True):
            assert g["Event"]["System"]["EventRecordID"] == w["Event"]["System"]["EventRecordID"], evtx_path
            # The twins come from another converter, which trims trailing spaces off values (41 of the 96 command
            # lines end with one in the .evtx), and one twin was edited by hand (Explorer.EXE -> .exe): the same
            # event up to trailing space and letter case (and SystemTime's digits past the microsecond, which the
            # twins write to 100 ns: the time as text, winlog.time_created, is left out).
            assert _loose(windows.parse(g, "")) == _loose(windows.parse(w, "")), evtx_path


def _loose(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, dict):
        return {k: _loose(v) for k, v in value.items() if k != "winlog.time_created"}
    if isinstance(value, list):
        return [_loose(v) for v in value]
    return value


def test_detect_claims_windows_shapes_and_not_zeek():
    assert windows.detect({"Event": {"System": {"EventID": 1}}})
    assert windows.detect({"EventID": 4624, "Channel": "Security"})
    assert windows.detect({"EventID": 4624, "SourceName": "Microsoft-Windows-Security-Auditing"})
    assert windows.detect({"event_id": 3, "log_name": "Microsoft-Windows-Sysmon/Operational"})
    assert not windows.detect({"_path": "conn", "EventID": 1, "Channel": "x"})
    assert not windows.detect({"EventID": 4624})
    assert not windows.detect({"Event": "text"})
    assert not windows.detect({"ts": 1.0, "uid": "C1"})


def test_dataset_names():
    assert windows.dataset_of("Microsoft-Windows-Sysmon/Operational", None) == "windows.sysmon_operational"
    assert windows.dataset_of("security", None) == "windows.security"
    assert windows.dataset_of("Microsoft-Windows-WMI-Activity/Operational", None) == \
        "windows.wmi_activity_operational"
    assert windows.dataset_of("Directory Service", None) == "windows.directory_service"
    assert windows.dataset_of(None, "Microsoft-Windows-Sysmon") == "windows.sysmon_operational"
    assert windows.dataset_of(None, None) == "windows.forwarded"


def test_nxlog_local_event_time_takes_the_offset_of_its_receipt():
    """EventTime 02:09:26 local, received 02:09:29 local = 06:09:29.626Z: the zone is UTC-4, the event 06:09:26Z."""
    record = {"EventID": 4624, "Channel": "Security", "Hostname": "h", "EventTime": "2020-08-05 02:09:26",
              "EventReceivedTime": "2020-08-05 02:09:29", "@timestamp": "2020-08-05T06:09:29.626Z"}
    event = windows.parse(record, "")
    assert event["@timestamp"] == windows._iso_micros("2020-08-05T06:09:26Z")
    assert event["tags"] is None


def test_mutated_records_never_break_the_parser():
    """Fixture records with values of the wrong type (lists, objects, huge numbers, garbage text) or keys removed
    are events or quarantined with a reason, never a parser error, and their events convert to Arrow."""
    import random

    from ingest.events_contract import to_arrow

    rng = random.Random(7)
    folder = Path(windows.__file__).parent / "fixtures"
    records = [json.loads(line) for log in sorted(folder.glob("*.log")) for line in log.read_text().splitlines()
               if line.strip()]
    odd = [None, True, 0, -1, 1.5, "", "-", [], {}, ["x"], {"#text": 5}, {"#attributes": 3}, 2**70, "0xZZ",
           "::ffff:", "CN=", "a@b@c", "2020-13-01T00:00:00Z"]

    def mutate(value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out = {}
        for key, item in value.items():
            roll = rng.random()
            if roll < 0.05:
                continue
            out[key] = rng.choice(odd) if roll < 0.2 else mutate(item)
        return out

    events = []
    for number in range(3000):
        record = mutate(rng.choice(records))
        if not windows.detect(record):
            continue
        parsed = parse_record(json.dumps(record).encode(), topic="fuzz", partition=0, offset=number, ingested_us=0)
        assert parsed.error is None or parsed.error[0] == windows.PARSER, (parsed.error, record)
        if parsed.event is not None:
            events.append(parsed.event)
    assert len(events) > 1000
    to_arrow(events)
