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
