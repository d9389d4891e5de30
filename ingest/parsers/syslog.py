"""Syslog lines: the header (RFC 5424 or RFC 3164), then the writing program's message forms.

Three DataFrame steps, each adding one internal column so that later expressions read a materialized value
instead of repeating a regular expression:

1. :func:`add_header` -> ``_hdr``: which header form matched and its groups (null: not a syslog line).
2. :func:`add_envelope` -> ``_sys``: the header normalized (timestamp, host, program, pid, message, …).
3. :func:`add_message_match` -> ``_msg``: which program message form matched (sshd, sudo, PAM, shadow-utils,
   dhcpd) and its groups.

:func:`fields` then maps all of it onto ECS paths and :func:`error` says why a syslog record cannot be an
event (no header; a timestamp that cannot be read). A line whose header parses is always an event: an
unknown program, or an unknown message of a known program, still yields host, process and message.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from ingest.parsers import (
    dhcpd,
    pam,
    sshd,
    sudo,
    syslog_json,
    syslog_rfc3164,
    syslog_rfc5424,
    user_management,
    windows,
)
from ingest.parsers import values as V
from ingest.parsers.field_map import Fields, coalesce_fields
from ingest.parsers.regex_forms import Groups, MessageForm, form_fields, match_forms

PARSER_RFC5424 = "syslog_rfc5424"
PARSER_RFC3164 = "syslog_rfc3164"
TAG_TIMESTAMP_MISSING = "syslog_timestamp_missing"

# The header forms are tried in this order (ids 1, 2); an RFC 5424 prefix never matches the RFC 3164 form.
_HEADERS = (MessageForm(syslog_rfc5424.HEADER, lambda g: {}), MessageForm(syslog_rfc3164.HEADER, lambda g: {}))
_RFC5424_ID = 1
# Program message forms, numbered in this order (PAM first: PAM lines come from any program).
_PROGRAM_FORMS: tuple[tuple[tuple[str, ...], tuple[MessageForm, ...]], ...] = (
    (sshd.PROGRAMS, sshd.FORMS),
    (sudo.PROGRAMS, sudo.FORMS),
    (user_management.PROGRAMS, user_management.FORMS),
    (dhcpd.PROGRAMS, dhcpd.FORMS),
)
ALL_FORMS: tuple[MessageForm, ...] = pam.FORMS + tuple(f for _, forms in _PROGRAM_FORMS for f in forms)
# Programs whose lines belong in the auth log (Elastic's system.auth dataset); PAM lines of any program too.
AUTH_PROGRAMS = (*sshd.PROGRAMS, *sudo.PROGRAMS, *user_management.PROGRAMS, "su", "login", "passwd", "chpasswd",
                 "chage", "chsh", "chfn", "systemd-logind", "polkitd", "gdm-password", "cron", "crond")
FACILITIES = ("kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
              "ftp", "ntp", "security", "console", "solaris-cron", "local0", "local1", "local2", "local3",
              "local4", "local5", "local6", "local7")
SEVERITIES = ("emergency", "alert", "critical", "error", "warning", "notice", "informational", "debug")
_REPEATED = r"^message repeated ([0-9]+) times: \[ ?(.*)\]$"


def add_header(df: DataFrame, line: Column, is_syslog: Column) -> DataFrame:
    return df.withColumn("_hdr", F.when(is_syslog, match_forms(line, _HEADERS)))


def add_envelope(df: DataFrame, ingested_at: Column, record_time: Column) -> DataFrame:
    """``_sys``: the header's fields, normalized, for rows with a header."""
    hdr = F.col("_hdr")
    g5 = Groups(hdr, syslog_rfc5424.HEADER).col
    g3 = Groups(hdr, syslog_rfc3164.HEADER).col
    is5424 = hdr.getField("form") == F.lit(_RFC5424_ID)

    def pick(a: Column, b: Column) -> Column:
        return F.when(is5424, a).otherwise(b)

    ts_text = pick(g5("ts"), g3("ts"))
    ts_nil = is5424 & (ts_text == F.lit("-"))
    timestamp = (F.when(ts_nil, F.coalesce(record_time, ingested_at))
                 .when(is5424, syslog_rfc5424.timestamp(ts_text))
                 .otherwise(syslog_rfc3164.timestamp(ts_text, ingested_at)))
    message = pick(syslog_rfc5424.strip_bom(F.coalesce(g5("msg"), F.lit(""))), F.coalesce(g3("msg"), F.lit("")))
    repeated = message.startswith("message repeated ") & message.rlike(_REPEATED)
    program = pick(V.blank_to_null(g5("app")), g3("prog"))
    envelope = F.struct(
        F.when(is5424, F.lit(PARSER_RFC5424)).otherwise(F.lit(PARSER_RFC3164)).alias("parser"),
        V.to_int(pick(g5("pri"), g3("pri"))).alias("priority"),
        F.when(is5424, g5("version")).alias("version"),
        ts_text.alias("ts_text"),
        ts_nil.alias("ts_nil"),
        V.python_safe_timestamp(timestamp).alias("timestamp"),
        pick(V.blank_to_null(g5("host")), g3("host")).alias("hostname"),
        program.alias("program"),
        F.lower(program).alias("program_lc"),
        pick(V.blank_to_null(g5("procid")), g3("pid")).alias("pid"),
        F.when(is5424, V.blank_to_null(g5("msgid"))).alias("msgid"),
        F.when(is5424, g5("sd")).alias("sd"),
        message.alias("message"),
        F.when(repeated, F.regexp_extract(message, _REPEATED, 2)).otherwise(message).alias("body"),
        F.when(repeated, V.to_int(F.regexp_extract(message, _REPEATED, 1))).alias("repeated"),
    )
    return df.withColumn("_sys", F.when(hdr.isNotNull(), envelope))


def add_message_match(df: DataFrame) -> DataFrame:
    """``_msg``: the program message form that matched the message body (PAM lines of any program first)."""
    sys = F.col("_sys")
    body = sys.getField("body")
    program = sys.getField("program_lc")
    matched = F.when(pam.looks_like(body), match_forms(body, pam.FORMS, first_id=1))
    next_id = len(pam.FORMS) + 1
    for programs, forms in _PROGRAM_FORMS:
        matched = matched.when(program.isin(*programs), match_forms(body, forms, first_id=next_id))
        next_id += len(forms)
    df = df.withColumn("_msg", F.when(sys.isNotNull(), matched))
    # JSON payloads (@cee: / bare object), then Windows events (rendered text or JSON).
    df = df.withColumn("_sjson", F.when(sys.isNotNull(), syslog_json.parse(body)))
    return windows.add_match(df, sys, F.col("_sjson"))


def fields(layer: Callable[[str, Column, Fields], Fields]) -> Fields:
    """ECS fields of syslog rows (all null on other rows); a matched message form's fields win.

    The fields come in four layers (Windows event, JSON payload, program message form, header), each null on
    the rows its condition excludes. ``layer(name, condition, fields)`` returns the layer's fields as they are to be
    read (the caller materializes them with :func:`ingest.parsers.field_map.dispatch_cases`, so that a row
    evaluates only the layers that apply to it).
    """
    sys = F.col("_sys")
    msg = F.col("_msg")
    present = sys.isNotNull()
    program = sys.getField("program_lc")
    priority = sys.getField("priority")
    facility = F.floor(priority / 8).cast("int")
    severity = (priority % 8).cast("int")
    is_pam = msg.getField("form") <= F.lit(len(pam.FORMS))
    is_dhcpd = program.isin(*dhcpd.PROGRAMS)
    is_5424 = sys.getField("parser") == F.lit(PARSER_RFC5424)
    generic: Fields = {
        "@timestamp": sys.getField("timestamp"),
        "message": F.nullif(sys.getField("message"), F.lit("")),
        "tags": F.when(sys.getField("ts_nil"), F.array(F.lit(TAG_TIMESTAMP_MISSING))),
        "event.kind": F.when(present, F.lit("event")),
        "event.module": F.when(is_dhcpd, F.lit("dhcpd")).when(present, F.lit("system")),
        "event.dataset": (F.when(is_dhcpd, F.lit("dhcpd"))
                          .when(program.isin(*AUTH_PROGRAMS) | is_pam, F.lit("system.auth"))
                          .when(present, F.lit("system.syslog"))),
        "log.syslog.priority": priority,
        "log.syslog.facility.code": facility,
        "log.syslog.facility.name": F.try_element_at(F.array(*[F.lit(f) for f in FACILITIES]), facility + 1),
        "log.syslog.severity.code": severity,
        "log.syslog.severity.name": F.try_element_at(F.array(*[F.lit(s) for s in SEVERITIES]), severity + 1),
        "log.syslog.version": sys.getField("version"),
        "log.syslog.appname": F.when(is_5424, sys.getField("program")),
        "log.syslog.procid": F.when(is_5424, sys.getField("pid")),
        "log.syslog.msgid": sys.getField("msgid"),
        "log.syslog.structured_data": syslog_rfc5424.structured_data(sys.getField("sd")),
        "host.name": sys.getField("hostname"),
        "host.hostname": sys.getField("hostname"),
        "process.name": sys.getField("program"),
        "process.pid": sys.getField("pid").try_cast("bigint"),
        "system.auth.repeated": sys.getField("repeated"),
    }
    j = F.col("_sjson")
    is_windows = F.col("_win").isNotNull()
    win = layer("_sw", is_windows, windows.fields(j))
    # Generic JSON keys map onto ECS only for non-Windows payloads (Windows JSON has its own meaning of "user").
    json_fields = layer("_sj", j.isNotNull(), {path: (expr if path == "syslog.json" else F.when(~is_windows, expr))
                                               for path, expr in syslog_json.fields(j).items()})
    forms = layer("_sm", msg.isNotNull(), form_fields(msg, ALL_FORMS))
    rest = coalesce_fields(json_fields, forms, layer("_sg", present, generic))
    merged = coalesce_fields(win, rest)
    # process.name/pid as a pair: the Windows process when the event names one, else the syslog header's (the
    # layer's fields are null on rows that are not Windows events).
    has_windows_process = win["process.name"].isNotNull()
    for path in ("process.name", "process.pid"):
        merged[path] = F.when(has_windows_process, win[path]).otherwise(rest[path])
    return merged


def error(line: Column) -> Column:
    """``struct<parser, reason>`` for a syslog row that cannot be an event, else null."""
    sys = F.col("_sys")
    looks_5424 = syslog_rfc5424.looks_like(line)
    no_header = F.struct(
        F.when(looks_5424, F.lit(PARSER_RFC5424)).otherwise(F.lit(PARSER_RFC3164)).alias("parser"),
        F.when(looks_5424, F.lit("malformed RFC 5424 header: expected "
                                 "'<PRI>VERSION TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG'"))
        .otherwise(F.lit("no syslog header: expected 'Mmm dd hh:mm:ss HOST TAG: MSG' (RFC 3164) or "
                         "'<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG' (RFC 5424)")).alias("reason"),
    )
    bad_time = F.struct(
        sys.getField("parser").alias("parser"),
        F.concat(F.lit("unreadable timestamp '"), sys.getField("ts_text"), F.lit("'")).alias("reason"),
    )
    return F.when(sys.isNull(), no_header).when(sys.getField("timestamp").isNull(), bad_time)
