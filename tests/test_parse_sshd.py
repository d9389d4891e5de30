"""OpenSSH sshd messages -> ECS authentication / session / network events (one Spark job for all samples)."""

from __future__ import annotations

import pytest

from tests.parse_helpers import get, parse_lines, utc

H = "Mar  9 10:00:00 bastion sshd[1234]: "
SAMPLES = {
    "accepted_publickey": H + "Accepted publickey for bob from 10.0.0.5 port 50022 ssh2: ED25519 "
                              "SHA256:Wq3bHh4Jq9Ylm1y5Zk0aH7u0Jk8Qy2g3zJtVv0Xw1Yc",
    "accepted_rsa_cert": H + "Accepted publickey for deploy from 10.0.0.6 port 40000 ssh2: RSA-CERT "
                             "SHA256:abcDEF012 ID deploy@ci (serial 42) CA RSA SHA256:caFP",
    "accepted_password": H + "Accepted password for alice from 2001:db8::7 port 61000 ssh2",
    "accepted_kbd": H + "Accepted keyboard-interactive/pam for carol from 10.0.0.8 port 2222 ssh2",
    "failed_password": H + "Failed password for root from 203.0.113.9 port 4242 ssh2",
    "failed_invalid_user": H + "Failed password for invalid user oracle from 203.0.113.10 port 4343 ssh2",
    "failed_none_preauth": H + "Failed none for invalid user admin from 203.0.113.11 port 4444 ssh2 [preauth]",
    "invalid_user": H + "Invalid user test from 203.0.113.12 port 4545",
    "invalid_user_old": H + "Invalid user guest from 203.0.113.13",
    "userauth_invalid": H + "input_userauth_request: invalid user pi [preauth]",
    "closed_preauth": H + "Connection closed by authenticating user root 203.0.113.14 port 4646 [preauth]",
    "closed_invalid": H + "Connection closed by invalid user ubuntu 203.0.113.15 port 4747 [preauth]",
    "closed_plain": H + "Connection closed by 203.0.113.16 port 4848",
    "disconnected_user": H + "Disconnected from user bob 10.0.0.5 port 50022",
    "received_disconnect": H + "Received disconnect from 203.0.113.17 port 4949:11: Bye Bye [preauth]",
    "reset": H + "Connection reset by 203.0.113.18 port 5050 [preauth]",
    "no_identification": H + "Did not receive identification string from 203.0.113.19 port 5151",
    "no_identification_old": H + "Did not receive identification string from 203.0.113.20",
    "max_auth": H + "error: maximum authentication attempts exceeded for root from 203.0.113.21 port 5252 ssh2 "
                    "[preauth]",
    "negotiation": H + "Unable to negotiate with 203.0.113.22 port 5353: no matching key exchange method found. "
                       "Their offer: diffie-hellman-group1-sha1 [preauth]",
    "bad_protocol": H + "Bad protocol version identification 'GET / HTTP/1.1' from 203.0.113.23 port 5454",
    "pam_failure": H + "pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 tty=ssh ruser= "
                       "rhost=attacker.example.net  user=admin",
    "pam_more": H + "PAM 2 more authentication failures; logname= uid=0 euid=0 tty=ssh ruser= rhost=203.0.113.24  "
                    "user=root",
    "session_opened": H + "pam_unix(sshd:session): session opened for user bob(uid=1001) by (uid=0)",
    "other_sshd": H + "Server listening on :: port 22.",
    "sshd_session_5424": "<38>1 2024-03-09T10:00:00Z bastion sshd-session 77 - - Accepted password for eve from "
                         "10.0.0.9 port 1000 ssh2",
}
NAMES = list(SAMPLES)


@pytest.fixture(scope="module")
def rows(spark) -> dict[str, dict]:
    return dict(zip(NAMES, parse_lines(spark, list(SAMPLES.values())), strict=True))


def test_every_sample_is_an_auth_event(rows):
    for name, r in rows.items():
        assert r["_error"] is None, name
        assert get(r, "event.dataset") == "system.auth", name
        assert get(r, "host.hostname") == "bastion", name
    assert rows["failed_password"]["@timestamp"] == utc(2024, 3, 9, 10, 0, 0)


def test_accepted_publickey_with_key_type_and_fingerprint(rows):
    r = rows["accepted_publickey"]
    assert get(r, "event.action") == "ssh_login" and get(r, "event.outcome") == "success"
    assert get(r, "event.category") == ["authentication", "session"]
    assert get(r, "user.name") == "bob" and get(r, "source.ip") == "10.0.0.5" and get(r, "source.port") == 50022
    assert get(r, "system.auth.ssh.method") == "publickey"
    assert get(r, "system.auth.ssh.key_type") == "ED25519"
    assert get(r, "system.auth.ssh.fingerprint") == "SHA256:Wq3bHh4Jq9Ylm1y5Zk0aH7u0Jk8Qy2g3zJtVv0Xw1Yc"
    assert get(r, "process.name") == "sshd" and get(r, "process.pid") == 1234
    c = rows["accepted_rsa_cert"]
    assert get(c, "system.auth.ssh.key_type") == "RSA-CERT" and get(c, "system.auth.ssh.fingerprint") == "SHA256:abcDEF012"
    assert get(c, "user.name") == "deploy"


def test_accepted_password_ipv6_and_keyboard_interactive(rows):
    r = rows["accepted_password"]
    assert get(r, "system.auth.ssh.method") == "password" and get(r, "source.ip") == "2001:db8::7"
    assert get(r, "network.type") == "ipv6" and get(r, "system.auth.ssh.key_type") is None
    k = rows["accepted_kbd"]
    assert get(k, "system.auth.ssh.method") == "keyboard-interactive/pam" and get(k, "user.name") == "carol"
    s = rows["sshd_session_5424"]
    assert get(s, "process.name") == "sshd-session" and get(s, "user.name") == "eve"
    assert get(s, "event.outcome") == "success" and s["@timestamp"] == utc(2024, 3, 9, 10, 0, 0)


def test_failed_password_variants(rows):
    r = rows["failed_password"]
    assert get(r, "event.action") == "ssh_login" and get(r, "event.outcome") == "failure"
    assert get(r, "user.name") == "root" and get(r, "source.ip") == "203.0.113.9" and get(r, "source.port") == 4242
    assert get(r, "system.auth.ssh.invalid_user") is False
    i = rows["failed_invalid_user"]
    assert get(i, "user.name") == "oracle" and get(i, "system.auth.ssh.invalid_user") is True
    n = rows["failed_none_preauth"]
    assert get(n, "system.auth.ssh.method") == "none" and get(n, "user.name") == "admin"
    assert get(n, "system.auth.ssh.preauth") is True and get(n, "system.auth.ssh.invalid_user") is True


def test_invalid_user(rows):
    for name, user, ip, port in (("invalid_user", "test", "203.0.113.12", 4545),
                                 ("invalid_user_old", "guest", "203.0.113.13", None)):
        r = rows[name]
        assert get(r, "event.action") == "ssh_invalid_user" and get(r, "event.outcome") == "failure"
        assert get(r, "user.name") == user and get(r, "source.ip") == ip and get(r, "source.port") == port
        assert get(r, "system.auth.ssh.invalid_user") is True
    u = rows["userauth_invalid"]
    assert get(u, "user.name") == "pi" and get(u, "system.auth.ssh.preauth") is True and get(u, "source.ip") is None


def test_disconnects(rows):
    c = rows["closed_preauth"]
    assert get(c, "event.action") == "ssh_disconnect" and get(c, "event.type") == ["end"]
    assert get(c, "user.name") == "root" and get(c, "source.ip") == "203.0.113.14" and get(c, "source.port") == 4646
    assert get(c, "system.auth.ssh.preauth") is True and get(c, "system.auth.ssh.event") == "Connection closed by"
    i = rows["closed_invalid"]
    assert get(i, "user.name") == "ubuntu" and get(i, "system.auth.ssh.invalid_user") is True
    p = rows["closed_plain"]
    assert get(p, "user.name") is None and get(p, "source.ip") == "203.0.113.16"
    assert get(p, "system.auth.ssh.preauth") is False
    d = rows["disconnected_user"]
    assert get(d, "user.name") == "bob" and get(d, "system.auth.ssh.event") == "Disconnected from"
    rd = rows["received_disconnect"]
    assert get(rd, "system.auth.ssh.disconnect_code") == 11 and get(rd, "system.auth.ssh.disconnect_reason") == "Bye Bye"
    assert get(rd, "source.port") == 4949
    assert get(rows["reset"], "system.auth.ssh.event") == "Connection reset by"


def test_network_failures(rows):
    n = rows["no_identification"]
    assert get(n, "event.action") == "ssh_no_identification" and get(n, "event.outcome") == "failure"
    assert get(n, "source.ip") == "203.0.113.19" and get(n, "source.port") == 5151
    assert get(rows["no_identification_old"], "source.ip") == "203.0.113.20"
    m = rows["max_auth"]
    assert get(m, "event.action") == "ssh_max_auth_attempts" and get(m, "user.name") == "root"
    assert get(rows["negotiation"], "event.action") == "ssh_negotiation_failed"
    assert get(rows["negotiation"], "source.port") == 5353
    assert get(rows["bad_protocol"], "event.action") == "ssh_bad_banner"
    assert get(rows["bad_protocol"], "source.ip") == "203.0.113.23"


def test_pam_from_sshd(rows):
    f = rows["pam_failure"]
    assert get(f, "event.outcome") == "failure" and get(f, "user.name") == "admin"
    assert get(f, "source.ip") is None and get(f, "source.domain") == "attacker.example.net"
    assert get(f, "system.auth.pam.rhost") == "attacker.example.net"
    m = rows["pam_more"]
    assert get(m, "system.auth.repeated") == 2 and get(m, "source.ip") == "203.0.113.24"
    s = rows["session_opened"]
    assert get(s, "event.action") == "session_opened" and get(s, "user.name") == "bob" and get(s, "user.id") == "1001"


def test_other_sshd_message_keeps_host_process_message(rows):
    r = rows["other_sshd"]
    assert get(r, "event.action") is None and r["message"] == "Server listening on :: port 22."
    assert get(r, "process.name") == "sshd" and get(r, "source.ip") is None
