"""``nightjar parse FILE…`` through the real CLI (a subprocess), and its parity with the stream's ``parse_bronze``.

The CLI runs the registry's per-record parser without Spark; the parity test checks that the same files through
``file_source.read_files`` + ``parse_bronze`` (what the stream runs) give the same events and the same bad lines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SYSLOG = [
    b"<38>Feb 21 21:54:44 bastion sshd[4242]: Accepted publickey for bob from 10.0.0.5 port 50022 ssh2: "
    b"ED25519 SHA256:abc",
    b"not a syslog line",
    b"Mar  9 10:00:00 dhcp-01 dhcpd[812]: DHCPACK on 10.0.0.50 to 0:c:29:aa:b:1 (laptop-7) via eth0\r",
    b"\xff\xfe broken bytes",
    b'<165>1 2023-10-11T22:14:15.003Z h app 1 ID [a@1 k="v"] msg',
]
ZEEK = [
    b'{"_path":"dns","ts":"2018-03-24T17:15:20.865716Z","uid":"C1","id.orig_h":"10.47.1.100","id.orig_p":41772,'
    b'"id.resp_h":"10.0.0.100","id.resp_p":53,"proto":"udp","query":"ise.wrccdc.org","qtype_name":"A",'
    b'"rcode_name":"NOERROR","answers":["134.71.3.16"],"TTLs":[60.0]}',
    b'{"_path":"conn","ts":1521911720.5,"uid":"C2"',
]


def nightjar(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nightjar.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("logs")
    syslog, zeek = d / "auth.log", d / "dns.log"
    syslog.write_bytes(b"\n".join(SYSLOG) + b"\n")
    zeek.write_bytes(b"\n".join(ZEEK))  # no final newline
    return syslog, zeek


def test_parse_prints_ecs_json_per_line_and_reports_bad_lines(files):
    syslog, zeek = files
    result = nightjar("parse", str(syslog), str(zeek))
    assert result.returncode == 0, result.stderr[-3000:]
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(docs) == 4
    ssh, dhcp, rfc5424, dns = docs
    assert ssh["event"]["original"] == SYSLOG[0].decode()
    assert ssh["event"]["action"] == "ssh_login" and ssh["user"]["name"] == "bob"
    assert ssh["event"]["dataset"] == "system.auth"
    assert ssh["source"] == {"ip": "10.0.0.5", "port": 50022}
    assert ssh["detail"]["system.auth.ssh.key_type"] == "ED25519"  # the source's own field, by its own name
    assert ssh["detail"]["system.auth.ssh.method"] == "publickey"
    assert ssh["@timestamp"].endswith("-02-21T21:54:44.000000Z")
    assert dhcp["source"]["mac"] == "00-0C-29-AA-0B-01" and dhcp["detail"]["dhcp.assigned_ip"] == "10.0.0.50"
    assert dhcp["event"]["dataset"] == "dhcpd"
    assert dhcp["event"]["original"].endswith("via eth0")  # the \r is not part of the line
    assert rfc5424["@timestamp"] == "2023-10-11T22:14:15.003000Z"
    assert json.loads(rfc5424["detail"]["log.syslog.structured_data"]) == {"a@1": {"k": "v"}}
    assert dns["dns"]["question"]["name"] == "ise.wrccdc.org"
    assert dns["dns"]["resolved_ip"] == ["134.71.3.16"]
    assert json.loads(dns["detail"]["dns.answers"]) == [{"data": "134.71.3.16", "ttl": 60}]
    assert dns["event"]["dataset"] == "zeek.dns" and dns["source"]["ip"] == "10.47.1.100"
    assert all(isinstance(v, str) for d in docs for v in d["detail"].values())  # detail values are text
    assert len({d["event"]["id"] for d in docs}) == 4
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith(str(syslog)) or ln.startswith(str(zeek))]
    assert errors == [
        f"{syslog}:2: syslog_rfc3164: no syslog header: expected 'Mmm dd hh:mm:ss HOST TAG: MSG' (RFC 3164) or "
        "'<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG' (RFC 5424)",
        f"{syslog}:4: decode: invalid UTF-8",
        f"{zeek}:2: zeek: malformed JSON: not one complete JSON object with Zeek's field types",
    ]
    assert "nightjar parse: 4 events, 3 bad lines" in result.stderr


def test_format_names_a_json_source(files):
    """``--format zeek`` forces the Zeek source; ``--format syslog`` makes the Zeek lines bad syslog lines."""
    _, zeek = files
    forced = nightjar("parse", "--format", "zeek", str(zeek), timeout=60)
    assert forced.returncode == 0, forced.stderr
    assert [json.loads(x)["event"]["dataset"] for x in forced.stdout.splitlines()] == ["zeek.dns"]
    as_syslog = nightjar("parse", "--format", "syslog", str(zeek), timeout=60)
    assert as_syslog.stdout == ""
    assert "nightjar parse: 0 events, 2 bad lines" in as_syslog.stderr


@pytest.mark.slow
def test_same_events_as_the_streams_parse(spark, files):
    """The CLI's events and bad lines are those of ``read_files`` + ``parse_bronze`` (the stream's mapInArrow)."""
    from pyspark.sql import functions as F

    from ingest.arrow_parse import ERROR_COLUMN, events_of, parse_bronze
    from ingest.file_source import read_files

    syslog, zeek = files
    result = nightjar("parse", str(syslog), str(zeek))
    cli = {d["event"]["id"]: d for d in map(json.loads, result.stdout.splitlines())}
    parsed = parse_bronze(read_files(spark, [syslog, zeek])).cache()
    rows = events_of(parsed).select(
        F.col("event.id").alias("id"), F.col("event.dataset").alias("dataset"), F.col("event.original").alias("o"),
        F.col("source.ip").alias("ip"), F.col("user.name").alias("user"), "detail").collect()
    assert {r["id"] for r in rows} == set(cli)
    for r in rows:
        doc = cli[r["id"]]
        assert (r["dataset"], r["o"], r["ip"], r["user"]) == (
            doc["event"]["dataset"], doc["event"]["original"], doc.get("source", {}).get("ip"),
            doc.get("user", {}).get("name"))
        assert dict(r["detail"] or {}) == doc.get("detail", {})
    bad = parsed.where(F.col(ERROR_COLUMN).isNotNull()).select(
        "partition", "offset", F.col(ERROR_COLUMN)["parser"].alias("p"), F.col(ERROR_COLUMN)["reason"].alias("r"))
    paths = [syslog, zeek]
    assert sorted(f"{paths[b['partition']]}:{b['offset']}: {b['p']}: {b['r']}" for b in bad.collect()) == sorted(
        ln for ln in result.stderr.splitlines() if ln.startswith((str(syslog), str(zeek))))
    parsed.unpersist()


@pytest.mark.parametrize(("args", "message"), [
    (["parse", "/nonexistent/file.log"], "/nonexistent/file.log: no such file"),
    (["parse", "--format", "xml", "x.log"], "invalid choice: 'xml'"),
    (["parse"], "the following arguments are required: FILE"),
    (["parse", "/tmp"], "/tmp: is a directory"),
])
def test_bad_arguments_get_one_line_and_non_zero_exit(args, message):
    result = nightjar(*args, timeout=60)
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    assert message in lines[0] and lines[0].startswith("nightjar parse")
    assert result.stdout == ""


def test_archives_are_parsed_in_place_and_bad_lines_name_the_member(tmp_path):
    """A .zip of Windows JSON lines: each event parsed as the windows source parses it; a bad line is reported as
    ARCHIVE:MEMBER:LINE, and the events' ids differ per member (the member is the source file)."""
    import zipfile

    event = {"EventID": 4624, "Channel": "Security", "Hostname": "DC-1.corp.example", "TargetUserName": "alice",
             "LogonType": "3", "IpAddress": "10.0.0.9", "EventTime": "2019-05-18 20:36:46"}
    archive = tmp_path / "capture.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("a.json", json.dumps(event) + "\n{broken\n")
        z.writestr("b.json", json.dumps(event) + "\n")
    done = nightjar("parse", str(archive))
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["event"]["code"] for e in events] == ["4624", "4624"]
    assert {e["event"]["dataset"] for e in events} == {"windows.security"}
    assert events[0]["user"]["name"] == "alice" and events[0]["detail"]["LogonType"] == "3"
    assert events[0]["event"]["id"] != events[1]["event"]["id"]
    assert f"{archive}:a.json:2: " in done.stderr
    assert "2 events, 1 bad lines" in done.stderr
