"""Zeek files, x509, smb_files, smb_mapping, kerberos, ntlm, dce_rpc, smtp, ftp, software, known_hosts,
known_services, pe -> ECS and zeek.<log>.* (one Spark job for all samples), exact values."""

from __future__ import annotations

import json

import pytest

from tests.parse_helpers import fields, get, parse_samples, utc

CONN = {"uid": "CZ1", "id.orig_h": "10.0.0.5", "id.orig_p": 49200, "id.resp_h": "10.0.0.10", "id.resp_p": 445}


def z(_log: str, with_conn: bool = True, **fields) -> str:
    record = {"_path": _log, "ts": 1521911720.5, **(CONN if with_conn else {})}
    record.update({k.replace("__", "."): v for k, v in fields.items()})
    return json.dumps(record)


SAMPLES = {
    "files": z("files", False, fuid="FHsa1", tx_hosts=["93.184.216.34"], rx_hosts=["10.0.0.5"], conn_uids=["CH1"],
               source="HTTP", depth=0, analyzers=["MD5", "SHA1", "PE"], mime_type="application/x-dosexec",
               filename="setup.exe", duration=0.25, local_orig=False, is_orig=False, seen_bytes=1024,
               total_bytes=2048, missing_bytes=0, overflow_bytes=0, timedout=False,
               md5="d41d8cd98f00b204e9800998ecf8427e", sha1="da39a3ee5e6b4b0d3255bfef95601890afd80709"),
    "x509": z("x509", False, id="FvUE4z3", certificate__version=3, certificate__serial="0A1B",
              certificate__subject="CN=www.example.com,O=Example", certificate__issuer="CN=Example CA",
              certificate__not_valid_before=1514764800.0, certificate__not_valid_after="2019-01-01T00:00:00Z",
              certificate__key_alg="rsaEncryption", certificate__sig_alg="sha256WithRSAEncryption",
              certificate__key_type="rsa", certificate__key_length=2048, certificate__exponent="65537",
              san__dns=["www.example.com", "example.com"], san__ip=["93.184.216.34"], basic_constraints__ca=False),
    "smb_files": z("smb_files", fuid="FS1", action="SMB::FILE_OPEN", path="\\\\DC01\\SYSVOL",
                   name="corp\\Policies\\gpt.ini", size=22, times__modified=1521900000.0,
                   times__accessed=1521900001.0, times__created=1521800000.0, times__changed=1521900000.0),
    "smb_mapping": z("smb_mapping", path="\\\\DC01\\IPC$", share_type="PIPE", native_file_system="-"),
    "kerberos": z("kerberos", request_type="TGS", client="alice/CORP.EXAMPLE", service="host/ws01.corp.example",
                  success=True, till=1521940000.0, cipher="aes256-cts-hmac-sha1-96", forwardable=True,
                  renewable=True),
    "kerberos_fail": z("kerberos", request_type="AS", client="bob/CORP.EXAMPLE", service="krbtgt/CORP.EXAMPLE",
                       success=False, error_msg="KDC_ERR_PREAUTH_FAILED"),
    "ntlm": z("ntlm", username="carol", hostname="WS-CAROL", domainname="CORP", server_nb_computer_name="DC01",
              server_dns_computer_name="dc01.corp.example", server_tree_name="corp.example", success=True),
    "dce_rpc": z("dce_rpc", rtt=0.000312, named_pipe="\\pipe\\lsass", endpoint="samr",
                 operation="SamrEnumerateUsersInDomain"),
    "smtp": z("smtp", trans_depth=1, helo="mail.example.org", mailfrom="<eve@example.org>",
              rcptto=["<alice@corp.example>"], date="Sat, 24 Mar 2018 10:00:00 -0700",
              **{"from": '"Eve" <eve@example.org>'}, to=["Alice <alice@corp.example>", "bob@corp.example"],
              cc=["<carol@corp.example>"], msg_id="<123@example.org>", subject="Invoice",
              user_agent="Mutt/1.9", path=["10.0.0.25", "203.0.113.5"], tls=False, fuids=["FM1"],
              is_webmail=False),
    "ftp": z("ftp", user="anonymous", password="guest@", command="RETR", arg="ftp://10.0.0.10/pub/a.zip",
             mime_type="application/zip", file_size=4096, reply_code=226, reply_msg="Transfer complete",
             data_channel__passive=True, data_channel__orig_h="10.0.0.5", data_channel__resp_h="10.0.0.10",
             data_channel__resp_p=50001, fuid="FF1"),
    "ftp_denied": z("ftp", user="root", command="PASS", reply_code=530, reply_msg="Login incorrect."),
    "software": z("software", False, host="10.0.0.22", host_p=22, software_type="SSH::SERVER", name="OpenSSH",
                  version__major=7, version__minor=4, unparsed_version="OpenSSH_7.4"),
    "known_hosts": z("known_hosts", False, host="10.0.0.77"),
    "known_services": z("known_services", False, host="10.0.0.22", port_num=22, port_proto="tcp",
                        service=["SSH"]),
    "pe": z("pe", False, id="FHsa1", machine="I386", compile_ts=1262304000.0, os="Windows XP",
            subsystem="WINDOWS_GUI", is_exe=True, is_64bit=False, uses_aslr=True, uses_dep=True,
            uses_code_integrity=False, uses_seh=True, has_import_table=True, has_export_table=False,
            has_cert_table=False, has_debug_data=False, section_names=[".text", ".rdata", ".data"]),
}
NAMES = list(SAMPLES)


@pytest.fixture(scope="module")
def rows(spark) -> dict[str, dict]:
    return parse_samples(spark, SAMPLES)


def test_every_log_is_an_event_of_its_dataset(rows):
    for name, r in rows.items():
        assert r["_error"] is None, name
        assert get(r, "event.dataset") == "zeek." + name.split("_fail")[0].split("_denied")[0], name
        assert r["@timestamp"] == utc(2018, 3, 24, 17, 15, 20, 500000), name


def test_files(rows):
    r = rows["files"]
    assert fields(r, "file.name", "file.mime_type", "file.size", "file.hash.md5", "file.hash.sha1",
                  "source.ip", "destination.ip", "zeek.session_id", "event.duration", "event.category") == {
        "file.name": "setup.exe", "file.mime_type": "application/x-dosexec", "file.size": 2048,
        "file.hash.md5": "d41d8cd98f00b204e9800998ecf8427e", "file.hash.sha1": "da39a3ee5e6b4b0d3255bfef95601890afd80709",
        "source.ip": "93.184.216.34", "destination.ip": "10.0.0.5", "zeek.session_id": "CH1",
        "event.duration": 250_000_000, "event.category": ["file"]}
    assert {k: v for k, v in get(r, "zeek.files").items() if v is not None} == {
        "fuid": "FHsa1", "source": "HTTP", "tx_hosts": ["93.184.216.34"], "rx_hosts": ["10.0.0.5"],
        "session_ids": ["CH1"], "analyzers": ["MD5", "SHA1", "PE"], "depth": 0, "local_orig": False,
        "is_orig": False, "seen_bytes": 1024, "total_bytes": 2048, "missing_bytes": 0, "overflow_bytes": 0,
        "timedout": False}


def test_x509(rows):
    r = rows["x509"]
    assert {k: v for k, v in get(r, "tls.server.x509").items() if v is not None} == {
        "version_number": "3", "serial_number": "0A1B",
        "subject": {"distinguished_name": "CN=www.example.com,O=Example"},
        "issuer": {"distinguished_name": "CN=Example CA"}, "not_before": utc(2018, 1, 1),
        "not_after": utc(2019, 1, 1), "public_key_algorithm": "rsaEncryption",
        "signature_algorithm": "sha256WithRSAEncryption", "public_key_size": 2048, "public_key_exponent": 65537,
        "alternative_names": ["www.example.com", "example.com", "93.184.216.34"]}
    assert fields(r, "zeek.x509.id", "zeek.x509.certificate.key_type", "zeek.x509.san.dns",
                  "zeek.x509.basic_constraints.ca", "source.ip") == {
        "zeek.x509.id": "FvUE4z3", "zeek.x509.certificate.key_type": "rsa",
        "zeek.x509.san.dns": ["www.example.com", "example.com"], "zeek.x509.basic_constraints.ca": False,
        "source.ip": None}


def test_smb(rows):
    r = rows["smb_files"]
    assert fields(r, "event.action", "file.name", "file.path", "file.directory", "file.size", "file.mtime",
                  "file.created", "network.protocol", "source.ip", "destination.port", "zeek.smb_files.action",
                  "zeek.smb_files.times.accessed") == {
        "event.action": "open", "file.name": "corp\\Policies\\gpt.ini",
        "file.path": "\\\\DC01\\SYSVOL\\corp\\Policies\\gpt.ini", "file.directory": "\\\\DC01\\SYSVOL",
        "file.size": 22, "file.mtime": utc(2018, 3, 24, 14, 0), "file.created": utc(2018, 3, 23, 10, 13, 20),
        "network.protocol": "smb", "source.ip": "10.0.0.5", "destination.port": 445,
        "zeek.smb_files.action": "SMB::FILE_OPEN", "zeek.smb_files.times.accessed": utc(2018, 3, 24, 14, 0, 1)}
    assert {k: v for k, v in get(rows["smb_mapping"], "zeek.smb_mapping").items() if v is not None} == {
        "path": "\\\\DC01\\IPC$", "share_type": "PIPE"}


def test_kerberos_and_ntlm(rows):
    assert fields(rows["kerberos"], "event.action", "event.outcome", "user.name", "user.domain",
                  "zeek.kerberos.service", "zeek.kerberos.valid.until", "zeek.kerberos.cipher",
                  "zeek.kerberos.forwardable", "network.protocol") == {
        "event.action": "TGS", "event.outcome": "success", "user.name": "alice", "user.domain": "CORP.EXAMPLE",
        "zeek.kerberos.service": "host/ws01.corp.example", "zeek.kerberos.valid.until": utc(2018, 3, 25, 1, 6, 40),
        "zeek.kerberos.cipher": "aes256-cts-hmac-sha1-96", "zeek.kerberos.forwardable": True,
        "network.protocol": "kerberos"}
    assert fields(rows["kerberos_fail"], "event.outcome", "user.name", "zeek.kerberos.error_msg") == {
        "event.outcome": "failure", "user.name": "bob", "zeek.kerberos.error_msg": "KDC_ERR_PREAUTH_FAILED"}
    assert fields(rows["ntlm"], "event.outcome", "user.name", "user.domain", "zeek.ntlm.hostname",
                  "zeek.ntlm.server_dns_computer_name", "related.user") == {
        "event.outcome": "success", "user.name": "carol", "user.domain": "CORP", "zeek.ntlm.hostname": "WS-CAROL",
        "zeek.ntlm.server_dns_computer_name": "dc01.corp.example", "related.user": ["carol"]}


def test_dce_rpc(rows):
    assert fields(rows["dce_rpc"], "event.action", "zeek.dce_rpc.rtt", "zeek.dce_rpc.named_pipe",
                  "zeek.dce_rpc.endpoint") == {
        "event.action": "SamrEnumerateUsersInDomain", "zeek.dce_rpc.rtt": 0.000312,
        "zeek.dce_rpc.named_pipe": "\\pipe\\lsass", "zeek.dce_rpc.endpoint": "samr"}


def test_smtp_email_fields(rows):
    r = rows["smtp"]
    assert {k: v for k, v in get(r, "email").items() if v is not None} == {
        "from": {"address": ["eve@example.org"]}, "to": {"address": ["alice@corp.example", "bob@corp.example"]},
        "cc": {"address": ["carol@corp.example"]}, "sender": {"address": "eve@example.org"},
        "subject": "Invoice", "message_id": "<123@example.org>"}
    assert fields(r, "user_agent.original", "zeek.smtp.helo", "zeek.smtp.rcptto", "zeek.smtp.path",
                  "zeek.smtp.tls", "zeek.smtp.from", "zeek.smtp.date") == {
        "user_agent.original": "Mutt/1.9", "zeek.smtp.helo": "mail.example.org",
        "zeek.smtp.rcptto": ["<alice@corp.example>"], "zeek.smtp.path": ["10.0.0.25", "203.0.113.5"],
        "zeek.smtp.tls": False, "zeek.smtp.from": '"Eve" <eve@example.org>',
        "zeek.smtp.date": "Sat, 24 Mar 2018 10:00:00 -0700"}


def test_ftp(rows):
    assert fields(rows["ftp"], "event.action", "event.outcome", "user.name", "file.size", "file.mime_type",
                  "zeek.ftp.arg", "zeek.ftp.password", "zeek.ftp.reply_code", "zeek.ftp.data_channel.passive",
                  "zeek.ftp.data_channel.response_port") == {
        "event.action": "retr", "event.outcome": "success", "user.name": "anonymous", "file.size": 4096,
        "file.mime_type": "application/zip", "zeek.ftp.arg": "ftp://10.0.0.10/pub/a.zip",
        "zeek.ftp.password": "guest@", "zeek.ftp.reply_code": 226, "zeek.ftp.data_channel.passive": True,
        "zeek.ftp.data_channel.response_port": 50001}
    assert fields(rows["ftp_denied"], "event.outcome", "user.name") == {"event.outcome": "failure",
                                                                        "user.name": "root"}


def test_software_and_known(rows):
    assert fields(rows["software"], "source.ip", "source.port", "zeek.software.name", "zeek.software.software_type",
                  "zeek.software.version.full", "zeek.software.version.major") == {
        "source.ip": "10.0.0.22", "source.port": 22, "zeek.software.name": "OpenSSH",
        "zeek.software.software_type": "SSH::SERVER", "zeek.software.version.full": "7.4",
        "zeek.software.version.major": 7}
    assert fields(rows["known_hosts"], "source.ip", "zeek.known_hosts.host") == {
        "source.ip": "10.0.0.77", "zeek.known_hosts.host": "10.0.0.77"}
    assert fields(rows["known_services"], "destination.ip", "destination.port", "network.transport",
                  "zeek.known_services.service") == {
        "destination.ip": "10.0.0.22", "destination.port": 22, "network.transport": "tcp",
        "zeek.known_services.service": ["SSH"]}


def test_pe(rows):
    pe = get(rows["pe"], "zeek.pe")
    assert pe == {"id": "FHsa1", "machine": "I386", "os": "Windows XP", "subsystem": "WINDOWS_GUI",
                  "compile_time": utc(2010, 1, 1), "is_exe": True, "is_64bit": False, "uses_aslr": True,
                  "uses_dep": True, "uses_code_integrity": False, "uses_seh": True, "has_import_table": True,
                  "has_export_table": False, "has_cert_table": False, "has_debug_data": False,
                  "section_names": [".text", ".rdata", ".data"]}
