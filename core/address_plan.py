"""The address plan of the simulated organization: its internal networks and the outside ranges with their countries.

The generator builds its traffic on it (``generator.organization``), and the rule pack's sample logs are written
against it: ``nightjar rules test`` enriches them with it as the default ``networks`` reference table
(``alerts.rules_test``). Both stages read it from here, so neither imports the other.
"""

from __future__ import annotations

# Internal networks: (cidr, zone, site, country, dhcp). DHCP zones hand out leases from the dhcpd pool.
INTERNAL_NETWORKS: tuple[tuple[str, str, str, str, bool], ...] = (
    ("10.10.0.0/22", "corp", "hq", "US", True),
    ("10.10.8.0/24", "servers", "hq", "US", False),
    ("10.10.9.0/24", "mgmt", "hq", "US", False),
    ("10.10.64.0/23", "guest", "hq", "US", True),
    ("172.16.10.0/24", "dmz", "hq", "US", False),
    ("10.20.0.0/23", "corp", "london", "GB", True),
    ("10.20.8.0/24", "servers", "london", "GB", False),
    ("10.30.0.0/23", "corp", "berlin", "DE", True),
)
# External address space with a country (what a GeoIP lookup would say). Home-country ranges are where
# remote employees connect from; the rest is the wider internet.
EXTERNAL_NETWORKS: tuple[tuple[str, str], ...] = (
    ("73.15.0.0/16", "US"), ("98.207.0.0/16", "US"), ("24.6.0.0/16", "US"),
    ("81.2.64.0/18", "GB"), ("86.128.0.0/16", "GB"),
    ("91.64.0.0/16", "DE"), ("84.128.0.0/16", "DE"),
    ("185.220.100.0/22", "NL"), ("45.155.204.0/22", "RU"), ("61.177.172.0/22", "CN"),
    ("5.188.10.0/23", "RU"), ("103.145.13.0/24", "VN"), ("177.54.128.0/20", "BR"),
    ("104.16.0.0/13", "US"), ("142.250.0.0/15", "US"), ("151.101.0.0/16", "US"), ("13.32.0.0/15", "US"),
)


def network_rows() -> list[dict]:
    """The plan as rows of the ``networks`` reference table (``enrich.reference_data.SCHEMAS``)."""
    rows = [{"cidr": c, "zone": z, "site": s, "country": cc, "internal": True, "dhcp": d}
            for c, z, s, cc, d in INTERNAL_NETWORKS]
    return rows + [{"cidr": c, "zone": "internet", "site": None, "country": cc, "internal": False, "dhcp": False}
                   for c, cc in EXTERNAL_NETWORKS]
