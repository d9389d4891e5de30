"""ingest/capture_files.py: captures are read in place, whatever their packaging, and nothing is dropped silently."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from ingest.capture_files import capture_lines

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
ZEEK = b'{"_path":"conn","ts":1.5,"uid":"C1"}'
WINDOWS = b'{"EventID":4624,"Channel":"Security","Hostname":"dc-1","TargetUserName":"alice"}'


def _lines(path: Path) -> tuple[list[tuple[str, int, bytes]], list[tuple[str, str]]]:
    problems: list[tuple[str, str]] = []
    lines = [(ln.where, ln.number, ln.value) for ln in capture_lines(path, lambda w, r: problems.append((w, r)))]
    return lines, problems


def test_plain_and_gzip_files_give_their_lines_without_terminators(tmp_path):
    plain = tmp_path / "conn.log"
    plain.write_bytes(ZEEK + b"\r\n" + WINDOWS + b"\n")
    packed = tmp_path / "conn.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for path in (plain, packed):
        lines, problems = _lines(path)
        assert lines == [(str(path), 1, ZEEK), (str(path), 2, WINDOWS)] and not problems


def test_zip_and_tar_members_are_read_in_order_each_by_its_name(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("a/security.json", WINDOWS + b"\n" + WINDOWS)
        z.writestr("b/conn.json.gz", gzip.compress(ZEEK + b"\n"))
    archive = tmp_path / "capture.zip"
    archive.write_bytes(buffer.getvalue())
    lines, problems = _lines(archive)
    assert not problems
    assert lines == [(f"{archive}:a/security.json", 1, WINDOWS), (f"{archive}:a/security.json", 2, WINDOWS),
                     (f"{archive}:b/conn.json.gz", 1, ZEEK)]

    tarball = tmp_path / "capture.tar.gz"
    with tarfile.open(tarball, "w:gz") as t:
        for name, data in (("one.json", WINDOWS + b"\n"), ("inner.zip", buffer.getvalue())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    lines, problems = _lines(tarball)
    assert not problems
    assert [(w.split(":", 1)[1], v) for w, _n, v in lines] == [
        ("one.json", WINDOWS), ("inner.zip:a/security.json", WINDOWS), ("inner.zip:a/security.json", WINDOWS),
        ("inner.zip:b/conn.json.gz", ZEEK)]


def test_a_truncated_archive_gives_what_it_holds_and_reports_the_rest(tmp_path):
    tarball = tmp_path / "cut.tar.gz"
    with tarfile.open(tarball, "w:gz") as t:
        for i in range(3):
            data = b"\n".join([WINDOWS] * 2000) + b"\n"
            info = tarfile.TarInfo(f"part{i}.json")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    whole = tarball.read_bytes()
    tarball.write_bytes(whole[: len(whole) * 2 // 3])
    lines, problems = _lines(tarball)
    assert 2000 <= len(lines) < 6000
    assert all(v == WINDOWS for _w, _n, v in lines[:-1])
    # The member the cut fell in is named (and the archive, which cannot go on past it).
    assert problems and problems[0][0].startswith(f"{tarball}:part") and "unreadable" in problems[0][1]
    assert all(w.startswith(str(tarball)) and "unreadable" in r for w, r in problems)


@pytest.mark.skipif(not (CORPUS / "sigmahq" / "regression_data").is_dir(), reason="../shared/corpus not present")
def test_evtx_files_become_one_evtx_json_line_per_record_also_inside_a_zip(tmp_path):
    evtx = sorted((CORPUS / "sigmahq" / "regression_data").rglob("*.evtx"))[0]
    lines, problems = _lines(evtx)
    assert lines and not problems
    event = json.loads(lines[0][2])
    assert "System" in event["Event"] and b"\n" not in lines[0][2]
    archive = tmp_path / "evtx.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.write(evtx, "logs/x.evtx")
    zipped, problems = _lines(archive)
    assert not problems and [v for _w, _n, v in zipped] == [v for _w, _n, v in lines]
    assert zipped[0][0] == f"{archive}:logs/x.evtx"


EVTX_JSON = {"Event": {"System": {"EventID": 4624, "Channel": "Security", "Computer": "dc-1"},
                       "EventData": {"TargetUserName": "alice", "LogonType": 3}}}


def test_pretty_printed_json_documents_become_one_compact_record_each(tmp_path):
    one = json.dumps(EVTX_JSON, indent=2).encode()
    other = json.dumps({**EVTX_JSON, "Event": {**EVTX_JSON["Event"], "EventData": {"TargetUserName": "bob"}}},
                       indent=2).encode()
    compact = [json.dumps(d, separators=(",", ":")).encode() for d in (json.loads(one), json.loads(other))]
    # evtx_dump -o json: a "Record N" line before each document
    dump = tmp_path / "security.json"
    dump.write_bytes(b"Record 1\n" + one + b"\nRecord 2\n" + other + b"\n")
    lines, problems = _lines(dump)
    assert [(n, v) for _, n, v in lines] == [(2, compact[0]), (2 + one.count(b"\n") + 2, compact[1])]
    assert not problems
    # SigmaHQ's regression data: one document; and a JSON array of events, also gzipped
    single = tmp_path / "event.json"
    single.write_bytes(b"\n" + one + b"\n")
    assert [(n, v) for _, n, v in _lines(single)[0]] == [(2, compact[0])]
    array = tmp_path / "events.json.gz"
    array.write_bytes(gzip.compress(b"[\n" + one + b",\n" + other + b"\n]\n"))
    assert [v for _, _, v in _lines(array)[0]] == compact


def test_a_pretty_printed_document_that_does_not_decode_is_kept_whole_for_the_quarantine(tmp_path):
    one = json.dumps(EVTX_JSON, indent=2).encode()
    broken = tmp_path / "cut.json"
    broken.write_bytes(one + b"\n" + one[: len(one) // 2])
    lines, problems = _lines(broken)
    assert [v for _, _, v in lines] == [json.dumps(EVTX_JSON, separators=(",", ":")).encode(),
                                        one[: len(one) // 2].strip()]
    assert lines[1][1] == one.count(b"\n") + 2 and not problems


def test_json_lines_stay_lines_even_when_the_first_is_an_object(tmp_path):
    path = tmp_path / "events.json"
    path.write_bytes(WINDOWS + b"\n{not json\n" + WINDOWS + b"\n")
    assert [v for _, _, v in _lines(path)[0]] == [WINDOWS, b"{not json", WINDOWS]


@pytest.mark.skipif(not (CORPUS / "sigmahq" / "regression_data").is_dir(), reason="the shared corpus is absent")
def test_sigmahq_regression_json_parses_as_the_evtx_it_renders():
    root = CORPUS / "sigmahq" / "regression_data" / "rules"
    jsons = [p for p in sorted(root.rglob("*.json")) if p.with_suffix(".evtx").is_file()][:20]
    assert jsons
    for path in jsons:
        records = [json.loads(v) for _, _, v in _lines(path)[0]]
        evtx = [json.loads(v) for _, _, v in _lines(path.with_suffix(".evtx"))[0]]
        assert len(records) == len(evtx) >= 1, path
        assert [r["Event"]["System"]["EventRecordID"] for r in records] == \
            [r["Event"]["System"]["EventRecordID"] for r in evtx], path
