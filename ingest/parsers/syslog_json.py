"""JSON payloads in syslog messages: ``@cee: {…}`` (CEE / lumberjack, rsyslog ``mmjsonparse``) and a bare
JSON object after the header (``<14>1 … app - - - {"user": "bob", …}``).

The whole object is kept, so nothing is lost, in ``syslog.json``: a ``map<string, string>`` (one entry per
top-level key; nested objects and arrays as their JSON text, numbers and booleans as their text, JSON
``null`` as a null value). A string map is the Delta/Arrow-friendly shape: one fixed column type whatever
keys the senders invent, readable by every Delta reader, no schema evolution per new key.

Keys with a known meaning are also mapped onto ECS (:data:`KNOWN_KEYS`), ECS-style dotted keys
(``"source.ip"``) and nested ECS objects (``"source": {"ip": …}``) included. A payload that is not one valid
JSON object leaves ``syslog.json`` null: the line is still an event with its header and raw message.
Windows event logs in JSON (``nteventlogtype`` / ``EventID`` keys) are mapped by :mod:`.windows`.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from ingest.parsers import values as V
from ingest.parsers.field_map import Fields

CEE_PREFIX = "@cee:"
JSON_TYPE = "map<string, string>"

# ECS path -> JSON keys (first present wins). "a.b" keys are ECS-style dotted keys; ("a", "$.b") a nested object.
KNOWN_KEYS: dict[str, tuple] = {
    "message": ("msg", "message", "MESSAGE", "Message"),
    "user.name": ("user", "username", "user_name", "usr", "user.name", ("user", "$.name")),
    "source.address": ("src_ip", "source_ip", "srcip", "src", "client_ip", "remote_addr", "source.ip",
                       ("source", "$.ip")),
    "source.port": ("src_port", "source_port", "sport", "srcport", "source.port", ("source", "$.port")),
    "destination.address": ("dst_ip", "dest_ip", "destination_ip", "dstip", "dst", "destination.ip",
                            ("destination", "$.ip")),
    "destination.port": ("dst_port", "dest_port", "dport", "dstport", "destination.port",
                         ("destination", "$.port")),
    "process.name": ("pname", "process", "program", "process.name", ("process", "$.name")),
    "process.pid": ("pid", "process.pid", ("process", "$.pid")),
    "event.action": ("action", "event.action", ("event", "$.action")),
    "event.outcome": ("outcome", "event.outcome", ("event", "$.outcome")),
    "log.level": ("level", "severity", "log.level", ("log", "$.level")),
    "url.original": ("url", "url.original", ("url", "$.original")),
    "http.request.method": ("method", "http_method", "http.request.method"),
    "http.response.status_code": ("status", "status_code", "http.response.status_code"),
    "user_agent.original": ("user_agent", "useragent", "http_user_agent", "user_agent.original"),
}
_OUTCOMES = ("success", "failure", "unknown")


def payload(body: Column) -> Column:
    """The JSON text of a message that carries one (``@cee:`` prefix or a leading ``{``), else null."""
    trimmed = F.ltrim(body)
    return (F.when(trimmed.startswith(CEE_PREFIX), F.trim(F.substring(trimmed, len(CEE_PREFIX) + 1, 1 << 30)))
            .when(trimmed.startswith("{"), F.rtrim(trimmed)))


def parse(body: Column) -> Column:
    """``map<string, string>`` of a JSON payload; null when there is none or it is not one JSON object."""
    text = payload(body)
    return F.when(text.isNotNull() & text.endswith("}"),
                  F.from_json(text, JSON_TYPE, {"mode": "PERMISSIVE"}))


def value(j: Column, key: str | tuple[str, str]) -> Column:
    """A scalar value: ``key`` of ``j`` (not a nested object or array), or ``(key, json_path)`` inside one."""
    if isinstance(key, tuple):
        return F.get_json_object(F.try_element_at(j, F.lit(key[0])), key[1])
    v = F.try_element_at(j, F.lit(key))
    return F.when(~F.ltrim(v).startswith("{") & ~F.ltrim(v).startswith("["), v)


def first(j: Column, keys: tuple) -> Column:
    return F.coalesce(*[V.blank_to_null(value(j, k)) for k in keys])


def fields(j: Column) -> Fields:
    """ECS fields of a syslog row whose message is a JSON object ``j`` (all null when ``j`` is null)."""
    out: Fields = {"syslog.json": j}
    for path, keys in KNOWN_KEYS.items():
        v = first(j, keys)
        if path.endswith(".port") or path == "http.response.status_code":
            v = V.to_int(v)
        elif path == "process.pid":
            v = v.try_cast("bigint")
        elif path == "log.level":
            v = F.lower(v)
        elif path == "event.outcome":
            v = F.when(F.lower(v).isin(*_OUTCOMES), F.lower(v))
        out[path] = v
    return out
