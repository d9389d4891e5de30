"""Sigma field names -> column paths of the ``events`` table (ECS, dotted).

Rules in Nightjar's own rule pack name ECS fields directly (``source.ip``, ``event.action``,
``nightjar.user.is_admin``); those are already column paths and map to themselves. Public Sigma rules for
Linux and network log sources use the Sigma taxonomy (``User``, ``DestinationPort``, the Zeek-style
``id.orig_h``, ``query``); :data:`SIGMA_TO_ECS` maps the common ones, so such rules compile without a
processing pipeline. The table only renames: whether the target column exists is decided by the compiler
against the real schema (``CommandLine`` maps to ``process.command_line``, which the parsers do not fill
today, so a rule using it fails with "unknown field" rather than silently never matching).

Why a plain table and no pySigma processing pipeline: the mapping is a few dozen static renames, and a
table is easy to read, test and extend; a pipeline would add a second place where field names change.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# Sigma taxonomy / log-source field name -> ECS path. Names not listed are taken as ECS paths themselves.
SIGMA_TO_ECS: Mapping[str, str] = MappingProxyType({
    # generic / process_creation (Linux)
    "User": "user.name",
    "Image": "process.name",
    "CommandLine": "process.command_line",
    "ProcessId": "process.pid",
    "Hostname": "host.name",
    "ComputerName": "host.name",
    # network_connection / firewall
    "SourceIp": "source.ip",
    "src_ip": "source.ip",
    "SourcePort": "source.port",
    "src_port": "source.port",
    "SourceHostname": "source.domain",
    "DestinationIp": "destination.ip",
    "dst_ip": "destination.ip",
    "DestinationPort": "destination.port",
    "dst_port": "destination.port",
    "DestinationHostname": "destination.domain",
    "Protocol": "network.transport",
    # Zeek log field names as used by public Sigma rules (product: zeek)
    "id.orig_h": "source.ip",
    "id.orig_p": "source.port",
    "id.resp_h": "destination.ip",
    "id.resp_p": "destination.port",
    "proto": "network.transport",
    "service": "network.protocol",
    # dns
    "query": "dns.question.name",
    "QueryName": "dns.question.name",
    "qtype_name": "dns.question.type",
    "record_type": "dns.question.type",
    "rcode_name": "dns.response_code",
    # proxy / http
    "c-uri": "url.original",
    "uri": "url.original",
    "cs-host": "url.domain",
    "c-useragent": "user_agent.original",
    "user_agent": "user_agent.original",
    "cs-method": "http.request.method",
    "method": "http.request.method",
    "sc-status": "http.response.status_code",
    "status_code": "http.response.status_code",
    "cs-referrer": "http.request.referrer",
    # tls
    "server_name": "tls.client.server_name",
    "ja3": "tls.client.ja3",
    "ja3s": "tls.server.ja3s",
})


def ecs_path(sigma_field: str) -> str:
    """The ``events`` column path for a Sigma field name: the taxonomy mapping, else the name itself (ECS)."""
    return SIGMA_TO_ECS.get(sigma_field, sigma_field)
