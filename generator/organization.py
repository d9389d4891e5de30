"""The simulated organization: sites, network zones, hosts, users, external address space, IOCs.

Everything is built from one seeded :class:`random.Random` and a seeded Faker, in a fixed order, so that
the same seed and sizes give the same organization (the same host names, MACs, addresses and users).
"""

from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass, field

from faker import Faker

from core.address_plan import EXTERNAL_NETWORKS, INTERNAL_NETWORKS

# Content-delivery / cloud ranges that benign web destinations resolve into.
CLOUD_RANGES = ("104.16.0.0/13", "142.250.0.0/15", "151.101.0.0/16", "13.32.0.0/15")
HOSTILE_RANGES = ("185.220.100.0/22", "45.155.204.0/22", "61.177.172.0/22", "5.188.10.0/23", "103.145.13.0/24",
                  "177.54.128.0/20")
SITE_COUNTRY = {"hq": "US", "london": "GB", "berlin": "DE"}
DEPARTMENTS = ("Engineering", "Sales", "Finance", "Marketing", "HR", "Legal", "Support", "Operations")
SERVER_ROLES = ("app", "db", "file", "web", "build", "mail", "jump", "mon", "log", "k8s")
DNS_SERVER_IP = "10.10.8.53"
DHCP_SERVER_IP = "10.10.8.67"
DHCP_SERVER_NAME = "dhcp-01"
WINDOWS_SERVER_ROLES = ("file", "mail", "jump")
WINDOWS_DOMAIN = "CORP"  # the Active Directory domain's NetBIOS name
DOMAIN_SID = "S-1-5-21-3623811015-3361044348-30300820"  # accounts are DOMAIN_SID-RID


def user_sid(user: User) -> str:
    """A domain account's SID: the domain SID and a relative id from the user's uid (RIDs start at 1000)."""
    return f"{DOMAIN_SID}-{user.uid + 100}"


@dataclass
class Host:
    name: str
    mac: str
    zone: str
    site: str
    owner: str
    criticality: str
    authorized_scanner: bool = False
    static_ip: str | None = None  # servers; DHCP clients get addresses from leases
    dhcp: bool = False
    laptop: bool = False
    syslog_5424: bool = False  # which header its rsyslog writes
    role: str = "workstation"

    @property
    def network(self) -> str:
        return f"{self.site}/{self.zone}"

    @property
    def windows(self) -> bool:
        """Windows hosts (their Security log goes out through the EvntSLog agent): the file, mail and jump
        servers, and three in four assigned workstations. Derived from the name and role, not drawn, so an
        organization built from a seed is the same as before Windows logs existed."""
        if self.role == "workstation":
            return self.owner != "unassigned" and int(self.name[-4:]) % 4 != 0
        return self.role in WINDOWS_SERVER_ROLES


@dataclass
class User:
    name: str
    full_name: str
    department: str
    is_admin: bool
    site: str
    uid: int
    workstation: str | None = None
    remote_worker: bool = False

    @property
    def country(self) -> str:
        return SITE_COUNTRY[self.site]


@dataclass
class Ioc:
    indicator: str
    type: str  # ip | domain
    threat: str
    source: str
    first_seen: float


@dataclass
class Organization:
    hosts: list[Host]
    users: list[User]
    domains: list[tuple[str, str]]  # benign web destinations: (name, resolved ip)
    iocs: list[Ioc]
    backup_target: tuple[str, str]  # (domain, ip) of the off-site backup provider
    pools: dict[str, list[str]] = field(default_factory=dict)  # DHCP network -> addresses of its pool
    gateways: dict[str, str] = field(default_factory=dict)  # DHCP network -> relay (gateway) address
    host_by_name: dict[str, Host] = field(default_factory=dict)
    user_by_name: dict[str, User] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.host_by_name = {h.name: h for h in self.hosts}
        self.user_by_name = {u.name: u for u in self.users}

    @property
    def servers(self) -> list[Host]:
        return [h for h in self.hosts if h.static_ip and h.zone in ("servers", "dmz")]

    @property
    def clients(self) -> list[Host]:
        return [h for h in self.hosts if h.dhcp]

    @property
    def admins(self) -> list[User]:
        return [u for u in self.users if u.is_admin]

    @property
    def non_admins(self) -> list[User]:
        return [u for u in self.users if not u.is_admin]

    @property
    def windows_servers(self) -> list[Host]:
        return [h for h in self.servers if h.windows]

    def special(self, role: str) -> Host:
        return next(h for h in self.hosts if h.role == role)


def random_mac(rng: random.Random, oui: tuple[int, int, int] | None = None) -> str:
    first = oui or (rng.choice((0x00, 0x3C, 0xA4, 0xF8, 0x98, 0x54)), rng.randrange(256), rng.randrange(256))
    return ":".join(f"{b:02x}" for b in (*first, rng.randrange(256), rng.randrange(256), rng.randrange(256)))


def random_ip_in(rng: random.Random, cidr: str) -> str:
    net = ipaddress.ip_network(cidr)
    return str(net.network_address + rng.randrange(1, net.num_addresses - 1))


def external_ip(rng: random.Random, country: str | None = None, hostile: bool = False) -> str:
    if hostile:
        return random_ip_in(rng, rng.choice(HOSTILE_RANGES))
    ranges = [c for c, cc in EXTERNAL_NETWORKS if (country is None or cc == country) and c not in CLOUD_RANGES
              and c not in HOSTILE_RANGES]
    return random_ip_in(rng, rng.choice(ranges))


def _pool(cidr: str) -> tuple[str, list[str]]:
    net = ipaddress.ip_network(cidr)
    hosts = [str(a) for a in net.hosts()]
    return hosts[0], hosts[19:]  # .1 is the gateway/relay; the first addresses are reserved


def build_organization(seed: int, n_hosts: int = 500, n_users: int = 300) -> Organization:
    if n_hosts < 12:
        raise ValueError("an organization needs at least 12 hosts")
    if n_users < 5:
        raise ValueError("an organization needs at least 5 users")
    rng = random.Random(f"org/{seed}")
    fake = Faker("en_US")
    fake.seed_instance(seed)

    users: list[User] = []
    taken: set[str] = set()
    n_admins = max(2, round(n_users * 0.06))
    sites = ("hq", "hq", "hq", "london", "berlin")
    for i in range(n_users):
        first, last = fake.first_name(), fake.last_name()
        base = "".join(c for c in f"{first[0]}{last}".lower() if c.isalpha())
        name, k = base, 1
        while name in taken:
            k += 1
            name = f"{base}{k}"
        taken.add(name)
        admin = i < n_admins
        users.append(User(name=name, full_name=f"{first} {last}", department="IT" if admin else rng.choice(DEPARTMENTS),
                          is_admin=admin, site=rng.choice(sites), uid=1000 + i, remote_worker=rng.random() < 0.25))

    hosts: list[Host] = []
    static_next: dict[str, int] = {}

    def static(cidr: str) -> str:
        net = ipaddress.ip_network(cidr)
        n = static_next.get(cidr, 10)
        static_next[cidr] = n + 1
        return str(net.network_address + n)

    def server(name: str, role: str, cidr: str, zone: str, site: str, crit: str, owner: str = "it-ops",
               scanner: bool = False, ip: str | None = None) -> Host:
        return Host(name=name, mac=random_mac(rng), zone=zone, site=site, owner=owner, criticality=crit,
                    authorized_scanner=scanner, static_ip=ip or static(cidr), role=role,
                    syslog_5424=rng.random() < 0.5)

    hosts.append(server(DHCP_SERVER_NAME, "dhcp", "10.10.8.0/24", "servers", "hq", "high", ip=DHCP_SERVER_IP))
    hosts.append(server("dns-01", "dns", "10.10.8.0/24", "servers", "hq", "high", ip=DNS_SERVER_IP))
    hosts.append(server("bastion-01", "bastion", "172.16.10.0/24", "dmz", "hq", "critical"))
    hosts.append(server("backup-01", "backup", "10.10.8.0/24", "servers", "hq", "high"))
    hosts.append(server("vulnscan-01", "scanner", "10.10.9.0/24", "mgmt", "hq", "medium", owner="secops",
                        scanner=True))
    hosts.append(server("web-01", "web", "172.16.10.0/24", "dmz", "hq", "critical"))
    n_servers = max(4, round(n_hosts * 0.15)) - 2
    server_nets = (("10.10.8.0/24", "hq"), ("10.10.8.0/24", "hq"), ("10.20.8.0/24", "london"))
    for i in range(n_servers):
        cidr, site = server_nets[i % len(server_nets)]
        role = SERVER_ROLES[i % len(SERVER_ROLES)]
        crit = rng.choice(("medium", "high", "high", "critical")) if role in ("db", "file", "mail") else \
            rng.choice(("low", "medium", "medium", "high"))
        hosts.append(server(f"{role}-{site[:3]}-{i + 1:02d}", role, cidr, "servers", site, crit))

    corp = {"hq": "10.10.0.0/22", "london": "10.20.0.0/23", "berlin": "10.30.0.0/23"}
    n_clients = n_hosts - len(hosts)
    for i in range(n_clients):
        user = users[i % len(users)] if i < len(users) else None
        guest = i >= len(users) and rng.random() < 0.3
        site = user.site if user else rng.choice(("hq", "hq", "london", "berlin"))
        laptop = rng.random() < 0.6
        name = f"{'lt' if laptop else 'ws'}-{i + 1:04d}"
        host = Host(name=name, mac=random_mac(rng), zone="guest" if guest else "corp",
                    site="hq" if guest else site, owner=user.name if user else "unassigned",
                    criticality="medium" if user and user.is_admin else "low", dhcp=True, laptop=laptop or guest,
                    role="workstation", syslog_5424=rng.random() < 0.5)
        if user:
            user.workstation = name
        hosts.append(host)
    del corp

    pools: dict[str, list[str]] = {}
    gateways: dict[str, str] = {}
    for cidr, zone, site, _cc, dhcp in INTERNAL_NETWORKS:
        if dhcp:
            gw, pool = _pool(cidr)
            # dhcpd ranges are sized to the clients (plus headroom), so freed addresses go to other hosts.
            clients = sum(1 for h in hosts if h.dhcp and h.site == site and h.zone == zone)
            size = 60 if zone == "guest" else int(clients * 1.15) + 6
            pools[f"{site}/{zone}"] = pool[:size]
            gateways[f"{site}/{zone}"] = gw

    domains: list[tuple[str, str]] = []
    seen: set[str] = set()
    while len(domains) < 150:
        d = fake.domain_name()
        if d in seen:
            continue
        seen.add(d)
        domains.append((rng.choice(("www.", "", "cdn.", "api.")) + d, random_ip_in(rng, rng.choice(CLOUD_RANGES))))
    backup_target = ("vault.offsite-backup.example.net", random_ip_in(rng, "13.32.0.0/15"))

    iocs: list[Ioc] = []
    threats = ("cobalt_strike", "emotet", "qakbot", "asyncrat", "phishing", "tor_exit", "scanner")
    for i in range(40):
        kind = "ip" if i % 2 == 0 else "domain"
        if kind == "ip":
            value = external_ip(rng, hostile=True)
        else:
            value = f"{fake.word()}-{fake.word()}{rng.randrange(10, 99)}.{rng.choice(('xyz', 'top', 'ru', 'info', 'biz'))}"
        iocs.append(Ioc(indicator=value, type=kind, threat=rng.choice(threats),
                        source=rng.choice(("abuse.ch", "alienvault-otx", "internal-ir", "misp-community")),
                        first_seen=0.0))
    return Organization(hosts=hosts, users=users, domains=domains, iocs=iocs, backup_target=backup_target,
                        pools=pools, gateways=gateways)
