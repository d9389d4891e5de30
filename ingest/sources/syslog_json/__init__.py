"""JSON payloads in syslog messages: ``@cee: {…}`` (CEE / lumberjack, rsyslog ``mmjsonparse``) and a bare JSON
object after the header (``<14>1 … app - - - {"user": "bob", …}``).

Every top-level key of the object is a detail key of the same name (nested objects and arrays as their JSON text,
numbers and booleans as text; JSON ``null`` leaves the key out), so nothing is lost whatever keys senders invent.
Keys with a known meaning are also mapped onto the core (:data:`KNOWN_KEYS`), ECS-style dotted keys
(``"source.ip"``) and nested ECS objects (``"source": {"ip": …}``) included; the level goes to detail ``log.level``.
A message that is not one JSON object is no payload (None): the line stays a plain syslog event. On a Windows
event's line the syslog source keeps only this layer's detail (the Windows layer gives the meaning of the keys).
"""

from __future__ import annotations

import json
from typing import Any

from ingest.sources import Event, Source
from ingest.sources.syslog import Envelope
from ingest.sources.values import blank_to_none

# Core path (or detail "log.level") -> JSON keys, first present wins. "a.b" keys are ECS-style dotted keys;
# ("a", "b") is key "b" of the nested object under key "a".
KNOWN_KEYS: dict[str, tuple[str | tuple[str, str], ...]] = {
    "message": ("msg", "message", "MESSAGE", "Message"),
    "user.name": ("user", "username", "user_name", "usr", "user.name", ("user", "name")),
    "source.address": ("src_ip", "source_ip", "srcip", "src", "client_ip", "remote_addr", "source.ip",
                       ("source", "ip")),
    "source.port": ("src_port", "source_port", "sport", "srcport", "source.port", ("source", "port")),
    "destination.address": ("dst_ip", "dest_ip", "destination_ip", "dstip", "dst", "destination.ip",
                            ("destination", "ip")),
    "destination.port": ("dst_port", "dest_port", "dport", "dstport", "destination.port",
                         ("destination", "port")),
    "process.name": ("pname", "process", "program", "process.name", ("process", "name")),
    "process.pid": ("pid", "process.pid", ("process", "pid")),
    "event.action": ("action", "event.action", ("event", "action")),
    "event.outcome": ("outcome", "event.outcome", ("event", "outcome")),
    "log.level": ("level", "severity", "log.level", ("log", "level")),
    "url.original": ("url", "url.original", ("url", "original")),
    "http.request.method": ("method", "http_method", "http.request.method"),
    "http.response.status_code": ("status", "status_code", "http.response.status_code"),
    "user_agent.original": ("user_agent", "useragent", "http_user_agent", "user_agent.original"),
}
_INTS = ("source.port", "destination.port", "http.response.status_code")
_INT_RANGE = {32: (-(1 << 31), 1 << 31), 64: (-(1 << 63), 1 << 63)}
_OUTCOMES = ("success", "failure", "unknown")
LEVEL = "log.level"


def blank(text: str | None) -> str | None:
    """None for None, blank (spaces only, as Spark's ``trim`` reads it) and ``-``."""
    if text is None:
        return None
    stripped = text.strip(" ")
    return text if stripped and stripped != "-" else None


def whole_number(text: str | None, bits: int = 32) -> int | None:
    """An integer written as one (``" 42"``, ``"-7"``; not ``"42.0"``) within ``bits``, else None: what the old
    parse's ``try_cast`` gave."""
    stripped = blank_to_none(text)
    if stripped is None:
        return None
    stripped = stripped.strip()
    digits = stripped[1:] if stripped[:1] in ("+", "-") else stripped
    if not digits.isascii() or not digits.isdigit():
        return None
    value = int(stripped)
    low, high = _INT_RANGE[bits]
    return value if low <= value < high else None


def _nested(text: str | None, key: str) -> str | None:
    """``key`` of the JSON object ``text`` as text (what ``get_json_object(text, '$.key')`` gives), else None."""
    if text is None or not text.lstrip().startswith("{"):
        return None
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    value = obj.get(key) if isinstance(obj, dict) else None
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _value(j: dict[str, str | None], key: str | tuple[str, str]) -> str | None:
    """A scalar: ``key``'s value unless it is a nested object or array, or ``(key, name)`` inside one."""
    if isinstance(key, tuple):
        return _nested(j.get(key[0]), key[1])
    v = j.get(key)
    return None if v is None or v.lstrip(" ").startswith(("{", "[")) else v


def _first(j: dict[str, str | None], keys: tuple[str | tuple[str, str], ...]) -> str | None:
    for key in keys:
        v = blank(_value(j, key))
        if v is not None:
            return v
    return None


def parse(env: Envelope) -> Event | None:
    """The payload's keys as detail plus the known keys' core fields; None when the message is no JSON object."""
    j = env.payload
    if j is None:
        return None
    event: Event = {}
    detail: dict[str, Any] = dict(j)
    for path, keys in KNOWN_KEYS.items():
        v = _first(j, keys)
        if v is None:
            continue
        if path in _INTS:
            event[path] = whole_number(v)
        elif path == "process.pid":
            event[path] = whole_number(v, 64)
        elif path == LEVEL:
            detail[LEVEL] = v.lower()
        elif path == "event.outcome":
            event[path] = v.lower() if v.lower() in _OUTCOMES else None
        else:
            event[path] = v
    event["detail"] = detail
    return event


SOURCE = Source(title="JSON payloads in syslog messages (@cee: and bare objects), any program",
                transport="syslog", parse=parse, programs=None, layer="payload")
