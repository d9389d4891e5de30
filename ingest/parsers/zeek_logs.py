"""Zeek logs beyond the connection-level ones, field by field: files, x509, smb_files, smb_mapping, kerberos,
ntlm, dce_rpc, smtp, ftp, software, known_hosts, known_services, pe.

ECS where ECS has a place (``file.*``, ``tls.server.x509.*``, ``email.*``, ``user.*``, ``url.*``), every Zeek
field under ``zeek.<log>.*`` as well (Elastic's zeek module names), so that nothing the log said is lost. Read
from the same ``from_json`` object as :mod:`.zeek` (all scalars as strings, converted with ``try_cast``);
Zeek writes records flattened with dotted keys (``certificate.subject``), which is what is read here.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from ingest.parsers import values as V
from ingest.parsers.field_map import Fields, constant, non_empty


def _first(values: Column) -> Column:
    return F.try_element_at(values, F.lit(1))


def _array_text(text: Column) -> Column:
    """A JSON array read as text (a field that is a string in another log) -> ``array<string>``."""
    return non_empty(F.when(F.ltrim(text).startswith("["), F.from_json(text, "array<string>")))


def _address(text: Column) -> Column:
    """``"Name" <user@example.com>`` / ``<user@example.com>`` / ``user@example.com`` -> ``user@example.com``."""
    return F.coalesce(F.nullif(F.regexp_extract(text, r"<([^<>]*)>", 1), F.lit("")), F.trim(text))


def per_path(j: Column, s, timestamp) -> dict[str, Fields]:
    """``{_path: Fields}`` for the logs of this module; ``s(j, name)`` reads a string field (``-`` = unset)."""

    def b(name: str) -> Column:
        return V.to_bool(j[name])

    def i(name: str) -> Column:
        return V.to_int(j[name])

    def n(name: str) -> Column:
        return V.to_long(j[name])

    def strings(log: str, *names: str) -> Fields:
        return {f"zeek.{log}.{name}": s(j, name) for name in names}

    def time(name: str) -> Column:
        return timestamp(s(j, name))

    files_hosts_tx, files_hosts_rx = non_empty(j["tx_hosts"]), non_empty(j["rx_hosts"])
    files: Fields = {
        **constant(event__category=["file"], event__type=["info"]),
        "zeek.session_id": _first(j["conn_uids"]),
        "source.address": _first(j["tx_hosts"]),
        "destination.address": _first(j["rx_hosts"]),
        "event.duration": V.seconds_to_nanos(j["duration"]),
        "file.name": s(j, "filename"),
        "file.mime_type": s(j, "mime_type"),
        "file.size": F.coalesce(n("total_bytes"), n("seen_bytes")),
        "file.hash.md5": s(j, "md5"),
        "file.hash.sha1": s(j, "sha1"),
        "file.hash.sha256": s(j, "sha256"),
        **strings("files", "fuid", "source", "parent_fuid", "extracted"),
        "zeek.files.tx_hosts": files_hosts_tx,
        "zeek.files.rx_hosts": files_hosts_rx,
        "zeek.files.session_ids": non_empty(j["conn_uids"]),
        "zeek.files.analyzers": non_empty(j["analyzers"]),
        "zeek.files.depth": i("depth"),
        "zeek.files.local_orig": b("local_orig"),
        "zeek.files.is_orig": b("is_orig"),
        "zeek.files.seen_bytes": n("seen_bytes"),
        "zeek.files.total_bytes": n("total_bytes"),
        "zeek.files.missing_bytes": n("missing_bytes"),
        "zeek.files.overflow_bytes": n("overflow_bytes"),
        "zeek.files.timedout": b("timedout"),
        "zeek.files.extracted_cutoff": b("extracted_cutoff"),
        "zeek.files.extracted_size": n("extracted_size"),
    }
    sans = F.concat(*[F.coalesce(j[f"san.{k}"], F.array().cast("array<string>")) for k in ("dns", "ip", "email", "uri")])
    x509: Fields = {
        **constant(event__category=["network"], event__type=["info"]),
        "zeek.session_id": F.lit(None).cast("string"),
        "tls.server.x509.version_number": s(j, "certificate.version"),
        "tls.server.x509.serial_number": s(j, "certificate.serial"),
        "tls.server.x509.subject.distinguished_name": s(j, "certificate.subject"),
        "tls.server.x509.issuer.distinguished_name": s(j, "certificate.issuer"),
        "tls.server.x509.not_before": time("certificate.not_valid_before"),
        "tls.server.x509.not_after": time("certificate.not_valid_after"),
        "tls.server.x509.public_key_algorithm": s(j, "certificate.key_alg"),
        "tls.server.x509.signature_algorithm": s(j, "certificate.sig_alg"),
        "tls.server.x509.public_key_size": i("certificate.key_length"),
        "tls.server.x509.public_key_exponent": n("certificate.exponent"),
        "tls.server.x509.public_key_curve": s(j, "certificate.curve"),
        "tls.server.x509.alternative_names": non_empty(sans),
        "zeek.x509.id": F.when(~F.ltrim(j["id"]).startswith("{"), s(j, "id")),
        "zeek.x509.fingerprint": s(j, "fingerprint"),
        "zeek.x509.certificate.key_type": s(j, "certificate.key_type"),
        "zeek.x509.san.dns": non_empty(j["san.dns"]),
        "zeek.x509.san.uri": non_empty(j["san.uri"]),
        "zeek.x509.san.email": non_empty(j["san.email"]),
        "zeek.x509.san.ip": non_empty(j["san.ip"]),
        "zeek.x509.basic_constraints.ca": b("basic_constraints.ca"),
        "zeek.x509.basic_constraints.path_len": i("basic_constraints.path_len"),
        "zeek.x509.host_cert": b("host_cert"),
        "zeek.x509.client_cert": b("client_cert"),
    }
    smb_path, smb_name = s(j, "path"), s(j, "name")
    smb_files: Fields = {
        **constant(event__category=["file", "network"], event__type=["info"], network__transport="tcp"),
        "event.action": F.lower(F.regexp_replace(s(j, "action"), r"^SMB::FILE_", "")),
        "file.name": smb_name,
        "file.path": F.when(smb_name.isNotNull(),
                            F.concat_ws("\\", F.regexp_replace(smb_path, r"\\+$", ""), smb_name)),
        "file.size": n("size"),
        "file.directory": smb_path,
        "file.mtime": time("times.modified"),
        "file.accessed": time("times.accessed"),
        "file.created": time("times.created"),
        "file.ctime": time("times.changed"),
        **strings("smb_files", "fuid", "action", "path", "name", "prev_name"),
        "zeek.smb_files.size": n("size"),
        "zeek.smb_files.times.modified": time("times.modified"),
        "zeek.smb_files.times.accessed": time("times.accessed"),
        "zeek.smb_files.times.created": time("times.created"),
        "zeek.smb_files.times.changed": time("times.changed"),
    }
    smb_mapping: Fields = {
        **constant(event__category=["network"], event__type=["info"], network__transport="tcp"),
        **strings("smb_mapping", "path", "service", "native_file_system", "share_type"),
    }
    client = s(j, "client")
    krb_success = b("success")
    kerberos: Fields = {
        **constant(event__category=["network", "authentication"], event__type=["info"]),
        "event.action": s(j, "request_type"),
        "event.outcome": F.when(krb_success, F.lit("success")).when(~krb_success, F.lit("failure")),
        "user.name": F.substring_index(client, "/", 1),
        "user.domain": F.when(client.contains("/"), F.substring_index(client, "/", -1)),
        **strings("kerberos", "request_type", "client", "service", "error_msg", "cipher", "client_cert_subject",
                  "client_cert_fuid", "server_cert_subject", "server_cert_fuid"),
        "zeek.kerberos.success": krb_success,
        "zeek.kerberos.valid.from": time("from"),
        "zeek.kerberos.valid.until": time("till"),
        "zeek.kerberos.forwardable": b("forwardable"),
        "zeek.kerberos.renewable": b("renewable"),
    }
    ntlm_success = b("success")
    ntlm: Fields = {
        **constant(event__category=["network", "authentication"], event__type=["info"]),
        "event.outcome": F.when(ntlm_success, F.lit("success")).when(~ntlm_success, F.lit("failure")),
        "user.name": s(j, "username"),
        "user.domain": s(j, "domainname"),
        **strings("ntlm", "username", "hostname", "domainname", "server_nb_computer_name",
                  "server_dns_computer_name", "server_tree_name", "status"),
        "zeek.ntlm.success": ntlm_success,
    }
    dce_rpc: Fields = {
        **constant(event__category=["network"], event__type=["connection", "protocol"]),
        "event.action": s(j, "operation"),
        "zeek.dce_rpc.rtt": V.to_double(j["rtt"]),
        **strings("dce_rpc", "named_pipe", "endpoint", "operation"),
    }
    to, cc = non_empty(j["to"]), non_empty(j["cc"])
    smtp: Fields = {
        **constant(event__category=["network", "email"], event__type=["connection", "protocol"],
                   network__transport="tcp"),
        "email.from.address": F.when(s(j, "from").isNotNull(), F.array(_address(s(j, "from")))),
        "email.to.address": non_empty(F.transform(j["to"], _address)),
        "email.cc.address": non_empty(F.transform(j["cc"], _address)),
        "email.reply_to.address": F.when(s(j, "reply_to").isNotNull(), F.array(_address(s(j, "reply_to")))),
        "email.sender.address": _address(s(j, "mailfrom")),
        "email.subject": s(j, "subject"),
        "email.message_id": s(j, "msg_id"),
        "user_agent.original": s(j, "user_agent"),
        **strings("smtp", "helo", "mailfrom", "date", "from", "reply_to", "msg_id", "in_reply_to", "subject",
                  "x_originating_ip", "first_received", "second_received", "last_reply", "user_agent"),
        "zeek.smtp.trans_depth": i("trans_depth"),
        "zeek.smtp.rcptto": non_empty(j["rcptto"]),
        "zeek.smtp.to": to,
        "zeek.smtp.cc": cc,
        "zeek.smtp.path": _array_text(j["path"]),
        "zeek.smtp.fuids": non_empty(j["fuids"]),
        "zeek.smtp.tls": b("tls"),
        "zeek.smtp.is_webmail": b("is_webmail"),
    }
    reply = i("reply_code")
    ftp: Fields = {
        **constant(event__category=["network"], event__type=["connection", "protocol"], network__transport="tcp"),
        "event.action": F.lower(s(j, "command")),
        "event.outcome": F.when(reply < 400, F.lit("success")).when(reply >= 400, F.lit("failure")),
        "user.name": s(j, "user"),
        "file.mime_type": s(j, "mime_type"),
        "file.size": n("file_size"),
        **strings("ftp", "user", "password", "command", "arg", "mime_type", "reply_msg", "fuid"),
        "zeek.ftp.file_size": n("file_size"),
        "zeek.ftp.reply_code": reply,
        "zeek.ftp.data_channel.passive": b("data_channel.passive"),
        "zeek.ftp.data_channel.originating_host": s(j, "data_channel.orig_h"),
        "zeek.ftp.data_channel.response_host": s(j, "data_channel.resp_h"),
        "zeek.ftp.data_channel.response_port": i("data_channel.resp_p"),
    }
    version = F.concat_ws(".", *[s(j, f"version.{p}") for p in ("major", "minor", "minor2", "minor3")])
    software: Fields = {
        **constant(event__category=["network"], event__type=["info"]),
        "source.address": s(j, "host"),
        "source.port": i("host_p"),
        "url.original": s(j, "url"),
        **strings("software", "software_type", "name", "unparsed_version", "url"),
        "zeek.software.host": s(j, "host"),
        "zeek.software.host_port": i("host_p"),
        "zeek.software.version.full": F.nullif(version, F.lit("")),
        "zeek.software.version.major": i("version.major"),
        "zeek.software.version.minor": i("version.minor"),
        "zeek.software.version.minor2": i("version.minor2"),
        "zeek.software.version.minor3": i("version.minor3"),
        "zeek.software.version.additional": s(j, "version.addl"),
    }
    known_hosts: Fields = {
        **constant(event__category=["network", "host"], event__type=["info"]),
        "source.address": s(j, "host"),
        "zeek.known_hosts.host": s(j, "host"),
    }
    known_services: Fields = {
        **constant(event__category=["network"], event__type=["info"]),
        "destination.address": s(j, "host"),
        "destination.port": i("port_num"),
        "network.transport": F.lower(s(j, "port_proto")),
        "zeek.known_services.host": s(j, "host"),
        "zeek.known_services.port_num": i("port_num"),
        "zeek.known_services.port_proto": s(j, "port_proto"),
        "zeek.known_services.service": F.coalesce(_array_text(j["service"]),
                                                  F.when(s(j, "service").isNotNull(), F.array(s(j, "service")))),
    }
    pe_flags = ("is_exe", "is_64bit", "uses_aslr", "uses_dep", "uses_code_integrity", "uses_seh", "has_import_table",
                "has_export_table", "has_cert_table", "has_debug_data")
    pe: Fields = {
        **constant(event__category=["file"], event__type=["info"]),
        "zeek.session_id": F.lit(None).cast("string"),
        "zeek.pe.id": F.when(~F.ltrim(j["id"]).startswith("{"), s(j, "id")),
        **strings("pe", "machine", "os", "subsystem"),
        "zeek.pe.compile_time": time("compile_ts"),
        **{f"zeek.pe.{flag}": b(flag) for flag in pe_flags},
        "zeek.pe.section_names": non_empty(j["section_names"]),
    }
    return {"files": files, "x509": x509, "smb_files": smb_files, "smb_mapping": smb_mapping, "kerberos": kerberos,
            "ntlm": ntlm, "dce_rpc": dce_rpc, "smtp": smtp, "ftp": ftp, "software": software,
            "known_hosts": known_hosts, "known_services": known_services, "pe": pe}
