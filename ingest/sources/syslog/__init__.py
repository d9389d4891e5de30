"""Syslog lines: the header (RFC 5424 or RFC 3164), then the message parsed by the sources of the writing program.

The header gives the envelope (:class:`Envelope`: time, host, program, pid, message); the syslog-transport
sources of the registry (sshd, sudo, pam, dhcpd, ...) parse the message in three layers — ``program``,
``payload``, ``event`` — merged per field, later layers winning, over the header's own fields. A line whose header
parses is always an event: an unknown program, or an unknown message of a known program, still yields host,
process and message (dataset ``system.syslog``, or the program's dataset when a source claims the program).

RFC 3164 (``[<PRI>]Mmm dd hh:mm:ss HOSTNAME TAG[PID]: MSG``): no ``<PRI>``, a day padded with a space or not,
fractional seconds, an RFC 3339 timestamp instead of the BSD one, no hostname, a tag without ``[PID]``, no tag.
The year-less BSD timestamp is read as UTC in the year of the record's ``ingested_at``; more than
:data:`FUTURE_TOLERANCE_DAYS` days after it (a December line read in January), or a date that does not exist in
that year (29 February), means the previous year. RFC 5424: ``-`` in any field, structured data with several
elements, escapes and repeated parameter names (joined with ``,``), fractions to the microsecond, ``Z``/``±hh:mm``,
the BOM before MSG. A ``-`` timestamp takes the Kafka timestamp and tags the event ``syslog_timestamp_missing``.
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ingest.sources import LAYERS, Event, ParseFailure, Source, sources
from ingest.sources.values import EPOCH, blank_to_none, day_micros, int64, micros, safe_micros

PARSER_RFC5424 = "syslog_rfc5424"
PARSER_RFC3164 = "syslog_rfc3164"
TAG_TIMESTAMP_MISSING = "syslog_timestamp_missing"
FUTURE_TOLERANCE_DAYS = 7
DATASET = "system.syslog"
AUTH_DATASET = "system.auth"
# Programs whose lines belong in the auth log (Elastic's system.auth dataset) although no source parses them.
AUTH_PROGRAMS = ("su", "login", "passwd", "chpasswd", "chage", "chsh", "chfn", "systemd-logind", "polkitd",
                 "gdm-password", "cron", "crond")
FACILITIES = ("kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
              "ftp", "ntp", "security", "console", "solaris-cron", "local0", "local1", "local2", "local3",
              "local4", "local5", "local6", "local7")
SEVERITIES = ("emergency", "alert", "critical", "error", "warning", "notice", "informational", "debug")

_BSD_TS = r"[A-Za-z]{3} +[0-9]{1,2} [0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
_RFC3339_TS = r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:[Zz]|[+-][0-9]{2}:?[0-9]{2})?"
RFC3164 = re.compile(
    rf"(?:<(?P<pri>[0-9]{{1,3}})>)?(?P<ts>{_BSD_TS}|{_RFC3339_TS}) +"
    r"(?:(?P<host>[^\s\[\]]*[^\s\[\]:]) +)?"
    r"(?:(?P<prog>[^\s\[\]:]{1,64})(?:\[(?P<pid>[^\]\s]*)\])?:(?: |\Z))?"
    r"(?P<msg>.*)", re.S)
_RFC5424_PREFIX = re.compile(r"<[0-9]{1,3}>[1-9][0-9]{0,2} ")
_SD_NAME = r'[^\s=\]"]+'
_SD_VALUE = r'"(?:[^"\\]|\\.)*"'
_SD_ELEMENT = rf"\[{_SD_NAME}(?: +{_SD_NAME}={_SD_VALUE})* *\]"
RFC5424 = re.compile(
    r"<(?P<pri>[0-9]{1,3})>(?P<version>[1-9][0-9]{0,2}) (?P<ts>\S+) (?P<host>\S+) (?P<app>\S+) (?P<procid>\S+) "
    rf"(?P<msgid>\S+) (?P<sd>-|(?:{_SD_ELEMENT})+)(?: (?P<msg>.*))?", re.S)
_RFC5424_TS = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
                         r"(Z|[+-][0-9]{2}:[0-9]{2})")
_RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
                      r"(Z|[+-][0-9]{2}:?[0-9]{2})?")
_BSD = re.compile(r"([A-Za-z]{3}) +([0-9]{1,2}) ([0-9]{1,2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?")
_ELEMENT_PARTS = re.compile(rf"\[({_SD_NAME})((?: +{_SD_NAME}={_SD_VALUE})*) *\]")
_PARAM = re.compile(rf"({_SD_NAME})=\"((?:[^\"\\]|\\.)*)\"")
_SD_ESCAPE = re.compile(r'\\(["\\\]])')
_REPEATED = re.compile(r"message repeated ([0-9]+) times: \[ ?(.*)\]", re.S)
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_abbr) if name}
_NO_HEADER = ("no syslog header: expected 'Mmm dd hh:mm:ss HOST TAG: MSG' (RFC 3164) or "
              "'<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG' (RFC 5424)")
_BAD_5424 = ("malformed RFC 5424 header: expected "
             "'<PRI>VERSION TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA MSG'")


@dataclass
class Envelope:
    """A syslog line's header, normalized: what every syslog-transport source gets."""

    parser: str  # syslog_rfc5424 | syslog_rfc3164
    priority: int | None
    version: str | None
    ts_text: str
    ts_nil: bool  # RFC 5424 "-": the sender did not know the time
    timestamp: int | None  # epoch microseconds
    hostname: str | None
    program: str | None
    pid: str | None
    msgid: str | None
    sd: str | None  # RFC 5424 structured data as written
    message: str  # MSG ("" when none)
    body: str  # MSG, unwrapped from "message repeated N times: [...]"
    repeated: int | None
    _payload: Any = field(default=None, repr=False)
    _payload_read: bool = field(default=False, repr=False)

    @property
    def program_lc(self) -> str | None:
        return self.program.lower() if self.program else None

    @property
    def payload(self) -> dict[str, str | None] | None:
        """The message's JSON object (``@cee: {…}`` or a bare ``{…}``), each top-level key as text (nested objects
        and arrays as their JSON, JSON null as None); None when the message carries no JSON object."""
        if not self._payload_read:
            self._payload, self._payload_read = json_payload(self.body), True
        return self._payload


CEE_PREFIX = "@cee:"


def json_payload(body: str) -> dict[str, str | None] | None:
    text = body.lstrip()
    if text.startswith(CEE_PREFIX):
        text = text[len(CEE_PREFIX):].strip()
    elif text.startswith("{"):
        text = text.rstrip()
    else:
        return None
    if not text.endswith("}"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    return {str(k): _as_text(v) for k, v in obj.items()}


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def envelope(line: str, ingested_us: int | None, record_us: int | None) -> Envelope:
    """The header of ``line``; :class:`ParseFailure` when there is none or its timestamp cannot be read."""
    if _RFC5424_PREFIX.match(line):
        m = RFC5424.fullmatch(line)
        if m is None:
            raise ParseFailure(PARSER_RFC5424, _BAD_5424)
        g = m.groupdict()
        ts_text = g["ts"]
        ts_nil = ts_text == "-"
        if ts_nil:
            timestamp = record_us if record_us is not None else ingested_us
        else:
            timestamp = _rfc5424_time(ts_text)
        msg = g["msg"] or ""
        env = Envelope(PARSER_RFC5424, int(g["pri"]), g["version"], ts_text, ts_nil, safe_micros(timestamp),
                       blank_to_none(g["host"]), blank_to_none(g["app"]), blank_to_none(g["procid"]),
                       blank_to_none(g["msgid"]), g["sd"], msg.removeprefix("\ufeff"), "", None)
    else:
        m = RFC3164.fullmatch(line)
        if m is None:
            raise ParseFailure(PARSER_RFC3164, _NO_HEADER)
        g = m.groupdict()
        ts_text = g["ts"]
        timestamp = _rfc3164_time(ts_text, ingested_us)
        env = Envelope(PARSER_RFC3164, int(g["pri"]) if g["pri"] else None, None, ts_text, False,
                       safe_micros(timestamp), g["host"] or None, g["prog"] or None, g["pid"] or None, None,
                       None, g["msg"] or "", "", None)
    if env.timestamp is None:
        raise ParseFailure(env.parser, f"unreadable timestamp '{ts_text}'")
    repeated = _REPEATED.fullmatch(env.message) if env.message.startswith("message repeated ") else None
    env.body = repeated.group(2) if repeated else env.message
    env.repeated = int(repeated.group(1)) if repeated else None
    return env


def _fraction_us(text: str | None) -> int:
    return int((text or "0")[:6].ljust(6, "0"))


def _rfc5424_time(text: str) -> int | None:
    m = _RFC5424_TS.fullmatch(text.upper())
    return _iso_time(m) if m else None


def _iso_time(m: re.Match[str]) -> int | None:
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    try:
        moment = dt.datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                             _fraction_us(fraction), tzinfo=dt.UTC)
    except ValueError:
        return None
    offset = 0
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = (int(digits[:2]) * 60 + int(digits[2:])) * 60 * (1 if zone[0] == "+" else -1)
    try:
        return micros(moment) - offset * 1_000_000
    except OverflowError:
        return None


def _rfc3164_time(text: str, ingested_us: int | None) -> int | None:
    if text[:1].isdigit():
        m = _RFC3339.fullmatch(text.upper())
        return _iso_time(m) if m else None
    m = _BSD.fullmatch(text)
    if m is None:
        return None
    mon, day, hour, minute, second, fraction = m.groups()
    month = _MONTHS.get(mon.lower())
    if month is None:
        return None
    year, limit = _reference(ingested_us if ingested_us is not None else micros(dt.datetime.now(dt.UTC)))
    time_of_day = ((int(hour) * 60 + int(minute)) * 60 + int(second)) * 1_000_000 + _fraction_us(fraction)
    if int(hour) > 23 or int(minute) > 59 or int(second) > 59:
        return None
    this_year = day_micros(year, month, int(day))
    if this_year is not None:
        this_year += time_of_day
    if this_year is None or this_year > limit:
        last_year = day_micros(year - 1, month, int(day))
        return None if last_year is None else last_year + time_of_day
    return this_year


@functools.lru_cache(maxsize=64)
def _reference(ingested_us: int) -> tuple[int, int]:
    """(the year of ``ingested_us``, the latest believable time) for year-less timestamps; a batch shares one."""
    return (EPOCH + dt.timedelta(microseconds=ingested_us)).year, ingested_us + FUTURE_TOLERANCE_DAYS * 86_400_000_000


def structured_data(sd: str | None) -> dict[str, dict[str, str]] | None:
    """``[id p="v" …][id2 …]`` -> ``{id: {param: value}}``; repeated ids merged, repeated params joined with ``,``."""
    if not sd or sd == "-":
        return None
    out: dict[str, dict[str, list[str]]] = {}
    for sd_id, params in _ELEMENT_PARTS.findall(sd):
        element = out.setdefault(sd_id, {})
        for name, value in _PARAM.findall(params):
            element.setdefault(name, []).append(_SD_ESCAPE.sub(r"\1", value))
    return {sd_id: {name: ",".join(values) for name, values in params.items()} for sd_id, params in out.items()}


def header_event(env: Envelope, program_dataset: tuple[str, str] | None) -> Event:
    """The fields every syslog event gets from its header (core and detail)."""
    module, dataset = program_dataset or ("system", AUTH_DATASET if env.program_lc in AUTH_PROGRAMS else DATASET)
    detail: dict[str, Any] = {}
    if env.priority is not None:
        facility, severity = env.priority // 8, env.priority % 8
        detail.update({
            "log.syslog.priority": env.priority, "log.syslog.facility.code": facility,
            "log.syslog.facility.name": FACILITIES[facility] if facility < len(FACILITIES) else None,
            "log.syslog.severity.code": severity, "log.syslog.severity.name": SEVERITIES[severity],
        })
    if env.parser == PARSER_RFC5424:
        detail.update({"log.syslog.version": env.version, "log.syslog.appname": env.program,
                       "log.syslog.procid": env.pid, "log.syslog.msgid": env.msgid,
                       "log.syslog.structured_data": structured_data(env.sd)})
    detail["system.auth.repeated"] = env.repeated
    return {
        "@timestamp": env.timestamp,
        "message": env.message or None,
        "tags": [TAG_TIMESTAMP_MISSING] if env.ts_nil else None,
        "event.kind": "event",
        "event.module": module,
        "event.dataset": dataset,
        "host.name": env.hostname,
        "host.hostname": env.hostname,
        "process.name": env.program,
        "process.pid": int64(env.pid) if env.pid and env.pid.isdigit() else None,
        "detail": detail,
    }


def _layers() -> dict[str, list[Source]]:
    by_layer: dict[str, list[Source]] = {layer: [] for layer in LAYERS}
    for s in sources():
        if s.transport == "syslog":
            by_layer[s.layer].append(s)
    for found in by_layer.values():
        found.sort(key=lambda s: s.order)
    return by_layer


_LAYERS: dict[str, list[Source]] | None = None


def parse(line: str, ingested_us: int | None, record_us: int | None) -> Event:
    """A syslog line -> an event: header, then the message layers of the sources that claim it."""
    global _LAYERS
    if _LAYERS is None:
        _LAYERS = _layers()
    env = envelope(line, ingested_us, record_us)
    program = env.program_lc
    program_dataset = None
    for s in _LAYERS["program"]:
        if s.programs is not None and program in s.programs and s.program_dataset is not None:
            program_dataset = s.program_dataset
            break
    event = header_event(env, program_dataset)
    layered: dict[str, Event] = {}
    for layer in LAYERS:
        for s in _LAYERS[layer]:
            if s.programs is not None and program not in s.programs:
                continue
            found = s.parse(env)
            if found is not None:
                layered[layer] = found
                break
    if "event" in layered and "payload" in layered:
        # A whole event's own fields mean more than the generic JSON keys: keep only the payload's detail.
        layered["payload"] = {"detail": layered["payload"].get("detail") or {}}
    if "event" in layered and layered["event"].get("process.name") is None:
        # name and pid as a pair: an event that names no process leaves the lower layers' pid too.
        layered["event"] = {k: v for k, v in layered["event"].items() if k != "process.pid"}
    for layer in LAYERS:
        if layer in layered:
            _overlay(event, layered[layer])
    if "event" in layered and layered["event"].get("process.name") is not None:
        event["process.pid"] = layered["event"].get("process.pid")  # name and pid as a pair, the event's own
    return event


def _overlay(event: Event, layer: Event) -> None:
    for path, value in layer.items():
        if path == "detail":
            event["detail"].update({k: v for k, v in (value or {}).items() if v is not None})
        elif value is not None:
            event[path] = value


SOURCE = Source(title="Syslog (RFC 3164 and RFC 5424) header and the lines no other source claims",
                transport="syslog", parse=lambda env: None, programs=(), layer="program", order=1000)
