"""ISC dhcpd lease messages -> ECS network events with dhcp.* (one Spark job for all samples)."""

from __future__ import annotations

import pytest

from tests.parse_helpers import get, parse_lines, utc

H = "<30>Mar  9 10:00:00 dhcp-01 dhcpd[812]: "
SAMPLES = {
    "discover": H + "DHCPDISCOVER from 00:0c:29:aa:0b:01 (laptop-7) via eth0",
    "discover_no_leases": H + "DHCPDISCOVER from 0:c:29:aa:b:2 via 10.1.0.1: network 10.1.0.0/24: no free leases",
    "offer": H + "DHCPOFFER on 10.0.0.50 to 00:0c:29:aa:0b:01 (laptop-7) via eth0",
    "request": H + "DHCPREQUEST for 10.0.0.50 (10.0.0.1) from 00:0c:29:aa:0b:01 (laptop-7) via eth0",
    "request_wrong": H + "DHCPREQUEST for 10.9.9.9 from 00:0c:29:aa:0b:03 via 10.1.0.1: wrong network.",
    "ack": H + "DHCPACK on 10.0.0.50 to 00:0c:29:aa:0b:01 (laptop-7) via eth0",
    "ack_relay": H + "DHCPACK on 10.1.0.77 to aa:bb:cc:dd:ee:ff via 10.1.0.1",
    "nak": H + "DHCPNAK on 10.9.9.9 to 00:0c:29:aa:0b:03 via eth1",
    "release": H + "DHCPRELEASE of 10.0.0.50 from 00:0c:29:aa:0b:01 (laptop-7) via eth0 (found)",
    "decline": H + "DHCPDECLINE of 10.0.0.60 from 00:0c:29:aa:0b:04 via eth0: abandoned",
    "inform": H + "DHCPINFORM from 10.0.0.5 via eth0",
    "inform_ack": H + "DHCPACK to 10.0.0.5 (00:0c:29:aa:0b:05) via eth0",
    "other": H + "Wrote 12 leases to leases file.",
}
NAMES = list(SAMPLES)


@pytest.fixture(scope="module")
def rows(spark) -> dict[str, dict]:
    return dict(zip(NAMES, parse_lines(spark, list(SAMPLES.values())), strict=True))


def test_all_lines_are_dhcpd_events(rows):
    for name, r in rows.items():
        assert r["_error"] is None, name
        assert get(r, "event.dataset") == "dhcpd" and get(r, "event.module") == "dhcpd", name
        assert get(r, "host.hostname") == "dhcp-01" and get(r, "process.pid") == 812, name
        assert r["@timestamp"] == utc(2024, 3, 9, 10, 0, 0)


def test_discover(rows):
    r = rows["discover"]
    assert get(r, "event.action") == "dhcpdiscover" and get(r, "dhcp.message_types") == ["DISCOVER"]
    assert get(r, "source.mac") == "00-0C-29-AA-0B-01" and get(r, "dhcp.client_hostname") == "laptop-7"
    assert get(r, "dhcp.interface") == "eth0" and get(r, "dhcp.relay_ip") is None and get(r, "source.ip") is None
    n = rows["discover_no_leases"]
    assert get(n, "source.mac") == "00-0C-29-AA-0B-02"  # dhcpd's unpadded octets
    assert get(n, "dhcp.relay_ip") == "10.1.0.1" and get(n, "dhcp.interface") is None
    assert get(n, "dhcp.detail") == "network 10.1.0.0/24: no free leases"


def test_offer_request_ack(rows):
    o = rows["offer"]
    assert get(o, "event.action") == "dhcpoffer" and get(o, "dhcp.assigned_ip") == "10.0.0.50"
    assert get(o, "source.ip") == "10.0.0.50"
    q = rows["request"]
    assert get(q, "dhcp.requested_ip") == "10.0.0.50" and get(q, "dhcp.server_ip") == "10.0.0.1"
    assert get(q, "dhcp.assigned_ip") is None and get(q, "dhcp.client_hostname") == "laptop-7"
    w = rows["request_wrong"]
    assert get(w, "dhcp.requested_ip") == "10.9.9.9" and get(w, "dhcp.relay_ip") == "10.1.0.1"
    assert get(w, "dhcp.detail") == "wrong network."
    a = rows["ack"]
    assert get(a, "event.action") == "dhcpack" and get(a, "event.outcome") == "success"
    assert get(a, "dhcp.assigned_ip") == "10.0.0.50" and get(a, "source.mac") == "00-0C-29-AA-0B-01"
    assert get(a, "network.protocol") == "dhcp" and get(a, "network.transport") == "udp"
    assert get(a, "related.ip") == ["10.0.0.50"] and get(a, "related.hosts") == ["dhcp-01", "laptop-7"]
    r = rows["ack_relay"]
    assert get(r, "dhcp.relay_ip") == "10.1.0.1" and get(r, "source.mac") == "AA-BB-CC-DD-EE-FF"
    assert set(get(r, "related.ip")) == {"10.1.0.77", "10.1.0.1"}


def test_nak_release_decline_inform(rows):
    n = rows["nak"]
    assert get(n, "event.action") == "dhcpnak" and get(n, "event.outcome") == "failure"
    assert get(n, "dhcp.interface") == "eth1" and get(n, "source.ip") == "10.9.9.9"
    r = rows["release"]
    assert get(r, "event.action") == "dhcprelease" and get(r, "source.ip") == "10.0.0.50"
    assert get(r, "dhcp.detail") == "(found)" and get(r, "event.outcome") is None
    d = rows["decline"]
    assert get(d, "event.action") == "dhcpdecline" and get(d, "event.outcome") == "failure"
    assert get(d, "dhcp.detail") == "abandoned" and get(d, "source.mac") == "00-0C-29-AA-0B-04"
    i = rows["inform"]
    assert get(i, "event.action") == "dhcpinform" and get(i, "source.ip") == "10.0.0.5" and get(i, "source.mac") is None
    ia = rows["inform_ack"]
    assert get(ia, "event.action") == "dhcpack" and get(ia, "source.ip") == "10.0.0.5"
    assert get(ia, "source.mac") == "00-0C-29-AA-0B-05" and get(ia, "dhcp.assigned_ip") is None


def test_other_dhcpd_line(rows):
    r = rows["other"]
    assert get(r, "event.action") is None and r["message"] == "Wrote 12 leases to leases file."
