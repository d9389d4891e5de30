"""Message forms of syslog programs: a regex per shape of message and the fields it yields (plain Python).

The plain-Python forms of the syslog ``program`` layer (sshd, sudo, PAM,
shadow-utils, dhcpd): a :class:`Form` is a literal start (a cheap ``str.startswith`` gate), a regex matched against
the whole message (``fullmatch``, ``re.S``) and a function from its named groups to the event's fields.
:func:`first_match` tries forms in order; the first that matches wins, as the Spark parse's ``CASE`` did.

Regexes are compiled with ``re.ASCII`` so that ``\\s``/``\\S``/``\\w`` mean what they meant in the Java regexes of
the Spark parse (ASCII whitespace and word characters only). Groups that captured nothing (absent, or empty) read as
None, as the Spark parse's empty captures read as null.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.sources import Event

if TYPE_CHECKING:
    from ingest.sources.syslog import Envelope

Groups = dict[str, str | None]
FLAGS = re.S | re.ASCII


@dataclass(frozen=True)
class Form:
    """One shape of message (``Accepted publickey for …``) and the fields it yields."""

    name: str
    start: str | tuple[str, ...]  # every match starts with this ("" when no literal start)
    regex: re.Pattern[str]
    fields: Callable[[Groups], Event]


def form(name: str, start: str | tuple[str, ...], regex: str, fields: Callable[[Groups], Event]) -> Form:
    """A :class:`Form`, its regex compiled once (at import) with :data:`FLAGS`."""
    return Form(name, start, re.compile(regex, FLAGS), fields)


def first_match(forms: Sequence[Form], text: str) -> Event | None:
    """The fields of the first form that matches the whole ``text``, or None."""
    for f in forms:
        if text.startswith(f.start):
            m = f.regex.fullmatch(text)
            if m is not None:
                return f.fields({k: v or None for k, v in m.groupdict().items()})
    return None


def body_parser(forms: Sequence[Form]) -> Callable[[Envelope], Event | None]:
    """A syslog ``program``-layer parser: the fields of the first of ``forms`` that matches the message body (the
    message unwrapped from ``message repeated N times: [...]``), or None (the header's event stands)."""

    def parse(env: Envelope) -> Event | None:
        return first_match(forms, env.body)

    return parse
