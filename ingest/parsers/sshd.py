"""OpenSSH ``sshd`` (and OpenSSH 9.8+ ``sshd-session``) messages -> ECS authentication/session events.

Forms (first match wins; an sshd message matching none is still an event, with host/process/message):

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
                       ``Connection reset by …``
no_identification      ``Did not receive identification string from IP [port P]``              ssh_no_identification / failure
banner                 ``banner exchange: Connection from IP port P: invalid format``,         ssh_bad_banner / failure
                       ``Bad protocol version identification '…' from IP [port P]``
negotiation            ``Unable to negotiate with IP port P: no matching key exchange …``      ssh_negotiation_failed / failure
connection             ``Connection from IP port P on IP port P`` (LogLevel VERBOSE)           ssh_connection
=====================  ===================================================================  ======================

PAM lines from sshd (``pam_unix(sshd:auth): authentication failure; …``) are handled by :mod:`.pam`.
``from`` may name a host instead of an address (``UseDNS yes``): ``source.address`` holds what the line
said, and normalization makes it ``source.ip`` or ``source.domain``.
"""

from __future__ import annotations

from ingest.parsers.field_map import literals
from ingest.parsers.regex_forms import FormFields, Groups, MessageForm, Pattern

PROGRAMS = ("sshd", "sshd-session")
_PREAUTH = r"(?<preauth> \[preauth\])?"
_FROM = r"(?<ip>\S+) port (?<port>[0-9]+)"


def _source(g: Groups) -> FormFields:
    return {"source.address": g("ip"), "source.port": g.get("port")}


def _accepted(g: Groups) -> FormFields:
    return {
        **literals(event__category=["authentication", "session"], event__type=["start"],
                   event__action="ssh_login", event__outcome="success", system__auth__ssh__event="Accepted"),
        **_source(g),
        "user.name": g("user"),
        "system.auth.ssh.method": g("method"),
        "system.auth.ssh.signature": g("signature"),
        "system.auth.ssh.key_type": g("keytype"),
        "system.auth.ssh.fingerprint": g("fingerprint"),
    }


def _failed(g: Groups) -> FormFields:
    return {
        **literals(event__category=["authentication"], event__type=["info"], event__action="ssh_login",
                   event__outcome="failure", system__auth__ssh__event="Failed"),
        **_source(g),
        "user.name": g("user"),
        "system.auth.ssh.method": g("method"),
        "system.auth.ssh.invalid_user": g.flag("invalid"),
        "system.auth.ssh.preauth": g.flag("preauth"),
    }


def _invalid_user(g: Groups) -> FormFields:
    return {
        **literals(event__category=["authentication"], event__type=["info"], event__action="ssh_invalid_user",
                   event__outcome="failure", system__auth__ssh__event="Invalid", system__auth__ssh__invalid_user=True),
        "source.address": g.get("ip"),
        "source.port": g.get("port"),
        "user.name": g("user"),
        "system.auth.ssh.preauth": g.flag("preauth"),
    }


def _max_auth(g: Groups) -> FormFields:
    return {
        **literals(event__category=["authentication"], event__type=["info"], event__action="ssh_max_auth_attempts",
                   event__outcome="failure", system__auth__ssh__event="MaxAuthTries"),
        **_source(g),
        "user.name": g("user"),
        "system.auth.ssh.invalid_user": g.flag("invalid"),
        "system.auth.ssh.preauth": g.flag("preauth"),
    }


def _disconnect(g: Groups) -> FormFields:
    return {
        **literals(event__category=["session"], event__type=["end"], event__action="ssh_disconnect"),
        **_source(g),
        "user.name": g.get("user"),
        "system.auth.ssh.event": g("what"),
        "system.auth.ssh.invalid_user": g.flag("invalid") if "invalid" in g else None,
        "system.auth.ssh.preauth": g.flag("preauth"),
        "system.auth.ssh.disconnect_code": g("code"),
        "system.auth.ssh.disconnect_reason": g("reason"),
    }


def _network_failure(action: str, event: str):
    def fields(g: Groups) -> FormFields:
        return {
            **literals(event__category=["network"], event__type=["connection"], event__action=action,
                       event__outcome="failure", system__auth__ssh__event=event),
            **_source(g),
            "system.auth.ssh.preauth": g.flag("preauth"),
        }

    return fields


def _connection(g: Groups) -> FormFields:
    return {
        **literals(event__category=["network"], event__type=["connection", "start"],
                   event__action="ssh_connection", system__auth__ssh__event="Connection"),
        **_source(g),
        "destination.address": g("dip"),
        "destination.port": g("dport"),
    }


FORMS: tuple[MessageForm, ...] = (
    MessageForm(Pattern("sshd.accepted",
                        rf"Accepted (?<method>\S+) for (?<user>\S+) from {_FROM}(?: (?<proto>ssh[12]))?"
                        r"(?:: (?<signature>(?<keytype>[A-Za-z0-9-]+) (?<fingerprint>\S+))(?<rest> .*)?)?"), _accepted),
    MessageForm(Pattern("sshd.failed",
                        rf"Failed (?<method>\S+) for (?<invalid>invalid user )?(?<user>.*?) from {_FROM}"
                        rf"(?: (?<proto>ssh[12]))?{_PREAUTH}"), _failed),
    MessageForm(Pattern("sshd.disconnect",
                        r"(?<what>Connection closed by|Connection reset by|Disconnected from|Received disconnect from) "
                        r"(?:(?:(?<invalid>invalid )|authenticating )?user (?<user>\S*) )?"
                        rf"{_FROM}(?::(?<code>[0-9]+): (?<reason>.*?))?{_PREAUTH}"), _disconnect),
    MessageForm(Pattern("sshd.disconnect_legacy",
                        r"(?<what>Received disconnect from) (?<ip>[^\s:]+): (?<code>[0-9]+): (?<reason>.*?)"
                        rf"{_PREAUTH}"), _disconnect),
    MessageForm(Pattern("sshd.invalid_user",
                        rf"Invalid user (?<user>.*?) from (?<ip>\S+)(?: port (?<port>[0-9]+))?{_PREAUTH}"),
                _invalid_user),
    MessageForm(Pattern("sshd.userauth_invalid",
                        rf"input_userauth_request: invalid user (?<user>\S*){_PREAUTH}"), _invalid_user),
    MessageForm(Pattern("sshd.max_auth",
                        r"(?:error: )?maximum authentication attempts exceeded for (?<invalid>invalid user )?"
                        rf"(?<user>.*?) from {_FROM}(?: ssh[12])?{_PREAUTH}"), _max_auth),
    MessageForm(Pattern("sshd.no_identification",
                        rf"Did not receive identification string from (?<ip>\S+)(?: port (?<port>[0-9]+))?{_PREAUTH}"),
                _network_failure("ssh_no_identification", "NoIdentification")),
    MessageForm(Pattern("sshd.banner",
                        rf"banner exchange: Connection from {_FROM}: (?<reason>.*?){_PREAUTH}"),
                _network_failure("ssh_bad_banner", "BadBanner")),
    MessageForm(Pattern("sshd.bad_protocol",
                        r"Bad protocol version identification '(?<banner>.*)' from (?<ip>\S+)"
                        rf"(?: port (?<port>[0-9]+))?{_PREAUTH}"),
                _network_failure("ssh_bad_banner", "BadProtocol")),
    MessageForm(Pattern("sshd.negotiation",
                        rf"Unable to negotiate with {_FROM}: (?<reason>.*?){_PREAUTH}"),
                _network_failure("ssh_negotiation_failed", "NegotiationFailed")),
    MessageForm(Pattern("sshd.connection",
                        rf"Connection from {_FROM} on (?<dip>\S+) port (?<dport>[0-9]+)(?: rdomain \"(?<rdomain>.*)\")?"),
                _connection),
)
