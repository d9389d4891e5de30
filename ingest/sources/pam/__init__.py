"""Linux-PAM module lines, from whichever program wrote them (sshd, sudo, su, login, passwd, …).

``pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 tty=ssh ruser= rhost=203.0.113.9  user=root``
and ``PAM 2 more authentication failures; …`` are failed authentications (``rhost`` becomes ``source.address``, then
``source.ip`` or ``source.domain``); ``pam_unix(sudo:session): session opened for user root(uid=0) by
alice(uid=1000)`` / ``session closed for user root`` are session start/end; ``password changed for bob`` is an
account change; ``check pass; user unknown`` a failed authentication. Any other ``pam_MODULE(SERVICE:TYPE): …`` line
keeps the module, service and type. A PAM event is ``system.auth`` whatever the program.

This source has no program list and a lower ``order`` than the program sources, so a PAM line of sshd or sudo is
PAM's. A message that starts like a PAM line but matches no PAM form yields an empty layer, so that no program's
forms are tried on it either.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ingest.sources import Event, Source
from ingest.sources.message_forms import FLAGS, Form, Groups, first_match, form
from ingest.sources.values import int32

if TYPE_CHECKING:
    from ingest.sources.syslog import Envelope

# Only messages starting like a PAM line pay for the PAM patterns (literal starts first, then this regex).
_LOOKS_LIKE = re.compile(r"pam_[A-Za-z0-9_]+\(|PAM [0-9]+ more ", FLAGS)
_MODULE = r"(?P<module>pam_[A-Za-z0-9_]+)\((?P<service>[^:)]+):(?P<type>[A-Za-z_]+)\): "
_AUTH_DETAILS = (r"logname=(?P<logname>\S*) uid=(?P<uid>\S*) euid=(?P<euid>\S*) tty=(?P<tty>\S*) "
                 r"ruser=(?P<ruser>\S*) rhost=(?P<rhost>\S*)(?: +user=(?P<user>\S*))?")
_AUTH = {"event.module": "system", "event.dataset": "system.auth"}


def _module(g: Groups) -> dict[str, str | None]:
    return {"system.auth.pam.module": g.get("module"), "system.auth.pam.service": g.get("service"),
            "system.auth.pam.type": g.get("type")}


def _other(g: Groups) -> Event:
    return {**_AUTH, "detail": _module(g)}


def _auth_failure(g: Groups) -> Event:
    return {
        **_AUTH, "event.category": ["authentication"], "event.type": ["info"],
        "event.action": "authentication_failure", "event.outcome": "failure",
        "user.name": g["user"], "source.address": g["rhost"],
        "detail": {**_module(g), "system.auth.pam.logname": g["logname"], "system.auth.pam.uid": g["uid"],
                   "system.auth.pam.euid": g["euid"], "system.auth.pam.tty": g["tty"],
                   "system.auth.pam.ruser": g["ruser"], "system.auth.pam.rhost": g["rhost"],
                   "system.auth.repeated": int32(g.get("count"))},
    }


def _session(opened: bool) -> Callable[[Groups], Event]:
    def fields(g: Groups) -> Event:
        by = g.get("by")
        return {
            **_AUTH, "event.category": ["session"], "event.type": ["start" if opened else "end"],
            "event.action": "session_opened" if opened else "session_closed", "event.outcome": "success",
            "user.name": g["user"], "user.id": g["uid"], "related.user": [by] if by else None,
            "detail": {**_module(g), "system.auth.pam.by": by},
        }

    return fields


def _password_changed(g: Groups) -> Event:
    return {**_AUTH, "event.category": ["iam"], "event.type": ["user", "change"], "event.action": "password_changed",
            "event.outcome": "success", "user.name": g["user"], "detail": _module(g)}


def _user_unknown(g: Groups) -> Event:
    return {**_AUTH, "event.category": ["authentication"], "event.type": ["info"],
            "event.action": "authentication_failure", "event.outcome": "failure", "detail": _module(g)}


FORMS: tuple[Form, ...] = (
    form("auth_failure", "pam_", rf"{_MODULE}authentication failure; {_AUTH_DETAILS}", _auth_failure),
    form("more_failures", "PAM ", rf"PAM (?P<count>[0-9]+) more authentication failures?; {_AUTH_DETAILS}",
         _auth_failure),
    form("session_opened", "pam_",
         rf"{_MODULE}session opened for user (?P<user>[^\s(]+)(?:\(uid=(?P<uid>[0-9]+)\))?"
         r"(?: by (?P<by>[^\s(]*)(?:\(uid=[0-9]+\))?)?", _session(True)),
    form("session_closed", "pam_",
         rf"{_MODULE}session closed for user (?P<user>[^\s(]+)(?:\(uid=(?P<uid>[0-9]+)\))?", _session(False)),
    form("password_changed", "pam_", rf"{_MODULE}password changed for (?P<user>\S+)", _password_changed),
    form("user_unknown", "pam_", rf"{_MODULE}check pass; user unknown", _user_unknown),
    form("other", "pam_", rf"{_MODULE}.*", _other),
)


def parse(env: Envelope) -> Event | None:
    """The PAM form's fields; ``{}`` (claimed, nothing to add) for a PAM-looking message no form matches; None for
    any other message (the program's own sources are tried next)."""
    body = env.body
    if not body.startswith(("pam_", "PAM ")) or _LOOKS_LIKE.match(body) is None:
        return None
    return first_match(FORMS, body) or {}


SOURCE = Source(title="Linux-PAM module lines of any program: authentication failures, sessions, password changes",
                transport="syslog", parse=parse, programs=None, layer="program", order=10)
