"""Value normalization shared by the parsers: IP addresses, MAC addresses, numbers, booleans (JVM only).

Rules (documented in docs/parsing.md):

* ``*.ip`` holds only valid IPv4 (dotted quad, no leading zeros) or IPv6 text, IPv6 lower-cased; anything
  else (a host name from ``sshd`` with ``UseDNS yes``, garbage) leaves ``*.ip`` null and stays in
  ``*.address`` (and ``*.domain`` when it looks like a host name).
* MAC addresses follow ECS: upper-case hex pairs separated by hyphens (``00-0C-29-AA-0B-01``), from the
  colon, hyphen or Cisco-dot spellings; ISC dhcpd's unpadded octets (``0:c:29:aa:b:1``) are padded.
* Numbers are read with ``try_cast``: text that is not a number gives null, never an error.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_H = r"[0-9a-fA-F]{1,4}"
IPV6 = (
    "(?:"
    rf"(?:{_H}:){{7}}{_H}"
    rf"|(?:{_H}:){{1,7}}:"
    rf"|(?:{_H}:){{1,6}}:{_H}"
    rf"|(?:{_H}:){{1,5}}(?::{_H}){{1,2}}"
    rf"|(?:{_H}:){{1,4}}(?::{_H}){{1,3}}"
    rf"|(?:{_H}:){{1,3}}(?::{_H}){{1,4}}"
    rf"|(?:{_H}:){{1,2}}(?::{_H}){{1,5}}"
    rf"|{_H}:(?::{_H}){{1,6}}"
    rf"|:(?:(?::{_H}){{1,7}}|:)"
    rf"|(?:{_H}:){{6}}{IPV4}"
    rf"|::(?:ffff(?::0{{1,4}})?:)?{IPV4}"
    rf"|(?:{_H}:){{1,5}}:{IPV4}"
    ")"
)
_IP_ANCHORED = f"^(?:{IPV4}|{IPV6})\\z"
_IPV4_ANCHORED = f"^{IPV4}\\z"
_HOSTNAME = r"^(?=.{1,253}\z)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9_])?(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62}[A-Za-z0-9_])?)*\.?\z"
_MAC_SEPARATED = r"^[0-9A-Fa-f]{1,2}(?:[:-][0-9A-Fa-f]{1,2}){5,19}\z"
_MAC_CISCO = r"^[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\.[0-9A-Fa-f]{4}\z"
_MAC_BARE = r"^[0-9A-Fa-f]{12}\z"


def blank_to_null(text: Column) -> Column:
    """Null for null, empty and whitespace-only text, and for the ``-`` that logs use for "no value"."""
    trimmed = F.trim(text)
    return F.when((trimmed != F.lit("")) & (trimmed != F.lit("-")), text)


def is_ip(text: Column) -> Column:
    return text.rlike(_IP_ANCHORED)


def ip_or_null(text: Column) -> Column:
    """``text`` if it is a valid IPv4/IPv6 address (IPv6 lower-cased), else null."""
    return F.when(is_ip(text), F.when(text.rlike(_IPV4_ANCHORED), text).otherwise(F.lower(text)))


def hostname_or_null(text: Column) -> Column:
    """``text`` lower-cased if it is a DNS host name and not an IP address, else null."""
    return F.when(~is_ip(text) & text.rlike(_HOSTNAME), F.lower(F.regexp_replace(text, r"\.$", "")))


def mac(text: Column) -> Column:
    """ECS MAC spelling (``00-0C-29-AA-0B-01``) from the common spellings; null when not a MAC address."""
    separated = F.array_join(F.transform(F.split(text, "[:-]"), lambda o: F.lpad(F.upper(o), 2, "0")), "-")
    plain = F.upper(F.regexp_replace(text, r"\.", ""))
    paired = F.regexp_replace(plain, r"(..)(?!$)", "$1-")
    return (
        F.when(text.rlike(_MAC_SEPARATED), separated)
        .when(text.rlike(_MAC_CISCO) | text.rlike(_MAC_BARE), paired)
    )


def to_int(text: Column) -> Column:
    return text.try_cast("int")


def to_long(text: Column) -> Column:
    """A whole number from text like ``"1234"`` or ``"1234.0"`` (Zeek counts are sometimes doubles)."""
    return F.coalesce(text.try_cast("bigint"), text.try_cast("decimal(38,6)").try_cast("bigint"))


def to_double(text: Column) -> Column:
    return text.try_cast("double")


def to_bool(text: Column) -> Column:
    """``true``/``false`` (JSON), ``T``/``F`` (Zeek TSV habits) and ``1``/``0``; anything else null."""
    lowered = F.lower(F.trim(text))
    return (F.when(lowered.isin("true", "t", "1"), F.lit(True))
            .when(lowered.isin("false", "f", "0"), F.lit(False)))


def seconds_to_nanos(text: Column) -> Column:
    """ECS ``event.duration`` (nanoseconds) from a seconds value such as Zeek's ``duration``."""
    # try_multiply: with ANSI mode on, an overflowing product would fail the query instead of giving null.
    return F.try_multiply(text.try_cast("decimal(38,9)"), F.lit(1_000_000_000)).try_cast("bigint")


def python_safe_timestamp(ts: Column) -> Column:
    """``ts`` if within years 1-9999, else null.

    Spark timestamps reach year 294247, but Python's ``datetime`` (used by Arrow -> Python conversions and
    the Delta sink's statistics) stops at 9999: a record claiming year 30000 must not break a writer.
    """
    lo = F.to_timestamp(F.lit("0001-01-01 00:00:00"))
    hi = F.to_timestamp(F.lit("9999-12-31 23:59:59.999999"))
    return F.when((ts >= lo) & (ts <= hi), ts)
