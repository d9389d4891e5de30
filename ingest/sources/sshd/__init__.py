"""OpenSSH ``sshd`` (and OpenSSH 9.8+ ``sshd-session``) messages -> authentication, session and network events.

Forms (first match wins; an sshd message matching none is still a ``system.auth`` event with host, process and
message):

=====================  ===================================================================  ======================
form                   example                                                              event.action/outcome
=====================  ===================================================================  ======================
accepted               ``Accepted publickey for bob from 10.0.0.5 port 50022 ssh2: ED25519   ssh_login / success
                       SHA256:…`` (password, keyboard-interactive/pam, certificates too)
failed                 ``Failed password for [invalid user ]bob from … port … ssh2``          ssh_login / failure
invalid_user           ``Invalid user bob from 203.0.113.9 [port 4242]``,                     ssh_invalid_user / failure
                       ``input_userauth_request: invalid user bob [preauth]``
max_auth               ``error: maximum authentication attempts exceeded for root from …``    ssh_max_auth_attempts / failure
disconnect             ``Connection closed by [authenticating|invalid] [user x] IP port P     ssh_disconnect
                       [preauth]``, ``Disconnected from user bob IP port P``,
                       ``Received disconnect from IP port P:11: Bye Bye [preauth]``,
                       ``Connection reset by …``, ``Received disconnect from IP: 11: …`` (old)
no_identification      ``Did not receive identification string from IP [port P]``              ssh_no_identification / failure
banner                 ``banner exchange: Connection from IP port P: invalid format``,         ssh_bad_banner / failure
                       ``Bad protocol version identification '…' from IP [port P]``
negotiation            ``Unable to negotiate with IP port P: no matching key exchange …``      ssh_negotiation_failed / failure
connection             ``Connection from IP port P on IP port P`` (LogLevel VERBOSE)           ssh_connection
=====================  ===================================================================  ======================

PAM lines from sshd (``pam_unix(sshd:auth): …``) are the ``pam`` source's. ``from`` may name a host instead of an
address (``UseDNS yes``): the parser puts what the line said in ``source.address`` and the record parser validates it
into ``source.ip`` or ``source.domain``.
"""

from __future__ import annotations

from collections.abc import Callable

from ingest.sources import Event, Source
from ingest.sources.message_forms import Form, Groups, body_parser, form
from ingest.sources.values import int32

PROGRAMS = ("sshd", "sshd-session")
_PREAUTH = r"(?P<preauth> \[preauth\])?"
_FROM = r"(?P<ip>\S+) port (?P<port>[0-9]+)"
_AUTH_FAILURE = {"event.category": ["authentication"], "event.type": ["info"], "event.outcome": "failure"}


def _source(g: Groups) -> Event:
    return {"source.address": g.get("ip"), "source.port": int32(g.get("port"))}


def _accepted(g: Groups) -> Event:
    return {
        "event.category": ["authentication", "session"], "event.type": ["start"], "event.action": "ssh_login",
        "event.outcome": "success", **_source(g), "user.name": g["user"],
        "detail": {"system.auth.ssh.event": "Accepted", "system.auth.ssh.method": g["method"],
                   "system.auth.ssh.signature": g["signature"], "system.auth.ssh.key_type": g["keytype"],
                   "system.auth.ssh.fingerprint": g["fingerprint"]},
    }


def _failed(g: Groups) -> Event:
    return {
        **_AUTH_FAILURE, "event.action": "ssh_login", **_source(g), "user.name": g["user"],
        "detail": {"system.auth.ssh.event": "Failed", "system.auth.ssh.method": g["method"],
                   "system.auth.ssh.invalid_user": g["invalid"] is not None,
                   "system.auth.ssh.preauth": g["preauth"] is not None},
    }


def _invalid_user(g: Groups) -> Event:
    return {
        **_AUTH_FAILURE, "event.action": "ssh_invalid_user", **_source(g), "user.name": g["user"],
        "detail": {"system.auth.ssh.event": "Invalid", "system.auth.ssh.invalid_user": True,
                   "system.auth.ssh.preauth": g["preauth"] is not None},
    }


def _max_auth(g: Groups) -> Event:
    return {
        **_AUTH_FAILURE, "event.action": "ssh_max_auth_attempts", **_source(g), "user.name": g["user"],
        "detail": {"system.auth.ssh.event": "MaxAuthTries", "system.auth.ssh.invalid_user": g["invalid"] is not None,
                   "system.auth.ssh.preauth": g["preauth"] is not None},
    }


def _disconnect(g: Groups) -> Event:
    return {
        "event.category": ["session"], "event.type": ["end"], "event.action": "ssh_disconnect", **_source(g),
        "user.name": g.get("user"),
        "detail": {"system.auth.ssh.event": g["what"],
                   # only the current form says whether the user was invalid (the legacy one has no group for it)
                   "system.auth.ssh.invalid_user": g["invalid"] is not None if "invalid" in g else None,
                   "system.auth.ssh.preauth": g["preauth"] is not None,
                   "system.auth.ssh.disconnect_code": int32(g["code"]),
                   "system.auth.ssh.disconnect_reason": g["reason"]},
    }


def _network_failure(action: str, what: str) -> Callable[[Groups], Event]:
    def fields(g: Groups) -> Event:
        return {
            "event.category": ["network"], "event.type": ["connection"], "event.action": action,
            "event.outcome": "failure", **_source(g),
            "detail": {"system.auth.ssh.event": what, "system.auth.ssh.preauth": g["preauth"] is not None},
        }

    return fields


def _connection(g: Groups) -> Event:
    return {
        "event.category": ["network"], "event.type": ["connection", "start"], "event.action": "ssh_connection",
        **_source(g), "destination.address": g["dip"], "destination.port": int32(g["dport"]),
        "detail": {"system.auth.ssh.event": "Connection"},
    }


_DISCONNECTS = ("Connection closed by", "Connection reset by", "Disconnected from", "Received disconnect from")
FORMS: tuple[Form, ...] = (
    form("accepted", "Accepted ",
         rf"Accepted (?P<method>\S+) for (?P<user>\S+) from {_FROM}(?: (?P<proto>ssh[12]))?"
         r"(?:: (?P<signature>(?P<keytype>[A-Za-z0-9-]+) (?P<fingerprint>\S+))(?P<rest> .*)?)?", _accepted),
    form("failed", "Failed ",
         rf"Failed (?P<method>\S+) for (?P<invalid>invalid user )?(?P<user>.*?) from {_FROM}"
         rf"(?: (?P<proto>ssh[12]))?{_PREAUTH}", _failed),
    form("disconnect", _DISCONNECTS,
         r"(?P<what>Connection closed by|Connection reset by|Disconnected from|Received disconnect from) "
         r"(?:(?:(?P<invalid>invalid )|authenticating )?user (?P<user>\S*) )?"
         rf"{_FROM}(?::(?P<code>[0-9]+): (?P<reason>.*?))?{_PREAUTH}", _disconnect),
    form("disconnect_legacy", "Received disconnect from ",
         rf"(?P<what>Received disconnect from) (?P<ip>[^\s:]+): (?P<code>[0-9]+): (?P<reason>.*?){_PREAUTH}",
         _disconnect),
    form("invalid_user", "Invalid user ",
         rf"Invalid user (?P<user>.*?) from (?P<ip>\S+)(?: port (?P<port>[0-9]+))?{_PREAUTH}", _invalid_user),
    form("userauth_invalid", "input_userauth_request: invalid user ",
         rf"input_userauth_request: invalid user (?P<user>\S*){_PREAUTH}", _invalid_user),
    form("max_auth", ("error: maximum ", "maximum "),
         r"(?:error: )?maximum authentication attempts exceeded for (?P<invalid>invalid user )?"
         rf"(?P<user>.*?) from {_FROM}(?: ssh[12])?{_PREAUTH}", _max_auth),
    form("no_identification", "Did not receive identification string from ",
         rf"Did not receive identification string from (?P<ip>\S+)(?: port (?P<port>[0-9]+))?{_PREAUTH}",
         _network_failure("ssh_no_identification", "NoIdentification")),
    form("banner", "banner exchange: Connection from ",
         rf"banner exchange: Connection from {_FROM}: (?P<reason>.*?){_PREAUTH}",
         _network_failure("ssh_bad_banner", "BadBanner")),
    form("bad_protocol", "Bad protocol version identification '",
         r"Bad protocol version identification '(?P<banner>.*)' from (?P<ip>\S+)"
         rf"(?: port (?P<port>[0-9]+))?{_PREAUTH}", _network_failure("ssh_bad_banner", "BadProtocol")),
    form("negotiation", "Unable to negotiate with ",
         rf"Unable to negotiate with {_FROM}: (?P<reason>.*?){_PREAUTH}",
         _network_failure("ssh_negotiation_failed", "NegotiationFailed")),
    form("connection", "Connection from ",
         rf"Connection from {_FROM} on (?P<dip>\S+) port (?P<dport>[0-9]+)(?: rdomain \"(?P<rdomain>.*)\")?",
         _connection),
)


SOURCE = Source(title="OpenSSH sshd: logins, failures, invalid users, disconnects, pre-auth network failures",
                transport="syslog", parse=body_parser(FORMS), programs=PROGRAMS, layer="program", order=100,
                program_dataset=("system", "system.auth"))
