"""One spelling of durations (and of points in time) for CLI flags, rule files and configuration.

Accepted everywhere: a number of seconds (``90``), a number with a short unit (``500ms``, ``30s``, ``5m``,
``1h``, ``1d``) or with a word (``10 minutes``, ``1 second``, ``2 hours``, ``1 day``). Spark's own interval text
(``"10 minutes"``) is one of these, so values can be passed to Spark with :func:`spark_interval`.
Points in time (``--from``, ``--to``, ``--start``) are ISO 8601, UTC when no offset is given: :func:`parse_time`.
"""

from __future__ import annotations

import datetime as dt
import re

from core.errors import UserError

_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
EXAMPLES = "90, 500ms, 30s, 5m, 1h, 1d or '10 minutes'"


def parse_duration(text: str | int | float, what: str = "duration") -> float:
    """``text`` in seconds; :class:`ValueError` naming ``what`` and the accepted forms otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"{what} must be a duration like {EXAMPLES}, not {text!r}")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"{what} must not be negative, not {text!r}")
        return float(text)
    m = _DURATION.match(str(text).lower())
    if not m or m.group(2) not in _UNITS and m.group(2) != "":
        raise ValueError(f"{what} must be a duration like {EXAMPLES}, not {text!r}")
    return float(m.group(1)) * (_UNITS[m.group(2)] if m.group(2) else 1.0)


def spark_interval(seconds: float) -> str:
    """Seconds as Spark's interval text (``"600 seconds"``, ``"500 milliseconds"``)."""
    if seconds == int(seconds):
        return f"{int(seconds)} seconds"
    return f"{int(round(seconds * 1000))} milliseconds"


def parse_time(text: str | None, flag: str) -> dt.datetime | None:
    """An ISO 8601 time given to ``flag`` (``2026-03-09T10:00:00Z``; no offset means UTC) as a naive UTC datetime,
    ``None`` for ``None``; :class:`UserError` (exit code 2) naming the flag and the expected spelling otherwise."""
    if text is None:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise UserError(f"{flag} {text!r} is not an ISO 8601 time (e.g. 2026-03-09T10:00:00Z)", exit_code=2) from None
    return t.astimezone(dt.UTC).replace(tzinfo=None) if t.tzinfo else t
