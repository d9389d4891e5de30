"""Record-level cases of the parse (contract v2) that the golden fixtures of ``ingest/sources`` do not hold, ported
from the tests of the old Spark SQL parse: syslog header edge cases read against another ingest date, event ids,
control characters inside values, and the real EvntSLog capture of ../shared/corpus (skipped when absent).

Each line goes through :func:`ingest.sources.record_parser.parse_record`, the per-record code that the stream's
``parse_bronze`` runs in its ``mapInArrow`` (no Spark needed here; ``tests/test_parse_command.py`` checks that
the two give the same events).
"""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import re
from pathlib import Path

import pytest

from ingest.events_contract import DETAIL
from ingest.field_resolver import resolve
from ingest.sources.record_parser import EVENT_ID_HEX_CHARS, Parsed, event_id, parse_record
from ingest.sources.values import micros
from tests.conftest import CORPUS

# Ingested on 3 January 2024: a "Dec 31" line is from 2023, a "Jan  2" line from 2024.
INGESTED = dt.datetime(2024, 1, 3, 8, 0, 0, tzinfo=dt.UTC)


def parse(line: str | bytes, offset: int = 1, ingested: dt.datetime = INGESTED) -> Parsed:
    raw = line.encode() if isinstance(line, str) else line
    return parse_record(raw, topic="file", partition=0, offset=offset, ingested_us=micros(ingested))


def field(event: dict, name: str):
    """``name``'s value in ``event`` where the field resolver places it for the event's dataset (detail as text)."""
    place = resolve(name, [event["event.dataset"]]).places[0]
    return event.get(place.core) if place.core is not None else (event.get(DETAIL) or {}).get(place.detail_key)


def ts(event: dict) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=event["@timestamp"])


# --- syslog headers ---------------------------------------------------------------------------------------------

def test_rfc3164_year_resolution_and_day_padding() -> None:
    padded = parse("Jan  2 03:04:05 ws-001 CRON[77]: (root) CMD (run-parts /etc/cron.hourly)").event
    assert ts(padded) == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    assert field(padded, "log.syslog.priority") is None and padded["process.name"] == "CRON"
    unpadded = parse("Jan 2 03:04:05 ws-001 systemd[1]: Started Session 5 of user alice.").event
    assert ts(unpadded) == dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    december = parse("Dec 31 23:59:59 ws-002 kernel: [12345.678] eth0: link up").event  # read in January
    assert ts(december) == dt.datetime(2023, 12, 31, 23, 59, 59, tzinfo=dt.UTC)
    assert december.get("process.pid") is None and december["message"] == "[12345.678] eth0: link up"
    # 29 February 2024 is more than the tolerance after the ingest date, and 2023 has no 29 February: undatable.
    assert parse("Feb 29 12:00:00 ws-003 app: leap day").error == (
        "syslog_rfc3164", "unreadable timestamp 'Feb 29 12:00:00'")


def test_rfc3164_with_rfc3339_timestamp() -> None:
    e = parse("2024-01-02T10:11:12.345678+01:00 web-01 nginx[999]: worker started").event
    assert ts(e) == dt.datetime(2024, 1, 2, 9, 11, 12, 345678, tzinfo=dt.UTC)
    assert (e["host.hostname"], e["process.name"], e["process.pid"]) == ("web-01", "nginx", 999)


def test_rfc5424_nil_values_nanoseconds_and_negative_offset() -> None:
    e = parse("<13>1 2023-10-11T22:14:15.123456789-07:00 host7 - - - - hello world").event
    assert ts(e) == dt.datetime(2023, 10, 12, 5, 14, 15, 123456, tzinfo=dt.UTC)  # nanoseconds cut to micros
    assert e.get("process.name") is None and e.get("process.pid") is None
    assert field(e, "log.syslog.msgid") is None and field(e, "log.syslog.structured_data") is None
    assert e["message"] == "hello world"


def test_rfc5424_nil_timestamp_takes_the_ingest_time_and_is_tagged() -> None:
    e = parse("<13>1 - host8 app 55 - - no clock here").event
    assert ts(e) == INGESTED and e["tags"] == ["syslog_timestamp_missing"]
    assert (e["process.name"], e["process.pid"]) == ("app", 55)


def test_rfc5424_escapes_and_repeated_params() -> None:
    e = parse(r'<14>1 2023-10-11T22:14:15Z h app - - [a@1 msg="say \"hi\" \] done" k="1" k="2"]').event
    assert json.loads(field(e, "log.syslog.structured_data")) == {"a@1": {"msg": 'say "hi" ] done', "k": "1,2"}}
    assert e.get("message") is None


def test_rfc5424_errors() -> None:
    assert parse("<14>1 yesterday h app - - - msg").error == ("syslog_rfc5424", "unreadable timestamp 'yesterday'")
    parser, reason = parse("<14>1 2023-10-11T22:14:15Z onlyhost").error
    assert parser == "syslog_rfc5424" and reason.startswith("malformed RFC 5424 header")


def test_sudo_over_rfc5424_without_tty_with_group() -> None:
    e = parse("<86>1 2024-03-09T10:00:02.5Z db-01 sudo - - - bob : PWD=/srv ; USER=postgres ; GROUP=postgres ; "
              "COMMAND=/usr/bin/psql").event
    assert ts(e) == dt.datetime(2024, 3, 9, 10, 0, 2, 500000, tzinfo=dt.UTC)
    assert (e["user.name"], e["user.effective.name"], e["group.name"]) == ("bob", "postgres", "postgres")
    assert field(e, "system.auth.sudo.tty") is None and field(e, "system.auth.sudo.command") == "/usr/bin/psql"


def test_a_repeated_sshd_message_is_the_repeated_event() -> None:
    e = parse("Mar  9 10:00:08 bastion sshd[3002]: message repeated 3 times: [ Failed password for root from "
              "198.51.100.7 port 5555 ssh2]").event
    assert field(e, "system.auth.repeated") == "3"
    assert (e["event.action"], e["event.outcome"], e["source.ip"], e["user.name"]) == (
        "ssh_login", "failure", "198.51.100.7", "root")


# --- event ids and values -------------------------------------------------------------------------------------

def test_event_ids_are_deterministic_per_record_and_distinct_across_records() -> None:
    line = "<38>Feb 21 21:54:44 bastion sshd[4242]: Server listening on 0.0.0.0 port 22."
    first, again, other = parse(line, 1).event, parse(line, 1).event, parse(line, 2).event
    assert first["event.id"] == again["event.id"] == event_id("file", 0, 1)
    assert len(first["event.id"]) == EVENT_ID_HEX_CHARS and other["event.id"] != first["event.id"]
    # the file a line came from is part of its id (two files' line 1 are two records)
    a = parse_record(line.encode(), topic="file", partition=0, offset=1, source_file="/a.log").event
    b = parse_record(line.encode(), topic="file", partition=0, offset=1, source_file="/b.log").event
    assert a["event.id"] != b["event.id"] != first["event.id"]


def test_control_characters_inside_values_are_kept() -> None:
    sep = "\u001f"  # the old Spark parse's group separator: a value holding it once took another code path
    e = parse(f"Nov 20 08:00:00 h sshd[1]: Accepted password for a{sep}b from 10.0.0.1 port 22 ssh2").event
    assert (e["user.name"], e["event.action"], e["source.ip"]) == (f"a{sep}b", "ssh_login", "10.0.0.1")
    e = parse(f"Nov 20 08:00:00 h sshd[1]: Accepted password for ab from 10.0.0.1 port 22 ssh2{sep}").event
    assert e["message"] == f"Accepted password for ab from 10.0.0.1 port 22 ssh2{sep}"
    assert e.get("event.action") is None and e.get("user.name") is None  # not sshd's form: no login read
    # RFC 5424's HOSTNAME is printable US-ASCII: a control character in it makes the header malformed (the old
    # parse took it into host.name)
    parser, reason = parse(f"<14>1 2026-11-20T08:00:00Z h{sep}x app - - - Invalid user bob from 10.0.0.2").error
    assert parser == "syslog_rfc5424" and reason.startswith("malformed RFC 5424 header")


# --- the real EvntSLog capture (Windows events over RFC 5424 syslog) -------------------------------------------

_CORPUS = Path(os.environ.get("NIGHTJAR_CORPUS") or CORPUS)
CAPTURE = _CORPUS / "zeek-wrccdc-2018" / "syslog-rfc5424-cee.log"
# event.code of the 286 lines, counted (titles inferred for the rendered lines, ids read from the JSON ones).
CAPTURE_CODES = {
    "4634": 51, "4672": 39, "4624": 29, "4776": 26, "5320": 18, "4017": 11, "5017": 11, "4769": 9, "7036": 5,
    "4006": 4, "100": 4, "102": 4, "200": 4, "201": 4, "5327": 4, "107": 3, "129": 3, "310": 3, "314": 3,
    "317": 3, "319": 3, "4326": 3, "5308": 3, "5309": 3, "5310": 3, "5311": 3, "5312": 3, "5313": 3, "5314": 3,
    "5315": 3, "5326": 3, "8006": 3, "7040": 2, None: 2, "3": 1, "51": 1, "301": 1, "318": 1, "3005": 1,
    "4097": 1, "4625": 1, "4662": 1,
}


@pytest.mark.skipif(not CAPTURE.is_file(), reason=f"corpus {CAPTURE} not present")
def test_real_capture_every_line_parses_with_its_code_and_logon_account() -> None:
    lines = CAPTURE.read_text().splitlines()
    parsed = [parse(line, i) for i, line in enumerate(lines, start=1)]
    assert len(parsed) == 286
    assert [i for i, p in enumerate(parsed, start=1) if p.error is not None] == []
    events = [p.event for p in parsed]
    assert collections.Counter(e.get("event.code") for e in events) == CAPTURE_CODES
    for line, e in zip(lines, events, strict=True):
        assert e["event.module"] == "windows" and e["event.dataset"].startswith("windows.")
        body = line.split(" - - - ", 1)[1]
        if body.startswith("@cee: "):
            data = json.loads(body[len("@cee: "):])
            assert e["event.code"] == data["id"]
            assert field(e, "winlog.channel") == data["nteventlogtype"]
            assert e["message"] == data["msg"]
            if data["id"] in ("4624", "4634"):
                assert e["user.name"] == data["TargetUserName"]
        elif body.startswith("An account was successfully logged on."):
            new_logon = re.search(r"New Logon: Security ID: (\S+) Account Name: (.+?) Account Domain: (.+?) Logon ID:",
                                  body)
            assert (e["user.id"], e["user.name"], e["user.domain"]) == new_logon.groups()
            assert e["source.ip"] == re.search(r"Source Network Address: (\S+)", body).group(1)
            assert field(e, "winlog.logon.type") == {"3": "Network", "2": "Interactive", "5": "Service",
                                                     "10": "RemoteInteractive"}[
                re.search(r"Logon Type: ([0-9]+)", body).group(1)]
            assert e["event.outcome"] == "success"
        elif body.startswith("An account was logged off."):
            subject = re.search(r"Subject: Security ID: \S+ Account Name: (.+?) Account Domain: (.+?) Logon ID:", body)
            assert (e["user.name"], e["user.domain"]) == subject.groups()
        elif body.startswith("Special privileges assigned to new logon."):
            subject = re.search(r"Subject: Security ID: (\S+) Account Name: (.+?) Account Domain:", body)
            assert (e["user.id"], e["user.name"]) == subject.groups()
        elif body.startswith("The domain controller attempted to validate"):
            assert e["user.name"] == re.search(r"Logon Account: (\S+)", body).group(1)
        elif body.startswith("A Kerberos service ticket was requested."):
            account = re.search(r"Account Name: ([^@ ]+)@(\S+)", body)
            assert (e["user.name"], e["user.domain"]) == account.groups()
            assert e["source.ip"] == re.search(r"Client Address: (?:::ffff:)?(\S+)", body).group(1)
    failed = events[175]  # line 176, the one failed logon: a guess at "administrator" from 10.150.0.20
    assert {k: failed.get(k) for k in ("event.code", "event.outcome", "user.name", "user.domain", "source.ip",
                                       "source.domain", "host.name")} == {
        "event.code": "4625", "event.outcome": "failure", "user.name": "administrator",
        "user.domain": "WORKSTATION", "source.ip": "10.150.0.20", "source.domain": "workstation",
        "host.name": "Kramer.jerry.land"}
    assert field(failed, "winlog.logon.type") == "Network"
    assert ts(failed) == dt.datetime(2018, 3, 24, 16, 6, 26, tzinfo=dt.UTC)
    service = events[0]
    assert (service["event.code"], service["event.dataset"]) == ("7036", "windows.system")
    assert {name: field(service, name) for name in ("service.name", "service.state", "winlog.provider_name",
                                                    "winlog.computer_name")} == {
        "service.name": "Multimedia Class Scheduler", "service.state": "stopped",
        "winlog.provider_name": "Service Control Manager", "winlog.computer_name": "PC-helen.jerry.land"}
    ticket = events[31]
    assert {k: ticket.get(k) for k in ("event.code", "user.name", "user.domain", "source.ip", "source.port",
                                       "event.outcome")} == {
        "event.code": "4769", "user.name": "PC-NEWMAN$", "user.domain": "JERRY.LAND", "source.ip": "172.20.0.80",
        "source.port": 50152, "event.outcome": "success"}
    assert field(ticket, "service.name") == "PC-NEWMAN$"
