"""Value normalization shared by every source's parser (plain Python, no Spark).

The rules (docs/events_contract.md, "From a raw record to an event"):

* ``*.ip`` holds only a valid IPv4 (dotted quad, no leading zeros) or IPv6 address, IPv6 lower-cased; anything else
  (a host name from ``sshd`` with ``UseDNS yes``, garbage) leaves ``*.ip`` null, and a host name goes to
  ``*.domain`` (lower-cased, without the root dot).
* MAC addresses follow ECS: upper-case hex pairs joined by hyphens (``00-0C-29-AA-0B-01``), from the colon, hyphen
  or Cisco-dot spellings; ISC dhcpd's unpadded octets (``0:c:29:aa:b:1``) are padded.
* Numbers and booleans are read leniently: text that is not one gives ``None``, never an exception.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import json
import re
from typing import Any

_IPV4 = re.compile(r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}")
_HOSTNAME = re.compile(r"(?=.{1,253}\Z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9_])?"
                       r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9_])?)*\.?")
_MAC_SEPARATED = re.compile(r"[0-9A-Fa-f]{1,2}(?:[:-][0-9A-Fa-f]{1,2}){5,19}")
_MAC_PLAIN = re.compile(r"[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}|[0-9A-Fa-f]{12}")
_MIN_MICROS = -62135596800 * 1_000_000  # 0001-01-01T00:00:00Z
_MAX_MICROS = 253402300799 * 1_000_000 + 999_999  # 9999-12-31T23:59:59.999999Z
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def blank_to_none(text: str | None) -> str | None:
    """None for None, empty and whitespace-only text, and for the ``-`` that logs use for "no value"."""
    if text is None:
        return None
    stripped = text.strip()
    return text if stripped and stripped != "-" else None


def ip_or_none(text: str | None) -> str | None:
    """``text`` if it is a valid IPv4/IPv6 address (IPv6 lower-cased), else None."""
    if not text:
        return None
    if _IPV4.fullmatch(text):
        return text
    if ":" not in text:
        return None
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return None
    return text.lower()


def is_ip(text: str | None) -> bool:
    return ip_or_none(text) is not None


def hostname_or_none(text: str | None) -> str | None:
    """``text`` lower-cased without a trailing dot if it is a DNS host name and not an IP address, else None."""
    if not text or ip_or_none(text) is not None or not _HOSTNAME.fullmatch(text):
        return None
    return text.lower().removesuffix(".")


def mac(text: str | None) -> str | None:
    """ECS MAC spelling (``00-0C-29-AA-0B-01``) from the common spellings; None when not a MAC address."""
    if not text:
        return None
    if _MAC_SEPARATED.fullmatch(text):
        return "-".join(octet.upper().rjust(2, "0") for octet in re.split("[:-]", text))
    if _MAC_PLAIN.fullmatch(text):
        plain = text.replace(".", "").upper()
        return "-".join(plain[i:i + 2] for i in range(0, len(plain), 2))
    return None


def to_int(value: Any) -> int | None:
    """A whole number from ``7``, ``"7"``, ``"7.0"`` or ``7.0``; None for anything else (booleans included)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        number = float(value) if isinstance(value, float) else float(str(value).strip())
    except ValueError:
        return None
    if number != number or number in (float("inf"), float("-inf")):
        return None
    return int(number)


def int32(value: Any) -> int | None:
    """:func:`to_int` within a 32-bit column's range (ports, codes), else None."""
    number = to_int(value)
    return number if number is not None and -(1 << 31) <= number < (1 << 31) else None


def int64(value: Any) -> int | None:
    number = to_int(value)
    return number if number is not None and -(1 << 63) <= number < (1 << 63) else None


def to_double(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def to_bool(value: Any) -> bool | None:
    """``true``/``false`` (JSON), ``T``/``F`` (Zeek TSV habits) and ``1``/``0``; anything else None."""
    if isinstance(value, bool):
        return value
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("true", "t", "1"):
        return True
    if text in ("false", "f", "0"):
        return False
    return None


def seconds_to_nanos(value: Any) -> int | None:
    """ECS ``event.duration`` (nanoseconds) from a seconds value such as Zeek's ``duration``."""
    seconds = to_double(value)
    if seconds is None or seconds != seconds or abs(seconds) > 9.2e9:
        return None
    return round(seconds * 1_000_000_000)


def micros(moment: dt.datetime) -> int:
    """Epoch microseconds of an aware datetime (naive means UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def safe_micros(value: int | None) -> int | None:
    """``value`` if within years 1-9999 (what Python and Arrow writers can represent), else None."""
    return value if value is not None and _MIN_MICROS <= value <= _MAX_MICROS else None


def detail_text(value: Any) -> str | None:
    """A detail value as text: strings as they are, booleans ``true``/``false``, numbers as JSON writes them, lists
    and objects as compact JSON; None and empty strings stay absent."""
    if value is None:
        return None
    if isinstance(value, str):
        return value if value != "" else None
    if value is True or value is False:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)  # what json.dumps writes, a tenth of the cost
    if type(value) is float and value == value and value not in (float("inf"), float("-inf")):
        return repr(value)  # likewise for a finite float
    if isinstance(value, int | float):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def non_empty(values: list[Any]) -> list[Any] | None:
    """``values`` without None, empty strings and duplicates (first occurrence kept), or None when nothing is left
    (ECS: absent, not ``[]``)."""
    seen: list[Any] = []
    for v in values:
        if v is not None and v != "" and v not in seen:
            seen.append(v)
    return seen or None


@functools.lru_cache(maxsize=4096)
def day_micros(year: int, month: int, day: int) -> int | None:
    """Epoch microseconds of the day's midnight UTC; None for a date that does not exist. Cached: a log's lines
    share a handful of days, and building a datetime per line was a tenth of the syslog parse."""
    try:
        return micros(dt.datetime(year, month, day, tzinfo=dt.UTC))
    except ValueError:
        return None
