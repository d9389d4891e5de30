"""``nightjar replay`` against a real (Tansu) broker: lines reach their raw topics byte for byte or shifted to
now, unreadable lines are sent and reported with their line numbers, bad arguments are one line and exit 2."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from core.config import TOPIC_RAW_SYSLOG, TOPIC_RAW_WINDOWS, TOPIC_RAW_ZEEK


def consume_all(bootstrap: str, topic: str, marker: bytes) -> list[bytes]:
    """Every record of ``topic`` containing ``marker`` (the broker is shared by the test run), each partition read to
    its end (test_alert_sink's reader), in the order they were read (one partition's records keep theirs)."""
    from tests.test_alert_sink import consume_all as read_to_end

    return [value for _, value in read_to_end(bootstrap, topic) if marker in value]


@pytest.fixture
def capture(tmp_path):
    marker = uuid.uuid4().hex[:12]
    syslog = tmp_path / "auth.log"
    lines = [
        f"<38>1 2018-03-24T08:59:54.123-07:00 host-{marker} sshd 4242 - - Accepted password for bob from "
        "10.0.0.5 port 50022 ssh2".encode(),
        f"<38>Mar 24 16:00:54 host-{marker} sshd[4242]: Failed password for root from 10.0.0.6 port 4 ssh2".encode(),
        b"",
        f"\xff\xfe not utf-8 host-{marker}".encode("latin-1"),
        f"<13>1 - host-{marker} app - - - no clock".encode(),
    ]
    syslog.write_bytes(b"\n".join(lines) + b"\n")
    zeek = tmp_path / "conn.ndjson"
    records = [{"_path": "conn", "ts": 1521907200.5, "uid": f"C{marker}", "id.orig_h": "10.0.0.5"},
               {"_path": "dns", "ts": "2018-03-24T16:01:00.250000Z", "uid": f"D{marker}", "query": "a.example"}]
    zeek.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return marker, syslog, zeek, lines


def test_replay_sends_every_line_unchanged(broker, capture, capsys):
    from nightjar.cli import main

    marker, syslog, zeek, lines = capture
    code = main(["replay", str(syslog), str(zeek), "--quiet", "--bootstrap", broker.bootstrap])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (f"replayed 7 lines (5 to {TOPIC_RAW_SYSLOG}, 2 to {TOPIC_RAW_ZEEK}, 0 to {TOPIC_RAW_WINDOWS}; "
            "2 reported on stderr)") in out
    assert err.splitlines() == [f"{syslog}:3: blank line (sent unchanged)",
                                f"{syslog}:4: invalid UTF-8 at byte 0 (sent unchanged)"]
    # Same host, same key, one partition: file order. The invalid-UTF-8 line has no host (no key).
    got = consume_all(broker.bootstrap, TOPIC_RAW_SYSLOG, marker.encode())
    assert [v for v in got if v != lines[3]] == [lines[0], lines[1], lines[4]] and lines[3] in got
    zeek_got = consume_all(broker.bootstrap, TOPIC_RAW_ZEEK, marker.encode())
    assert sorted(zeek_got) == sorted(zeek.read_bytes().splitlines())


def test_replay_sends_windows_events_from_an_archive_to_their_topic_keyed_by_computer(broker, tmp_path, capsys):
    """NXLog and evtx-JSON events inside a .tar.gz go to nightjar.raw.windows, read in place; a Zeek line beside them
    in the archive still goes to the Zeek topic."""
    import io
    import tarfile

    from nightjar.cli import main

    marker = uuid.uuid4().hex[:12]
    nxlog = json.dumps({"EventID": 4625, "Channel": "Security", "Hostname": f"dc-{marker}",
                        "TargetUserName": "alice", "EventTime": "2019-05-18 20:36:46"}).encode()
    evtx = json.dumps({"Event": {"System": {"EventID": 1, "Channel": "Microsoft-Windows-Sysmon/Operational",
                                            "Computer": f"ws-{marker}",
                                            "TimeCreated": {"#attributes": {"SystemTime": "2024-01-01T00:00:00Z"}}},
                                 "EventData": {"Image": "C:\\Windows\\System32\\cmd.exe"}}}).encode()
    zeek = json.dumps({"_path": "conn", "ts": 1.5, "uid": f"C{marker}", "id.orig_h": "10.0.0.5"}).encode()
    tarball = tmp_path / "capture.tar.gz"
    with tarfile.open(tarball, "w:gz") as t:
        data = b"\n".join([nxlog, evtx, zeek]) + b"\n"
        info = tarfile.TarInfo("logs/mixed.json")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    code = main(["replay", str(tarball), "--quiet", "--bootstrap", broker.bootstrap])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"1 to {TOPIC_RAW_ZEEK}, 2 to {TOPIC_RAW_WINDOWS}" in out
    assert sorted(consume_all(broker.bootstrap, TOPIC_RAW_WINDOWS, marker.encode())) == sorted([nxlog, evtx])
    assert consume_all(broker.bootstrap, TOPIC_RAW_ZEEK, marker.encode()) == [zeek]


def test_replay_shift_to_now_keeps_spacing(broker, capture, capsys):
    from core.config import Settings
    from ingest.replay import replay

    marker, syslog, zeek, lines = capture
    now = dt.datetime(2026, 11, 24, 7, 0, 0, tzinfo=dt.UTC)
    # Earliest timestamp of the capture: 2018-03-24T15:59:54.123Z (the RFC 5424 line, -07:00).
    result = replay(Settings(bootstrap=broker.bootstrap), [syslog, zeek], rate=200, shift_to_now=True,
                    progress=False, now=now)
    err = capsys.readouterr().err.splitlines()
    assert result.offset == now - dt.datetime(2018, 3, 24, 15, 59, 54, 123000, tzinfo=dt.UTC)
    assert result.delivered == 7 and result.reported == 3
    assert err == [f"{syslog}:3: blank line (sent unchanged)", f"{syslog}:4: invalid UTF-8 at byte 0 (sent unchanged)",
                   f"{syslog}:5: no readable timestamp to shift (sent unchanged)"]
    # this test's own marker: the four syslog lines that carry it (the blank line does not), the two Zeek records
    got = [v for v in consume_all(broker.bootstrap, TOPIC_RAW_SYSLOG, marker.encode()) if v != lines[3]]
    assert len(got) == 3
    # The RFC 5424 line keeps its offset and its 3 fraction digits; the BSD line (2018 read as this year, 2026)
    # moves by the same offset.
    assert got[0] == (f"<38>1 2026-11-24T00:00:00.000-07:00 host-{marker} sshd 4242 - - Accepted password for bob "
                      "from 10.0.0.5 port 50022 ssh2").encode()
    bsd_then = dt.datetime(2026, 3, 24, 16, 0, 54, tzinfo=dt.UTC) + result.offset
    assert got[1].startswith(f"<38>{bsd_then:%b} {bsd_then.day:>2} {bsd_then:%H:%M:%S} host-{marker}".encode())
    assert got[2] == lines[4]
    zeek_got = sorted((json.loads(v) for v in consume_all(broker.bootstrap, TOPIC_RAW_ZEEK, marker.encode())),
                      key=lambda r: r["_path"])
    assert len(zeek_got) == 2
    assert zeek_got[0]["ts"] == pytest.approx((dt.datetime(2018, 3, 24, 16, 0, 0, 500000, tzinfo=dt.UTC)
                                               + result.offset).timestamp(), abs=1e-3)
    assert zeek_got[1]["ts"] == "2026-11-24T07:01:06.127000Z"


@pytest.mark.parametrize(("argv", "message"), [
    (["replay", "/nonexistent/file.log"], "nightjar replay: error: /nonexistent/file.log: no such file"),
    (["replay", "--rate", "0", "/dev/null"], "nightjar replay: error: --rate must be a positive number"),
])
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv, message):
    from nightjar.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(message)


def test_missing_files_argument_exits_2(capsys):
    from nightjar.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["replay"])
    assert exc.value.code == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
