"""The normalized event schema: ECS field names as nested struct columns, one fixed Spark schema.

Every parser maps its input onto dotted ECS paths (``"source.ip"``, ``"dns.question.name"``); this module
owns the one list of those paths and their types, and :func:`assemble` turns a ``{path: Column}`` mapping
into the nested top-level columns. A path a parser does not produce is a typed null, so ``events`` has the
same columns and types whatever mix of sources a micro-batch holds (Delta appends never change the schema
unless this list does). A struct whose fields are all null is itself null, so JSON output and
``IS NULL`` tests stay meaningful.

Extending: add ``"namespace.field": "type"`` lines to :data:`ECS_FIELDS` (enrichment adds its own the same
way). Types are Spark DDL types. Fields that ECS does not define (``dhcp.*``, ``system.auth.*``,
``zeek.*``) follow Elastic's module naming where one exists.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# path -> Spark DDL type. Order is column order. Comments name the source(s) that fill a group.
ECS_FIELDS: dict[str, str] = {
    "@timestamp": "timestamp",
    "message": "string",
    "tags": "array<string>",
    # event: every source
    "event.id": "string",
    "event.kind": "string",
    "event.module": "string",
    "event.dataset": "string",
    "event.category": "array<string>",
    "event.type": "array<string>",
    "event.action": "string",
    "event.outcome": "string",
    "event.duration": "bigint",
    "event.created": "timestamp",
    "event.ingested": "timestamp",
    "event.original": "string",
    # syslog header (RFC 3164 / RFC 5424)
    "log.syslog.priority": "int",
    "log.syslog.facility.code": "int",
    "log.syslog.facility.name": "string",
    "log.syslog.severity.code": "int",
    "log.syslog.severity.name": "string",
    "log.syslog.version": "string",
    "log.syslog.appname": "string",
    "log.syslog.procid": "string",
    "log.syslog.msgid": "string",
    "log.syslog.structured_data": "map<string, map<string, string>>",
    "host.name": "string",
    "host.hostname": "string",
    # Filled by enrichment (enrich.dhcp_sessions) for events with no reporting host: the DHCP lease holder.
    "host.mac": "string",
    "host.ip": "array<string>",
    "process.name": "string",
    "process.pid": "bigint",
    # network endpoints: sshd, dhcpd, zeek
    "source.address": "string",
    "source.ip": "string",
    "source.port": "int",
    "source.mac": "string",
    "source.domain": "string",
    "source.bytes": "bigint",
    "source.packets": "bigint",
    "destination.address": "string",
    "destination.ip": "string",
    "destination.port": "int",
    "destination.mac": "string",
    "destination.domain": "string",
    "destination.bytes": "bigint",
    "destination.packets": "bigint",
    "network.transport": "string",
    "network.protocol": "string",
    "network.type": "string",
    "network.bytes": "bigint",
    "network.packets": "bigint",
    "network.community_id": "string",
    # identities: sshd, sudo, useradd/groupadd, zeek http
    "user.name": "string",
    "user.id": "string",
    "user.effective.name": "string",
    "group.name": "string",
    "group.id": "string",
    # application protocols: zeek dns/http/ssl/notice
    "dns.id": "string",
    "dns.type": "string",
    "dns.question.name": "string",
    "dns.question.type": "string",
    "dns.question.class": "string",
    "dns.response_code": "string",
    "dns.header_flags": "array<string>",
    "dns.answers": "array<struct<data: string, ttl: bigint>>",
    "dns.resolved_ip": "array<string>",
    "url.original": "string",
    "url.full": "string",
    "url.domain": "string",
    "url.path": "string",
    "url.query": "string",
    "http.version": "string",
    "http.request.method": "string",
    "http.request.referrer": "string",
    "http.request.body.bytes": "bigint",
    "http.response.status_code": "int",
    "http.response.body.bytes": "bigint",
    "http.response.mime_type": "string",
    "user_agent.original": "string",
    "tls.version": "string",
    "tls.version_protocol": "string",
    "tls.cipher": "string",
    "tls.curve": "string",
    "tls.resumed": "boolean",
    "tls.established": "boolean",
    "tls.next_protocol": "string",
    "tls.client.server_name": "string",
    "tls.client.ja3": "string",
    "tls.server.ja3s": "string",
    "tls.server.subject": "string",
    "tls.server.issuer": "string",
    "rule.name": "string",
    "related.ip": "array<string>",
    "related.user": "array<string>",
    "related.hosts": "array<string>",
    # DHCP leases from ISC dhcpd lines and Zeek dhcp.log, one shape for both (no ECS equivalent).
    # The DHCP client is source.ip / source.mac; these name the roles.
    "dhcp.message_types": "array<string>",
    "dhcp.assigned_ip": "string",
    "dhcp.requested_ip": "string",
    "dhcp.server_ip": "string",
    "dhcp.relay_ip": "string",
    "dhcp.interface": "string",
    "dhcp.client_hostname": "string",
    "dhcp.lease_seconds": "bigint",
    "dhcp.domain": "string",
    "dhcp.detail": "string",
    # auth log specifics (Elastic's system.auth names)
    "system.auth.ssh.event": "string",
    "system.auth.ssh.method": "string",
    "system.auth.ssh.signature": "string",
    "system.auth.ssh.key_type": "string",
    "system.auth.ssh.fingerprint": "string",
    "system.auth.ssh.invalid_user": "boolean",
    "system.auth.ssh.preauth": "boolean",
    "system.auth.ssh.disconnect_code": "int",
    "system.auth.ssh.disconnect_reason": "string",
    "system.auth.sudo.tty": "string",
    "system.auth.sudo.pwd": "string",
    "system.auth.sudo.user": "string",
    "system.auth.sudo.group": "string",
    "system.auth.sudo.command": "string",
    "system.auth.sudo.error": "string",
    "system.auth.pam.module": "string",
    "system.auth.pam.service": "string",
    "system.auth.pam.type": "string",
    "system.auth.pam.logname": "string",
    "system.auth.pam.uid": "string",
    "system.auth.pam.euid": "string",
    "system.auth.pam.tty": "string",
    "system.auth.pam.ruser": "string",
    "system.auth.pam.rhost": "string",
    "system.auth.pam.by": "string",
    "system.auth.useradd.home": "string",
    "system.auth.useradd.shell": "string",
    "system.auth.useradd.from": "string",
    "system.auth.groupadd.file": "string",
    "system.auth.repeated": "int",
    # Zeek specifics (Elastic's zeek module names)
    "zeek.session_id": "string",
    "zeek.connection.state": "string",
    "zeek.connection.history": "string",
    "zeek.connection.local_orig": "boolean",
    "zeek.connection.local_resp": "boolean",
    "zeek.connection.missed_bytes": "bigint",
    "zeek.connection.tunnel_parents": "array<string>",
    "zeek.dns.rtt": "double",
    "zeek.dns.rejected": "boolean",
    "zeek.dns.qtype": "int",
    "zeek.dns.qclass": "int",
    "zeek.dns.rcode": "int",
    "zeek.dns.Z": "int",
    "zeek.dhcp.uids": "array<string>",
    "zeek.dhcp.client_fqdn": "string",
    "zeek.dhcp.duration": "double",
    "zeek.http.trans_depth": "int",
    "zeek.http.status_msg": "string",
    "zeek.http.tags": "array<string>",
    "zeek.http.orig_fuids": "array<string>",
    "zeek.http.resp_fuids": "array<string>",
    "zeek.http.resp_mime_types": "array<string>",
    "zeek.ssl.ssl_history": "string",
    "zeek.ssl.validation_status": "string",
    "zeek.ssl.last_alert": "string",
    "zeek.ssl.sni_matches_cert": "boolean",
    "zeek.ssl.cert_chain_fps": "array<string>",
    "zeek.ssl.client_cert_chain_fps": "array<string>",
    "zeek.ssh.version": "int",
    "zeek.ssh.auth_success": "boolean",
    "zeek.ssh.auth_attempts": "int",
    "zeek.ssh.direction": "string",
    "zeek.ssh.client": "string",
    "zeek.ssh.server": "string",
    "zeek.ssh.cipher_alg": "string",
    "zeek.ssh.mac_alg": "string",
    "zeek.ssh.compression_alg": "string",
    "zeek.ssh.kex_alg": "string",
    "zeek.ssh.host_key_alg": "string",
    "zeek.ssh.host_key": "string",
    "zeek.notice.note": "string",
    "zeek.notice.msg": "string",
    "zeek.notice.sub": "string",
    "zeek.notice.actions": "array<string>",
    "zeek.notice.suppress_for": "double",
    "zeek.notice.peer_descr": "string",
    "zeek.notice.dropped": "boolean",
    "zeek.notice.fuid": "string",
    "zeek.weird.name": "string",
    "zeek.weird.addl": "string",
    "zeek.weird.notice": "boolean",
    "zeek.weird.peer": "string",
    "zeek.weird.source": "string",
    "zeek.ntp.version": "int",
    "zeek.ntp.mode": "int",
    "zeek.ntp.stratum": "int",
    "zeek.ntp.poll": "double",
    "zeek.ntp.precision": "double",
    "zeek.ntp.root_delay": "double",
    "zeek.ntp.root_disp": "double",
    "zeek.ntp.ref_id": "string",
    "zeek.ntp.ref_time": "timestamp",
    "zeek.ntp.org_time": "timestamp",
    "zeek.ntp.rec_time": "timestamp",
    "zeek.ntp.xmt_time": "timestamp",
    "zeek.ntp.num_exts": "int",
    "zeek.rdp.cookie": "string",
    "zeek.rdp.result": "string",
    "zeek.rdp.security_protocol": "string",
    "zeek.rdp.client_channels": "array<string>",
    "zeek.rdp.keyboard_layout": "string",
    "zeek.rdp.client_build": "string",
    "zeek.rdp.client_name": "string",
    "zeek.rdp.client_dig_product_id": "string",
    "zeek.rdp.desktop_width": "int",
    "zeek.rdp.desktop_height": "int",
    "zeek.rdp.requested_color_depth": "string",
    "zeek.rdp.cert_type": "string",
    "zeek.rdp.cert_count": "int",
    "zeek.rdp.cert_permanent": "boolean",
    "zeek.rdp.encryption_level": "string",
    "zeek.rdp.encryption_method": "string",
    # --- Added later: appended here so that the events table evolves additively (new leaves go last in
    # their struct, new top-level columns last). Windows event logs (ingest/parsers/windows.py), JSON
    # payloads in syslog (ingest/parsers/syslog_json.py).
    "event.code": "string",
    "event.provider": "string",
    "log.level": "string",
    "user.domain": "string",
    "user.target.name": "string",
    "user.target.domain": "string",
    "user.target.id": "string",
    "user.effective.domain": "string",
    "group.domain": "string",
    "process.executable": "string",
    "process.command_line": "string",
    "process.parent.pid": "bigint",
    "process.parent.name": "string",
    "process.parent.executable": "string",
    "service.name": "string",
    "service.state": "string",
    # Windows specifics (Elastic's winlog.* names); winlog.event_data keeps every EventData value by name.
    "winlog.event_id": "string",
    "winlog.channel": "string",
    "winlog.provider_name": "string",
    "winlog.computer_name": "string",
    "winlog.task": "string",
    "winlog.keywords": "array<string>",
    "winlog.user.name": "string",
    "winlog.user.domain": "string",
    "winlog.user.identifier": "string",
    "winlog.logon.type": "string",
    "winlog.logon.id": "string",
    "winlog.event_data": "map<string, string>",
    # A JSON object after the syslog header (@cee: or bare), every top-level key as text.
    "syslog.json": "map<string, string>",
    # Zeek logs of ingest/parsers/zeek_logs.py: ECS file.*, tls.server.x509.*, email.*; the rest under zeek.<log>.*
    "file.name": "string",
    "file.mime_type": "string",
    "file.size": "bigint",
    "file.hash.md5": "string",
    "file.hash.sha1": "string",
    "file.hash.sha256": "string",
    "file.path": "string",
    "file.directory": "string",
    "file.mtime": "timestamp",
    "file.accessed": "timestamp",
    "file.created": "timestamp",
    "file.ctime": "timestamp",
    "tls.server.x509.version_number": "string",
    "tls.server.x509.serial_number": "string",
    "tls.server.x509.subject.distinguished_name": "string",
    "tls.server.x509.issuer.distinguished_name": "string",
    "tls.server.x509.not_before": "timestamp",
    "tls.server.x509.not_after": "timestamp",
    "tls.server.x509.public_key_algorithm": "string",
    "tls.server.x509.signature_algorithm": "string",
    "tls.server.x509.public_key_size": "int",
    "tls.server.x509.public_key_exponent": "bigint",
    "tls.server.x509.public_key_curve": "string",
    "tls.server.x509.alternative_names": "array<string>",
    "email.from.address": "array<string>",
    "email.to.address": "array<string>",
    "email.cc.address": "array<string>",
    "email.reply_to.address": "array<string>",
    "email.sender.address": "string",
    "email.subject": "string",
    "email.message_id": "string",
    "zeek.files.fuid": "string",
    "zeek.files.source": "string",
    "zeek.files.parent_fuid": "string",
    "zeek.files.extracted": "string",
    "zeek.files.tx_hosts": "array<string>",
    "zeek.files.rx_hosts": "array<string>",
    "zeek.files.session_ids": "array<string>",
    "zeek.files.analyzers": "array<string>",
    "zeek.files.depth": "int",
    "zeek.files.local_orig": "boolean",
    "zeek.files.is_orig": "boolean",
    "zeek.files.seen_bytes": "bigint",
    "zeek.files.total_bytes": "bigint",
    "zeek.files.missing_bytes": "bigint",
    "zeek.files.overflow_bytes": "bigint",
    "zeek.files.timedout": "boolean",
    "zeek.files.extracted_cutoff": "boolean",
    "zeek.files.extracted_size": "bigint",
    "zeek.x509.id": "string",
    "zeek.x509.fingerprint": "string",
    "zeek.x509.certificate.key_type": "string",
    "zeek.x509.san.dns": "array<string>",
    "zeek.x509.san.uri": "array<string>",
    "zeek.x509.san.email": "array<string>",
    "zeek.x509.san.ip": "array<string>",
    "zeek.x509.basic_constraints.ca": "boolean",
    "zeek.x509.basic_constraints.path_len": "int",
    "zeek.x509.host_cert": "boolean",
    "zeek.x509.client_cert": "boolean",
    "zeek.smb_files.fuid": "string",
    "zeek.smb_files.action": "string",
    "zeek.smb_files.path": "string",
    "zeek.smb_files.name": "string",
    "zeek.smb_files.prev_name": "string",
    "zeek.smb_files.size": "bigint",
    "zeek.smb_files.times.modified": "timestamp",
    "zeek.smb_files.times.accessed": "timestamp",
    "zeek.smb_files.times.created": "timestamp",
    "zeek.smb_files.times.changed": "timestamp",
    "zeek.smb_mapping.path": "string",
    "zeek.smb_mapping.service": "string",
    "zeek.smb_mapping.native_file_system": "string",
    "zeek.smb_mapping.share_type": "string",
    "zeek.kerberos.request_type": "string",
    "zeek.kerberos.client": "string",
    "zeek.kerberos.service": "string",
    "zeek.kerberos.error_msg": "string",
    "zeek.kerberos.cipher": "string",
    "zeek.kerberos.client_cert_subject": "string",
    "zeek.kerberos.client_cert_fuid": "string",
    "zeek.kerberos.server_cert_subject": "string",
    "zeek.kerberos.server_cert_fuid": "string",
    "zeek.kerberos.success": "boolean",
    "zeek.kerberos.valid.from": "timestamp",
    "zeek.kerberos.valid.until": "timestamp",
    "zeek.kerberos.forwardable": "boolean",
    "zeek.kerberos.renewable": "boolean",
    "zeek.ntlm.username": "string",
    "zeek.ntlm.hostname": "string",
    "zeek.ntlm.domainname": "string",
    "zeek.ntlm.server_nb_computer_name": "string",
    "zeek.ntlm.server_dns_computer_name": "string",
    "zeek.ntlm.server_tree_name": "string",
    "zeek.ntlm.status": "string",
    "zeek.ntlm.success": "boolean",
    "zeek.dce_rpc.rtt": "double",
    "zeek.dce_rpc.named_pipe": "string",
    "zeek.dce_rpc.endpoint": "string",
    "zeek.dce_rpc.operation": "string",
    "zeek.smtp.helo": "string",
    "zeek.smtp.mailfrom": "string",
    "zeek.smtp.date": "string",
    "zeek.smtp.from": "string",
    "zeek.smtp.reply_to": "string",
    "zeek.smtp.msg_id": "string",
    "zeek.smtp.in_reply_to": "string",
    "zeek.smtp.subject": "string",
    "zeek.smtp.x_originating_ip": "string",
    "zeek.smtp.first_received": "string",
    "zeek.smtp.second_received": "string",
    "zeek.smtp.last_reply": "string",
    "zeek.smtp.user_agent": "string",
    "zeek.smtp.trans_depth": "int",
    "zeek.smtp.rcptto": "array<string>",
    "zeek.smtp.to": "array<string>",
    "zeek.smtp.cc": "array<string>",
    "zeek.smtp.path": "array<string>",
    "zeek.smtp.fuids": "array<string>",
    "zeek.smtp.tls": "boolean",
    "zeek.smtp.is_webmail": "boolean",
    "zeek.ftp.user": "string",
    "zeek.ftp.password": "string",
    "zeek.ftp.command": "string",
    "zeek.ftp.arg": "string",
    "zeek.ftp.mime_type": "string",
    "zeek.ftp.reply_msg": "string",
    "zeek.ftp.fuid": "string",
    "zeek.ftp.file_size": "bigint",
    "zeek.ftp.reply_code": "int",
    "zeek.ftp.data_channel.passive": "boolean",
    "zeek.ftp.data_channel.originating_host": "string",
    "zeek.ftp.data_channel.response_host": "string",
    "zeek.ftp.data_channel.response_port": "int",
    "zeek.software.software_type": "string",
    "zeek.software.name": "string",
    "zeek.software.unparsed_version": "string",
    "zeek.software.url": "string",
    "zeek.software.host": "string",
    "zeek.software.host_port": "int",
    "zeek.software.version.full": "string",
    "zeek.software.version.major": "int",
    "zeek.software.version.minor": "int",
    "zeek.software.version.minor2": "int",
    "zeek.software.version.minor3": "int",
    "zeek.software.version.additional": "string",
    "zeek.known_hosts.host": "string",
    "zeek.known_services.host": "string",
    "zeek.known_services.port_num": "int",
    "zeek.known_services.port_proto": "string",
    "zeek.known_services.service": "array<string>",
    "zeek.pe.id": "string",
    "zeek.pe.machine": "string",
    "zeek.pe.os": "string",
    "zeek.pe.subsystem": "string",
    "zeek.pe.compile_time": "timestamp",
    "zeek.pe.is_exe": "boolean",
    "zeek.pe.is_64bit": "boolean",
    "zeek.pe.uses_aslr": "boolean",
    "zeek.pe.uses_dep": "boolean",
    "zeek.pe.uses_code_integrity": "boolean",
    "zeek.pe.uses_seh": "boolean",
    "zeek.pe.has_import_table": "boolean",
    "zeek.pe.has_export_table": "boolean",
    "zeek.pe.has_cert_table": "boolean",
    "zeek.pe.has_debug_data": "boolean",
    "zeek.pe.section_names": "array<string>",
}

_ATOMIC: dict[str, DataType] = {
    "string": StringType(), "int": IntegerType(), "bigint": LongType(), "double": DoubleType(),
    "boolean": BooleanType(), "timestamp": TimestampType(), "binary": BinaryType(),
}


def parse_type(ddl: str) -> DataType:
    """The Spark type of a DDL type string (the subset used here), without needing a Spark session."""
    typ, rest = _parse(ddl.replace(" ", ""))
    if rest:
        raise ValueError(f"unexpected {rest!r} in type {ddl!r}")
    return typ


def _parse(text: str) -> tuple[DataType, str]:
    for name in ("array<", "map<", "struct<"):
        if text.startswith(name):
            rest = text[len(name):]
            if name == "array<":
                element, rest = _parse(rest)
                return ArrayType(element), _expect(rest, ">")
            if name == "map<":
                key, rest = _parse(rest)
                value, rest = _parse(_expect(rest, ","))
                return MapType(key, value), _expect(rest, ">")
            fields = []
            while True:
                field_name, rest = rest.split(":", 1)
                field_type, rest = _parse(rest)
                fields.append(StructField(field_name, field_type))
                if rest.startswith(">"):
                    return StructType(fields), rest[1:]
                rest = _expect(rest, ",")
    for name, typ in _ATOMIC.items():
        if text.startswith(name):
            return typ, text[len(name):]
    raise ValueError(f"unknown type at {text!r}")


def _expect(text: str, token: str) -> str:
    if not text.startswith(token):
        raise ValueError(f"expected {token!r} at {text!r}")
    return text[len(token):]


FIELD_TYPES: dict[str, DataType] = {path: parse_type(ddl) for path, ddl in ECS_FIELDS.items()}


def _tree(paths: list[str]) -> dict:
    """Nested dict of the dotted paths: ``{"source": {"ip": "source.ip", ...}, ...}`` (leaves are paths)."""
    root: dict = {}
    for path in paths:
        node = root
        *parents, leaf = path.split(".") if path != "@timestamp" else ["@timestamp"]
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"ECS path {path} nests under a leaf")
        if leaf in node:
            raise ValueError(f"ECS path {path} declared twice or both as leaf and struct")
        node[leaf] = path
    return root


_TREE = _tree(list(ECS_FIELDS))
ECS_COLUMNS: tuple[str, ...] = tuple(_TREE)


def _struct_type(node: dict) -> StructType:
    return StructType([
        StructField(name, _struct_type(child) if isinstance(child, dict) else FIELD_TYPES[child], True)
        for name, child in node.items()
    ])


ECS_SCHEMA: StructType = _struct_type(_TREE)


def typed_null(path: str) -> Column:
    return F.lit(None).cast(FIELD_TYPES[path])


def assemble(values: dict[str, Column]) -> list[Column]:
    """The ECS top-level columns (in schema order) from ``{path: Column}``; unknown paths are an error.

    Leaves are cast to their declared type (a no-op when the parser produced that type already). Each
    struct is null when all of its leaves are null. ``values`` should reference plain columns (see
    ``normalize``), since a leaf expression appears twice: in the struct and in its null test.
    """
    unknown = set(values) - set(ECS_FIELDS)
    if unknown:
        raise KeyError(f"not ECS paths of ecs_schema.ECS_FIELDS: {sorted(unknown)}")

    def build(name: str, node: dict | str) -> tuple[Column, Column | None]:
        """(column, "is not null" test or None when always null)."""
        if isinstance(node, str):
            value = values.get(node)
            if value is None:
                return typed_null(node).alias(name), None
            return value.try_cast(FIELD_TYPES[node]).alias(name), value.isNotNull()
        children = [build(child_name, child) for child_name, child in node.items()]
        tests = [test for _, test in children if test is not None]
        struct = F.struct(*[col for col, _ in children])
        if not tests:
            return F.lit(None).cast(_struct_type(node)).alias(name), None
        present = reduce(lambda a, b: a | b, tests)
        return F.when(present, struct).alias(name), present

    return [build(name, node)[0] for name, node in _TREE.items()]
