"""RFC 5424 syslog headers: ``<PRI>VERSION TIMESTAMP HOSTNAME APP-NAME PROCID MSGID STRUCTURED-DATA [MSG]``.

Variants handled: ``-`` (NILVALUE) in any header field, structured data with several elements, escaped
``\\"``, ``\\\\`` and ``\\]`` in parameter values and repeated parameter names (their values are joined with
``,``), fractional seconds up to nanoseconds (kept to the microsecond), ``Z`` or ``±hh:mm`` offsets, and
the UTF-8 byte-order mark that RFC 5424 puts before a UTF-8 MSG. A NILVALUE timestamp means the sender did
not know the time: the record's Kafka timestamp is used instead and the event is tagged
``syslog_timestamp_missing``. Any other timestamp that is not RFC 3339 quarantines the record.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from ingest.parsers.regex_forms import Pattern

# "<PRI>digit " is how a line announces RFC 5424; it then must parse as RFC 5424 (no RFC 3164 fallback).
PREFIX = r"^<[0-9]{1,3}>[1-9][0-9]{0,2} "
_SD_NAME = r'[^\s=\]"]+'
_SD_VALUE = r'"(?:[^"\\]|\\.)*"'
_SD_ELEMENT = rf"\[{_SD_NAME}(?: +{_SD_NAME}={_SD_VALUE})* *\]"
HEADER = Pattern(
    "rfc5424",
    r"<(?<pri>[0-9]{1,3})>(?<version>[1-9][0-9]{0,2}) (?<ts>\S+) (?<host>\S+) (?<app>\S+) (?<procid>\S+) "
    rf"(?<msgid>\S+) (?<sd>-|(?:{_SD_ELEMENT})+)(?: (?<msg>.*))?",
)
TIMESTAMP = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}:[0-9]{2})\z"
_ELEMENT_PARTS = rf"\[({_SD_NAME})((?: +{_SD_NAME}={_SD_VALUE})*) *\]"
_PARAM = rf"({_SD_NAME})=\"((?:[^\"\\]|\\.)*)\""


def looks_like(line: Column) -> Column:
    return line.rlike(PREFIX)


def timestamp(text: Column) -> Column:
    """An RFC 3339 timestamp (as RFC 5424 restricts it) -> timestamp; null when not one."""
    upper = F.upper(text)
    return F.when(upper.rlike(TIMESTAMP), F.try_to_timestamp(upper))


def structured_data(sd: Column) -> Column:
    """``[id p="v" …][id2 …]`` -> ``map<id, map<param, value>>`` (null for ``-``).

    Keys are made unique before building maps (Spark rejects duplicate map keys): repeated SD-IDs are merged,
    repeated parameter names have their values joined with ``,``.
    """
    ids = F.regexp_extract_all(sd, F.lit(_ELEMENT_PARTS), 1)
    params = F.regexp_extract_all(sd, F.lit(_ELEMENT_PARTS), 2)
    elements = F.arrays_zip(ids.alias("id"), params.alias("params"))

    def param_map(text: Column) -> Column:
        names = F.regexp_extract_all(text, F.lit(_PARAM), 1)
        values = F.transform(F.regexp_extract_all(text, F.lit(_PARAM), 2),
                             lambda v: F.regexp_replace(v, r'\\(["\\\]])', "$1"))
        pairs = F.arrays_zip(names.alias("n"), values.alias("v"))
        unique = F.array_distinct(names)
        joined = F.transform(unique, lambda n: F.array_join(
            F.transform(F.filter(pairs, lambda p: p["n"] == n), lambda p: p["v"]), ","))
        return F.map_from_arrays(unique, joined)

    unique_ids = F.array_distinct(ids)
    maps = F.transform(unique_ids, lambda i: param_map(F.array_join(
        F.transform(F.filter(elements, lambda e: e["id"] == i), lambda e: e["params"]), " ")))
    return F.when(sd.isNotNull() & (sd != F.lit("-")), F.map_from_arrays(unique_ids, maps))


def strip_bom(msg: Column) -> Column:
    """``msg`` without a leading byte-order mark. A prefix test and a substring, not a regex: the message is
    long on some lines (Windows events) and this expression is repeated wherever the envelope reads it."""
    return F.when(msg.startswith("\ufeff"), F.substring(msg, 2, 1 << 30)).otherwise(msg)
