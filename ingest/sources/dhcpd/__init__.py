"""ISC dhcpd lease messages -> network events with the ``dhcp.*`` lease fields that DHCP attribution reads.

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

The DHCP client is the ECS source: ``source.mac`` (ECS spelling; dhcpd's unpadded ``0:c:29:aa:b:1`` is padded by the
record parser) and ``source.ip`` (the address the message is about). ``dhcp.assigned_ip`` is set by OFFER/ACK,
``dhcp.requested_ip`` by REQUEST, ``dhcp.server_ip`` by the server identifier of a REQUEST, ``dhcp.relay_ip`` by a
``via`` that is an address, else ``dhcp.interface``; ``dhcp.client_hostname`` by the parenthesised client name, and
``dhcp.detail`` keeps the text after ``via …`` (``wrong network.``, ``(found)``, ``abandoned``). The ``dhcp.*_ip``
fields hold valid addresses only, and are added to ``related.ip`` (the client name to ``related.hosts``).
``event.action`` is the message type in lower case (``dhcpack``); NAK and DECLINE are failures, ACK a success. Other
dhcpd lines (start-up, failover, ``reuse_lease``) are ``dhcpd`` events with host, process and message. The
``dhcp.*`` fields are detail keys (``fields.yml``); DHCP attribution reads them through the field resolver.
"""

from __future__ import annotations

from collections.abc import Callable

from ingest.sources import Event, Source
from ingest.sources.message_forms import Form, Groups, body_parser, form
from ingest.sources.values import ip_or_none

PROGRAMS = ("dhcpd",)
_HW = r"[0-9A-Fa-f]{1,2}(?::[0-9A-Fa-f]{1,2}){5,19}"
_IP = r"[0-9A-Fa-f.:]+"
_NAME = r"(?: \((?P<hostname>[^)]*)\))?"
_VIA = r"via (?P<via>[^\s:]+)(?::? (?P<detail>.*))?"
_OUTCOMES = {"ACK": "success", "NAK": "failure", "DECLINE": "failure"}
# The lease address of each message type, by role.
_IP_ROLE = {"OFFER": "dhcp.assigned_ip", "ACK": "dhcp.assigned_ip", "REQUEST": "dhcp.requested_ip"}


def _fields(kind: str, lease: bool = True) -> Callable[[Groups], Event]:
    action, types, outcome = f"dhcp{kind.lower()}", [kind], _OUTCOMES.get(kind)
    role = _IP_ROLE.get(kind) if lease else None

    def fields(g: Groups) -> Event:
        via = g["via"]
        relay = ip_or_none(via)
        hostname = g.get("hostname")
        ips = {"dhcp.assigned_ip": None, "dhcp.requested_ip": None,
               "dhcp.server_ip": ip_or_none(g.get("server")), "dhcp.relay_ip": relay}
        if role is not None:
            ips[role] = ip_or_none(g.get("ip"))
        return {
            "event.category": ["network"], "event.type": ["protocol"], "event.action": action,
            "event.outcome": outcome, "network.protocol": "dhcp", "network.transport": "udp",
            "source.address": g.get("ip"), "source.mac": g.get("mac"),
            "related.ip": list(ips.values()), "related.hosts": [hostname],
            "detail": {"dhcp.message_types": types, **ips, "dhcp.interface": via if relay is None else None,
                       "dhcp.client_hostname": hostname, "dhcp.detail": g["detail"]},
        }

    return fields


def _form(kind: str, regex: str) -> Form:
    return form(kind.lower(), f"DHCP{kind} ", regex, _fields(kind))


FORMS: tuple[Form, ...] = (
    _form("DISCOVER", rf"DHCPDISCOVER from (?P<mac>{_HW}){_NAME} {_VIA}"),
    _form("REQUEST", rf"DHCPREQUEST for (?P<ip>{_IP})(?: \((?P<server>[^)]*)\))? from (?P<mac>{_HW}){_NAME} {_VIA}"),
    *[_form(kind, rf"DHCP{kind} on (?P<ip>{_IP}) to (?P<mac>{_HW}){_NAME} {_VIA}") for kind in ("OFFER", "ACK", "NAK")],
    # DHCPACK answering a DHCPINFORM names the client address and puts the MAC in parentheses.
    form("inform_ack", "DHCPACK to ", rf"DHCPACK to (?P<ip>{_IP}) \((?P<mac>{_HW})\) {_VIA}", _fields("ACK", False)),
    *[_form(kind, rf"DHCP{kind} of (?P<ip>{_IP}) from (?P<mac>{_HW}){_NAME} {_VIA}") for kind in ("RELEASE", "DECLINE")],
    _form("INFORM", rf"DHCPINFORM from (?P<ip>{_IP}) {_VIA}"),
)

SOURCE = Source(title="ISC dhcpd: DISCOVER, OFFER, REQUEST, ACK, NAK, RELEASE, DECLINE, INFORM", transport="syslog",
                parse=body_parser(FORMS), programs=PROGRAMS, layer="program", order=100,
                program_dataset=("dhcpd", "dhcpd"))
