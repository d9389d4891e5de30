"""The benign background: DHCP lease lifecycles, DNS-then-connect browsing, internal traffic, admin SSH and
sudo, remote logins, occasional mistyped passwords and the nightly backup job.

:class:`Network` holds the state every event depends on (who holds which address right now);
:class:`Background` draws activity per simulated window with the diurnal load curve.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import math
import random

from core.address_plan import INTERNAL_NETWORKS
from generator import formats as fmt
from generator.organization import (
    DHCP_SERVER_IP,
    DHCP_SERVER_NAME,
    DNS_SERVER_IP,
    WINDOWS_DOMAIN,
    Host,
    Organization,
    User,
    external_ip,
    user_sid,
)
from generator.timeline import DAY, SYSLOG, Emitter, diurnal, poisson

LEASE_TIME = 1200.0  # seconds; clients renew at half the lease (RFC 2131 T1)
COMMANDS = ("/usr/bin/systemctl restart nginx", "/usr/bin/apt-get update", "/usr/bin/journalctl -u sshd -n 50",
            "/usr/bin/systemctl status postgresql", "/bin/cat /var/log/syslog", "/usr/sbin/reboot",
            "/usr/bin/docker ps", "/usr/bin/tail -f /var/log/nginx/error.log", "/usr/bin/du -sh /srv",
            "/usr/sbin/ufw status")
USER_AGENTS = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0 Safari/537.36",
               "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
               "Mozilla/5.0 (X11; Linux x86_64; rv:131.0) Gecko/20100101 Firefox/131.0",
               "Microsoft-CryptoAPI/10.0", "Windows-Update-Agent/10.0.10011.16384 Client-Protocol/2.50")
INTERNAL_SERVICES = ((445, "tcp", None), (389, "tcp", None), (88, "tcp", "krb_tcp"), (8080, "tcp", "http"),
                     (5432, "tcp", None), (443, "tcp", "ssl"))
INTERNAL_DOMAIN = "corp.nightjar.example"
# What sshd and its clients announce (Zeek's ssh.log client/server fields).
SSH_CLIENTS = ("SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5", "SSH-2.0-OpenSSH_9.7", "SSH-2.0-PuTTY_Release_0.81",
               "SSH-2.0-OpenSSH_for_Windows_9.5")
SSH_SERVER = "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3"


def network_cidr(site_zone: str) -> str:
    site, zone = site_zone.split("/")
    return next(c for c, z, s, _cc, _d in INTERNAL_NETWORKS if z == zone and s == site)


class Network:
    """DHCP leases (the dhcpd pool per network) and every host's current address."""

    def __init__(self, org: Organization, rng: random.Random, em: Emitter, start: float) -> None:
        self.org, self.rng, self.em = org, rng, em
        self.free: dict[str, list[str]] = {n: list(pool) for n, pool in org.pools.items()}
        self.ip_of: dict[str, str] = {h.name: h.static_ip for h in org.hosts if h.static_ip}
        self.lease_of_mac: dict[str, str] = {}  # mac -> ip last leased (dhcpd prefers it again)
        self.holder: dict[str, str] = {}  # ip -> mac currently holding it
        self.org_macs = {h.mac for h in org.hosts}
        self.timers: list[tuple[float, int, str, str]] = []  # (ts, seq, host, action)
        self.seq = 0
        self.pinned: dict[str, float] = {}  # host -> until: keep its lease (a scenario is using it)
        self.dhcpd_pid = 1000 + rng.randrange(30000)
        self.arrive: dict[str, float] = {}
        self.leave: dict[str, float] = {}
        for h in org.clients:
            self.arrive[h.name] = rng.gauss(8.5, 0.6)
            self.leave[h.name] = rng.gauss(17.6, 0.9)
            if not h.laptop or self._should_be_online(h, start):
                ip = self._allocate(h.network, h.mac)
                if ip is None:
                    continue
                self.ip_of[h.name] = ip
                acquired = start - rng.uniform(0, LEASE_TIME / 2)
                # Log the grant of the lease the host holds when the run starts (stamped before --start), so
                # its traffic from the first minute on can be attributed to it, as in a log that began earlier.
                self._request_ack(acquired, h, ip)
                self._timer(acquired + LEASE_TIME / 2, h.name, "renew")
                if h.laptop:
                    self._timer(self._next_leave(h, start), h.name, "leave")
            else:
                self._timer(self._next_arrival(h, start), h.name, "arrive")

    # -- schedule -------------------------------------------------------------------------------------
    def _timer(self, ts: float, host: str, action: str) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (ts, self.seq, host, action))

    def _should_be_online(self, h: Host, ts: float) -> bool:
        hour = (ts % DAY) / 3600
        weekday = int(ts // DAY + 3) % 7 < 5  # 1970-01-01 was a Thursday
        return weekday and self.arrive[h.name] <= hour < self.leave[h.name]

    def _next_arrival(self, h: Host, ts: float) -> float:
        day = ts - ts % DAY
        for k in range(0, 8):
            t = day + k * DAY + self.arrive[h.name] * 3600 + self.rng.uniform(-900, 900)
            weekday = int((day + k * DAY) // DAY + 3) % 7 < 5
            if t > ts and (weekday or self.rng.random() < 0.1):
                return t
        return ts + DAY

    def _next_leave(self, h: Host, ts: float) -> float:
        day = ts - ts % DAY
        t = day + self.leave[h.name] * 3600 + self.rng.uniform(-900, 900)
        return t if t > ts else t + DAY

    # -- leases ---------------------------------------------------------------------------------------
    def _allocate(self, network: str, mac: str) -> str | None:
        free = self.free[network]
        prev = self.lease_of_mac.get(mac)
        if prev is not None and prev in free and prev not in self.holder:
            free.remove(prev)
            ip = prev
        elif free:
            ip = free.pop(0)  # least recently used first: addresses move to other hosts over time
        else:
            return None
        self.holder[ip] = mac
        self.lease_of_mac[mac] = ip
        return ip

    def release(self, network: str, ip: str) -> None:
        mac = self.holder.pop(ip, None)
        if mac is not None:
            self.free[network].append(ip)
            if mac not in self.org_macs:  # visitors and forged MACs: forget them (bounded state in long runs)
                self.lease_of_mac.pop(mac, None)

    def online(self, h: Host) -> str | None:
        return self.ip_of.get(h.name)

    def pin(self, host: str, until: float) -> None:
        self.pinned[host] = max(until, self.pinned.get(host, 0.0))

    def gateway(self, network: str) -> str:
        return self.org.gateways[network]

    def _request_ack(self, t: float, h: Host, ip: str) -> None:
        """A renewal (or the grant of a lease held at the start): REQUEST -> ACK, dhcpd syslog + Zeek dhcp."""
        em, rng = self.em, self.rng
        server = self.org.host_by_name[DHCP_SERVER_NAME]
        via = self.gateway(h.network)
        em.syslog(t, server, "dhcpd", self.dhcpd_pid, f"DHCPREQUEST for {ip} from {h.mac} ({h.name}) via {via}",
                  fmt.PRI_DAEMON_INFO)
        t1 = t + rng.uniform(0.001, 0.02)
        em.syslog(t1, server, "dhcpd", self.dhcpd_pid, f"DHCPACK on {ip} to {h.mac} ({h.name}) via {via}",
                  fmt.PRI_DAEMON_INFO)
        em.zeek(t, ip, fmt.dhcp(t, [fmt.zeek_uid(rng)], ip, DHCP_SERVER_IP, h.mac, h.name, ["REQUEST", "ACK"],
                                assigned_addr=ip, lease_time=LEASE_TIME, duration=t1 - t), "dhcp")

    def dora(self, t: float, h: Host | None, network: str, mac: str, hostname: str | None) -> str | None:
        """DISCOVER -> OFFER -> REQUEST -> ACK for ``mac`` (dhcpd syslog + one Zeek dhcp record)."""
        em, rng = self.em, self.rng
        server = self.org.host_by_name[DHCP_SERVER_NAME]
        via = self.gateway(network)
        name = f" ({hostname})" if hostname else ""
        ip = self._allocate(network, mac)
        if ip is None:
            em.syslog(t, server, "dhcpd", self.dhcpd_pid,
                      f"DHCPDISCOVER from {mac}{name} via {via}: network {network_cidr(network)}: no free leases",
                      fmt.PRI_DAEMON_INFO)
            return None
        em.syslog(t, server, "dhcpd", self.dhcpd_pid, f"DHCPDISCOVER from {mac}{name} via {via}", fmt.PRI_DAEMON_INFO)
        t1 = t + rng.uniform(0.001, 0.02)
        em.syslog(t1, server, "dhcpd", self.dhcpd_pid, f"DHCPOFFER on {ip} to {mac}{name} via {via}", fmt.PRI_DAEMON_INFO)
        t2 = t1 + rng.uniform(0.005, 0.5)
        em.syslog(t2, server, "dhcpd", self.dhcpd_pid,
                  f"DHCPREQUEST for {ip} ({DHCP_SERVER_IP}) from {mac}{name} via {via}", fmt.PRI_DAEMON_INFO)
        t3 = t2 + rng.uniform(0.001, 0.02)
        em.syslog(t3, server, "dhcpd", self.dhcpd_pid, f"DHCPACK on {ip} to {mac}{name} via {via}", fmt.PRI_DAEMON_INFO)
        em.zeek(t, ip, fmt.dhcp(t, [fmt.zeek_uid(rng)], None, DHCP_SERVER_IP, mac, hostname,
                                ["DISCOVER", "OFFER", "REQUEST", "ACK"], assigned_addr=ip, lease_time=LEASE_TIME,
                                duration=t3 - t), "dhcp")
        if h is not None:
            self.ip_of[h.name] = ip
        return ip

    def advance(self, until: float) -> None:
        """Run every lease timer due before ``until``."""
        em, rng = self.em, self.rng
        server = self.org.host_by_name[DHCP_SERVER_NAME]
        while self.timers and self.timers[0][0] < until:
            t, _seq, name, action = heapq.heappop(self.timers)
            h = self.org.host_by_name[name]
            if action == "arrive":
                if self.dora(t, h, h.network, h.mac, h.name) is None:
                    self._timer(t + 120, name, "arrive")
                    continue
                self._timer(t + LEASE_TIME / 2, name, "renew")
                self._timer(self._next_leave(h, t), name, "leave")
            elif action == "renew":
                ip = self.ip_of.get(name)
                if ip is None:
                    continue
                self._request_ack(t, h, ip)
                self._timer(t + LEASE_TIME / 2, name, "renew")
            elif action == "leave":
                ip = self.ip_of.get(name)
                if ip is None:
                    continue
                if self.pinned.get(name, 0.0) > t:
                    self._timer(self.pinned[name] + 60, name, "leave")
                    continue
                if rng.random() < 0.7:  # a clean shutdown releases; a closed lid just lets the lease expire
                    via = self.gateway(h.network)
                    em.syslog(t, server, "dhcpd", self.dhcpd_pid,
                              f"DHCPRELEASE of {ip} from {h.mac} ({h.name}) via {via} (found)", fmt.PRI_DAEMON_INFO)
                    em.zeek(t, ip, fmt.dhcp(t, [fmt.zeek_uid(rng)], ip, DHCP_SERVER_IP, h.mac, h.name, ["RELEASE"]),
                            "dhcp")
                    self.release(h.network, ip)
                else:
                    self.expire_later(t + LEASE_TIME / 2, h.network, ip)
                del self.ip_of[name]
                # Drop this host's pending renewal: it is gone.
                self.timers = [x for x in self.timers if not (x[2] == name and x[3] == "renew")]
                heapq.heapify(self.timers)
                self._timer(self._next_arrival(h, t), name, "arrive")
            elif action.startswith("visitor:"):  # a guest-Wi-Fi phone/laptop leaving
                _, mac, ip, vname = action.split("|")
                via = self.gateway("hq/guest")
                name = f" ({vname})" if vname else ""
                em.syslog(t, server, "dhcpd", self.dhcpd_pid, f"DHCPRELEASE of {ip} from {mac}{name} via {via} (found)",
                          fmt.PRI_DAEMON_INFO)
                self.release("hq/guest", ip)
            elif action.startswith("expire:"):
                _, network, ip = action.split(":", 2)
                self.release(network, ip)

    def visitor(self, t: float) -> None:
        """A visitor's device joins the guest Wi-Fi (randomized MAC) and leaves again within hours."""
        rng = self.rng
        first = rng.randrange(256) & 0xFE | 0x02  # locally administered: a randomized MAC
        mac = f"{first:02x}:" + ":".join(f"{rng.randrange(256):02x}" for _ in range(5))
        vname = rng.choice(("iPhone", "Galaxy-S23", "Pixel-8", "MacBook-Air", "", "android-" + f"{rng.getrandbits(32):08x}"))
        ip = self.dora(t, None, "hq/guest", mac, vname or None)
        if ip is not None:
            self._timer(t + rng.uniform(120, LEASE_TIME / 2 - 10), DHCP_SERVER_NAME, f"visitor:|{mac}|{ip}|{vname}")

    def expire_later(self, ts: float, network: str, ip: str) -> None:
        self._timer(ts, DHCP_SERVER_NAME, f"expire:{network}:{ip}")


def hash_index(text: str, n: int) -> int:
    """A stable index in ``range(n)`` from ``text`` (no rng draw, so adding it changes no other event)."""
    return hashlib.sha256(text.encode()).digest()[0] % n


def ssh_fingerprint(seed: int, user: str) -> str:
    digest = hashlib.sha256(f"{seed}/{user}".encode()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


class Background:
    """Benign activity per window. Rates are per eligible entity per second at diurnal load 1.0."""

    WEB_RATE = 0.02  # browsing sessions per online client
    INTERNAL_RATE = 0.008  # client -> internal service
    SERVER_RATE = 0.01  # server -> server
    ADMIN_SSH_RATE = 0.0008  # interactive admin sessions per admin
    REMOTE_RATE = 0.0002  # remote logins to the bastion per remote worker
    MISTYPE_P = 0.06
    VISITOR_RATE = 20 / 3600  # guest Wi-Fi devices joining per second at full load
    INTERNET_NOISE_RATE = 8 / 3600  # drive-by SSH probes of the bastion from the internet (any time of day)
    TYPO_RATE = 0.0004  # mistyped names (NXDOMAIN, no connection) per online client
    WIN_LOGON_RATE = 0.0002  # interactive sign-ins (after a lock, a restart) per online Windows workstation
    WIN_SHARE_RATE = 0.001  # network logons to a Windows file server per online Windows workstation

    def __init__(self, org: Organization, net: Network, rng: random.Random, em: Emitter, seed: int) -> None:
        self.org, self.net, self.rng, self.em, self.seed = org, net, rng, em, seed
        self.servers = org.servers
        self.internal_servers = [h for h in self.servers if h.zone == "servers" and h.role not in ("dhcp", "dns")]
        self.admins = org.admins
        self.remote = [u for u in org.users if u.remote_worker]
        self.home_ip: dict[str, str] = {u.name: external_ip(rng, u.country) for u in self.remote}
        self.ioc_values = {i.indicator for i in org.iocs}
        self.bastion = org.special("bastion")
        self.backup = org.special("backup")
        self.file_servers = [h for h in self.servers if h.role == "file"] or self.internal_servers[:1]
        self.windows_shares = [h for h in self.servers if h.windows and h.zone == "servers"]

    # -- building blocks (also used by scenarios) ------------------------------------------------------
    def port(self) -> int:
        return self.rng.randrange(32768, 61000)

    def lookup(self, t: float, ip: str, name: str, answers: list[str] | None, qtype: str = "A",
               rcode: str = "NOERROR", ttl: float = 300.0) -> float:
        """A DNS query (Zeek dns + its conn); returns when the answer arrived."""
        rng = self.rng
        uid = fmt.zeek_uid(rng)
        p = self.port()
        rtt = rng.uniform(0.0005, 0.004) if answers and rng.random() < 0.7 else rng.uniform(0.01, 0.08)
        self.em.zeek(t, ip, fmt.dns(t, uid, ip, p, DNS_SERVER_IP, name, qtype=qtype, rcode=rcode, answers=answers,
                                    ttl=ttl, rtt=rtt, trans_id=rng.randrange(65536)), "dns")
        self.em.zeek(t, ip, fmt.conn(t, uid, ip, p, DNS_SERVER_IP, 53, "udp", service="dns", duration=rtt,
                                     orig_bytes=len(name) + 17, resp_bytes=(len(name) + 33) if answers else len(name) + 17,
                                     local_resp=True), "conn")
        return t + rtt

    def connect(self, t: float, ip: str, dst: str, port: int, server_name: str | None, *, external: bool = True,
                orig_bytes: int | None = None, resp_bytes: int | None = None, duration: float | None = None,
                tls: bool | None = None) -> None:
        rng = self.rng
        uid = fmt.zeek_uid(rng)
        p = self.port()
        tls = (port == 443) if tls is None else tls
        duration = rng.uniform(0.05, 30.0) if duration is None else duration
        ob = rng.randint(300, 4000) if orig_bytes is None else orig_bytes
        rb = rng.randint(1500, 400_000) if resp_bytes is None else resp_bytes
        service = "ssl" if tls else ("http" if port in (80, 8080) else None)
        self.em.zeek(t, ip, fmt.conn(t, uid, ip, p, dst, port, "tcp", service=service, duration=duration,
                                     orig_bytes=ob, resp_bytes=rb, local_resp=not external), "conn")
        if tls and server_name:
            ts = t + rng.uniform(0.01, 0.08)
            self.em.zeek(ts, ip, fmt.ssl(ts, uid, ip, p, dst, port, server_name), "ssl")
        elif service == "http" and server_name:
            ts = t + rng.uniform(0.005, 0.05)
            uri = rng.choice(("/", "/index.html", "/api/v1/status", "/static/app.js", "/favicon.ico"))
            self.em.zeek(ts, ip, fmt.http(ts, uid, ip, p, dst, port, server_name, uri,
                                          status=rng.choice((200, 200, 200, 304, 301, 404)),
                                          user_agent=rng.choice(USER_AGENTS), resp_len=max(0, rb - 300)), "http")

    def ssh_session(self, t: float, user: User, src_ip: str, server: Host, *, mistypes: int = 0,
                    sudo: int = 0, duration: float | None = None, external: bool = False,
                    method: str | None = None) -> float:
        """A whole interactive SSH session on ``server``; returns its end time."""
        rng, em = self.rng, self.em
        pid = rng.randrange(2000, 60000)
        sport = self.port()
        method = method or ("password" if mistypes or rng.random() < 0.3 else "publickey")
        duration = rng.uniform(60, 1800) if duration is None else duration
        sip = self.net.online(server) or server.static_ip
        uid = fmt.zeek_uid(rng)
        start = t
        em.zeek(t, src_ip, fmt.conn(t, uid, src_ip, sport, sip, 22, "tcp", service="ssh",
                                    duration=duration, orig_bytes=rng.randint(3000, 90000),
                                    resp_bytes=rng.randint(5000, 400000), local_orig=not external, local_resp=True),
                "conn")
        t += rng.uniform(0.2, 1.0)
        for _ in range(mistypes):
            em.syslog(t, server, "sshd", pid, f"pam_unix(sshd:auth): authentication failure; logname= uid=0 euid=0 "
                      f"tty=ssh ruser= rhost={src_ip}  user={user.name}", fmt.PRI_AUTHPRIV_NOTICE)
            t += rng.uniform(1.5, 3.0)
            em.syslog(t, server, "sshd", pid, f"Failed password for {user.name} from {src_ip} port {sport} ssh2")
            t += rng.uniform(3.0, 9.0)
        if method == "publickey":
            em.syslog(t, server, "sshd", pid, f"Accepted publickey for {user.name} from {src_ip} port {sport} ssh2: "
                      f"ED25519 {ssh_fingerprint(self.seed, user.name)}")
        else:
            em.syslog(t, server, "sshd", pid, f"Accepted password for {user.name} from {src_ip} port {sport} ssh2")
        em.syslog(t + 0.01, server, "sshd", pid,
                  f"pam_unix(sshd:session): session opened for user {user.name}(uid={user.uid}) by (uid=0)",
                  fmt.PRI_AUTHPRIV_INFO)
        # Zeek's view of the same connection (same uid and 4-tuple as the conn record): its ssh.log entry is
        # stamped with the connection's start, like conn's, and says the login succeeded.
        em.zeek(start, src_ip, fmt.ssh(start, uid, src_ip, sport, sip, 22, auth_success=True,
                                       auth_attempts=mistypes + 1, client=SSH_CLIENTS[hash_index(user.name, 4)],
                                       server=SSH_SERVER), "ssh")
        end = t + duration
        for _ in range(sudo):
            ts = rng.uniform(t + 5, end - 1)
            self.sudo(ts, user, server, rng.choice(COMMANDS))
        em.syslog(end, server, "sshd", pid, f"Received disconnect from {src_ip} port {sport}:11: disconnected by user")
        em.syslog(end, server, "sshd", pid, f"Disconnected from user {user.name} {src_ip} port {sport}")
        em.syslog(end + 0.01, server, "sshd", pid, f"pam_unix(sshd:session): session closed for user {user.name}",
                  fmt.PRI_AUTHPRIV_INFO)
        return end

    def sudo(self, t: float, user: User, host: Host, command: str, refused: str | None = None) -> None:
        em, rng = self.em, self.rng
        pid = rng.randrange(2000, 60000)
        tty = f"pts/{rng.randrange(0, 4)}"
        if refused:
            em.syslog(t, host, "sudo", pid, f"{user.name} : {refused} ; TTY={tty} ; PWD=/home/{user.name} ; USER=root ; "
                      f"COMMAND={command}", fmt.PRI_AUTHPRIV_ALERT)
            return
        em.syslog(t, host, "sudo", pid, f"{user.name} : TTY={tty} ; PWD=/home/{user.name} ; USER=root ; COMMAND={command}",
                  fmt.PRI_AUTHPRIV_NOTICE)
        em.syslog(t + 0.002, host, "sudo", pid,
                  f"pam_unix(sudo:session): session opened for user root(uid=0) by {user.name}(uid={user.uid})",
                  fmt.PRI_AUTHPRIV_INFO)
        em.syslog(t + rng.uniform(0.05, 20), host, "sudo", pid, "pam_unix(sudo:session): session closed for user root",
                  fmt.PRI_AUTHPRIV_INFO)

    # -- Windows (Security log through the EvntSLog agent) -------------------------------------------------
    def evntslog(self, t: float, host: Host, line: str) -> None:
        self.em.push(t, SYSLOG, host.name, line, fmt.EVNTSLOG)

    def logon_id(self) -> str:
        return f"0x{self.rng.randrange(0x100000, 0x7fffffff):x}"

    def logon_guid(self) -> str:
        h = f"{self.rng.getrandbits(128):032X}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    def windows_interactive(self, t: float, ws: Host, user: User, *, mistypes: int = 0) -> None:
        """A user signing in at their Windows workstation (logon type 2), after ``mistypes`` wrong passwords."""
        rng = self.rng
        w = fmt.WinLogon(user.name, WINDOWS_DOMAIN, user_sid(user), 2, "127.0.0.1", 0, ws.name.upper(),
                         self.logon_id(), computer_account=f"{ws.name.upper()}$")
        for _ in range(mistypes):
            self.evntslog(t, ws, fmt.windows_failed_logon(t, ws.name, w))
            t += rng.uniform(3.0, 10.0)
        self.evntslog(t, ws, fmt.windows_logon(t, ws.name, w, self.logon_guid()))

    def windows_share(self, t: float, ws: Host, ip: str, user: User, server: Host) -> None:
        """A workstation opening a share on a Windows file server: the SMB connection (Zeek conn to 445) and the
        server's network logon (type 3, NTLM, the client's address and port), logged off when the session ends."""
        rng = self.rng
        sport = self.port()
        duration = rng.uniform(0.5, 90.0)
        self.em.zeek(t, ip, fmt.conn(t, fmt.zeek_uid(rng), ip, sport, server.static_ip, 445, "tcp", service="smb",
                                     duration=duration, orig_bytes=rng.randint(1500, 40000),
                                     resp_bytes=rng.randint(2000, 2_000_000), local_resp=True), "conn")
        w = fmt.WinLogon(user.name, WINDOWS_DOMAIN, user_sid(user), 3, ip, sport, ws.name.upper(), self.logon_id())
        t1 = t + rng.uniform(0.01, 0.2)
        self.evntslog(t1, server, fmt.windows_logon(t1, server.name, w, "00000000-0000-0000-0000-000000000000"))
        self.evntslog(t + duration, server, fmt.windows_logoff(t + duration, server.name, w))

    def _windows(self, t0: float, t1: float, clients: list[tuple[Host, str]], load: float) -> None:
        rng = self.rng
        users = self.org.user_by_name
        width = t1 - t0
        win = [(h, ip) for h, ip in clients if h.windows and h.owner in users]
        if not win:
            return
        for _ in range(poisson(rng, self.WIN_LOGON_RATE * len(win) * load * width)):
            h, _ip = rng.choice(win)
            self.windows_interactive(rng.uniform(t0, t1), h, users[h.owner],
                                     mistypes=1 if rng.random() < self.MISTYPE_P else 0)
        if self.windows_shares:
            for _ in range(poisson(rng, self.WIN_SHARE_RATE * len(win) * load * width)):
                h, ip = rng.choice(win)
                self.windows_share(rng.uniform(t0, t1), h, ip, users[h.owner], rng.choice(self.windows_shares))

    def online_clients(self) -> list[tuple[Host, str]]:
        return [(h, ip) for h in self.org.clients if (ip := self.net.ip_of.get(h.name))]

    # -- the window loop -------------------------------------------------------------------------------
    def window(self, t0: float, t1: float) -> None:
        rng = self.rng
        self.net.advance(t1)
        load = diurnal(t0)
        width = t1 - t0
        clients = self.online_clients()
        for _ in range(poisson(rng, self.WEB_RATE * len(clients) * load * width)):
            h, ip = rng.choice(clients)
            t = rng.uniform(t0, t1)
            name, dst = rng.choice(self.org.domains)
            t = self.lookup(t, ip, name, [dst])
            for _k in range(1 if rng.random() < 0.7 else rng.randint(2, 4)):
                t += rng.uniform(0.005, 0.3)
                port = 443 if rng.random() < 0.85 else 80
                self.connect(t, ip, dst, port, name)
        for _ in range(poisson(rng, self.INTERNAL_RATE * len(clients) * load * width)):
            h, ip = rng.choice(clients)
            srv = rng.choice(self.internal_servers)
            port, _proto, service = rng.choice(INTERNAL_SERVICES)
            t = rng.uniform(t0, t1)
            t = self.lookup(t, ip, f"{srv.name}.{INTERNAL_DOMAIN}", [srv.static_ip], ttl=3600.0)
            self.connect(t + rng.uniform(0.001, 0.05), ip, srv.static_ip, port,
                         f"{srv.name}.{INTERNAL_DOMAIN}" if service in ("ssl", "http") else None, external=False,
                         resp_bytes=rng.randint(200, 60000))
        for _ in range(poisson(rng, self.SERVER_RATE * len(self.internal_servers) * max(load, 0.4) * width)):
            a, b = rng.choice(self.internal_servers), rng.choice(self.internal_servers)
            if a is b:
                continue
            self.connect(rng.uniform(t0, t1), a.static_ip, b.static_ip, rng.choice((5432, 443, 6379, 9200)), None,
                         external=False, tls=False, duration=rng.uniform(0.001, 2.0), orig_bytes=rng.randint(100, 5000),
                         resp_bytes=rng.randint(100, 50000))
        for _ in range(poisson(rng, self.ADMIN_SSH_RATE * len(self.admins) * load * width)):
            user = rng.choice(self.admins)
            ws = self.org.host_by_name.get(user.workstation or "")
            ip = self.net.ip_of.get(ws.name) if ws else None
            if ip is None:
                continue
            mistypes = 1 if rng.random() < self.MISTYPE_P else 0
            self.ssh_session(rng.uniform(t0, t1), user, ip, rng.choice(self.servers), mistypes=mistypes,
                             sudo=rng.choice((0, 0, 1, 2, 3)))
        for _ in range(poisson(rng, self.REMOTE_RATE * len(self.remote) * load * width)):
            user = rng.choice(self.remote)
            mistypes = 1 if rng.random() < self.MISTYPE_P else 0
            self.ssh_session(rng.uniform(t0, t1), user, self.home_ip[user.name], self.bastion, mistypes=mistypes,
                             external=True, duration=rng.uniform(30, 600))
        for _ in range(poisson(rng, self.INTERNET_NOISE_RATE * width)):
            self.internet_noise(rng.uniform(t0, t1))
        for _ in range(poisson(rng, self.TYPO_RATE * len(clients) * load * width)):
            h, ip = rng.choice(clients)
            name, _dst = rng.choice(self.org.domains)
            cut = rng.randrange(1, max(2, len(name) - 4))
            self.lookup(rng.uniform(t0, t1), ip, name[:cut] + name[cut + 1:], None, rcode="NXDOMAIN")
        for _ in range(poisson(rng, self.VISITOR_RATE * load * width)):
            self.net.visitor(rng.uniform(t0, t1))
        self._windows(t0, t1, clients, load)
        self._backup(t0, t1)

    def internet_noise(self, t: float) -> None:
        """The background radiation of an SSH port on the internet: a probe or one or two guesses, then gone."""
        rng, em = self.rng, self.em
        src = external_ip(rng, hostile=rng.random() < 0.7)
        while src in self.ioc_values:  # stay clear of the IOC list: only ioc_match incidents should match it
            src = external_ip(rng, hostile=True)
        pid = rng.randrange(2000, 60000)
        sport = self.port()
        bip = self.bastion.static_ip
        kind = rng.random()
        em.zeek(t, src, fmt.conn(t, fmt.zeek_uid(rng), src, sport, bip, 22, "tcp", service="ssh" if kind > 0.3 else None,
                                 duration=rng.uniform(0.1, 8.0), orig_bytes=rng.randint(0, 2500),
                                 resp_bytes=rng.randint(20, 3000), local_orig=False, local_resp=True), "conn")
        t += rng.uniform(0.05, 0.5)
        if kind < 0.3:
            em.syslog(t, self.bastion, "sshd", pid, f"Connection closed by {src} port {sport} [preauth]")
            return
        name = rng.choice(("root", "admin", "ubuntu", "test", "oracle", "user", "pi"))
        for _ in range(rng.choice((1, 1, 2))):
            if name == "root":
                em.syslog(t, self.bastion, "sshd", pid, f"Failed password for root from {src} port {sport} ssh2")
            else:
                em.syslog(t, self.bastion, "sshd", pid, f"Invalid user {name} from {src} port {sport}")
                t += rng.uniform(0.5, 2.0)
                em.syslog(t, self.bastion, "sshd", pid, f"Failed password for invalid user {name} from {src} port {sport} ssh2")
            t += rng.uniform(1.0, 3.0)
        em.syslog(t, self.bastion, "sshd", pid, f"Received disconnect from {src} port {sport}:11: Bye Bye [preauth]")

    def _backup(self, t0: float, t1: float) -> None:
        """The nightly backup (01:00-04:00 UTC): pull from file servers, push off-site, every 5 minutes."""
        day = t0 - t0 % DAY
        first, stop = day + 3600, day + 4 * 3600
        t = first + max(0, math.ceil((t0 - first) / 300)) * 300
        while t < t1 and t < stop:
            self.backup_beat(t)
            t += 300

    def backup_beat(self, t: float) -> None:
        rng = self.rng
        ip = self.backup.static_ip
        fs = rng.choice(self.file_servers)
        self.connect(t + rng.uniform(0, 2), ip, fs.static_ip, 873, None, external=False, tls=False,
                     duration=rng.uniform(20, 120), orig_bytes=rng.randint(2000, 9000),
                     resp_bytes=rng.randint(50_000_000, 300_000_000))
        name, dst = self.org.backup_target
        t2 = self.lookup(t + rng.uniform(2, 4), ip, name, [dst], ttl=60.0)
        self.connect(t2 + 0.01, ip, dst, 443, name, duration=rng.uniform(30, 200),
                     orig_bytes=rng.randint(40_000_000, 250_000_000), resp_bytes=rng.randint(5000, 40000))
