"""Syslog headers (RFC 3164, RFC 5424), sudo, PAM, useradd/groupadd and unknown programs -> ECS.

All samples are parsed in one Spark job (module fixture); each test asserts field values of its rows.
"""

from __future__ import annotations

import datetime as dt

import pytest

from tests.parse_helpers import get, parse_lines, utc

# Ingested on 3 January 2024: a "Dec 31" line is from 2023, a "Jan  2" line from 2024.
INGESTED = dt.datetime(2024, 1, 3, 8, 0, 0, tzinfo=dt.UTC)

SAMPLES = {
    "bsd_pri": "<38>Feb 21 21:54:44 bastion sshd[4242]: Server listening on 0.0.0.0 port 22.",
    "bsd_no_pri_padded_day": "Jan  2 03:04:05 ws-001 CRON[77]: (root) CMD (run-parts /etc/cron.hourly)",
    "bsd_last_year": "Dec 31 23:59:59 ws-002 kernel: [12345.678] eth0: link up",
    "bsd_unpadded_day": "Jan 2 03:04:05 ws-001 systemd[1]: Started Session 5 of user alice.",
    "bsd_rfc3339": "2024-01-02T10:11:12.345678+01:00 web-01 nginx[999]: worker started",
    "bsd_feb29_prev_leap": "Feb 29 12:00:00 ws-003 app: leap day",
    "bsd_bad_time": "Feb 30 12:00:00 ws-003 app: no such day",
    "rfc5424_sd": '<165>1 2023-10-11T22:14:15.003Z mymachine.example.com evntslog 1234 ID47 '
                  '[exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"][examplePriority@32473 '
                  'class="high"] \ufeffAn application event log entry',
    "rfc5424_nil": "<13>1 2023-10-11T22:14:15.123456789-07:00 host7 - - - - hello world",
    "rfc5424_nil_ts": "<13>1 - host8 app 55 - - no clock here",
    "rfc5424_escaped": r'<14>1 2023-10-11T22:14:15Z h app - - [a@1 msg="say \"hi\" \] done" k="1" k="2"]',
    "rfc5424_bad_ts": "<14>1 yesterday h app - - - msg",
    "rfc5424_bad_header": "<14>1 2023-10-11T22:14:15Z onlyhost",
    "sudo_ok": "Mar  9 10:00:00 db-01 sudo:    alice : TTY=pts/0 ; PWD=/home/alice ; USER=root ; "
               "COMMAND=/usr/bin/systemctl restart nginx",
    "sudo_not_in_sudoers": "Mar  9 10:00:01 db-01 sudo: mallory : user NOT in sudoers ; TTY=pts/1 ; PWD=/tmp ; "
                           "USER=root ; COMMAND=/bin/cat /etc/shadow",
    "sudo_5424": '<86>1 2024-03-09T10:00:02.5Z db-01 sudo - - - bob : PWD=/srv ; USER=postgres ; GROUP=postgres ; '
                 'COMMAND=/usr/bin/psql',
    "pam_auth_failure": "Mar  9 10:00:03 bastion sshd[3001]: pam_unix(sshd:auth): authentication failure; logname= "
                        "uid=0 euid=0 tty=ssh ruser= rhost=203.0.113.9  user=root",
    "pam_session_opened": "Mar  9 10:00:04 db-01 sudo: pam_unix(sudo:session): session opened for user root(uid=0) "
                          "by alice(uid=1000)",
    "useradd": "Mar  9 10:00:05 ws-001 useradd[900]: new user: name=eve, UID=1005, GID=1005, home=/home/eve, "
               "shell=/bin/bash, from=/dev/pts/0",
    "groupadd": "Mar  9 10:00:06 ws-001 groupadd[901]: group added to /etc/group: name=dev, GID=1010",
    "usermod_group": "Mar  9 10:00:07 ws-001 usermod[902]: add 'eve' to group 'sudo'",
    "repeated": "Mar  9 10:00:08 bastion sshd[3002]: message repeated 3 times: [ Failed password for root from "
                "198.51.100.7 port 5555 ssh2]",
    "unknown_program": "<30>Mar  9 10:00:09 fw-01 myapp[31337]: something happened: code=7",
    "garbage": "this is not syslog at all",
}
NAMES = list(SAMPLES)


@pytest.fixture(scope="module")
def rows(spark) -> dict[str, dict]:
    parsed = parse_lines(spark, list(SAMPLES.values()), ingested_at=INGESTED)
    return dict(zip(NAMES, parsed, strict=True))


def test_rfc3164_header_with_priority(rows):
    r = rows["bsd_pri"]
    assert r["_error"] is None
    assert r["@timestamp"] == utc(2023, 2, 21, 21, 54, 44)  # > 7 days after ingest: last year
    assert get(r, "host.hostname") == "bastion"
    assert get(r, "process.name") == "sshd" and get(r, "process.pid") == 4242
    assert get(r, "log.syslog.priority") == 38
    assert get(r, "log.syslog.facility.name") == "auth" and get(r, "log.syslog.severity.name") == "informational"
    assert r["message"] == "Server listening on 0.0.0.0 port 22."
    assert get(r, "event.dataset") == "system.auth" and get(r, "event.kind") == "event"
    assert get(r, "event.original") == SAMPLES["bsd_pri"]


def test_rfc3164_year_resolution_and_day_padding(rows):
    assert rows["bsd_no_pri_padded_day"]["@timestamp"] == utc(2024, 1, 2, 3, 4, 5)
    assert get(rows["bsd_no_pri_padded_day"], "log.syslog.priority") is None
    assert get(rows["bsd_no_pri_padded_day"], "process.name") == "CRON"
    assert rows["bsd_unpadded_day"]["@timestamp"] == utc(2024, 1, 2, 3, 4, 5)
    # December, ingested in January: last year.
    assert rows["bsd_last_year"]["@timestamp"] == utc(2023, 12, 31, 23, 59, 59)
    assert get(rows["bsd_last_year"], "process.pid") is None
    assert rows["bsd_last_year"]["message"] == "[12345.678] eth0: link up"
    # 29 February does not exist in 2024's predecessor... but 2024 is a leap year: Feb 29 2024 is in the
    # future by more than the tolerance (ingested 3 Jan 2024), so the previous year is tried, which has no
    # 29 February either: the record cannot be dated.
    assert rows["bsd_feb29_prev_leap"]["_error"]["parser"] == "syslog_rfc3164"


def test_rfc3164_with_rfc3339_timestamp(rows):
    r = rows["bsd_rfc3339"]
    assert r["_error"] is None
    assert r["@timestamp"] == utc(2024, 1, 2, 9, 11, 12, 345678)
    assert get(r, "host.hostname") == "web-01" and get(r, "process.pid") == 999


def test_unreadable_rfc3164_timestamp_is_quarantined(rows):
    err = rows["bsd_bad_time"]["_error"]
    assert err["parser"] == "syslog_rfc3164" and "unreadable timestamp 'Feb 30 12:00:00'" in err["reason"]


def test_rfc5424_structured_data_and_bom(rows):
    r = rows["rfc5424_sd"]
    assert r["_error"] is None
    assert r["@timestamp"] == utc(2023, 10, 11, 22, 14, 15, 3000)
    assert get(r, "log.syslog.priority") == 165 and get(r, "log.syslog.version") == "1"
    assert get(r, "log.syslog.facility.name") == "local4" and get(r, "log.syslog.severity.name") == "notice"
    assert get(r, "host.hostname") == "mymachine.example.com"
    assert get(r, "log.syslog.appname") == "evntslog" and get(r, "process.pid") == 1234
    assert get(r, "log.syslog.msgid") == "ID47"
    assert get(r, "log.syslog.structured_data") == {
        "exampleSDID@32473": {"iut": "3", "eventSource": "Application", "eventID": "1011"},
        "examplePriority@32473": {"class": "high"},
    }
    assert r["message"] == "An application event log entry"


def test_rfc5424_nil_values_fraction_and_offset(rows):
    r = rows["rfc5424_nil"]
    assert r["_error"] is None
    assert r["@timestamp"] == utc(2023, 10, 12, 5, 14, 15, 123456)
    assert get(r, "process.name") is None and get(r, "process.pid") is None
    assert get(r, "log.syslog.msgid") is None and get(r, "log.syslog.structured_data") is None
    assert r["message"] == "hello world"


def test_rfc5424_nil_timestamp_uses_ingest_time_and_is_tagged(rows):
    r = rows["rfc5424_nil_ts"]
    assert r["_error"] is None
    assert r["@timestamp"] == utc(2024, 1, 3, 8, 0, 0)
    assert r["tags"] == ["syslog_timestamp_missing"]
    assert get(r, "process.name") == "app" and get(r, "process.pid") == 55


def test_rfc5424_escapes_and_repeated_params(rows):
    r = rows["rfc5424_escaped"]
    assert r["_error"] is None
    assert get(r, "log.syslog.structured_data") == {"a@1": {"msg": 'say "hi" ] done', "k": "1,2"}}
    assert r["message"] is None


def test_rfc5424_errors(rows):
    assert rows["rfc5424_bad_ts"]["_error"]["parser"] == "syslog_rfc5424"
    assert "unreadable timestamp 'yesterday'" in rows["rfc5424_bad_ts"]["_error"]["reason"]
    assert rows["rfc5424_bad_header"]["_error"]["parser"] == "syslog_rfc5424"
    assert "malformed RFC 5424 header" in rows["rfc5424_bad_header"]["_error"]["reason"]
    assert rows["garbage"]["_error"]["parser"] == "syslog_rfc3164"
    assert "no syslog header" in rows["garbage"]["_error"]["reason"]


def test_sudo_command(rows):
    r = rows["sudo_ok"]
    assert get(r, "event.action") == "sudo_command" and get(r, "event.outcome") == "success"
    assert get(r, "event.category") == ["process"] and get(r, "event.dataset") == "system.auth"
    assert get(r, "user.name") == "alice" and get(r, "user.effective.name") == "root"
    assert get(r, "system.auth.sudo.command") == "/usr/bin/systemctl restart nginx"
    assert get(r, "system.auth.sudo.tty") == "pts/0" and get(r, "system.auth.sudo.pwd") == "/home/alice"
    assert get(r, "related.user") == ["alice", "root"]


def test_sudo_not_in_sudoers(rows):
    r = rows["sudo_not_in_sudoers"]
    assert get(r, "event.outcome") == "failure"
    assert get(r, "user.name") == "mallory" and get(r, "user.effective.name") == "root"
    assert get(r, "system.auth.sudo.error") == "user NOT in sudoers"
    assert get(r, "system.auth.sudo.command") == "/bin/cat /etc/shadow"


def test_sudo_rfc5424_without_tty_with_group(rows):
    r = rows["sudo_5424"]
    assert r["@timestamp"] == utc(2024, 3, 9, 10, 0, 2, 500000)
    assert get(r, "user.name") == "bob" and get(r, "user.effective.name") == "postgres"
    assert get(r, "group.name") == "postgres" and get(r, "system.auth.sudo.tty") is None
    assert get(r, "system.auth.sudo.command") == "/usr/bin/psql"


def test_pam_lines(rows):
    r = rows["pam_auth_failure"]
    assert get(r, "event.action") == "authentication_failure" and get(r, "event.outcome") == "failure"
    assert get(r, "user.name") == "root" and get(r, "source.ip") == "203.0.113.9"
    assert get(r, "system.auth.pam.module") == "pam_unix" and get(r, "system.auth.pam.service") == "sshd"
    assert get(r, "system.auth.pam.tty") == "ssh"
    s = rows["pam_session_opened"]
    assert get(s, "event.action") == "session_opened" and get(s, "event.type") == ["start"]
    assert get(s, "user.name") == "root" and get(s, "user.id") == "0" and get(s, "system.auth.pam.by") == "alice"
    assert get(s, "related.user") == ["root", "alice"]


def test_useradd_groupadd_usermod(rows):
    u = rows["useradd"]
    assert get(u, "event.category") == ["iam"] and get(u, "event.type") == ["user", "creation"]
    assert get(u, "event.action") == "user_created" and get(u, "user.name") == "eve"
    assert get(u, "user.id") == "1005" and get(u, "group.id") == "1005"
    assert get(u, "system.auth.useradd.home") == "/home/eve" and get(u, "system.auth.useradd.shell") == "/bin/bash"
    assert get(u, "system.auth.useradd.from") == "/dev/pts/0"
    g = rows["groupadd"]
    assert get(g, "event.action") == "group_created" and get(g, "group.name") == "dev" and get(g, "group.id") == "1010"
    assert get(g, "system.auth.groupadd.file") == "/etc/group"
    m = rows["usermod_group"]
    assert get(m, "event.action") == "user_added_to_group"
    assert get(m, "user.name") == "eve" and get(m, "group.name") == "sudo"


def test_message_repeated(rows):
    r = rows["repeated"]
    assert get(r, "system.auth.repeated") == 3
    assert get(r, "event.action") == "ssh_login" and get(r, "event.outcome") == "failure"
    assert get(r, "source.ip") == "198.51.100.7" and get(r, "user.name") == "root"


def test_unknown_program_is_still_normalized(rows):
    r = rows["unknown_program"]
    assert r["_error"] is None
    assert get(r, "event.dataset") == "system.syslog" and get(r, "event.module") == "system"
    assert get(r, "event.action") is None
    assert get(r, "host.hostname") == "fw-01" and get(r, "process.name") == "myapp"
    assert get(r, "process.pid") == 31337 and r["message"] == "something happened: code=7"
    assert get(r, "related.hosts") == ["fw-01"]


def test_event_ids_are_deterministic_and_distinct(rows, spark):
    ids = [get(r, "event.id") for r in rows.values()]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 for i in ids)
    from pyspark.sql import functions as F

    from ingest.arrow_parse import event_id

    again = spark.range(1).select(event_id(F.lit("file"), F.lit(0), F.lit(1)).alias("id")).first()["id"]
    assert again == get(rows["bsd_pri"], "event.id")


def test_literal_prefix_is_what_every_match_starts_with():
    from ingest.parsers.regex_forms import literal_prefix as _literal_prefix

    assert _literal_prefix(r"Failed (?<m>\S+) for") == "Failed "
    assert _literal_prefix(r"errors? found") == "error"  # the optional "s" may be absent
    assert _literal_prefix(r"ab+c") == "ab"
    assert _literal_prefix(r"(?<what>Connection closed by|Disconnected from) x") == ""
    assert _literal_prefix(r"Accepted x|Failed y") == ""  # an alternative at the top level: no common start
    assert _literal_prefix(r"a[|]b") == "a" and _literal_prefix(r"\[x") == ""


def test_a_separator_inside_a_line_gives_the_same_fields_as_the_regex(spark):
    """Lines containing the group separator (U+001F) take the rlike + regexp_extract path: same values."""
    sep = "\u001f"
    rows = parse_lines(spark, [
        f"Nov 20 08:00:00 h sshd[1]: Accepted password for a{sep}b from 10.0.0.1 port 22 ssh2",
        f"Nov 20 08:00:00 h sshd[1]: Accepted password for ab from 10.0.0.1 port 22 ssh2{sep}",
        f"<14>1 2026-11-20T08:00:00Z h{sep}x app - - - Invalid user bob from 10.0.0.2 port 23",
    ])
    assert [(get(r, "user.name"), get(r, "event.action"), get(r, "source.ip")) for r in rows] == [
        (f"a{sep}b", "ssh_login", "10.0.0.1"), (None, None, None), (None, None, None)]
    assert get(rows[1], "message") == f"Accepted password for ab from 10.0.0.1 port 22 ssh2{sep}"
    assert get(rows[2], "host.name") == f"h{sep}x" and get(rows[2], "process.name") == "app"


def optimized_plan(spark, line: str) -> str:
    """The optimized plan of ``parse_bronze`` over one line, as text with every struct field listed."""
    from ingest.file_source import lines_dataframe
    from ingest.arrow_parse import parse_bronze

    # Not a bare local relation: the optimizer would evaluate the whole projection on it (and print no regex).
    bronze = lines_dataframe(spark, [line]).repartition(1)
    key = "spark.sql.debug.maxToStringFields"  # the plan's text lists at most 25 fields of a struct by default
    saved = spark.conf.get(key, None)
    spark.conf.set(key, "100000")
    try:
        return parse_bronze(bronze)._jdf.queryExecution().optimizedPlan().toString()
    finally:
        spark.conf.unset(key) if saved is None else spark.conf.set(key, saved)
