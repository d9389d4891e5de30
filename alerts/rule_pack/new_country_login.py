"""Login from a new country: a successful login by a known user from an outside address in a country other
than the user's home country.

What it detects. Stolen credentials (phished passwords, leaked keys, a brute force that finally worked) used
from the attacker's infrastructure: the account is valid, so every authentication rule is quiet, but the login
comes from somewhere the user does not live.

How. Authentication events (``event.category`` contains ``authentication``) with ``event.outcome == success``
and a ``user.name`` — sshd ``Accepted password/publickey/...`` lines — whose source address is public (not
RFC 1918 / unique-local) and geolocated by the ``networks`` table (``source.geo.country_iso_code``), compared
with the user's home country from the ``users`` table (``nightjar.user.country``). One candidate per user and
:data:`WINDOW` (tumbling, on ``_event_time``), so several logins in the hour are one alert.

Why the users table and not "a country never seen for this user". The generator's remote workers log in from
their home country (``users.country``), and its ``new_country_login`` scenario logs in from BR/VN/RU/NL/CN —
never a home country — so both readings agree on its data. On real data the reference table is the sounder
baseline: it is there for the first login of every user (a learned history makes every user's first login, and
everything after a state reset, "new"), costs no per-user state in the stream (only the hour window's), and is
what an analyst can correct. A learned per-user country list would be a refinement on top (travel).

Internal addresses never count: a login from the office network is not a login "from" the site's country, and
VPN pools are internal. Users not in ``users`` (or without a country) are skipped: there is no baseline — a
successful login by an unknown account is ``ssh_brute_force_success``'s and the Sigma rules' business.

Known blind spots: an attacker using a proxy/VPN exit in the victim's home country; travelling or relocated
users fire until ``users`` is updated; IPv6 sources (the ``networks`` table is matched for IPv4 only) and
addresses in no ``networks`` range have no country and are skipped; logins that leave no success line (web
SSO, VPN concentrators not logging to syslog); user names that differ in case from the ``users`` table.

Streaming: stateless filter, then a watermarked tumbling-window count; output mode ``update`` (the candidate
appears in the micro-batch of the first foreign login and grows with later ones in the same hour).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from alerts.python_rules import Windowed, field, python_rule, with_event_time
from alerts.window_aggregator import GROUP, candidate_columns, candidates_from, items_of, run_windowed
from core.spark_session import PerContext
from enrich.dhcp_sessions import is_internal

RULE_ID = "new_country_login"
WINDOW = "1 hour"


def new_country_logins(*, window: str = WINDOW) -> Windowed:
    """The rule as a windowed spec: successful logins from abroad, per user and tumbling ``window``."""
    ts = F.col("`@timestamp`")
    user = field("user.name")
    source_ip = field("source.ip")
    country = F.upper(field("source.geo.country_iso_code"))
    home = F.upper(field("nightjar.user.country"))
    where = (F.coalesce(F.array_contains(field("event.category"), F.lit("authentication")), F.lit(False))
             & (field("event.outcome") == F.lit("success"))
             & user.isNotNull() & ts.isNotNull() & source_ip.isNotNull() & ~is_internal(source_ip)
             & country.isNotNull() & home.isNotNull() & (country != home))
    item = F.struct(country.alias("country"), source_ip.alias("ip"), home.alias("home"))

    def columns() -> tuple[Column, list[Column]]:
        logins = items_of("struct<country: string, ip: string, home: string>")
        countries = F.array_join(F.array_sort(F.array_distinct(F.transform(logins, lambda x: x["country"]))), ", ")
        ips = F.array_join(F.array_sort(F.array_distinct(F.transform(logins, lambda x: x["ip"]))), ", ")
        home_country = F.array_max(F.transform(logins, lambda x: x["home"]))
        return candidate_columns(RULE_ID, "user", 0, condition=F.lit(True), user=F.element_at(F.col(GROUP), 1),
                                 detail=F.format_string("%d successful login(s) from %s (%s); home country %s",
                                                        F.col("n"), countries, ips, home_country))

    # The expressions do not depend on the batch: built once per Spark context, not in every windowed micro-batch.
    built = PerContext(columns)

    def finish(agg: DataFrame) -> DataFrame:
        return candidates_from(agg, built.get())

    return Windowed(window=window, where=where, group_by=(user,), item=item, finish=finish)


def detect_new_country_login(events: DataFrame, *, window: str = WINDOW) -> DataFrame:
    return run_windowed(with_event_time(events), [new_country_logins(window=window).to_rule(RULE_ID)])


# -- samples: sshd lines as the bastion's rsyslog forwards them (RFC 5424 and RFC 3164, the generator's forms) --
FP = "SHA256:Jr1k0aW7x3V9yq8m2TQe5bHf4LpZs6uNcY0dKgR1oEw"
SAMPLE_POSITIVE = [
    # jdoe (home US) works from home as usual ...
    "<38>1 2026-01-05T08:12:40.118Z bastion-01 sshd 31877 - - Accepted publickey for jdoe from 73.15.22.9 "
    f"port 51234 ssh2: ED25519 {FP}",
    "<86>1 2026-01-05T08:12:40.128Z bastion-01 sshd 31877 - - pam_unix(sshd:session): session opened for user "
    "jdoe(uid=1042) by (uid=0)",
    "<38>1 2026-01-05T08:19:02.551Z bastion-01 sshd 31877 - - Disconnected from user jdoe 73.15.22.9 port 51234",
    # ... then the same account logs in from Brazil.
    "<38>1 2026-01-05T09:47:13.904Z bastion-01 sshd 40211 - - Accepted password for jdoe from 177.54.130.20 "
    "port 60112 ssh2",
    "<86>1 2026-01-05T09:47:13.914Z bastion-01 sshd 40211 - - pam_unix(sshd:session): session opened for user "
    "jdoe(uid=1042) by (uid=0)",
]
SAMPLE_NEGATIVE = [
    # Home logins: jdoe from the US (RFC 5424), asmith from Great Britain (RFC 3164).
    "<38>1 2026-01-05T08:12:40.118Z bastion-01 sshd 31877 - - Accepted publickey for jdoe from 73.15.22.9 "
    f"port 51234 ssh2: ED25519 {FP}",
    "<38>Jan  5 09:02:11 bastion-01 sshd[5120]: Accepted password for asmith from 81.2.70.14 port 40022 ssh2",
    # An admin whose home is Germany logs in from a London office workstation: internal, not a country.
    "<38>Jan  5 10:30:55 db-hq-02 sshd[7781]: Accepted publickey for mkowalski from 10.20.0.31 port 53318 ssh2: "
    f"ED25519 {FP}",
    # A failed guess at jdoe's password from Russia: not a login (brute-force rules cover it).
    "<38>1 2026-01-05T11:05:09.300Z bastion-01 sshd 41999 - - Failed password for jdoe from 45.155.204.7 "
    "port 38811 ssh2",
]
SAMPLE_REFERENCE = {
    "users": [
        {"name": "jdoe", "full_name": "John Doe", "department": "Sales", "is_admin": False, "site": "hq",
         "country": "US", "uid": 1042},
        {"name": "asmith", "full_name": "Alice Smith", "department": "Finance", "is_admin": False, "site": "london",
         "country": "GB", "uid": 1043},
        {"name": "mkowalski", "full_name": "Marta Kowalski", "department": "IT", "is_admin": True, "site": "berlin",
         "country": "DE", "uid": 1001},
    ],
    "networks": [
        {"cidr": "10.20.0.0/23", "zone": "corp", "site": "london", "country": "GB", "internal": True, "dhcp": True},
        {"cidr": "172.16.10.0/24", "zone": "dmz", "site": "hq", "country": "US", "internal": True, "dhcp": False},
        {"cidr": "73.15.0.0/16", "zone": "internet", "country": "US", "internal": False},
        {"cidr": "81.2.64.0/18", "zone": "internet", "country": "GB", "internal": False},
        {"cidr": "177.54.128.0/20", "zone": "internet", "country": "BR", "internal": False},
        {"cidr": "45.155.204.0/22", "zone": "internet", "country": "RU", "internal": False},
    ],
}


@python_rule(
    id=RULE_ID,
    name="Successful login from a country other than the user's home",
    severity="medium",
    tags=["attack.initial_access", "attack.persistence", "attack.t1078", "attack.t1133"],
    entity_type="user",
    samples={"positive": SAMPLE_POSITIVE, "negative": SAMPLE_NEGATIVE, "reference": SAMPLE_REFERENCE,
             "entity": "jdoe"},
    windowed=True,
    description="A known user logs in successfully from a public address geolocated outside their home country "
                "(users.country): likely stolen credentials.",
)
def rule() -> Windowed:
    return new_country_logins()
