"""Zeek JSON logs (one JSON object per line): the ECS core, and every Zeek field in ``detail`` under Zeek's name.

Variants read:

* flattened dotted keys (``"id.orig_h"``, Zeek's default) and a nested ``"id": {"orig_h": …}`` object;
* ``ts`` as ISO 8601 (``2018-03-24T17:15:20.865716Z``) or epoch seconds (``1521911720.865716``, rounded half-up
  to the microsecond);
* IPv4 and IPv6 addresses; sets and vectors as JSON arrays; numbers written as text or as numbers;
* no ``_path`` (logs written to per-type files): inferred from fields only that log has.

Each Zeek log has its field list in ``fields/<log>.yml`` (dataset ``zeek.<log>``): the detail keys are Zeek's own
field names (what SigmaHQ's Zeek rules name) converted to the type listed there, with Elastic's path as
alias; the few values derived from Zeek's fields (``dns.answers``, ``url.full``, ``email.*.address``, ...) are detail
keys under their ECS path. Fields no list names still go to detail as text (the datasets are open). Any other
``_path`` is an event too: time, ``uid``, the 4-tuple and its fields as text.

Quarantined (parser ``zeek``): not one JSON object, or an array field (:data:`ARRAY_FIELDS`) that is not an array, no
``_path`` that can be inferred, no ``ts``, unreadable ``ts``.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from ingest.events_contract import iso_micros
from ingest.sources import Event, ParseFailure, Source
from ingest.sources.record_parser import MALFORMED_JSON
from ingest.sources.values import (
    EPOCH,
    blank_to_none,
    detail_text,
    ip_or_none,
    mac,
    micros,
    non_empty,
    safe_micros,
    to_bool,
)

PARSER = "zeek"
MALFORMED = MALFORMED_JSON  # what record_parser says of a record that is not JSON at all
NO_PATH = "no _path field, and the log type cannot be inferred from the fields"
NO_TS = "no ts field"
FIELDS_DIR = Path(__file__).resolve().parent / "fields"

# Fields Zeek writes as arrays (sets and vectors): any other JSON value there makes the record malformed.
ARRAY_FIELDS = frozenset((
    "tunnel_parents", "answers", "TTLs", "uids", "msg_types", "tags", "proxied", "orig_fuids", "orig_filenames",
    "orig_mime_types", "resp_fuids", "resp_filenames", "resp_mime_types", "cert_chain_fps",
    "client_cert_chain_fps", "actions", "client_channels", "tx_hosts", "rx_hosts", "conn_uids", "analyzers",
    "san.dns", "san.uri", "san.email", "san.ip", "rcptto", "to", "cc", "fuids", "section_names",
))
PROTOCOLS = {**{p: p for p in ("dns", "http", "ssh", "ntp", "rdp", "dhcp", "kerberos", "ntlm", "dce_rpc", "smtp",
                               "ftp")},
             "ssl": "tls", "smb_files": "smb", "smb_mapping": "smb"}
# (log, any of these fields present), tried in this order, for records without _path.
INFERENCE = (
    ("conn", ("conn_state", "orig_pkts", "history")),
    ("dhcp", ("msg_types", "assigned_addr", "lease_time")),
    ("dns", ("qtype_name", "qclass_name", "rcode_name", "query")),
    ("http", ("method", "status_code", "uri", "user_agent")),
    ("ssl", ("ssl_history", "cipher", "validation_status", "cert_chain_fps")),
    ("ssh", ("auth_attempts", "auth_success", "kex_alg")),
    ("notice", ("note",)),
    ("ntp", ("stratum", "ref_id", "xmt_time")),
    ("rdp", ("security_protocol", "cookie", "keyboard_layout")),
)
_WEIRD_HINTS = ("addl", "peer", "notice")
_ID_KEYS = ("orig_h", "orig_p", "resp_h", "resp_p")

_EPOCH = re.compile(r"-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
_ISO_GATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ]")
_ISO = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{1,2})(?::([0-9]{1,2})(?::([0-9]{1,2})(?:\.([0-9]*))?)?)?"
                  r" *(Z|UTC|GMT|[+-][0-9]{1,2}(?::?[0-9]{2})?)?")
_CANONICAL = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{6})?Z")
_CANONICAL_MICROS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z")
_ONE_MICRO = dt.timedelta(microseconds=1)
_INT_TEXT = re.compile(r"\s*[+-]?[0-9]+\s*")
_MICRO = Decimal("0.000001")
_NANO = Decimal("0.000000001")
_DECIMAL_38_6_LIMIT = Decimal(10) ** 32
_DECIMAL_38_9_LIMIT = Decimal(10) ** 29
_INT32 = 1 << 31
_INT64 = 1 << 63


# --- Values: every scalar read as the text of its JSON value, then converted to the listed type. ------------------

def text(value: Any) -> str | None:
    """A JSON value as text: strings as they are, other values as their JSON text (compact)."""
    return value if isinstance(value, str) else detail_text(value)


def string(value: Any) -> str | None:
    """A string field: Zeek's ``-`` and blank mean unset."""
    if value.__class__ is str:  # the common case, without the calls
        stripped = value.strip()
        return value if stripped and stripped != "-" else None
    return blank_to_none(text(value))


def _whole(value: Any, limit: int) -> int | None:
    """``try_cast`` of a number or its text to an integer type (ANSI): whole numbers only, within ``±limit``."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _INT_TEXT.fullmatch(value):
        number = int(value)
    else:
        return None
    return number if -limit <= number < limit else None


def to_int(value: Any) -> int | None:
    """``try_cast(… as int)``."""
    return _whole(value, _INT32)


def to_int64(value: Any) -> int | None:
    """``try_cast(… as bigint)``."""
    return _whole(value, _INT64)


def _decimal(value: Any, quantum: Decimal, limit: Decimal) -> Decimal | None:
    """``try_cast(… as decimal(38, scale))``: rounded half-up to the scale; None beyond the precision."""
    if value is None or isinstance(value, bool):
        return None
    source = repr(value) if isinstance(value, float) else str(value).strip()
    if isinstance(value, str) and not _EPOCH.fullmatch(source):
        return None
    try:
        number = Decimal(source).quantize(quantum, rounding=ROUND_HALF_UP)
    except (InvalidOperation, ValueError):
        return None
    return number if abs(number) < limit else None


def to_long(value: Any) -> int | None:
    """``coalesce(try_cast(… as bigint), try_cast(try_cast(… as decimal(38,6)) as bigint))``."""
    number = to_int64(value)
    if number is not None:
        return number
    exact = _decimal(value, _MICRO, _DECIMAL_38_6_LIMIT)
    return None if exact is None else to_int64(int(exact))


def to_double(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        return float(value.strip())
    except ValueError:
        return None


def seconds_to_nanos(value: Any) -> int | None:
    """``event.duration`` from seconds: ``try_cast(decimal(38,9)) * 1e9`` as bigint."""
    exact = _decimal(value, _NANO, _DECIMAL_38_9_LIMIT)
    return None if exact is None else to_int64(int(exact * 1_000_000_000))


def timestamp(value: Any) -> int | None:
    """Epoch seconds (a number, or its text) or ISO 8601 -> epoch microseconds; None when unreadable."""
    if value is None:
        return None
    if isinstance(value, str):
        if _ISO_GATE.match(value):
            if _CANONICAL.fullmatch(value):  # what Zeek writes: no need for the general form
                try:
                    return safe_micros((dt.datetime.fromisoformat(value) - EPOCH) // _ONE_MICRO)
                except ValueError:
                    return None
            return _iso(value.upper())
        if not _EPOCH.fullmatch(value):
            return None
    exact = _decimal(value, _MICRO, _DECIMAL_38_6_LIMIT)
    return None if exact is None else safe_micros(to_int64(int(exact * 1_000_000)))


def _iso(value: str) -> int | None:
    m = _ISO.fullmatch(value)
    if m is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    try:
        moment = dt.datetime(int(year), int(month), int(day), int(hour), int(minute or 0), int(second or 0),
                             int((fraction or "0")[:6].ljust(6, "0")), tzinfo=dt.UTC)
    except ValueError:
        return None
    offset = 0
    if zone and zone[0] in "+-":
        digits = zone[1:].replace(":", "")
        hours, minutes = (digits, "0") if len(digits) <= 2 else (digits[:-2], digits[-2:])
        offset = (int(hours) * 60 + int(minutes)) * 60 * (1 if zone[0] == "+" else -1)
    return safe_micros(micros(moment) - offset * 1_000_000)


def iso_text(value: Any) -> str | None:
    """A timestamp detail value: ISO 8601 text of :func:`timestamp` of a string field."""
    if value.__class__ is str and _CANONICAL_MICROS.fullmatch(value) and timestamp(value) is not None:
        return value  # already the text iso_micros writes
    moment = timestamp(string(value))
    return None if moment is None else iso_micros(moment)


def texts(value: Any) -> list[str | None] | None:
    """An array<string> field: each element as text (None when not an array)."""
    return [v if v.__class__ is str else text(v) for v in value] if isinstance(value, list) else None


def array(value: Any) -> list[str] | None:
    """An array field without nulls, empty strings and duplicates, or None."""
    return non_empty(texts(value) or [])


def first(value: Any) -> str | None:
    return text(value[0]) if isinstance(value, list) and value else None


CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "string": string, "int": to_int, "bigint": to_long, "double": to_double, "boolean": to_bool,
    "timestamp": iso_text, "array<string>": array,
}


# --- The field lists: which Zeek fields land in the core (no detail copy), and each detail field's conversion. ----

def _load() -> tuple[dict[str, dict[str, Callable[[Any], Any]]], dict[str, frozenset[str]]]:
    converters: dict[str, dict[str, Callable[[Any], Any]]] = {}
    consumed: dict[str, frozenset[str]] = {}
    for path in sorted(FIELDS_DIR.glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        names = doc.get("datasets") or [doc["dataset"]]
        table = {str(f["name"]): CONVERTERS[str(f["type"]).replace(" ", "")] for f in doc["fields"]
                 if not f.get("core") and str(f["type"]).replace(" ", "") in CONVERTERS}
        core = frozenset(str(f["name"]) for f in doc["fields"] if f.get("core"))
        for name in names:
            converters[name.removeprefix("zeek.")] = table
            consumed[name.removeprefix("zeek.")] = core
    return converters, consumed


DETAIL_TYPES, CORE_NAMES = _load()
_OTHER = "other"  # the field list of logs without their own (fields/other.yml)


def detect(obj: Any) -> bool:
    """A JSON object with ``_path``, or one whose log type can be inferred from its fields (:data:`INFERENCE`)."""
    return isinstance(obj, dict) and ("_path" in obj or _inferred(obj) is not None)


def _inferred(obj: dict[str, Any]) -> str | None:
    for log, hints in INFERENCE:
        for hint in hints:
            if obj.get(hint) is not None:
                return log
    if obj.get("name") is not None and any(obj.get(h) is not None for h in _WEIRD_HINTS):
        return "weird"
    return None


def parse(obj: Any, line: str) -> Event:
    """One Zeek JSON record -> an event; :class:`ParseFailure` (parser ``zeek``) for a record that is not one object
    with Zeek's field types, whose log type cannot be inferred, or without a readable ``ts``."""
    if not isinstance(obj, dict):
        raise ParseFailure(PARSER, MALFORMED)
    for key in ARRAY_FIELDS.intersection(obj):
        if obj[key] is not None and not isinstance(obj[key], list):
            raise ParseFailure(PARSER, MALFORMED)
    path_text = string(obj.get("_path"))
    log = path_text.lower() if path_text is not None else _inferred(obj)
    if log is None:
        raise ParseFailure(PARSER, NO_PATH)
    raw_ts = obj.get("ts")
    if raw_ts is None:
        raise ParseFailure(PARSER, NO_TS)
    ts = timestamp(raw_ts)
    if ts is None:
        raise ParseFailure(PARSER, f"unreadable ts '{text(raw_ts)}'")

    nested = obj.get("id")
    nested = nested if isinstance(nested, dict) else None
    ids = {k: obj.get(f"id.{k}") for k in _ID_KEYS}
    if nested is not None:
        ids = {k: ids[k] if ids[k] is not None else text(nested.get(k)) for k in _ID_KEYS}
    orig_h = string(obj.get("id.orig_h")) or (text(nested.get("orig_h")) if nested else None)
    resp_h = string(obj.get("id.resp_h")) or (text(nested.get("resp_h")) if nested else None)
    proto = string(obj.get("proto"))
    detail: dict[str, Any] = {}
    event: Event = {
        "@timestamp": ts,
        "event.kind": "event",
        "event.module": "zeek",
        "event.dataset": f"zeek.{log}",
        "event.category": ["network"],
        "event.type": ["protocol"],
        "source.address": orig_h,
        "source.port": to_int(ids["orig_p"]),
        "destination.address": resp_h,
        "destination.port": to_int(ids["resp_p"]),
        "network.transport": proto.lower() if proto else None,
        "network.protocol": PROTOCOLS.get(log),
        "detail": detail,
    }
    types = DETAIL_TYPES.get(log) or DETAIL_TYPES[_OTHER]
    consumed = CORE_NAMES.get(log) or CORE_NAMES[_OTHER]
    for key, value in obj.items():
        if key in consumed or (key == "id" and nested is not None):
            continue
        convert = types.get(key)
        detail[key] = convert(value) if convert is not None else value
    detail["uid"] = string(obj.get("uid"))
    per_log = LOGS.get(log)
    if per_log is not None:
        per_log(obj, event, detail)
    return event


# --- Per log: the ECS fields and the derived detail values. ----------------------------------------------------------

def _outcome(success: bool | None) -> str | None:
    return None if success is None else ("success" if success else "failure")


def _both(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    total = (a or 0) + (b or 0)
    return total if -_INT64 <= total < _INT64 else None


_CONN_SUCCESS = frozenset(("SF", "S1", "S2", "S3", "RSTO", "RSTR"))
_CONN_FAILURE = frozenset(("S0", "REJ", "RSTOS0", "RSTRH", "SH", "SHR"))


def _conn(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    state = detail.get("conn_state")
    service = string(obj.get("service"))
    orig_bytes, resp_bytes = to_long(obj.get("orig_bytes")), to_long(obj.get("resp_bytes"))
    event.update({
        "event.type": ["connection", "end"],
        "event.action": "network_flow",
        "event.outcome": "success" if state in _CONN_SUCCESS else ("failure" if state in _CONN_FAILURE else None),
        "event.duration": seconds_to_nanos(obj.get("duration")),
        "network.protocol": service.split(",", 1)[0].lower() if service is not None else None,
        "source.bytes": orig_bytes,
        "destination.bytes": resp_bytes,
        "network.bytes": _both(orig_bytes, resp_bytes),
        "source.mac": string(obj.get("orig_l2_addr")),
        "destination.mac": string(obj.get("resp_l2_addr")),
        "network.community_id": string(obj.get("community_id")),
    })
    detail["network.packets"] = _both(detail.get("orig_pkts"), detail.get("resp_pkts"))


_DNS_FLAGS = ("AA", "TC", "RD", "RA")


def _dns(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    rcode = string(obj.get("rcode_name"))
    answers = texts(obj.get("answers"))
    ttls = texts(obj.get("TTLs")) or []
    event.update({
        "event.type": ["connection", "protocol", "info"],
        "event.action": "dns_query",
        "event.outcome": None if rcode is None else ("success" if rcode == "NOERROR" else "failure"),
        "dns.question.name": string(obj.get("query")),
        "dns.question.type": string(obj.get("qtype_name")),
        "dns.response_code": rcode,
        "dns.resolved_ip": non_empty([ip_or_none(a) for a in answers or []]),
    })
    detail["dns.type"] = "answer" if rcode is not None or answers is not None else "query"
    detail["dns.header_flags"] = non_empty([f for f in _DNS_FLAGS if to_bool(text(obj.get(f)))])
    if answers:
        detail["dns.answers"] = [{"data": a, "ttl": to_long(ttls[i]) if i < len(ttls) else None}
                                 for i, a in enumerate(answers)]


def _dhcp(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    types = texts(obj.get("msg_types")) or []
    assigned = string(obj.get("assigned_addr"))
    last = types[-1] if types else None
    server = string(obj.get("server_addr"))
    event.update({
        "event.type": ["connection", "protocol"],
        "network.transport": "udp",
        "event.action": f"dhcp{last or ''}".lower(),
        "event.outcome": "failure" if "NAK" in types else ("success" if "ACK" in types else None),
        "event.duration": seconds_to_nanos(obj.get("duration")),
        "source.address": assigned or string(obj.get("client_addr")),
        "source.port": to_int(obj.get("client_port")),
        "source.mac": string(obj.get("mac")),
        "destination.address": server,
        "destination.port": to_int(obj.get("server_port")),
    })
    ips = [ip_or_none(detail.get(k)) for k in ("assigned_addr", "requested_addr", "server_addr")]
    for key, ip in zip(("assigned_addr", "requested_addr", "server_addr"), ips, strict=True):
        if ip is not None:
            detail[key] = ip
    if detail.get("mac") is not None:
        detail["mac"] = mac(detail["mac"]) or detail["mac"]
    event["related.ip"] = ips
    event["related.hosts"] = [detail.get("host_name")]
    detail["uid"] = first(obj.get("uids"))


_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_URL_PATH = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://[^/]*)?([^?#]*)")
_URL_QUERY = re.compile(r"\?([^#]*)")
_HOST_PORT = re.compile(r":[0-9]+$")
_BRACKETS = re.compile(r"^\[(.*)\]$")


def _http(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    host, uri = string(obj.get("host")), string(obj.get("uri"))
    status = to_int(obj.get("status_code"))
    method = string(obj.get("method"))
    domain = _BRACKETS.sub(r"\1", _HOST_PORT.sub("", host)) if host is not None else None
    query = _URL_QUERY.search(uri) if uri is not None else None
    url_path = _URL_PATH.match(uri).group(1) if uri is not None else None
    event.update({
        "event.category": ["network", "web"],
        "event.type": ["connection", "protocol"],
        "network.transport": "tcp",
        "event.action": method.lower() if method else None,
        "event.outcome": None if status is None else ("success" if status < 400 else "failure"),
        "url.original": uri,
        "url.domain": domain,
        "url.path": url_path or None,
        "destination.domain": domain,
        "http.request.method": method,
        "http.response.status_code": status,
        "user_agent.original": string(obj.get("user_agent")),
        "user.name": string(obj.get("username")),
    })
    if uri is not None and _URL_SCHEME.match(uri):
        detail["url.full"] = uri
    elif host is not None and uri is not None:
        detail["url.full"] = f"http://{host}{uri}"
    detail["url.query"] = (query.group(1) or None) if query else None
    detail["http.response.mime_type"] = first(obj.get("resp_mime_types"))


_TLS_VERSION = re.compile(r"(TLS|SSL|DTLS)v([0-9])([0-9])?$")


def _ssl(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    version = string(obj.get("version"))
    parts = _TLS_VERSION.match(version) if version is not None else None
    sni = string(obj.get("server_name"))
    event.update({
        "event.type": ["connection", "protocol"],
        "event.action": "tls_handshake",
        "network.transport": "tcp",
        "event.outcome": _outcome(detail.get("established")),
        "tls.version": f"{parts.group(2)}.{parts.group(3) or '0'}" if parts else None,
        "tls.client.server_name": sni,
        "tls.client.ja3": string(obj.get("ja3")),
        "tls.server.ja3s": string(obj.get("ja3s")),
        "destination.domain": sni,
    })
    detail["tls.version_protocol"] = parts.group(1).lower() if parts else None


def _ssh(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    success = detail.get("auth_success")
    event.update({
        "event.type": ["connection", "protocol"],
        "network.transport": "tcp",
        "event.category": ["network"] if success is None else ["network", "authentication"],
        "event.action": "ssh_connection" if success is None else "ssh_login",
        "event.outcome": _outcome(success),
    })


_LEADING_DIGITS = re.compile(r"[0-9]+")


def _notice(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    note = string(obj.get("note"))
    port = _LEADING_DIGITS.match(text(obj.get("p")) or "")
    event.update({
        "event.kind": "alert",
        "event.category": ["intrusion_detection"],
        "event.type": ["info"],
        "event.action": note,
        "message": string(obj.get("msg")),
        "source.address": event["source.address"] or string(obj.get("src")),
        "destination.address": event["destination.address"] or string(obj.get("dst")),
    })
    if event["destination.port"] is None and port is not None:
        event["destination.port"] = to_int(port.group(0))


def _weird(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    name = string(obj.get("name"))
    event.update({
        "event.type": ["info"],
        "event.action": name,
        "message": ": ".join(p for p in (name, string(obj.get("addl"))) if p is not None),
    })


def _udp(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event["network.transport"] = "udp"


def _rdp(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event["event.type"] = ["connection", "protocol"]
    event["network.transport"] = "tcp"


def _files(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event.update({
        "event.category": ["file"],
        "event.type": ["info"],
        "source.address": first(obj.get("tx_hosts")),
        "destination.address": first(obj.get("rx_hosts")),
        "event.duration": seconds_to_nanos(obj.get("duration")),
        "file.name": string(obj.get("filename")),
    })
    total = detail.get("total_bytes")
    detail["file.size"] = total if total is not None else detail.get("seen_bytes")
    detail["uid"] = first(obj.get("conn_uids"))


_SANS = ("san.dns", "san.ip", "san.email", "san.uri")


def _x509(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event["event.type"] = ["info"]
    detail["tls.server.x509.alternative_names"] = non_empty([a for k in _SANS for a in texts(obj.get(k)) or []])


_SMB_ACTION = re.compile(r"^SMB::FILE_")
_TRAILING_BACKSLASHES = re.compile(r"\\+$")


def _smb_files(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    action, name, directory = string(obj.get("action")), string(obj.get("name")), string(obj.get("path"))
    event.update({
        "event.category": ["file", "network"],
        "event.type": ["info"],
        "network.transport": "tcp",
        "event.action": _SMB_ACTION.sub("", action).lower() if action is not None else None,
        "file.name": name,
        "file.path": None if name is None else "\\".join(
            p for p in (_TRAILING_BACKSLASHES.sub("", directory) if directory is not None else None, name)
            if p is not None),
    })


def _tcp_info(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event.update({"event.type": ["info"], "network.transport": "tcp"})


def _kerberos(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    client = string(obj.get("client"))
    event.update({
        "event.category": ["network", "authentication"],
        "event.type": ["info"],
        "event.action": string(obj.get("request_type")),
        "event.outcome": _outcome(detail.get("success")),
        "user.name": client.split("/", 1)[0] if client is not None else None,
        "user.domain": client.rsplit("/", 1)[1] if client is not None and "/" in client else None,
    })


def _ntlm(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event.update({
        "event.category": ["network", "authentication"],
        "event.type": ["info"],
        "event.outcome": _outcome(detail.get("success")),
        "user.name": string(obj.get("username")),
        "user.domain": string(obj.get("domainname")),
    })


def _dce_rpc(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event.update({"event.type": ["connection", "protocol"], "event.action": string(obj.get("operation"))})


_ANGLE_ADDRESS = re.compile(r"<([^<>]*)>")


def _address(value: str | None) -> str | None:
    """``"Name" <user@example.com>`` / ``<user@example.com>`` / ``user@example.com`` -> ``user@example.com``."""
    if value is None:
        return None
    m = _ANGLE_ADDRESS.search(value)
    return m.group(1) if m and m.group(1) else value.strip(" ")


def _smtp(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    sender, reply_to = string(obj.get("from")), string(obj.get("reply_to"))
    event.update({
        "event.category": ["network", "email"],
        "event.type": ["connection", "protocol"],
        "network.transport": "tcp",
        "user_agent.original": string(obj.get("user_agent")),
    })
    detail.update({
        "email.from.address": [_address(sender)] if sender is not None else None,
        "email.to.address": non_empty([_address(a) for a in texts(obj.get("to")) or []]),
        "email.cc.address": non_empty([_address(a) for a in texts(obj.get("cc")) or []]),
        "email.reply_to.address": [_address(reply_to)] if reply_to is not None else None,
        "email.sender.address": _address(string(obj.get("mailfrom"))),
    })


def _ftp(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    command, reply = string(obj.get("command")), detail.get("reply_code")
    event.update({
        "event.type": ["connection", "protocol"],
        "network.transport": "tcp",
        "event.action": command.lower() if command else None,
        "event.outcome": None if reply is None else ("success" if reply < 400 else "failure"),
        "user.name": string(obj.get("user")),
    })


_VERSION_PARTS = ("version.major", "version.minor", "version.minor2", "version.minor3")


def _software(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event.update({
        "event.type": ["info"],
        "source.address": string(obj.get("host")),
        "source.port": to_int(obj.get("host_p")),
        "url.original": string(obj.get("url")),
    })
    detail["version.full"] = ".".join(p for k in _VERSION_PARTS if (p := string(obj.get(k))) is not None) or None


def _known_hosts(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event.update({"event.category": ["network", "host"], "event.type": ["info"],
                  "source.address": string(obj.get("host"))})


def _known_services(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    proto = string(obj.get("port_proto"))
    service = obj.get("service")
    event.update({
        "event.type": ["info"],
        "destination.address": string(obj.get("host")),
        "destination.port": to_int(obj.get("port_num")),
        "network.transport": proto.lower() if proto else None,
    })
    detail["service"] = array(service) if isinstance(service, list) else (
        [s] if (s := string(service)) is not None else None)


def _file_info(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    event.update({"event.category": ["file"], "event.type": ["info"]})


def _file_id(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    """x509 and pe: ``id`` is the file id (a string), not the 4-tuple; they have no session."""
    detail["uid"] = None
    if not isinstance(obj.get("id"), dict):
        detail["id"] = string(obj.get("id"))


def _chain(*steps: Callable[[dict[str, Any], Event, dict[str, Any]], None]) -> Callable[..., None]:
    def run(obj: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
        for step in steps:
            step(obj, event, detail)
    return run


LOGS: dict[str, Callable[[dict[str, Any], Event, dict[str, Any]], None]] = {
    "conn": _conn, "dns": _dns, "dhcp": _dhcp, "http": _http, "ssl": _ssl, "ssh": _ssh, "notice": _notice,
    "weird": _weird, "ntp": _udp, "rdp": _rdp, "files": _files, "x509": _chain(_x509, _file_id),
    "smb_files": _smb_files, "smb_mapping": _tcp_info, "kerberos": _kerberos, "ntlm": _ntlm, "dce_rpc": _dce_rpc,
    "smtp": _smtp, "ftp": _ftp, "software": _software, "known_hosts": _known_hosts,
    "known_services": _known_services, "pe": _chain(_file_info, _file_id),
}

SOURCE = Source(title="Zeek JSON logs (conn, dns, dhcp, http, ssl, ssh, notice, weird, ntp, rdp, files, x509, smb, "
                      "kerberos, ntlm, dce_rpc, smtp, ftp, software, known_*, pe, and any other _path)",
                transport="json", parse=parse, detect=detect, json_fallback=True, order=1000)
