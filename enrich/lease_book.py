"""Per-IP DHCP lease state, DNS answers and host attribution: the pure-Python core of the ``dhcp_sessions``
stateful operator (:mod:`enrich.dhcp_sessions`), testable without Spark.

One :class:`LeaseBook` holds, for one internal IP address:

* its DHCP sessions (who held the address from when to when): a DHCPACK to a new MAC opens a session, an ACK
  to the holder renews it (extends the expected end), an ACK to another MAC closes it as ``reassigned``, a
  DHCPRELEASE closes it as ``release``, a lease end passing without renewal closes it as ``expiry``, and a
  session whose lease length was never logged (dhcpd does not log it) closes as ``timeout`` when nothing renews
  it within :attr:`Limits.unknown_lease_s` (expiry and timeout are declared :attr:`Limits.expiry_grace_s` of log
  time late, so that a RELEASE or renewal logged by another source can still arrive first);
* the DNS answers this address (as a client) received recently, so a connection to a resolved address gets the
  name that was looked up (``destination.domain``);
* events that could not be attributed yet because the lease that covers them has not arrived (logs from two
  sources are not ordered with each other): they wait until a covering lease arrives or, at most,
  :attr:`Limits.wait_s` of log time.

Times are epoch seconds (floats). Everything is deterministic: the same messages give the same sessions and ids
whatever the micro-batch boundaries, which the stream/batch parity test relies on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

ACK = "ack"
RELEASE = "release"
END_RELEASE = "release"
END_EXPIRY = "expiry"
END_REASSIGNED = "reassigned"
END_TIMEOUT = "timeout"
STATE_OPEN = "open"
STATE_RENEWED = "renewed"
STATE_CLOSED = "closed"
# Lookups kept per answered address: a connection takes the newest one before its own time, so a few suffice even
# for a late-logged connection; the cap bounds the state of a client that resolves one CDN address all day.
MAX_ANSWERS_PER_IP = 8


@dataclass(frozen=True)
class Limits:
    """How long state is kept (log time unless said otherwise); all bounded so state stays flat."""

    wait_s: float = 60.0            # an event waits at most this long for its lease to arrive
    history_s: float = 3600.0       # closed sessions and DNS answers kept this long, for late events
    dns_window_s: float = 600.0     # a DNS answer names connections to its address for this long
    unknown_lease_s: float = 3600.0  # a session with no logged lease length ends this long after its last ACK
    # A lease is declared expired only when log time is this far past its end: a RELEASE or renewal logged by
    # another source may still be on its way (attribution does not wait for this: it uses the lease end).
    expiry_grace_s: float = 900.0


@dataclass
class Session:
    session_id: str
    mac: str
    hostname: str | None
    start: float
    end: float | None           # expected end while open (None: lease length unknown), actual end once closed
    last_ack: float
    dataset: str | None
    end_reason: str | None = None

    @property
    def closed(self) -> bool:
        return self.end_reason is not None

    def covers(self, ts: float, limits: Limits) -> bool:
        if ts < self.start:
            return False
        if self.closed or self.end is not None:
            return ts < (self.end if self.end is not None else self.start)
        return ts < self.last_ack + limits.unknown_lease_s


def session_id(ip: str, mac: str, start: float) -> str:
    """Deterministic: the same lease seen twice (a replay, the batch path) gets the same id."""
    return hashlib.sha256(f"{ip}|{mac}|{start:.6f}".encode()).hexdigest()[:24]


@dataclass
class LeaseBook:
    ip: str
    sessions: list[Session] = field(default_factory=list)
    # answer ip -> the newest lookups of it by this client, oldest first: [(ts, domain), ...]. Indexed by address
    # so a connection finds its name in O(1), not by scanning an hour of answers.
    dns: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    waiting: list[dict[str, Any]] = field(default_factory=list)      # events waiting for a lease
    releases: list[tuple[float, str | None]] = field(default_factory=list)  # RELEASEs that came before their ACK
    max_ts: float = float("-inf")

    # -- state (de)serialization: one JSON string per key in Spark's state store ---------------------------
    def to_json(self) -> str:
        return json.dumps({"ip": self.ip, "max_ts": self.max_ts, "dns": self.dns, "waiting": self.waiting,
                           "releases": self.releases, "sessions": [s.__dict__ for s in self.sessions]},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> LeaseBook:
        d = json.loads(text)
        raw_dns = d["dns"]
        if isinstance(raw_dns, list):  # the earlier format: a flat list of (answer ip, domain, ts)
            by_ip: dict[str, list[tuple[float, str]]] = {}
            for ip, domain, ts in raw_dns:
                by_ip.setdefault(ip, []).append((ts, domain))
            dns = {ip: sorted(v)[-MAX_ANSWERS_PER_IP:] for ip, v in by_ip.items()}
        else:
            dns = {ip: [tuple(x) for x in v] for ip, v in raw_dns.items()}
        return cls(ip=d["ip"], sessions=[Session(**s) for s in d["sessions"]], dns=dns, waiting=d["waiting"],
                   max_ts=d["max_ts"], releases=[tuple(x) for x in d.get("releases", [])])

    # -- DHCP ------------------------------------------------------------------------------------------------
    def _row(self, s: Session, state: str, at: float) -> dict[str, Any]:
        return {"session_id": s.session_id, "ip": self.ip, "mac": s.mac, "hostname": s.hostname,
                "lease_start": s.start, "lease_end": s.end, "end_reason": s.end_reason, "state": state,
                "updated_at": at, "dataset": s.dataset}

    def _close(self, s: Session, at: float, reason: str) -> dict[str, Any]:
        s.end = at
        s.end_reason = reason
        return self._row(s, STATE_CLOSED, at)

    def ack(self, ts: float, mac: str, hostname: str | None, lease_s: float | None, dataset: str | None,
            limits: Limits) -> list[dict[str, Any]]:
        """A DHCPACK of this IP to ``mac`` at ``ts``: open, renew or reassign. Returns session rows."""
        out: list[dict[str, Any]] = []
        expected = ts + lease_s if lease_s else None
        current = self._holder_session(ts, limits)
        if current is not None and current.mac == mac:
            if current.closed:  # an ACK inside a session already closed (late message): nothing to change
                return out
            current.last_ack = max(current.last_ack, ts)
            changed = False
            if expected is not None and (current.end is None or expected > current.end):
                current.end, changed = expected, True
            if hostname and not current.hostname:
                current.hostname, changed = hostname, True
            # dhcpd and Zeek both log each ACK: a row only when the session learned something.
            out = [self._row(current, STATE_RENEWED, ts)] if changed else []
            return out + self._apply_pending_releases(current)
        if current is not None and not current.closed:
            if current.end is not None and current.end < ts:
                out.append(self._close(current, current.end, END_EXPIRY))  # had lapsed before the new holder
            else:
                out.append(self._close(current, ts, END_REASSIGNED))
        out += self._expire_before(ts, limits)
        # A later session (messages arrived out of order) bounds this one.
        later = [s for s in self.sessions if s.start > ts]
        new = Session(session_id(self.ip, mac, ts), mac, hostname, ts, expected, ts, dataset)
        self.sessions.append(new)
        self.sessions.sort(key=lambda s: s.start)
        out.append(self._row(new, STATE_OPEN, ts))
        if later:
            nxt = min(later, key=lambda s: s.start)
            if nxt.mac != mac:
                out.append(self._close(new, nxt.start, END_REASSIGNED))
        return out + self._apply_pending_releases(new)

    def _apply_pending_releases(self, s: Session) -> list[dict[str, Any]]:
        """A RELEASE logged by one source can arrive before the ACK logged by another: apply it now."""
        for rel in sorted(self.releases):
            ts, mac = rel
            if not s.closed and ts >= s.last_ack and (mac is None or mac == s.mac):
                self.releases.remove(rel)
                return [self._close(s, ts, END_RELEASE)]
        return []

    def release(self, ts: float, mac: str | None) -> list[dict[str, Any]]:
        for s in self.sessions:
            if not s.closed and s.start <= ts and (mac is None or s.mac == mac):
                return [self._close(s, ts, END_RELEASE)]
        if not any(s.start <= ts and (s.end is None or ts <= s.end) for s in self.sessions if s.mac == mac):
            self.releases.append((ts, mac))  # its ACK has not arrived yet
        return []

    def _expire_before(self, ts: float, limits: Limits, grace: float = 0.0) -> list[dict[str, Any]]:
        """Close open sessions whose lease ended more than ``grace`` before ``ts``."""
        out = []
        for s in self.sessions:
            if s.closed:
                continue
            if s.end is not None and s.end + grace <= ts:
                out.append(self._close(s, s.end, END_EXPIRY))
            elif s.end is None and s.last_ack + limits.unknown_lease_s + grace <= ts:
                out.append(self._close(s, s.last_ack + limits.unknown_lease_s, END_TIMEOUT))
        return out

    def _holder_session(self, ts: float, limits: Limits) -> Session | None:
        best = None
        for s in self.sessions:
            if s.start <= ts and (best is None or s.start >= best.start):
                best = s
        if best is not None and (best.covers(ts, limits) or not best.closed):
            return best
        return None

    def holder(self, ts: float, limits: Limits) -> Session | None:
        """The session holding this IP at ``ts``, if one is known."""
        s = self._holder_session(ts, limits)
        return s if s is not None and s.covers(ts, limits) else None

    # -- DNS ---------------------------------------------------------------------------------------------------
    def add_answers(self, ts: float, domain: str, ips: list[str]) -> None:
        for ip in ips:
            answers = self.dns.setdefault(ip, [])
            answers.append((ts, domain))
            if len(answers) > 1 and answers[-2][0] > ts:  # arrived out of order
                answers.sort()
            if len(answers) > MAX_ANSWERS_PER_IP:
                del answers[0]

    def domain_for(self, ip: str, ts: float, limits: Limits) -> str | None:
        """The name this client resolved to ``ip`` most recently before ``ts`` (within the DNS window)."""
        for a_ts, domain in reversed(self.dns.get(ip, ())):
            if a_ts <= ts:
                return domain if a_ts >= ts - limits.dns_window_s else None
        return None

    def answer_count(self) -> int:
        return sum(len(v) for v in self.dns.values())

    # -- housekeeping ------------------------------------------------------------------------------------------
    def prune(self, limits: Limits) -> list[dict[str, Any]]:
        """Expire what log time has passed and drop what no late event can need any more."""
        out = self._expire_before(self.max_ts, limits, limits.expiry_grace_s)
        horizon = self.max_ts - limits.history_s
        self.sessions = [s for s in self.sessions if not s.closed or (s.end or s.start) >= horizon]
        self.releases = [r for r in self.releases if r[0] >= horizon]
        # Answers are kept as long as sessions, so a connection logged late still finds its lookup.
        oldest = horizon - limits.dns_window_s
        self.dns = {ip: kept for ip, answers in self.dns.items() if (kept := [a for a in answers if a[0] >= oldest])}
        return out

    def close_all(self, limits: Limits) -> list[dict[str, Any]]:
        """The key went idle (state timeout): close what is still open, by its own lease end."""
        out = []
        for s in self.sessions:
            if not s.closed:
                if s.end is not None:
                    out.append(self._close(s, s.end, END_EXPIRY))
                else:
                    out.append(self._close(s, s.last_ack + limits.unknown_lease_s, END_TIMEOUT))
        return out


_RANK = {ACK: 0, RELEASE: 1}


def _order(r: dict[str, Any]) -> tuple:
    """Time, then ACK before RELEASE, then the raw line: messages with the same timestamp are applied in an order
    that depends on their content only, never on Kafka or file coordinates (the stream/batch parity needs it)."""
    return r["ts"], _RANK.get(r.get("dhcp"), 2), r.get("original") or "", r["event_id"]


def process(book: LeaseBook, rows: list[dict[str, Any]], limits: Limits, flush: bool) -> tuple[list, list]:
    """Apply one key's new ``rows`` (sorted or not) to ``book``.

    Each row: ``ts``, ``event_id``, ``dhcp`` (``ack``/``release``/None), ``mac``, ``hostname``, ``lease_s``,
    ``dataset``, ``dns_domain``, ``dns_ips``, ``dst_ip``, ``needs_host`` (the event should name a host: no
    reporting host and an address in a DHCP zone), plus opaque fields passed through.
    Returns (events out: the row plus ``host_name``, ``host_mac``, ``host_ip``, ``dest_domain``, ``session_id``;
    session rows). With ``flush`` every waiting event is released, attributed or not.
    """
    rows = sorted(rows, key=_order)
    sessions: list[dict[str, Any]] = []
    for r in rows:
        book.max_ts = max(book.max_ts, r["ts"])
        if r.get("dhcp") == ACK and r.get("mac"):
            sessions += book.ack(r["ts"], r["mac"], r.get("hostname"), r.get("lease_s"), r.get("dataset"), limits)
        elif r.get("dhcp") == RELEASE:
            sessions += book.release(r["ts"], r.get("mac"))
        if r.get("dns_domain") and r.get("dns_ips"):
            book.add_answers(r["ts"], r["dns_domain"], list(r["dns_ips"]))
    events: list[dict[str, Any]] = []
    pending, book.waiting = book.waiting + rows, []
    for r in sorted(pending, key=_order):
        s = book.holder(r["ts"], limits)
        if s is None and r.get("needs_host") and not flush and r["ts"] > book.max_ts - limits.wait_s:
            book.waiting.append(r)
            continue
        out = dict(r)
        out["dest_domain"] = book.domain_for(r["dst_ip"], r["ts"], limits) if r.get("dst_ip") else None
        out["host_ip"] = book.ip if s is not None else None
        out["host_name"] = s.hostname if s is not None else None
        out["host_mac"] = s.mac if s is not None else None
        out["session_id"] = s.session_id if s is not None else None
        events.append(out)
    sessions += book.prune(limits)
    return events, sessions
