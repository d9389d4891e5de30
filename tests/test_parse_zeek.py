"""Zeek JSON logs -> ECS (one Spark job for all samples)."""

from __future__ import annotations

import json

import pytest

from tests.parse_helpers import get, parse_lines, utc


def z(**fields) -> str:
    return json.dumps({k.replace("__", "."): v for k, v in fields.items()}, separators=(",", ":"))


SAMPLES = {
    "conn": z(_path="conn", ts=1521911720.865716, uid="CAbc1", id__orig_h="10.47.1.100", id__orig_p=41772,
              id__resp_h="10.0.0.100", id__resp_p=443, proto="tcp", service="ssl,http", duration=1.5,
              orig_bytes=100, resp_bytes=2000, conn_state="SF", local_orig=True, missed_bytes=0,
              history="ShADadFf", orig_pkts=5, resp_pkts=7, tunnel_parents=[]),
    "conn_rej_ipv6": z(_path="conn", ts="2018-03-24T17:15:20.5Z", uid="C2", id__orig_h="2001:DB8::1",
                       id__orig_p=5000, id__resp_h="2001:db8::2", id__resp_p=22, proto="tcp", conn_state="REJ"),
    "dns": z(_path="dns", ts="2018-03-24T17:15:20.865716Z", uid="CqKst", id__orig_h="10.47.1.100",
             id__orig_p=41772, id__resp_h="10.0.0.100", id__resp_p=53, proto="udp", trans_id=36329,
             rtt=0.00087, query="ise.wrccdc.org", qclass=1, qclass_name="C_INTERNET", qtype=1, qtype_name="A",
             rcode=0, rcode_name="NOERROR", AA=False, TC=False, RD=True, RA=True, Z=0,
             answers=["ise.wrccdc.cpp.edu", "134.71.3.16"], TTLs=[2230.0, 41830.0], rejected=False),
    "dns_nxdomain": z(_path="dns", ts=1521911721, uid="C3", id__orig_h="10.0.0.9", id__orig_p=1, id__resp_h="10.0.0.1",
                      id__resp_p=53, proto="udp", query="nope.example", qtype_name="AAAA", rcode_name="NXDOMAIN"),
    "dhcp": z(_path="dhcp", ts=1521911722.25, uids=["CD1", "CD2"], client_addr="10.0.0.50", server_addr="10.0.0.1",
              mac="00:0c:29:aa:0b:01", host_name="laptop-7", assigned_addr="10.0.0.50", lease_time=86400.0,
              msg_types=["REQUEST", "ACK"], duration=0.01),
    "http": z(_path="http", ts=1521911723.0, uid="CH1", id__orig_h="10.0.0.5", id__orig_p=50000,
              id__resp_h="93.184.216.34", id__resp_p=80, trans_depth=1, method="GET", host="example.com",
              uri="/path/a?x=1&y=2", version="1.1", user_agent="curl/8.0", request_body_len=0,
              response_body_len=1256, status_code=404, status_msg="Not Found", resp_mime_types=["text/html"]),
    "ssl": z(_path="ssl", ts=1521911724.0, uid="CS1", id__orig_h="10.0.0.5", id__orig_p=50001,
             id__resp_h="93.184.216.34", id__resp_p=443, version="TLSv12", cipher="TLS_AES_128_GCM_SHA256",
             curve="x25519", server_name="www.example.com", resumed=False, established=True,
             ja3="abc", ja3s="def", subject="CN=www.example.com", validation_status="ok"),
    "ssh": z(_path="ssh", ts=1521911725.0, uid="CX1", id__orig_h="203.0.113.9", id__orig_p=4242,
             id__resp_h="10.0.0.22", id__resp_p=22, version=2, auth_success=False, auth_attempts=3,
             direction="INBOUND", client="SSH-2.0-libssh", server="SSH-2.0-OpenSSH_7.4"),
    "notice": z(_path="notice", ts=1521911726.0, note="Scan::Port_Scan", msg="10.0.0.66 scanned 50 ports",
                src="10.0.0.66", dst="10.0.0.1", p=443, actions=["Notice::ACTION_LOG"], suppress_for=3600.0),
    "weird": z(_path="weird", ts=1521911727.0, uid="CW1", id__orig_h="10.0.0.7", id__orig_p=1, id__resp_h="10.0.0.8",
               id__resp_p=2, name="bad_TCP_checksum", addl="", notice=False, peer="zeek"),
    "nested_id_no_path": json.dumps({"ts": 1521911728.0, "uid": "CN1", "id": {"orig_h": "10.1.1.1", "orig_p": 7,
                                     "resp_h": "10.1.1.2", "resp_p": 8}, "proto": "udp", "conn_state": "S0"}),
    "other_path": z(_path="x509", ts=1521911729.0, id__orig_h="10.0.0.1"),
    "truncated": z(_path="conn", ts=1521911720.0, uid="C9")[:-7],
    "no_ts": z(_path="conn", uid="C10"),
    "bad_ts": z(_path="conn", ts="yesterday", uid="C11"),
    "no_path": z(ts=1521911720.0, uid="C12"),
    "not_object": "[1, 2, 3]",
}
NAMES = list(SAMPLES)


@pytest.fixture(scope="module")
def rows(spark) -> dict[str, dict]:
    return dict(zip(NAMES, parse_lines(spark, list(SAMPLES.values())), strict=True))


def test_conn(rows):
    r = rows["conn"]
    assert r["_error"] is None
    assert r["@timestamp"] == utc(2018, 3, 24, 17, 15, 20, 865716)
    assert get(r, "event.dataset") == "zeek.conn" and get(r, "event.module") == "zeek"
    assert get(r, "event.outcome") == "success" and get(r, "event.duration") == 1_500_000_000
    assert get(r, "source.ip") == "10.47.1.100" and get(r, "source.port") == 41772
    assert get(r, "destination.ip") == "10.0.0.100" and get(r, "destination.port") == 443
    assert get(r, "network.transport") == "tcp" and get(r, "network.protocol") == "ssl"
    assert get(r, "network.bytes") == 2100 and get(r, "network.packets") == 12
    assert get(r, "zeek.session_id") == "CAbc1" and get(r, "zeek.connection.state") == "SF"
    assert get(r, "zeek.connection.local_orig") is True and get(r, "zeek.connection.tunnel_parents") is None
    assert get(r, "related.ip") == ["10.47.1.100", "10.0.0.100"]
    assert get(r, "event.original") == SAMPLES["conn"]


def test_conn_ipv6_iso_ts_and_failure(rows):
    r = rows["conn_rej_ipv6"]
    assert r["@timestamp"] == utc(2018, 3, 24, 17, 15, 20, 500000)
    assert get(r, "source.ip") == "2001:db8::1" and get(r, "destination.ip") == "2001:db8::2"
    assert get(r, "network.type") == "ipv6" and get(r, "event.outcome") == "failure"


def test_dns(rows):
    r = rows["dns"]
    assert get(r, "event.dataset") == "zeek.dns" and get(r, "event.outcome") == "success"
    assert get(r, "dns.question.name") == "ise.wrccdc.org" and get(r, "dns.question.type") == "A"
    assert get(r, "dns.response_code") == "NOERROR" and get(r, "dns.id") == "36329"
    assert get(r, "dns.answers") == [{"data": "ise.wrccdc.cpp.edu", "ttl": 2230},
                                     {"data": "134.71.3.16", "ttl": 41830}]
    assert get(r, "dns.resolved_ip") == ["134.71.3.16"] and get(r, "dns.header_flags") == ["RD", "RA"]
    assert "134.71.3.16" in get(r, "related.ip")
    assert get(r, "zeek.dns.rtt") == pytest.approx(0.00087)
    n = rows["dns_nxdomain"]
    assert get(n, "dns.response_code") == "NXDOMAIN" and get(n, "event.outcome") == "failure"
    assert n["@timestamp"] == utc(2018, 3, 24, 17, 15, 21) and get(n, "dns.answers") is None


def test_dhcp(rows):
    r = rows["dhcp"]
    assert get(r, "event.action") == "dhcpack" and get(r, "event.outcome") == "success"
    assert get(r, "source.ip") == "10.0.0.50" and get(r, "source.mac") == "00-0C-29-AA-0B-01"
    assert get(r, "dhcp.assigned_ip") == "10.0.0.50" and get(r, "dhcp.server_ip") == "10.0.0.1"
    assert get(r, "dhcp.client_hostname") == "laptop-7" and get(r, "dhcp.lease_seconds") == 86400
    assert get(r, "dhcp.message_types") == ["REQUEST", "ACK"] and get(r, "zeek.session_id") == "CD1"


def test_http(rows):
    r = rows["http"]
    assert get(r, "event.action") == "get" and get(r, "event.outcome") == "failure"
    assert get(r, "url.full") == "http://example.com/path/a?x=1&y=2" and get(r, "url.domain") == "example.com"
    assert get(r, "url.path") == "/path/a" and get(r, "url.query") == "x=1&y=2"
    assert get(r, "http.response.status_code") == 404 and get(r, "http.request.method") == "GET"
    assert get(r, "http.response.body.bytes") == 1256 and get(r, "user_agent.original") == "curl/8.0"
    assert get(r, "http.response.mime_type") == "text/html"


def test_ssl(rows):
    r = rows["ssl"]
    assert get(r, "tls.version") == "1.2" and get(r, "tls.version_protocol") == "tls"
    assert get(r, "tls.cipher") == "TLS_AES_128_GCM_SHA256" and get(r, "tls.client.server_name") == "www.example.com"
    assert get(r, "tls.established") is True and get(r, "event.outcome") == "success"
    assert get(r, "destination.domain") == "www.example.com" and get(r, "network.protocol") == "tls"


def test_ssh(rows):
    r = rows["ssh"]
    assert get(r, "event.action") == "ssh_login" and get(r, "event.outcome") == "failure"
    assert get(r, "event.category") == ["network", "authentication"]
    assert get(r, "zeek.ssh.auth_attempts") == 3 and get(r, "zeek.ssh.client") == "SSH-2.0-libssh"
    assert get(r, "source.ip") == "203.0.113.9"


def test_notice_and_weird(rows):
    n = rows["notice"]
    assert get(n, "event.kind") == "alert" and get(n, "rule.name") == "Scan::Port_Scan"
    assert get(n, "source.ip") == "10.0.0.66" and get(n, "destination.ip") == "10.0.0.1"
    assert get(n, "destination.port") == 443 and n["message"] == "10.0.0.66 scanned 50 ports"
    assert get(n, "zeek.notice.actions") == ["Notice::ACTION_LOG"]
    w = rows["weird"]
    assert get(w, "event.action") == "bad_TCP_checksum" and get(w, "zeek.weird.addl") is None
    assert get(w, "zeek.weird.notice") is False and get(w, "zeek.weird.peer") == "zeek"


def test_nested_id_and_inferred_path_and_unmapped_path(rows):
    r = rows["nested_id_no_path"]
    assert r["_error"] is None
    assert get(r, "event.dataset") == "zeek.conn" and get(r, "source.ip") == "10.1.1.1"
    assert get(r, "source.port") == 7 and get(r, "destination.port") == 8 and get(r, "event.outcome") == "failure"
    o = rows["other_path"]
    assert o["_error"] is None and get(o, "event.dataset") == "zeek.x509" and get(o, "source.ip") == "10.0.0.1"


def test_bad_records_are_quarantined_with_reasons(rows):
    def reason(name):
        err = rows[name]["_error"]
        assert err["parser"] == "zeek", name
        return err["reason"]

    assert reason("truncated").startswith("malformed JSON")
    assert reason("not_object").startswith("malformed JSON")
    assert reason("no_ts") == "no ts field"
    assert reason("bad_ts") == "unreadable ts 'yesterday'"
    assert reason("no_path").startswith("no _path field")


def test_forced_format(spark):
    line = SAMPLES["conn"]
    as_syslog = parse_lines(spark, [line], fmt="syslog")[0]
    as_zeek = parse_lines(spark, [line], fmt="zeek")[0]
    assert as_syslog["_error"]["parser"] == "syslog_rfc3164"
    assert as_zeek["_error"] is None and get(as_zeek, "source.ip") == "10.47.1.100"
