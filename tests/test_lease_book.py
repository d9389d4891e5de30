"""The per-IP lease logic alone (no Spark): sessions, attribution at an event's time, DNS names, waiting, pruning."""

from __future__ import annotations

import datetime as dt

from enrich.lease_book import (
    ACK,
    END_EXPIRY,
    END_REASSIGNED,
    END_RELEASE,
    END_TIMEOUT,
    STATE_CLOSED,
    STATE_OPEN,
    STATE_RENEWED,
    LeaseBook,
    Limits,
    process,
    session_id,
)

IP = "10.10.0.23"
A, B = "AA-AA-AA-AA-AA-01", "BB-BB-BB-BB-BB-02"
LIMITS = Limits(wait_s=60, history_s=3600, dns_window_s=600, unknown_lease_s=3600, expiry_grace_s=900)


def t(hhmm: str) -> float:
    h, m = map(int, hhmm.split(":"))
    return dt.datetime(2026, 3, 9, h, m, tzinfo=dt.UTC).timestamp()


def ack(ts: float, mac: str, host: str, lease: float | None = 1200, eid: str | None = None) -> dict:
    return {"ts": ts, "event_id": eid or f"ack-{ts}-{mac}", "dhcp": ACK, "mac": mac, "hostname": host,
            "lease_s": lease, "dataset": "zeek.dhcp", "needs_host": False}


def release(ts: float, mac: str) -> dict:
    return {"ts": ts, "event_id": f"rel-{ts}", "dhcp": "release", "mac": mac, "dataset": "dhcpd"}


def event(ts: float, eid: str, dst_ip: str | None = None, needs_host: bool = True) -> dict:
    return {"ts": ts, "event_id": eid, "dst_ip": dst_ip, "needs_host": needs_host}


def dns(ts: float, domain: str, ips: list[str]) -> dict:
    return {"ts": ts, "event_id": f"dns-{ts}", "dns_domain": domain, "dns_ips": ips, "needs_host": True}


def hosts_of(events: list[dict]) -> dict[str, str | None]:
    return {e["event_id"]: e["host_name"] for e in events}


def test_reassignment_attributes_each_event_to_the_holder_at_its_time_even_out_of_order():
    book = LeaseBook(IP)
    # A: 10:00, renewed 10:10 (lease to 10:30), released 10:30; B from 10:35. Events arrive 10:40 first.
    rows = [ack(t("10:00"), A, "host-a"), ack(t("10:10"), A, "host-a"), release(t("10:30"), A),
            ack(t("10:35"), B, "host-b"), event(t("10:40"), "e1040"), event(t("10:10") + 5, "e1010")]
    events, sessions = process(book, rows, LIMITS, flush=False)
    hosts = hosts_of(events)
    assert hosts["e1010"] == "host-a" and hosts["e1040"] == "host-b"
    macs = {e["event_id"]: e["host_mac"] for e in events}
    assert macs["e1010"] == A and macs["e1040"] == B
    closed = [s for s in sessions if s["state"] == STATE_CLOSED]
    assert [(s["mac"], s["end_reason"], s["lease_end"]) for s in closed] == [(A, END_RELEASE, t("10:30"))]
    opened = [s for s in sessions if s["state"] == STATE_OPEN]
    assert [s["mac"] for s in opened] == [A, B]
    renewed = [s for s in sessions if s["state"] == STATE_RENEWED]
    assert len(renewed) == 1 and renewed[0]["lease_end"] == t("10:30")


def test_an_ack_to_another_mac_closes_the_old_session_as_reassigned():
    book = LeaseBook(IP)
    _, sessions = process(book, [ack(t("10:00"), A, "a", lease=3600), ack(t("10:35"), B, "b")], LIMITS, False)
    closed = [s for s in sessions if s["state"] == STATE_CLOSED]
    assert len(closed) == 1 and closed[0]["mac"] == A and closed[0]["end_reason"] == END_REASSIGNED
    assert closed[0]["lease_end"] == t("10:35")
    assert book.holder(t("10:20"), LIMITS).mac == A and book.holder(t("10:36"), LIMITS).mac == B


def test_a_lease_that_is_not_renewed_expires_and_unknown_lengths_time_out():
    book = LeaseBook(IP)
    _, sessions = process(book, [ack(t("10:00"), A, "a", lease=1200), event(t("10:30"), "in-grace")], LIMITS, False)
    assert sessions[-1]["state"] == STATE_OPEN  # a release may still be on its way
    assert book.holder(t("10:25"), LIMITS) is None  # but attribution already knows the lease ended
    _, sessions = process(book, [event(t("10:45"), "later")], LIMITS, False)
    assert [(s["end_reason"], s["lease_end"]) for s in sessions if s["state"] == STATE_CLOSED] == \
        [(END_EXPIRY, t("10:20"))]
    assert book.holder(t("10:30"), LIMITS) is None

    book = LeaseBook(IP)
    _, sessions = process(book, [ack(t("10:00"), A, "a", lease=None), event(t("11:30"), "much-later")], LIMITS, False)
    assert [(s["end_reason"], s["lease_end"]) for s in sessions if s["state"] == STATE_CLOSED] == \
        [(END_TIMEOUT, t("11:00"))]


def test_dhcpd_and_zeek_logging_the_same_ack_give_one_renewal_row():
    book = LeaseBook(IP)
    process(book, [ack(t("10:00"), A, "a")], LIMITS, False)
    _, sessions = process(book, [ack(t("10:10"), A, "a", lease=None), ack(t("10:10") + 0.5, A, "a")], LIMITS, False)
    assert [s["state"] for s in sessions] == [STATE_RENEWED]
    assert sessions[0]["session_id"] == session_id(IP, A, t("10:00"))


def test_events_wait_for_a_late_lease_and_are_released_after_the_wait_or_on_flush():
    book = LeaseBook(IP)
    events, _ = process(book, [event(t("10:05"), "early")], LIMITS, False)
    assert events == [] and len(book.waiting) == 1
    # The lease arrives (logged by another source, later): the waiting event is attributed.
    events, _ = process(book, [ack(t("10:04"), A, "a")], LIMITS, False)
    assert hosts_of(events) == {"early": "a", f"ack-{t('10:04')}-{A}": "a"}
    # No lease ever: released unattributed once log time has moved past the wait.
    book = LeaseBook("10.10.0.99")
    events, _ = process(book, [event(t("10:05"), "x")], LIMITS, False)
    assert events == []
    events, _ = process(book, [event(t("10:07"), "y")], LIMITS, False)
    assert hosts_of(events) == {"x": None}
    events, _ = process(book, [], LIMITS, flush=True)
    assert hosts_of(events) == {"y": None} and book.waiting == []
    # Events that need no host (static addresses, syslog with a reporting host) never wait.
    events, _ = process(LeaseBook(IP), [event(t("10:05"), "z", needs_host=False)], LIMITS, False)
    assert hosts_of(events) == {"z": None}


def test_a_connection_gets_the_name_its_client_resolved_most_recently_within_the_window():
    book = LeaseBook(IP)
    rows = [ack(t("09:00"), A, "a", lease=7200), dns(t("10:00"), "old.example", ["203.0.113.5"]),
            dns(t("10:02"), "cdn.example", ["203.0.113.5", "203.0.113.6"]),
            event(t("10:03"), "c1", dst_ip="203.0.113.5"), event(t("10:03"), "c2", dst_ip="203.0.113.6"),
            event(t("10:01"), "c0", dst_ip="203.0.113.5"), event(t("10:03"), "c3", dst_ip="198.51.100.1"),
            event(t("10:20"), "c4", dst_ip="203.0.113.6")]
    events, _ = process(book, rows, LIMITS, False)
    domains = {e["event_id"]: e["dest_domain"] for e in events}
    assert domains["c0"] == "old.example" and domains["c1"] == "cdn.example" and domains["c2"] == "cdn.example"
    assert domains["c3"] is None  # never resolved
    assert domains["c4"] is None  # resolved 18 minutes earlier: outside the 10-minute window


def test_state_is_bounded_and_survives_serialization():
    book = LeaseBook(IP)
    for hour in range(9, 18):
        rows = [ack(t(f"{hour}:00"), A if hour % 2 else B, f"h{hour}", lease=1200),
                dns(t(f"{hour}:01"), f"d{hour}.example", ["203.0.113.9"])]
        process(book, rows, LIMITS, False)
        book = LeaseBook.from_json(book.to_json())
    # Only sessions ending within history_s (1 h) of the newest message and the open one are kept.
    assert len(book.sessions) <= 3
    assert book.answer_count() == 2  # answers of the last history_s + dns_window_s only
    assert book.holder(t("17:10"), LIMITS).hostname == "h17"
    closed = book.close_all(LIMITS)
    assert closed and all(s["state"] == STATE_CLOSED for s in closed)


def test_a_release_that_arrives_before_its_ack_still_ends_the_session():
    book = LeaseBook(IP)
    _, sessions = process(book, [release(t("10:30"), A)], LIMITS, False)
    assert sessions == [] and book.releases == [(t("10:30"), A)]
    _, sessions = process(book, [ack(t("10:00"), A, "a")], LIMITS, False)
    assert [(s["state"], s["end_reason"], s["lease_end"]) for s in sessions] == \
        [(STATE_OPEN, None, t("10:20")), (STATE_CLOSED, END_RELEASE, t("10:30"))]
    assert book.releases == [] and book.holder(t("10:31"), LIMITS) is None


def test_a_new_holder_after_the_old_lease_lapsed_closes_it_as_expired_at_its_end():
    book = LeaseBook(IP)
    _, sessions = process(book, [ack(t("10:00"), A, "a", lease=1200), ack(t("10:25"), B, "b")], LIMITS, False)
    assert [(s["mac"], s["end_reason"], s["lease_end"]) for s in sessions if s["state"] == STATE_CLOSED] == \
        [(A, END_EXPIRY, t("10:20"))]
