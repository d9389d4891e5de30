"""One raw record -> one event of the events contract, or the reason it goes to quarantine (plain Python).

This is the per-record path shared by the stream (``ingest.arrow_parse``: Arrow batches on the executors), by
``nightjar parse`` and by the golden-fixture tests::

    result = parse_record(value, topic="nightjar.raw.syslog", partition=0, offset=7, ingested_us=...)
    result.event        # flat {dotted core path: value, "detail": {...}}, or None
    result.error        # (parser, reason) when the record cannot be an event, else None

Steps: decode (size limit, UTF-8, line terminator and BOM) -> format (a record that starts with ``{`` or ``[`` is
JSON, anything else syslog, unless ``fmt`` names one) -> the source's parser (:mod:`ingest.sources`) -> the fields
every event gets (:func:`finalize`: ``event.id``, ``event.original``, validated addresses, ``related.*``).
A parser that raises anything but :class:`~ingest.sources.ParseFailure` is a bug, and still loses nothing: the
record goes to quarantine with the exception as its reason.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from ingest.events_contract import DETAIL
from ingest.sources import Event, ParseFailure, Source, sources
from ingest.sources import syslog as syslog_source
from ingest.sources.values import detail_text, hostname_or_none, ip_or_none, mac, non_empty

PARSER_DECODE = "decode"
FORMAT_AUTO = "auto"
FORMAT_SYSLOG = "syslog"
EVENT_ID_HEX_CHARS = 32  # 128 bits of SHA-256: collision-free in practice, short enough to read
DEFAULT_MAX_RECORD_BYTES = 64 * 1024
_SPACE = " \t\n\x0b\f\r"  # what a blank line may consist of and what may precede a JSON record
# The reason for a record that starts like JSON but is not JSON (parser: the forced or the fallback JSON source).
MALFORMED_JSON = "malformed JSON: not one complete JSON object with Zeek's field types"


@dataclass(frozen=True)
class Parsed:
    event: Event | None
    error: tuple[str, str] | None
    line: str | None  # the decoded text (None when the record could not be decoded)


def formats() -> tuple[str, ...]:
    """``--format`` choices: auto, syslog, and every JSON source by name."""
    return (FORMAT_AUTO, FORMAT_SYSLOG, *[s.name for s in _json_sources()])


@functools.cache
def _json_sources() -> tuple[Source, ...]:
    """The JSON sources in the order they are asked (once per process: the registry does not change)."""
    return tuple(sorted((s for s in sources() if s.transport == "json"), key=lambda s: s.order))


@functools.cache
def _fallback_json_source() -> Source:
    for s in _json_sources():
        if s.json_fallback:
            return s
    raise RuntimeError("no JSON source is marked json_fallback in ingest/sources")


def event_id(topic: str, partition: int, offset: int, source_file: str | None = None) -> str:
    """Deterministic ``event.id`` from the record's coordinates: a replay of the same record gets the same id."""
    parts = [topic, str(partition), str(offset)]
    if source_file is not None:
        parts.append(source_file)
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:EVENT_ID_HEX_CHARS]


def decode(value: bytes | None, max_record_bytes: int) -> str:
    """The record's text without line terminator or byte-order mark; :class:`ParseFailure` (``decode``) for an empty,
    oversized or non-UTF-8 record."""
    if value is None:
        raise ParseFailure(PARSER_DECODE, "empty record (no value)")
    if len(value) > max_record_bytes:
        raise ParseFailure(PARSER_DECODE, f"oversized record: {len(value)} bytes, the limit is {max_record_bytes}")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseFailure(PARSER_DECODE, "invalid UTF-8") from None
    line = text.rstrip("\r\n").lstrip("\ufeff")
    if not line.lstrip(_SPACE):
        raise ParseFailure(PARSER_DECODE, "empty record (blank line)")
    return line


def parse_line(line: str, fmt: str = FORMAT_AUTO, ingested_us: int | None = None,
               record_us: int | None = None) -> Event:
    """The source's event for a decoded line (without the fields :func:`finalize` adds)."""
    if fmt == FORMAT_SYSLOG or (fmt == FORMAT_AUTO and not line.lstrip(_SPACE).startswith(("{", "["))):
        return syslog_source.parse(line, ingested_us, record_us)
    forced = None if fmt == FORMAT_AUTO else _json_source(fmt)
    try:
        obj = json.loads(line)
    except ValueError:
        raise ParseFailure((forced or _fallback_json_source()).name, MALFORMED_JSON) from None
    if forced is None and isinstance(obj, dict):
        for s in _json_sources():
            if s.detect is not None and s.detect(obj):
                return s.parse(obj, line)
    # Looked up only here: a record some source detects needs no fallback source.
    return (forced or _fallback_json_source()).parse(obj, line)


def _json_source(name: str) -> Source:
    for s in _json_sources():
        if s.name == name:
            return s
    raise ValueError(f"format must be one of {', '.join(formats())}, not {name!r}")


def parse_record(value: bytes | None, *, topic: str, partition: int, offset: int, fmt: str = FORMAT_AUTO,
                 timestamp_us: int | None = None, ingested_us: int | None = None, source_file: str | None = None,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Parsed:
    """A raw Kafka record (or file line) -> :class:`Parsed`; never raises on bad data."""
    line = None
    try:
        line = decode(value, max_record_bytes)
        event = parse_line(line, fmt, ingested_us, timestamp_us)
    except ParseFailure as failure:
        return Parsed(None, (failure.parser, failure.reason), line)
    except Exception as exc:  # a parser bug must not stop the stream or lose the record
        return Parsed(None, ("parser", f"internal parser error: {type(exc).__name__}: {exc}"), line)
    finalize(event, line, event_id(topic, partition, offset, source_file), timestamp_us, ingested_us)
    return Parsed(event, None, line)


_SIDES = (("source.address", "source.ip", "source.domain", "source.mac"),
          ("destination.address", "destination.ip", "destination.domain", "destination.mac"))


def finalize(event: Event, line: str, eid: str, created_us: int | None, ingested_us: int | None) -> Event:
    """The fields every event gets whatever its source: id, original line, times, validated addresses (a parser
    puts what the log said in ``source.address`` / ``destination.address``), ``related.*``, ``network.type``, and the
    detail values as text. Absent and None mean the same (null); only values are set."""
    event["event.id"] = eid
    event["event.original"] = line
    event["event.created"] = created_us
    event["event.ingested"] = ingested_us
    get = event.get
    for address_key, ip_key, domain_key, mac_key in _SIDES:
        address = event.pop(address_key, None)
        given_ip, given_domain = get(ip_key), get(domain_key)
        if address is None and given_ip is None and given_domain is None:
            if get(mac_key) is not None:
                event[mac_key] = mac(event[mac_key])
            continue
        event[ip_key] = ip_or_none(given_ip or address)
        event[domain_key] = hostname_or_none(given_domain or address)
        if get(mac_key) is not None:
            event[mac_key] = mac(event[mac_key])
    source_ip, destination_ip = get("source.ip"), get("destination.ip")
    ips = [source_ip, destination_ip, *(get("related.ip") or ()), *(get("dns.resolved_ip") or ())]
    event["related.ip"] = non_empty(ips)
    event["related.user"] = non_empty([get("user.name"), get("user.effective.name"), *(get("related.user") or ())])
    hosts = [get("host.hostname"), get("source.domain"), get("destination.domain"), *(get("related.hosts") or ())]
    event["related.hosts"] = non_empty([h.lower() if isinstance(h, str) else h for h in hosts])
    either = source_ip or destination_ip
    if either is not None:
        event["network.type"] = "ipv6" if ":" in either else "ipv4"
    detail = get(DETAIL)
    if detail:
        texts = {}
        for key, value in detail.items():
            if type(value) is str:
                if value:
                    texts[key] = value
            elif (text := detail_text(value)) is not None:
                texts[key] = text
        event[DETAIL] = texts or None
    else:
        event[DETAIL] = None
    return event
