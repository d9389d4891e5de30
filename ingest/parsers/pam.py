"""Linux-PAM module lines, from whichever program wrote them (sshd, sudo, su, login, passwd, …).

``pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 tty=ssh ruser= rhost=203.0.113.9  user=root``
and ``PAM 2 more authentication failures; …`` are failed authentications (``rhost`` becomes
``source.address``, then ``source.ip`` or ``source.domain``); ``pam_unix(sudo:session): session opened for
user root(uid=0) by alice(uid=1000)`` / ``session closed for user root`` are session start/end;
``password changed for bob`` is an account change; ``check pass; user unknown`` a failed authentication.
Any other ``pam_MODULE(SERVICE:TYPE): …`` line keeps the module, service and type.
"""

from __future__ import annotations

from pyspark.sql import Column

from ingest.parsers.field_map import literals
from ingest.parsers.regex_forms import FormFields, Groups, MessageForm, Pattern

# Cheap pre-test so that only PAM-looking messages pay for the PAM patterns.
PREFIX = r"^(?:pam_[A-Za-z0-9_]+\(|PAM [0-9]+ more )"
_MODULE = r"(?<module>pam_[A-Za-z0-9_]+)\((?<service>[^:)]+):(?<type>[A-Za-z_]+)\): "
_AUTH_DETAILS = (r"logname=(?<logname>\S*) uid=(?<uid>\S*) euid=(?<euid>\S*) tty=(?<tty>\S*) ruser=(?<ruser>\S*) "
                 r"rhost=(?<rhost>\S*)(?: +user=(?<user>\S*))?")


def looks_like(message: Column) -> Column:
    """True for a message that starts like a PAM line. Every message of every syslog line is tested, so the
    literal starts are compared first (bytes, no conversion to a Java string) and the regex runs only on those."""
    return (message.startswith("pam_") | message.startswith("PAM ")) & message.rlike(PREFIX)


def _module(g: Groups) -> FormFields:
    return {
        "system.auth.pam.module": g.get("module"),
        "system.auth.pam.service": g.get("service"),
        "system.auth.pam.type": g.get("type"),
    }


def _auth_failure(g: Groups) -> FormFields:
    return {
        **literals(event__category=["authentication"], event__type=["info"],
                   event__action="authentication_failure", event__outcome="failure"),
        **_module(g),
        "user.name": g("user"),
        "source.address": g("rhost"),
        "system.auth.pam.logname": g("logname"),
        "system.auth.pam.uid": g("uid"),
        "system.auth.pam.euid": g("euid"),
        "system.auth.pam.tty": g("tty"),
        "system.auth.pam.ruser": g("ruser"),
        "system.auth.pam.rhost": g("rhost"),
        "system.auth.repeated": g.get("count"),
    }


def _session(opened: bool):
    def fields(g: Groups) -> FormFields:
        return {
            **literals(event__category=["session"], event__type=["start" if opened else "end"],
                       event__action="session_opened" if opened else "session_closed", event__outcome="success"),
            **_module(g),
            "user.name": g("user"),
            "user.id": g("uid"),
            "system.auth.pam.by": g.get("by"),
        }

    return fields


def _password_changed(g: Groups) -> FormFields:
    return {
        **literals(event__category=["iam"], event__type=["user", "change"], event__action="password_changed",
                   event__outcome="success"),
        **_module(g),
        "user.name": g("user"),
    }


def _user_unknown(g: Groups) -> FormFields:
    return {
        **literals(event__category=["authentication"], event__type=["info"], event__action="authentication_failure",
                   event__outcome="failure"),
        **_module(g),
    }


FORMS: tuple[MessageForm, ...] = (
    MessageForm(Pattern("pam.auth_failure", rf"{_MODULE}authentication failure; {_AUTH_DETAILS}"), _auth_failure),
    MessageForm(Pattern("pam.more_failures",
                        rf"PAM (?<count>[0-9]+) more authentication failures?; {_AUTH_DETAILS}"), _auth_failure),
    MessageForm(Pattern("pam.session_opened",
                        rf"{_MODULE}session opened for user (?<user>[^\s(]+)(?:\(uid=(?<uid>[0-9]+)\))?"
                        r"(?: by (?<by>[^\s(]*)(?:\(uid=[0-9]+\))?)?"), _session(True)),
    MessageForm(Pattern("pam.session_closed",
                        rf"{_MODULE}session closed for user (?<user>[^\s(]+)(?:\(uid=(?<uid>[0-9]+)\))?"),
                _session(False)),
    MessageForm(Pattern("pam.password_changed", rf"{_MODULE}password changed for (?<user>\S+)"), _password_changed),
    MessageForm(Pattern("pam.user_unknown", rf"{_MODULE}check pass; user unknown"), _user_unknown),
    MessageForm(Pattern("pam.other", rf"{_MODULE}.*"), _module),
)
