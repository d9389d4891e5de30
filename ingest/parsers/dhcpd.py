"""ISC dhcpd lease messages -> ECS network events with the shared ``dhcp.*`` lease fields.

==============  ==========================================================================================
message         examples (``via`` names the interface, or the relay agent's address when relayed)
==============  ==========================================================================================
DHCPDISCOVER    ``DHCPDISCOVER from 00:0c:29:aa:0b:01 (laptop) via eth0[: network 10.0.0.0/24: no free leases]``
DHCPOFFER       ``DHCPOFFER on 10.0.0.50 to 00:0c:29:aa:0b:01 (laptop) via eth0``
DHCPREQUEST     ``DHCPREQUEST for 10.0.0.50 (10.0.0.1) from 00:0c:29:aa:0b:01 (laptop) via 10.1.0.1[: wrong network.]``
DHCPACK         ``DHCPACK on 10.0.0.50 to 00:0c:29:aa:0b:01 (laptop) via eth0``; after INFORM:
                ``DHCPACK to 10.0.0.5 (00:0c:29:aa:0b:01) via eth0``
DHCPNAK         ``DHCPNAK on 10.0.0.50 to 00:0c:29:aa:0b:01 via eth0``
DHCPRELEASE     ``DHCPRELEASE of 10.0.0.50 from 00:0c:29:aa:0b:01 (laptop) via eth0 (found)``
DHCPDECLINE     ``DHCPDECLINE of 10.0.0.50 from 00:0c:29:aa:0b:01 (laptop) via eth0: abandoned``
DHCPINFORM      ``DHCPINFORM from 10.0.0.5 via eth0``
==============  ==========================================================================================

The DHCP client is the ECS source: ``source.mac`` (ECS spelling; dhcpd's unpadded ``0:c:29:aa:b:1`` is
padded) and ``source.ip`` (the address the message is about). ``dhcp.assigned_ip`` is set by OFFER/ACK,
``dhcp.requested_ip`` by REQUEST, ``dhcp.server_ip`` by the server identifier of a REQUEST,
``dhcp.relay_ip``/``dhcp.interface`` by ``via``, ``dhcp.client_hostname`` by the parenthesised client name,
and ``dhcp.detail`` keeps the text after ``via …`` (``wrong network.``, ``(found)``, ``abandoned``).
Addresses are kept as written here and validated by normalization (``source.ip`` is null if not an IP;
``via`` becomes ``dhcp.relay_ip`` when it is an address, else ``dhcp.interface``).
``event.action`` is the message type in lower case (``dhcpack``); NAK and DECLINE are failures, ACK a
success. Other dhcpd lines (start-up, failover, ``reuse_lease``) are events with host/process/message.
"""

from __future__ import annotations

from ingest.parsers.field_map import literals
from ingest.parsers.regex_forms import FormFields, Groups, MessageForm, Pattern

PROGRAMS = ("dhcpd",)
_HW = r"[0-9A-Fa-f]{1,2}(?::[0-9A-Fa-f]{1,2}){5,19}"
_IP = r"[0-9A-Fa-f.:]+"
_NAME = r"(?: \((?<hostname>[^)]*)\))?"
_VIA = r"via (?<via>[^\s:]+)(?::? (?<detail>.*))?"
_OUTCOMES = {"ACK": "success", "NAK": "failure", "DECLINE": "failure"}
# The lease address of each message type, by role.
_IP_ROLE = {"OFFER": "dhcp.assigned_ip", "ACK": "dhcp.assigned_ip", "REQUEST": "dhcp.requested_ip"}


def _fields(kind: str, lease: bool = True):
    def fields(g: Groups) -> FormFields:
        out: FormFields = {
            **literals(event__category=["network"], event__type=["protocol"], event__action=f"dhcp{kind.lower()}",
                       network__protocol="dhcp", network__transport="udp", dhcp__message_types=[kind]),
            "event.outcome": _OUTCOMES.get(kind),
            "source.address": g.get("ip"),
            "source.mac": g.get("mac"),
            "dhcp.server_ip": g.get("server"),
            "dhcp.relay_ip": g("via"),
            "dhcp.interface": g("via"),
            "dhcp.client_hostname": g.get("hostname"),
            "dhcp.detail": g("detail"),
        }
        if lease and kind in _IP_ROLE:
            out[_IP_ROLE[kind]] = g("ip")
        return out

    return fields


def _form(kind: str, regex: str) -> MessageForm:
    return MessageForm(Pattern(f"dhcpd.{kind.lower()}", regex), _fields(kind))


FORMS: tuple[MessageForm, ...] = (
    _form("DISCOVER", rf"DHCPDISCOVER from (?<mac>{_HW}){_NAME} {_VIA}"),
    _form("REQUEST", rf"DHCPREQUEST for (?<ip>{_IP})(?: \((?<server>[^)]*)\))? from (?<mac>{_HW}){_NAME} {_VIA}"),
    *[_form(kind, rf"DHCP{kind} on (?<ip>{_IP}) to (?<mac>{_HW}){_NAME} {_VIA}") for kind in ("OFFER", "ACK", "NAK")],
    # DHCPACK answering a DHCPINFORM names the client address and puts the MAC in parentheses.
    MessageForm(Pattern("dhcpd.inform_ack", rf"DHCPACK to (?<ip>{_IP}) \((?<mac>{_HW})\) {_VIA}"), _fields("ACK", lease=False)),
    *[_form(kind, rf"DHCP{kind} of (?<ip>{_IP}) from (?<mac>{_HW}){_NAME} {_VIA}") for kind in ("RELEASE", "DECLINE")],
    _form("INFORM", rf"DHCPINFORM from (?<ip>{_IP}) {_VIA}"),
)
