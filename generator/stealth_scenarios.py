"""Stealth attacks that stay under every rule's threshold: what the behavioural models (alerts/ml) are for.

Each one is far from the entity's *own* normal while looking unremarkable to a fixed threshold:

- ``slow_lateral_movement``: a workstation opens SMB/RDP to one new internal workstation every 15–30 minutes.
  The horizontal scan rule wants 30 targets in 10 minutes; this is 2–4 an hour, but workstations never talk to
  other workstations on admin ports.
- ``low_slow_exfiltration``: a workstation uploads 60–200 MB to one outside address over about two hours, a few
  connections at irregular gaps: under the 250 MB/hour exfiltration rule and too irregular for the beaconing
  rule, yet thousands of times the host's usual upload volume.
- ``night_service_login``: an admin (service/operations) account logs in interactively over SSH between 22:00
  and 05:00 UTC from a workstation it has never used, and runs sudo: no failures (no brute-force rule), an admin
  (no sudo rule), an internal source (no new-country rule).

Ground truth entities are the model's entities: the host for the first two, the user for the third.
"""

from __future__ import annotations

import string

from generator.scenarios import Incident, Scenario, attacker_ip, online_client, random_label
from generator.timeline import DAY

LATERAL_PORTS = (445, 3389)
NIGHT_START_H, NIGHT_END_H = 22, 5


def slow_lateral_movement(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    h, ip = online_client(sim, lambda host: not host.laptop)  # a desktop stays online for the whole run
    if h is None:
        return None
    peers = [p_ip for p, p_ip in sim.bg.online_clients() if p.name != h.name and not p.laptop]
    rng.shuffle(peers)
    gap_lo, gap_hi = 15 * 60, 30 * 60
    n = max(3, min(len(peers), int(budget * 0.9 / ((gap_lo + gap_hi) / 2))))
    if len(peers) < 3:
        return None
    sim.net.pin(h.name, t0 + budget)
    t = t0
    touched = []
    for peer in peers[:n]:
        if t > t0 + budget * 0.95:
            break
        port = rng.choice(LATERAL_PORTS)
        sim.bg.connect(t, ip, peer, port, None, external=False, tls=False, duration=rng.uniform(2, 90),
                       orig_bytes=rng.randint(2_000, 60_000), resp_bytes=rng.randint(2_000, 200_000))
        touched.append(peer)
        t += rng.uniform(gap_lo, gap_hi)
    return Incident("host", h.name, host_name=h.name, details={"peers": touched, "source_ip": ip})


def low_slow_exfiltration(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    h, ip = online_client(sim, lambda host: not host.laptop)
    if h is None:
        return None
    dst = attacker_ip(sim)
    domain = f"{random_label(rng, 6, string.ascii_lowercase)}-share.{rng.choice(('net', 'io', 'app'))}"
    span = min(budget * 0.9, 2 * 3600.0)
    n = rng.randint(6, 12)
    total_target = rng.randint(60_000_000, 200_000_000)
    sizes = [rng.uniform(0.5, 1.5) for _ in range(n)]
    scale = total_target / sum(sizes)
    sim.net.pin(h.name, t0 + budget)
    t = sim.bg.lookup(t0, ip, domain, [dst], ttl=300.0)
    total = 0
    for s in sizes:
        size = int(s * scale)
        total += size
        sim.bg.connect(t, ip, dst, 443, domain, duration=rng.uniform(30, 300), orig_bytes=size,
                       resp_bytes=rng.randint(3_000, 20_000))
        t += rng.uniform(0.3, 1.7) * span / n  # irregular: no beacon period to find
    return Incident("host", h.name, host_name=h.name,
                    details={"destination": dst, "domain": domain, "bytes_out": total, "connections": n})


def _next_night(t0: float, budget: float, rng) -> float | None:
    """A time in the next night (22:00–05:00 UTC) that starts within ``budget`` (leaving an hour to finish)."""
    hour = (t0 % DAY) / 3600
    if hour >= NIGHT_START_H or hour < NIGHT_END_H - 1:
        return t0
    start = t0 - t0 % DAY + NIGHT_START_H * 3600 + rng.uniform(0, 3 * 3600)
    return start if start + 3600 <= t0 + budget else None


def night_service_login(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    t = _next_night(t0, budget, rng)
    if t is None:
        return None
    admins = list(sim.org.admins)
    rng.shuffle(admins)
    user = admins[0]
    # a desktop (online all night) of somebody else: a machine this account never logs in from
    desktops = [(h, ip) for h, ip in sim.bg.online_clients() if not h.laptop and h.owner != user.name
                and h.name != user.workstation]
    if not desktops:
        return None
    src_host, src_ip = rng.choice(desktops)
    sim.net.pin(src_host.name, t + 3600)
    server = rng.choice([s for s in sim.org.servers if s.role in ("db", "file", "app", "build")] or sim.org.servers)
    sim.bg.ssh_session(t, user, src_ip, server, sudo=rng.randint(1, 3), duration=rng.uniform(300, 1800),
                       method="password")
    return Incident("user", user.name, host_name=server.name, user_name=user.name,
                    details={"source_host": src_host.name, "source_ip": src_ip, "server": server.name,
                             "at_hour_utc": int((t % DAY) // 3600)})


STEALTH_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("slow_lateral_movement", "ml.behaviour", True, slow_lateral_movement,
             "a workstation opening SMB/RDP to one new internal workstation every 15-30 minutes"),
    Scenario("low_slow_exfiltration", "ml.behaviour", True, low_slow_exfiltration,
             "60-200 MB uploaded to one outside address over two hours, under the exfiltration rule"),
    Scenario("night_service_login", "ml.behaviour", True, night_service_login,
             "an admin account logging in at night from a workstation it never used, then sudo"),
)
STEALTH_NAMES: tuple[str, ...] = tuple(s.name for s in STEALTH_SCENARIOS)
# Simulated seconds each needs (the engine's MAX_BUDGET): two hours of slow activity; the night login may wait
# for the night.
STEALTH_BUDGETS: dict[str, float] = {"slow_lateral_movement": 7200, "low_slow_exfiltration": 7200,
                                     "night_service_login": 86400}
