"""Attack scenarios and hard negatives: each emits the events the activity would really leave.

A scenario is a function ``(sim, t0, budget) -> Incident | None`` that pushes its events (stamped with the
incident id by the emitter) starting at simulated time ``t0`` and finishing within ``budget`` seconds, and
returns what the ground truth should say about it (``None``: could not run now, e.g. no suitable host online).
"""

from __future__ import annotations

import base64
import string
from collections.abc import Callable
from dataclasses import dataclass, field

from core.address_plan import EXTERNAL_NETWORKS
from generator import formats as fmt
from generator.benign import LEASE_TIME
from generator.organization import HOSTILE_RANGES, WINDOWS_DOMAIN, external_ip, random_ip_in


@dataclass
class Incident:
    entity_type: str
    entity_value: str
    host_name: str | None = None
    user_name: str | None = None
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    name: str
    rule_id: str  # attacks: the rule expected to fire; hard negatives: the rules (comma-separated) that must NOT fire
    attack: bool
    fn: Callable
    description: str


COMMON_USERS = ("root", "admin", "ubuntu", "test", "oracle", "postgres", "git", "user", "ftpuser", "support",
                "deploy", "pi", "guest", "jenkins", "hadoop", "mysql", "www-data", "centos", "ec2-user", "nagios")


def attacker_ip(sim) -> str:
    """A fresh hostile outside address: not a known IOC (that would be another rule's hit), not used before."""
    iocs = {i.indicator for i in sim.org.iocs}
    while True:
        ip = external_ip(sim.rng, hostile=True)
        if ip not in iocs and ip not in sim.used_ips:
            sim.used_ips.add(ip)
            return ip


def online_client(sim, predicate=None):
    """A random online client ``(host, ip)`` that satisfies ``predicate``; ``(None, None)`` when none is online."""
    cands = [(h, ip) for h, ip in sim.bg.online_clients() if predicate is None or predicate(h)]
    if not cands:
        return None, None
    return sim.rng.choice(cands)


# -- SSH ----------------------------------------------------------------------------------------------------
def _ssh_attempts(sim, t: float, src: str, target, names: list[str], per_conn: int, gap: float) -> float:
    """Failed password attempts against ``target`` from ``src``, ``per_conn`` per TCP connection."""
    rng, em = sim.rng, sim.em
    known = sim.org.user_by_name
    i = 0
    while i < len(names):
        pid = rng.randrange(2000, 60000)
        sport = sim.bg.port()
        batch = names[i:i + per_conn]
        em.zeek(t, src, fmt.conn(t, fmt.zeek_uid(rng), src, sport, target.static_ip, 22, "tcp", service="ssh",
                                 duration=gap * len(batch), orig_bytes=rng.randint(1500, 3500),
                                 resp_bytes=rng.randint(2000, 4000), local_orig=False, local_resp=True), "conn")
        t += rng.uniform(0.3, 1.0)
        for name in batch:
            if name in known or name == "root":
                em.syslog(t, target, "sshd", pid, f"pam_unix(sshd:auth): authentication failure; logname= uid=0 "
                          f"euid=0 tty=ssh ruser= rhost={src}  user={name}", fmt.PRI_AUTHPRIV_NOTICE)
                t += rng.uniform(0.5, 2.0)
                em.syslog(t, target, "sshd", pid, f"Failed password for {name} from {src} port {sport} ssh2")
            else:
                em.syslog(t, target, "sshd", pid, f"Invalid user {name} from {src} port {sport}")
                t += rng.uniform(0.5, 2.0)
                em.syslog(t, target, "sshd", pid, f"Failed password for invalid user {name} from {src} port {sport} ssh2")
            t += rng.uniform(0.5, 1.5) * gap
        last = batch[-1]
        if len(batch) >= 6:
            em.syslog(t, target, "sshd", pid, f"error: maximum authentication attempts exceeded for {last} from {src} "
                      f"port {sport} ssh2 [preauth]", fmt.PRI_AUTHPRIV_ALERT)
        who = f"authenticating user {last}" if last in known or last == "root" else f"invalid user {last}"
        em.syslog(t + 0.01, target, "sshd", pid, f"Connection closed by {who} {src} port {sport} [preauth]")
        i += per_conn
        t += rng.uniform(0.2, 1.0)
    return t


def ssh_brute_force(sim, t0: float, budget: float, success: bool = False) -> Incident:
    rng = sim.rng
    src = attacker_ip(sim)
    target = sim.org.special("bastion")
    n = rng.randint(40, 100)
    gap = min(3.0, max(0.3, budget * 0.6 / n))
    names = [rng.choice(COMMON_USERS[:4]) if rng.random() < 0.6 else rng.choice(COMMON_USERS) for _ in range(n)]
    victim = None
    if success:
        victim = rng.choice(sim.org.non_admins)
        names[-4:] = [victim.name] * 4
    t = _ssh_attempts(sim, t0, src, target, names, 6, gap)
    if success:
        sim.bg.ssh_session(t + rng.uniform(1, 5), victim, src, target, duration=rng.uniform(60, min(600, budget * 0.2)),
                           external=True, method="password")
    return Incident("ip", src, host_name=target.name, user_name=victim.name if victim else None,
                    details={"attempts": n, "target": target.name})


def ssh_brute_force_success(sim, t0: float, budget: float) -> Incident:
    return ssh_brute_force(sim, t0, budget, success=True)


def password_spraying(sim, t0: float, budget: float) -> Incident:
    rng = sim.rng
    src = attacker_ip(sim)
    target = sim.org.special("bastion")
    k = min(len(sim.org.users), rng.randint(15, 40))
    names = [u.name for u in rng.sample(sim.org.users, k)]
    gap = min(30.0, max(1.0, budget * 0.7 / k))
    t = _ssh_attempts(sim, t0, src, target, names, 1, gap)
    del t
    return Incident("ip", src, host_name=target.name, details={"users": k, "target": target.name})


def new_country_login(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    remote = [u for u in sim.org.users if u.remote_worker]
    if not remote:
        return None
    user = rng.choice(remote)
    bastion = sim.org.special("bastion")
    home = sim.bg.home_ip[user.name]
    # The user's usual login first (so even a short run has their history), then one from abroad.
    tag, sim.em.tag = sim.em.tag, None
    sim.bg.ssh_session(t0, user, home, bastion, external=True, duration=rng.uniform(30, 120))
    sim.em.tag = tag
    foreign_cc = rng.choice(("BR", "VN", "RU", "NL", "CN"))
    ranges = [c for c, cc in EXTERNAL_NETWORKS if cc == foreign_cc]
    src = random_ip_in(rng, rng.choice(ranges))
    sim.used_ips.add(src)
    sim.bg.ssh_session(t0 + rng.uniform(0.3, 0.6) * budget, user, src, bastion, external=True,
                       duration=rng.uniform(60, 300))
    return Incident("user", user.name, host_name=bastion.name, user_name=user.name,
                    details={"source_ip": src, "country": foreign_cc, "usual_country": user.country})


def sudo_non_admin(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    ws_users = {h.owner: ip for h, ip in sim.bg.online_clients()}
    cands = [u for u in sim.org.non_admins if u.name in ws_users]
    if not cands:
        return None
    user = rng.choice(cands)
    server = rng.choice([s for s in sim.org.servers if s.role in ("build", "app", "k8s")] or sim.org.servers)
    tag, sim.em.tag = sim.em.tag, None  # logging in to a build server is normal; the sudo is not
    start = t0 + rng.uniform(0, 30)
    end = sim.bg.ssh_session(start, user, ws_users[user.name], server, duration=min(600, budget * 0.8))
    sim.em.tag = tag
    t = start + rng.uniform(10, 30)
    tries = rng.randint(1, 3)
    for _ in range(tries):
        sim.bg.sudo(t, user, server, rng.choice(("/bin/cat /etc/shadow", "/usr/bin/passwd root", "/bin/bash",
                                                 "/usr/bin/vi /etc/sudoers")), refused="user NOT in sudoers")
        t += rng.uniform(5, 30)
    if rng.random() < 0.3 and t < end:  # a sudoers rule that should not be there
        sim.bg.sudo(t, user, server, "/usr/bin/systemctl stop auditd")
    return Incident("user", user.name, host_name=server.name, user_name=user.name, details={"refused": tries})


# -- Windows ------------------------------------------------------------------------------------------------
WINDOWS_GUESSES = ("administrator", "Administrator", "admin", "user", "test", "guest", "backup", "scanner")


def _windows_failures(sim, t: float, src: str, target, names: list[str], gap: float, workstation: str,
                      logon_type: int = 3) -> float:
    """One 4625 on ``target`` per name (NTLM network logons, as RDP with NLA and SMB leave them)."""
    rng = sim.rng
    known = sim.org.user_by_name
    for name in names:
        sub = fmt.SUB_STATUS_BAD_PASSWORD if name in known or name.lower() == "administrator" \
            else fmt.SUB_STATUS_NO_SUCH_USER
        w = fmt.WinLogon(name, WINDOWS_DOMAIN, "S-1-0-0", logon_type, src, sim.bg.port(), workstation)
        sim.bg.evntslog(t, target, fmt.windows_failed_logon(t, target.name, w, sub))
        t += rng.uniform(0.5, 1.5) * gap
    return t


def _windows_target(sim):
    servers = sim.org.windows_servers
    return sim.rng.choice(servers) if servers else None


def windows_brute_force(sim, t0: float, budget: float) -> Incident | None:
    """Password guessing from the internet against an exposed Windows server (RDP with NLA: type 3 failures)."""
    rng = sim.rng
    target = _windows_target(sim)
    if target is None:
        return None
    src = attacker_ip(sim)
    n = rng.randint(40, 100)
    gap = min(3.0, max(0.3, budget * 0.6 / n))
    names = [rng.choice(WINDOWS_GUESSES[:3]) if rng.random() < 0.7 else rng.choice(WINDOWS_GUESSES) for _ in range(n)]
    _windows_failures(sim, t0, src, target, names, gap, rng.choice(("WORKSTATION", "kali", "DESKTOP-8F3K2LQ")))
    return Incident("ip", src, host_name=target.name, details={"attempts": n, "target": target.name})


def windows_password_spraying(sim, t0: float, budget: float) -> Incident | None:
    """A compromised workstation trying one password against many domain accounts on a file server."""
    rng = sim.rng
    target = _windows_target(sim)
    h, ip = online_client(sim, lambda c: c.windows)
    if target is None or h is None:
        return None
    k = min(len(sim.org.users), rng.randint(15, 40))
    names = [u.name for u in rng.sample(sim.org.users, k)]
    gap = min(30.0, max(1.0, budget * 0.7 / k))
    sim.net.pin(h.name, t0 + budget)
    _windows_failures(sim, t0, ip, target, names, gap, h.name.upper())
    return Incident("ip", ip, host_name=target.name, details={"users": k, "target": target.name, "source": h.name})


# -- network ------------------------------------------------------------------------------------------------
def _scan(sim, t: float, src: str, targets: list[tuple[str, int]], gap: float, external: bool,
          open_ports: set[int] = frozenset()) -> float:
    rng, em = sim.rng, sim.em
    for dst, port in targets:
        uid = fmt.zeek_uid(rng)
        sport = rng.randrange(32768, 61000)
        if port in open_ports:
            line = fmt.conn(t, uid, src, sport, dst, port, "tcp", duration=rng.uniform(0.001, 0.01), orig_bytes=0,
                            resp_bytes=0, conn_state="RSTO", history="ShR", local_orig=not external, local_resp=True)
        else:
            state = "REJ" if rng.random() < 0.6 else "S0"
            line = fmt.conn(t, uid, src, sport, dst, port, "tcp", conn_state=state, local_orig=not external,
                            local_resp=True)
        em.zeek(t, src, line, "conn")
        t += rng.expovariate(1.0 / gap)
    return t


def _sweep_targets(rng, n: int, port: int) -> list[tuple[str, int]]:
    base = rng.choice(("10.10.8.", "10.10.0.", "10.10.1.", "10.20.8.", "10.10.2."))
    return [(f"{base}{i}", port) for i in range(1, min(254, n) + 1)]


def port_scan_horizontal(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    h, ip = online_client(sim)
    if h is None:
        return None
    n = rng.randint(60, 250)
    port = rng.choice((445, 22, 3389, 5985))
    sim.net.pin(h.name, t0 + budget)
    _scan(sim, t0, ip, _sweep_targets(rng, n, port), min(0.5, budget * 0.5 / n), external=False,
          open_ports=set())
    return Incident("ip", ip, host_name=h.name, details={"port": port, "targets": n})


def port_scan_vertical(sim, t0: float, budget: float) -> Incident:
    rng = sim.rng
    src = attacker_ip(sim)
    target = sim.org.special("web")
    n = rng.randint(200, 1000)
    ports = rng.sample(range(1, 10000), n)
    _scan(sim, t0, src, [(target.static_ip, p) for p in ports], min(0.2, budget * 0.5 / n), external=True,
          open_ports={22, 80, 443})
    return Incident("ip", src, host_name=target.name, details={"target": target.static_ip, "ports": n})


def random_label(rng, n: int, alphabet: str = string.ascii_lowercase + string.digits) -> str:
    """``n`` random characters of ``alphabet``: DNS labels that look generated (tunnels, DGA domains)."""
    return "".join(rng.choices(alphabet, k=n))


def dns_tunnelling(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    h, ip = online_client(sim)
    if h is None:
        return None
    domain = f"{random_label(rng, 6, string.ascii_lowercase)}-cdn.{rng.choice(('xyz', 'top', 'site'))}"
    n = rng.randint(150, 400)
    gap = min(2.0, budget * 0.6 / n)
    sim.net.pin(h.name, t0 + budget)
    t = t0
    for i in range(n):
        payload = base64.b32encode(rng.randbytes(rng.randint(28, 36))).decode().rstrip("=").lower()
        name = f"{payload[:60]}.{i:04x}.{domain}"
        answer = base64.b64encode(rng.randbytes(24)).decode()
        t = sim.bg.lookup(t, ip, name, [answer], qtype="TXT", ttl=0.0)
        t += rng.expovariate(1.0 / gap)
    return Incident("ip", ip, host_name=h.name, details={"domain": domain, "queries": n})


def dns_dga(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    h, ip = online_client(sim)
    if h is None:
        return None
    n = rng.randint(40, 120)
    gap = min(3.0, budget * 0.5 / n)
    sim.net.pin(h.name, t0 + budget)
    t = t0
    resolved = 0
    for _ in range(n):
        name = random_label(rng, rng.randint(12, 22), "bcdfghjklmnpqrstvwxz" + "aeiou" * 1) + "." + \
            rng.choice(("com", "net", "org", "info", "biz"))
        if rng.random() < 0.05:
            t = sim.bg.lookup(t, ip, name, [random_ip_in(rng, rng.choice(HOSTILE_RANGES))], ttl=60.0)
            resolved += 1
        else:
            t = sim.bg.lookup(t, ip, name, None, rcode="NXDOMAIN")
        t += rng.expovariate(1.0 / gap)
    return Incident("ip", ip, host_name=h.name, details={"lookups": n, "resolved": resolved})


def c2_beaconing(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    h, ip = online_client(sim)
    if h is None:
        return None
    period = 60.0 if budget >= 40 * 60 else max(5.0, budget / 40)
    n = max(20, int(budget * 0.9 / period))
    jitter = rng.uniform(0.05, 0.2)
    domain = f"{random_label(rng, 8, string.ascii_lowercase)}.{rng.choice(('cloud', 'online', 'live'))}"
    dst = attacker_ip(sim)
    sim.net.pin(h.name, t0 + budget)
    t = t0
    last_lookup = -1e18
    for _ in range(n):
        if t - last_lookup > 300:
            t = sim.bg.lookup(t, ip, domain, [dst], ttl=300.0) + rng.uniform(0.005, 0.05)
            last_lookup = t
        sim.bg.connect(t, ip, dst, 443, domain, duration=rng.uniform(0.2, 1.5), orig_bytes=rng.randint(180, 700),
                       resp_bytes=rng.randint(90, 500))
        t += period * (1 + rng.uniform(-jitter, jitter))
    return Incident("ip", ip, host_name=h.name, details={"destination": dst, "domain": domain, "period_s": period,
                                                         "jitter": round(jitter, 3), "beacons": n})


def ioc_match(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    h, ip = online_client(sim)
    if h is None:
        return None
    ips = [i.indicator for i in sim.org.iocs if i.type == "ip"]
    domains = [i.indicator for i in sim.org.iocs if i.type == "domain"]
    bad_domain, bad_ip, direct_ip = rng.choice(domains), rng.choice(ips), rng.choice(ips)
    sim.net.pin(h.name, t0 + budget)
    t = sim.bg.lookup(t0, ip, bad_domain, [bad_ip], ttl=120.0)
    sim.bg.connect(t + rng.uniform(0.01, 0.2), ip, bad_ip, rng.choice((443, 80)), bad_domain)
    sim.bg.connect(t0 + rng.uniform(0.2, 0.6) * budget, ip, direct_ip, rng.choice((8080, 443, 4444)), None, tls=False)
    return Incident("ip", ip, host_name=h.name, details={"indicators": [bad_domain, bad_ip, direct_ip]})


def exfiltration(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    h, ip = online_client(sim)
    if h is None:
        return None
    dst = attacker_ip(sim)
    domain = f"files-{random_label(rng, 5)}.{rng.choice(('io', 'cc', 'me'))}"
    n = rng.randint(5, 15)
    sim.net.pin(h.name, t0 + budget)
    t = sim.bg.lookup(t0, ip, domain, [dst], ttl=300.0)
    total = 0
    for _ in range(n):
        size = rng.randint(60_000_000, 300_000_000)
        total += size
        sim.bg.connect(t, ip, dst, 443, domain, duration=rng.uniform(20, 120), orig_bytes=size,
                       resp_bytes=rng.randint(5000, 30000))
        t += rng.uniform(0.5, 1.0) * budget * 0.6 / n
    return Incident("ip", ip, host_name=h.name, details={"destination": dst, "bytes_out": total, "connections": n})


def dhcp_starvation(sim, t0: float, budget: float) -> Incident:
    rng = sim.rng
    network = "hq/guest"
    n = rng.randint(300, 600)
    gap = min(0.3, budget * 0.5 / n)
    t = t0
    exhausted = 0
    for _ in range(n):
        mac = ":".join(f"{b:02x}" for b in rng.randbytes(6))
        ip = sim.net.dora(t, None, network, mac, None)
        if ip is None:
            exhausted += 1
        else:
            sim.net.expire_later(t + LEASE_TIME, network, ip)
        t += rng.expovariate(1.0 / gap)
    return Incident("host", "dhcp-01", host_name="dhcp-01",
                    details={"network": network, "relay": sim.net.gateway(network), "discovers": n,
                             "no_free_leases": exhausted})


# -- hard negatives -----------------------------------------------------------------------------------------
def mistype_3(sim, t0: float, budget: float) -> Incident | None:
    rng = sim.rng
    ws = {h.owner: ip for h, ip in sim.bg.online_clients()}
    cands = [u for u in sim.org.admins if u.name in ws]
    if not cands:
        return None
    user = rng.choice(cands)
    server = rng.choice(sim.org.servers)
    sim.bg.ssh_session(t0, user, ws[user.name], server, mistypes=3, duration=min(600, budget * 0.5))
    return Incident("ip", ws[user.name], host_name=server.name, user_name=user.name, details={"failures": 3})


def authorized_scanner(sim, t0: float, budget: float) -> Incident:
    rng = sim.rng
    scanner = sim.org.special("scanner")
    targets = _sweep_targets(rng, 200, 22) + [(sim.org.special("web").static_ip, p) for p in range(1, 600)]
    _scan(sim, t0, scanner.static_ip, targets, min(0.2, budget * 0.5 / len(targets)), external=False,
          open_ports={22, 80, 443})
    return Incident("ip", scanner.static_ip, host_name=scanner.name, details={"authorized_scanner": True})


def backup_beat(sim, t0: float, budget: float) -> Incident:
    n = max(6, min(12, int(budget / 300)))
    period = min(300.0, budget / n)
    for k in range(n):
        sim.bg.backup_beat(t0 + k * period)
    backup = sim.org.special("backup")
    return Incident("ip", backup.static_ip, host_name=backup.name, details={"beats": n, "period_s": period})


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("ssh_brute_force", "ssh_brute_force", True, ssh_brute_force,
             "many failed SSH passwords from one outside address against the bastion"),
    Scenario("ssh_brute_force_success", "ssh_brute_force_success", True, ssh_brute_force_success,
             "an SSH brute force that ends with an accepted password"),
    Scenario("password_spraying", "password_spraying", True, password_spraying,
             "one outside address trying one password against many real users"),
    Scenario("windows_brute_force", "windows_brute_force", True, windows_brute_force,
             "many failed Windows logons (4625) from one outside address against a Windows server"),
    Scenario("windows_password_spraying", "windows_password_spraying", True, windows_password_spraying,
             "one internal workstation failing Windows logons (4625) for many real accounts on a file server"),
    Scenario("port_scan_horizontal", "port_scan_horizontal", True, port_scan_horizontal,
             "an internal host probing one port across a subnet"),
    Scenario("port_scan_vertical", "port_scan_vertical", True, port_scan_vertical,
             "an outside address probing hundreds of ports of the DMZ web server"),
    Scenario("dns_tunnelling", "dns_tunnelling", True, dns_tunnelling,
             "long encoded TXT queries under one domain from one host"),
    Scenario("dns_dga", "dns_dga", True, dns_dga, "bursts of random-looking NXDOMAIN lookups (DGA malware)"),
    Scenario("c2_beaconing", "c2_beaconing", True, c2_beaconing,
             "small periodic TLS connections with jitter to one outside address"),
    Scenario("ioc_match", "ioc_match", True, ioc_match, "lookups of and connections to indicators in the iocs table"),
    Scenario("exfiltration", "exfiltration", True, exfiltration, "hundreds of MB uploaded by one host to one address"),
    Scenario("dhcp_starvation", "dhcp_starvation", True, dhcp_starvation,
             "hundreds of DHCPDISCOVERs from random MACs exhausting the guest pool"),
    Scenario("sudo_non_admin", "sudo_non_admin", True, sudo_non_admin, "sudo attempts by a user who is not an admin"),
    Scenario("new_country_login", "new_country_login", True, new_country_login,
             "a user's SSH login from a country they never log in from"),
    Scenario("mistype_3", "ssh_brute_force", False, mistype_3,
             "an admin mistyping the password three times, then logging in"),
    Scenario("authorized_scanner", "port_scan_horizontal,port_scan_vertical", False, authorized_scanner,
             "the authorized vulnerability scanner (assets.authorized_scanner) sweeping and probing"),
    Scenario("backup_beat", "c2_beaconing,exfiltration", False, backup_beat,
             "the backup job's regular large uploads to the off-site provider"),
)}
ATTACKS = tuple(n for n, s in SCENARIOS.items() if s.attack)
HARD_NEGATIVES = tuple(n for n, s in SCENARIOS.items() if not s.attack)
