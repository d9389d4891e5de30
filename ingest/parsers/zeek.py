"""Zeek JSON logs (one JSON object per line) -> ECS, with Zeek's own fields under ``zeek.*``.

Read with one ``from_json`` and an explicit schema (:data:`JSON_SCHEMA`), the union of the fields of the
logs mapped here. Every scalar is read as a string and converted with ``try_cast``: Zeek writes ``ts`` as
an ISO 8601 string or as epoch seconds depending on ``LogAscii::json_timestamps``, counts sometimes as
doubles, and a type surprise in one field must not cost the whole record. Variants handled:

* flattened dotted keys (``"id.orig_h"``, Zeek's default) and nested ``"id": {"orig_h": …}`` objects;
* ``ts`` as ISO 8601 (``2018-03-24T17:15:20.865716Z``) or epoch seconds (``1521911720.865716``);
* IPv4 and IPv6 addresses; sets and vectors as JSON arrays;
* a missing ``_path`` (logs written to per-type files): inferred from fields only that log has.

Addresses are kept as written (``source.address``, ``dhcp.assigned_ip``, …); normalization validates
them into ``source.ip`` etc. Mapped logs: conn, dns, dhcp, http, ssl, ssh, notice, weird, ntp, rdp, and (in
:mod:`.zeek_logs`) files, x509, smb_files, smb_mapping, kerberos, ntlm, dce_rpc, smtp, ftp, software,
known_hosts, known_services, pe. Any other ``_path`` is still an event: timestamp, ``zeek.session_id`` and the
connection 4-tuple. A record is
quarantined when it is not one complete JSON object, has no ``_path`` that can be inferred, or has no
readable ``ts``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType

from ingest.parsers import values as V
from ingest.parsers import zeek_logs
from ingest.parsers.field_map import Fields, constant, non_empty

PARSER = "zeek"
CORRUPT = "_corrupt_record"
_ARRAY_FIELDS = {
    "tunnel_parents", "answers", "TTLs", "uids", "msg_types", "tags", "proxied", "orig_fuids", "orig_filenames",
    "orig_mime_types", "resp_fuids", "resp_filenames", "resp_mime_types", "cert_chain_fps",
    "client_cert_chain_fps", "actions", "client_channels",
    # files, x509, smtp, pe
    "tx_hosts", "rx_hosts", "conn_uids", "analyzers", "san.dns", "san.uri", "san.email", "san.ip", "rcptto", "to",
    "cc", "fuids", "section_names",
}
_SCALAR_FIELDS = (
    "_path ts uid id.orig_h id.orig_p id.resp_h id.resp_p proto "
    # conn
    "service duration orig_bytes resp_bytes conn_state local_orig local_resp missed_bytes history orig_pkts "
    "orig_ip_bytes resp_pkts resp_ip_bytes orig_l2_addr resp_l2_addr community_id "
    # dns
    "trans_id rtt query qclass qclass_name qtype qtype_name rcode rcode_name AA TC RD RA Z rejected "
    # dhcp
    "client_addr server_addr client_port server_port mac host_name client_fqdn domain requested_addr "
    "assigned_addr lease_time "
    # http
    "trans_depth method host uri referrer version user_agent request_body_len response_body_len status_code "
    "status_msg username "
    # ssl
    "cipher curve server_name resumed last_alert next_protocol established ssl_history subject issuer "
    "sni_matches_cert validation_status ja3 ja3s "
    # ssh
    "auth_success auth_attempts direction client server cipher_alg mac_alg compression_alg kex_alg "
    "host_key_alg host_key "
    # notice
    "fuid note msg sub src dst p n peer_descr suppress_for dropped "
    # weird
    "name addl notice peer source "
    # ntp
    "mode stratum poll precision root_delay root_disp ref_id ref_time org_time rec_time xmt_time num_exts "
    # rdp
    "cookie result security_protocol keyboard_layout client_build client_name client_dig_product_id "
    "desktop_width desktop_height requested_color_depth cert_type cert_count cert_permanent encryption_level "
    "encryption_method "
    # files
    "source depth mime_type filename is_orig seen_bytes total_bytes missing_bytes overflow_bytes timedout "
    "parent_fuid md5 sha1 sha256 extracted extracted_cutoff extracted_size "
    # x509 (the certificate's file id is the string "id", read through the id column)
    "certificate.version certificate.serial certificate.subject certificate.issuer certificate.not_valid_before "
    "certificate.not_valid_after certificate.key_alg certificate.sig_alg certificate.key_type "
    "certificate.key_length certificate.exponent certificate.curve basic_constraints.ca basic_constraints.path_len "
    "fingerprint host_cert client_cert "
    # smb_files, smb_mapping ("path" is an array in smtp: read as text, parsed there)
    "action path size prev_name times.modified times.accessed times.created times.changed service "
    "native_file_system share_type "
    # kerberos, ntlm
    "request_type success error_msg from till forwardable renewable client_cert_subject client_cert_fuid "
    "server_cert_subject server_cert_fuid hostname domainname server_nb_computer_name server_dns_computer_name "
    "server_tree_name status "
    # dce_rpc
    "named_pipe endpoint operation "
    # smtp
    "helo mailfrom date reply_to msg_id in_reply_to x_originating_ip first_received second_received last_reply "
    "tls is_webmail "
    # ftp
    "user password command arg file_size reply_code reply_msg data_channel.passive data_channel.orig_h "
    "data_channel.resp_h data_channel.resp_p "
    # software, known_hosts, known_services ("service" of known_services is an array: read as text)
    "host_p software_type version.major version.minor version.minor2 version.minor3 version.addl "
    "unparsed_version url port_num port_proto "
    # pe
    "machine compile_ts os subsystem is_exe is_64bit uses_aslr uses_dep uses_code_integrity uses_seh "
    "has_import_table has_export_table has_cert_table has_debug_data"
).split()
_SCALAR_FIELDS = list(dict.fromkeys(_SCALAR_FIELDS))  # a name shared by two logs is read once
_ID = StructType([StructField(n, StringType()) for n in ("orig_h", "orig_p", "resp_h", "resp_p")])
JSON_SCHEMA = StructType(
    [StructField(n, StringType()) for n in _SCALAR_FIELDS]
    + [StructField(n, ArrayType(StringType())) for n in sorted(_ARRAY_FIELDS)]
    # "id" is the 4-tuple object in most logs but the file id string in x509/pe: read as text, parsed when an object.
    + [StructField("id", StringType()), StructField(CORRUPT, StringType())]
)


def add_json(df: DataFrame, line: Column, is_zeek: Column) -> DataFrame:
    """``_zeek``: the parsed JSON object (null when not a Zeek row); then ``_zpath`` and ``_zts``."""
    parsed = F.from_json(line, JSON_SCHEMA, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
    df = df.withColumn("_zeek", F.when(is_zeek, parsed))
    j = F.col("_zeek")
    return (df.withColumn("_zpath", F.when(j.isNotNull(), F.lower(F.coalesce(V.blank_to_null(j["_path"]),
                                                                              _inferred_path(j)))))
              .withColumn("_zts", F.when(j.isNotNull(), _timestamp(j["ts"]))))


def _inferred_path(j: Column) -> Column:
    """The log type from fields only it has, for JSON written without ``_path``."""
    def has(*names: str) -> Column:
        out = None
        for n in names:
            cond = j[n].isNotNull()
            out = cond if out is None else out | cond
        return out

    return (F.when(has("conn_state", "orig_pkts", "history"), F.lit("conn"))
            .when(has("msg_types", "assigned_addr", "lease_time"), F.lit("dhcp"))
            .when(has("qtype_name", "qclass_name", "rcode_name", "query"), F.lit("dns"))
            .when(has("method", "status_code", "uri", "user_agent"), F.lit("http"))
            .when(has("ssl_history", "cipher", "validation_status", "cert_chain_fps"), F.lit("ssl"))
            .when(has("auth_attempts", "auth_success", "kex_alg"), F.lit("ssh"))
            .when(has("note"), F.lit("notice"))
            .when(has("stratum", "ref_id", "xmt_time"), F.lit("ntp"))
            .when(has("security_protocol", "cookie", "keyboard_layout"), F.lit("rdp"))
            .when(j["name"].isNotNull() & has("addl", "peer", "notice"), F.lit("weird")))


def _timestamp(ts: Column) -> Column:
    """Epoch seconds (``1521911720.865716``, or a double's ``1.521911720865716E9``) or ISO 8601 -> timestamp."""
    epoch = ts.rlike(r"^-?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?\z")
    micros = F.try_multiply(ts.try_cast("decimal(38,6)"), F.lit(1_000_000)).try_cast("bigint")
    iso = F.try_to_timestamp(F.upper(ts))
    return V.python_safe_timestamp(
        F.when(epoch, F.timestamp_micros(micros)).when(ts.rlike(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ]"), iso))


def error() -> Column:
    """``struct<parser, reason>`` for a Zeek row that cannot be an event, else null."""
    j = F.col("_zeek")

    def err(reason: Column) -> Column:
        return F.struct(F.lit(PARSER).alias("parser"), reason.alias("reason"))

    return (F.when(j.isNull() | j[CORRUPT].isNotNull(),
                   err(F.lit("malformed JSON: not one complete JSON object with Zeek's field types")))
            .when(F.col("_zpath").isNull(),
                  err(F.lit("no _path field, and the log type cannot be inferred from the fields")))
            .when(j["ts"].isNull(), err(F.lit("no ts field")))
            .when(F.col("_zts").isNull(), err(F.concat(F.lit("unreadable ts '"), j["ts"], F.lit("'")))))


def _s(j: Column, name: str) -> Column:
    """A string field, with Zeek's ``-`` / empty meaning unset."""
    return V.blank_to_null(j[name])


def _first(values: Column) -> Column:
    return F.try_element_at(values, F.lit(1))


def _both(a: Column, b: Column, combine) -> Column:
    return F.when(a.isNotNull() | b.isNotNull(), combine(F.coalesce(a, F.lit(0)), F.coalesce(b, F.lit(0))))


def cases(is_zeek: Column) -> list[tuple[Column, Fields]]:
    """ECS fields of Zeek rows as ``[(condition, fields), ...]`` for
    :func:`~ingest.parsers.field_map.dispatch_cases`: one case per mapped log type, then the fields every Zeek row
    (``is_zeek``) gets."""
    j = F.col("_zeek")
    path = F.col("_zpath")
    nested = F.when(F.ltrim(j["id"]).startswith("{"), F.from_json(j["id"], _ID))
    orig_h = F.coalesce(_s(j, "id.orig_h"), nested["orig_h"])
    resp_h = F.coalesce(_s(j, "id.resp_h"), nested["resp_h"])
    orig_p = V.to_int(F.coalesce(j["id.orig_p"], nested["orig_p"]))
    resp_p = V.to_int(F.coalesce(j["id.resp_p"], nested["resp_p"]))
    proto = F.lower(_s(j, "proto"))
    common: Fields = {
        "@timestamp": F.col("_zts"),
        "event.kind": F.lit("event"),
        "event.module": F.lit("zeek"),
        "event.dataset": F.concat(F.lit("zeek."), path),
        "event.category": F.array(F.lit("network")),
        "event.type": F.array(F.lit("protocol")),
        "zeek.session_id": _s(j, "uid"),
        "source.address": orig_h,
        "source.port": orig_p,
        "destination.address": resp_h,
        "destination.port": resp_p,
        "network.transport": proto,
        "network.protocol": F.when(path.isin("dns", "http", "ssh", "ntp", "rdp", "dhcp", "kerberos", "ntlm",
                                             "dce_rpc", "smtp", "ftp"), path)
                             .when(path == F.lit("ssl"), F.lit("tls"))
                             .when(path.isin("smb_files", "smb_mapping"), F.lit("smb")),
    }
    per_path = {
        "conn": _conn(j),
        "dns": _dns(j),
        "dhcp": _dhcp(j),
        "http": _http(j),
        "ssl": _ssl(j),
        "ssh": _ssh(j),
        "notice": _notice(j, orig_h, resp_h, resp_p),
        "weird": _weird(j),
        "ntp": _ntp(j),
        "rdp": _rdp(j),
        **zeek_logs.per_path(j, _s, _timestamp),
    }
    cases = [(path == F.lit(name), f) for name, f in per_path.items()]  # _zpath is null on other rows
    return [*cases, (is_zeek, common)]


def _conn(j: Column) -> Fields:
    orig_bytes, resp_bytes = V.to_long(j["orig_bytes"]), V.to_long(j["resp_bytes"])
    orig_pkts, resp_pkts = V.to_long(j["orig_pkts"]), V.to_long(j["resp_pkts"])
    state = _s(j, "conn_state")
    service = F.lower(_first(F.split(_s(j, "service"), ",")))
    return {
        **constant(event__type=["connection", "end"], event__action="network_flow"),
        "event.outcome": F.when(state.isin("SF", "S1", "S2", "S3", "RSTO", "RSTR"), F.lit("success"))
                          .when(state.isin("S0", "REJ", "RSTOS0", "RSTRH", "SH", "SHR"), F.lit("failure")),
        "event.duration": V.seconds_to_nanos(j["duration"]),
        "network.protocol": service,
        "source.bytes": orig_bytes,
        "destination.bytes": resp_bytes,
        "network.bytes": _both(orig_bytes, resp_bytes, F.try_add),
        "source.packets": orig_pkts,
        "destination.packets": resp_pkts,
        "network.packets": _both(orig_pkts, resp_pkts, F.try_add),
        "source.mac": _s(j, "orig_l2_addr"),
        "destination.mac": _s(j, "resp_l2_addr"),
        "network.community_id": _s(j, "community_id"),
        "zeek.connection.state": state,
        "zeek.connection.history": _s(j, "history"),
        "zeek.connection.local_orig": V.to_bool(j["local_orig"]),
        "zeek.connection.local_resp": V.to_bool(j["local_resp"]),
        "zeek.connection.missed_bytes": V.to_long(j["missed_bytes"]),
        "zeek.connection.tunnel_parents": non_empty(j["tunnel_parents"]),
    }


def _dns(j: Column) -> Fields:
    answers = j["answers"]
    ttls = j["TTLs"]
    rcode = _s(j, "rcode_name")
    flags = F.array(*[F.when(V.to_bool(j[f]), F.lit(f)) for f in ("AA", "TC", "RD", "RA")])
    return {
        **constant(event__type=["connection", "protocol", "info"], event__action="dns_query"),
        "event.outcome": F.when(rcode == F.lit("NOERROR"), F.lit("success")).when(rcode.isNotNull(), F.lit("failure")),
        "dns.id": _s(j, "trans_id"),
        "dns.type": F.when(rcode.isNotNull() | answers.isNotNull(), F.lit("answer")).otherwise(F.lit("query")),
        "dns.question.name": _s(j, "query"),
        "dns.question.type": _s(j, "qtype_name"),
        "dns.question.class": _s(j, "qclass_name"),
        "dns.response_code": rcode,
        "dns.header_flags": non_empty(flags),
        "dns.answers": F.when(F.size(answers) > 0, F.transform(answers, lambda a, i: F.struct(
            a.alias("data"),
            V.to_long(F.try_element_at(ttls, i + 1)).alias("ttl")))),
        "dns.resolved_ip": non_empty(F.transform(answers, V.ip_or_null)),
        "zeek.dns.rtt": V.to_double(j["rtt"]),
        "zeek.dns.rejected": V.to_bool(j["rejected"]),
        "zeek.dns.qtype": V.to_int(j["qtype"]),
        "zeek.dns.qclass": V.to_int(j["qclass"]),
        "zeek.dns.rcode": V.to_int(j["rcode"]),
        "zeek.dns.Z": V.to_int(j["Z"]),
    }


def _dhcp(j: Column) -> Fields:
    client = F.coalesce(_s(j, "assigned_addr"), _s(j, "client_addr"))
    types = j["msg_types"]
    return {
        **constant(event__type=["connection", "protocol"], network__transport="udp"),
        "event.action": F.lower(F.concat(F.lit("dhcp"), F.coalesce(F.element_at(types, -1), F.lit("")))),
        "event.outcome": F.when(F.array_contains(types, F.lit("NAK")), F.lit("failure"))
                          .when(F.array_contains(types, F.lit("ACK")), F.lit("success")),
        "event.duration": V.seconds_to_nanos(j["duration"]),
        "zeek.session_id": _first(j["uids"]),
        "source.address": client,
        "source.port": V.to_int(j["client_port"]),
        "source.mac": _s(j, "mac"),
        "destination.address": _s(j, "server_addr"),
        "destination.port": V.to_int(j["server_port"]),
        "dhcp.message_types": non_empty(types),
        "dhcp.assigned_ip": _s(j, "assigned_addr"),
        "dhcp.requested_ip": _s(j, "requested_addr"),
        "dhcp.server_ip": _s(j, "server_addr"),
        "dhcp.client_hostname": _s(j, "host_name"),
        "dhcp.lease_seconds": V.to_long(j["lease_time"]),
        "dhcp.domain": _s(j, "domain"),
        "zeek.dhcp.uids": non_empty(j["uids"]),
        "zeek.dhcp.client_fqdn": _s(j, "client_fqdn"),
        "zeek.dhcp.duration": V.to_double(j["duration"]),
    }


def _http(j: Column) -> Fields:
    host = _s(j, "host")
    uri = _s(j, "uri")
    status = V.to_int(j["status_code"])
    domain = F.regexp_replace(F.regexp_replace(host, r":[0-9]+$", ""), r"^\[(.*)\]$", "$1")
    return {
        **constant(event__category=["network", "web"], event__type=["connection", "protocol"], network__transport="tcp"),
        "event.action": F.lower(_s(j, "method")),
        "event.outcome": F.when(status < 400, F.lit("success")).when(status >= 400, F.lit("failure")),
        "url.original": uri,
        "url.full": F.when(uri.rlike("^[A-Za-z][A-Za-z0-9+.-]*://"), uri)
                     .when(host.isNotNull() & uri.isNotNull(), F.concat(F.lit("http://"), host, uri)),
        "url.domain": domain,
        "url.path": F.nullif(F.regexp_extract(uri, r"^(?:[A-Za-z][A-Za-z0-9+.-]*://[^/]*)?([^?#]*)", 1), F.lit("")),
        "url.query": F.nullif(F.regexp_extract(uri, r"\?([^#]*)", 1), F.lit("")),
        "destination.domain": domain,
        "http.version": _s(j, "version"),
        "http.request.method": _s(j, "method"),
        "http.request.referrer": _s(j, "referrer"),
        "http.request.body.bytes": V.to_long(j["request_body_len"]),
        "http.response.status_code": status,
        "http.response.body.bytes": V.to_long(j["response_body_len"]),
        "http.response.mime_type": _first(j["resp_mime_types"]),
        "user_agent.original": _s(j, "user_agent"),
        "user.name": _s(j, "username"),
        "zeek.http.trans_depth": V.to_int(j["trans_depth"]),
        "zeek.http.status_msg": _s(j, "status_msg"),
        "zeek.http.tags": non_empty(j["tags"]),
        "zeek.http.orig_fuids": non_empty(j["orig_fuids"]),
        "zeek.http.resp_fuids": non_empty(j["resp_fuids"]),
        "zeek.http.resp_mime_types": non_empty(j["resp_mime_types"]),
    }


def _ssl(j: Column) -> Fields:
    version = _s(j, "version")
    parts = r"^(TLS|SSL|DTLS)v([0-9])([0-9])?$"
    established = V.to_bool(j["established"])
    sni = _s(j, "server_name")
    return {
        **constant(event__type=["connection", "protocol"], event__action="tls_handshake", network__transport="tcp"),
        "event.outcome": F.when(established, F.lit("success")).when(~established, F.lit("failure")),
        "tls.version": F.when(version.rlike(parts), F.concat(
            F.regexp_extract(version, parts, 2), F.lit("."),
            F.coalesce(F.nullif(F.regexp_extract(version, parts, 3), F.lit("")), F.lit("0")))),
        "tls.version_protocol": F.when(version.rlike(parts), F.lower(F.regexp_extract(version, parts, 1))),
        "tls.cipher": _s(j, "cipher"),
        "tls.curve": _s(j, "curve"),
        "tls.resumed": V.to_bool(j["resumed"]),
        "tls.established": established,
        "tls.next_protocol": _s(j, "next_protocol"),
        "tls.client.server_name": sni,
        "tls.client.ja3": _s(j, "ja3"),
        "tls.server.ja3s": _s(j, "ja3s"),
        "tls.server.subject": _s(j, "subject"),
        "tls.server.issuer": _s(j, "issuer"),
        "destination.domain": sni,
        "zeek.ssl.ssl_history": _s(j, "ssl_history"),
        "zeek.ssl.validation_status": _s(j, "validation_status"),
        "zeek.ssl.last_alert": _s(j, "last_alert"),
        "zeek.ssl.sni_matches_cert": V.to_bool(j["sni_matches_cert"]),
        "zeek.ssl.cert_chain_fps": non_empty(j["cert_chain_fps"]),
        "zeek.ssl.client_cert_chain_fps": non_empty(j["client_cert_chain_fps"]),
    }


def _ssh(j: Column) -> Fields:
    success = V.to_bool(j["auth_success"])
    return {
        **constant(event__type=["connection", "protocol"], network__transport="tcp"),
        "event.category": F.when(success.isNotNull(), F.array(F.lit("network"), F.lit("authentication")))
                           .otherwise(F.array(F.lit("network"))),
        "event.action": F.when(success.isNotNull(), F.lit("ssh_login")).otherwise(F.lit("ssh_connection")),
        "event.outcome": F.when(success, F.lit("success")).when(~success, F.lit("failure")),
        "zeek.ssh.version": V.to_int(j["version"]),
        "zeek.ssh.auth_success": success,
        "zeek.ssh.auth_attempts": V.to_int(j["auth_attempts"]),
        **{f"zeek.ssh.{n}": _s(j, n) for n in ("direction", "client", "server", "cipher_alg", "mac_alg",
                                                "compression_alg", "kex_alg", "host_key_alg", "host_key")},
    }


def _notice(j: Column, orig_h: Column, resp_h: Column, resp_p: Column) -> Fields:
    src = F.coalesce(orig_h, _s(j, "src"))
    dst = F.coalesce(resp_h, _s(j, "dst"))
    note = _s(j, "note")
    return {
        **constant(event__kind="alert", event__category=["intrusion_detection"], event__type=["info"]),
        "event.action": note,
        "rule.name": note,
        "message": _s(j, "msg"),
        "source.address": src,
        "destination.address": dst,
        "destination.port": F.coalesce(resp_p, V.to_int(F.regexp_extract(F.coalesce(j["p"], F.lit("")),
                                                                           r"^([0-9]+)", 1))),
        "zeek.notice.note": note,
        "zeek.notice.msg": _s(j, "msg"),
        "zeek.notice.sub": _s(j, "sub"),
        "zeek.notice.actions": non_empty(j["actions"]),
        "zeek.notice.suppress_for": V.to_double(j["suppress_for"]),
        "zeek.notice.peer_descr": _s(j, "peer_descr"),
        "zeek.notice.dropped": V.to_bool(j["dropped"]),
        "zeek.notice.fuid": _s(j, "fuid"),
    }


def _weird(j: Column) -> Fields:
    return {
        **constant(event__type=["info"]),
        "event.action": _s(j, "name"),
        "message": F.concat_ws(": ", _s(j, "name"), _s(j, "addl")),
        "zeek.weird.name": _s(j, "name"),
        "zeek.weird.addl": _s(j, "addl"),
        "zeek.weird.notice": V.to_bool(j["notice"]),
        "zeek.weird.peer": _s(j, "peer"),
        "zeek.weird.source": _s(j, "source"),
    }


def _ntp(j: Column) -> Fields:
    def time(name: str) -> Column:
        return _timestamp(_s(j, name))

    return {
        **constant(network__transport="udp"),
        "zeek.ntp.version": V.to_int(j["version"]),
        "zeek.ntp.mode": V.to_int(j["mode"]),
        "zeek.ntp.stratum": V.to_int(j["stratum"]),
        "zeek.ntp.poll": V.to_double(j["poll"]),
        "zeek.ntp.precision": V.to_double(j["precision"]),
        "zeek.ntp.root_delay": V.to_double(j["root_delay"]),
        "zeek.ntp.root_disp": V.to_double(j["root_disp"]),
        "zeek.ntp.ref_id": _s(j, "ref_id"),
        "zeek.ntp.ref_time": time("ref_time"),
        "zeek.ntp.org_time": time("org_time"),
        "zeek.ntp.rec_time": time("rec_time"),
        "zeek.ntp.xmt_time": time("xmt_time"),
        "zeek.ntp.num_exts": V.to_int(j["num_exts"]),
    }


def _rdp(j: Column) -> Fields:
    strings = ("cookie", "result", "security_protocol", "keyboard_layout", "client_build", "client_name",
               "client_dig_product_id", "requested_color_depth", "cert_type", "encryption_level", "encryption_method")
    return {
        **constant(event__type=["connection", "protocol"], network__transport="tcp"),
        **{f"zeek.rdp.{n}": _s(j, n) for n in strings},
        "zeek.rdp.client_channels": non_empty(j["client_channels"]),
        "zeek.rdp.desktop_width": V.to_int(j["desktop_width"]),
        "zeek.rdp.desktop_height": V.to_int(j["desktop_height"]),
        "zeek.rdp.cert_count": V.to_int(j["cert_count"]),
        "zeek.rdp.cert_permanent": V.to_bool(j["cert_permanent"]),
    }
