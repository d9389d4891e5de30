"""RFC 3164 ("BSD") syslog headers: ``[<PRI>]Mmm dd hh:mm:ss HOSTNAME TAG[PID]: MSG``.

Variants handled: no ``<PRI>`` (lines from files such as ``/var/log/auth.log``), single-digit days padded
with a space (``Feb  1``) or not, fractional seconds, an RFC 3339 timestamp in place of the BSD one (what
rsyslog writes by default on current Debian/Ubuntu), no hostname (``logger`` to ``/dev/log``), a tag without
``[PID]``, and no tag at all (the rest is the message).

Year-less timestamps: the BSD timestamp has no year and no zone. It is read as UTC in the year of the
record's ``ingested_at``; if that puts it more than :data:`FUTURE_TOLERANCE_DAYS` days after ``ingested_at``
(a December line ingested in January), or the date does not exist in that year (29 February), the
previous year is used. A timestamp that still cannot be read (``Feb 30``, ``25:61:00``) quarantines the
record.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from ingest.parsers.regex_forms import Pattern

FUTURE_TOLERANCE_DAYS = 7
BSD_TIMESTAMP = r"[A-Za-z]{3} +[0-9]{1,2} [0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
RFC3339_TIMESTAMP = (r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
                     r"(?:[Zz]|[+-][0-9]{2}:?[0-9]{2})?")
HEADER = Pattern(
    "rfc3164",
    rf"(?:<(?<pri>[0-9]{{1,3}})>)?(?<ts>{BSD_TIMESTAMP}|{RFC3339_TIMESTAMP}) +"
    r"(?:(?<host>[^\s\[\]]*[^\s\[\]:]) +)?"
    r"(?:(?<prog>[^\s\[\]:]{1,64})(?:\[(?<pid>[^\]\s]*)\])?:(?: |\z))?"
    r"(?<msg>.*)",
)
_BSD_FORMAT = "yyyy MMM d H:mm:ss[.SSSSSS]"


def timestamp(text: Column, ingested_at: Column) -> Column:
    """The header timestamp text -> timestamp, BSD year resolved against ``ingested_at`` (see module doc)."""
    upper = F.upper(text)
    iso = F.try_to_timestamp(upper)
    # Collapse the day padding and keep at most microseconds of a fraction; each regex only on text that needs it.
    squeezed = F.when(text.contains("  "), F.regexp_replace(text, " +", " ")).otherwise(text)
    reference = F.coalesce(ingested_at, F.current_timestamp())
    year = F.year(reference)
    limit = reference + F.expr(f"INTERVAL {FUTURE_TOLERANCE_DAYS} DAYS")

    def resolve(bsd: Column) -> Column:
        def in_year(y: Column) -> Column:
            return F.try_to_timestamp(F.concat_ws(" ", y.cast("string"), bsd), F.lit(_BSD_FORMAT))

        # The parse in this year is bound once: written out, the test and the value would parse it three times.
        return F.transform(F.array(in_year(year)), lambda this_year: F.when(
            this_year.isNull() | (this_year > limit), in_year(year - 1)).otherwise(this_year))[0]

    def trim_fraction(squeezed: Column) -> Column:
        return resolve(F.when(squeezed.contains("."), F.regexp_replace(squeezed, r"(\.[0-9]{6})[0-9]+$", "$1"))
                       .otherwise(squeezed))

    # The squeezed text is bound once too (a lambda variable), so that its regex runs at most once.
    resolved = F.transform(F.array(squeezed), trim_fraction)[0]
    return F.when(text.rlike(r"^[0-9]{4}-"), iso).otherwise(resolved)
