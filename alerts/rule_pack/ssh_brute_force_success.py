"""SSH brute force followed by a successful login from the same source.

What it detects. Password guessing that worked: ten or more failed SSH passwords from one address and then an
accepted login from that address, within :data:`WINDOW`. That is the moment a brute force becomes an intrusion, so
it is critical while ``ssh_brute_force`` alone is high.

Why Python and not a Sigma correlation. Sigma's ``temporal_ordered`` says "A then B" but not "at least ten A then
B": as a correlation it would fire on every user who mistypes a password once and then logs in. Here it is one
windowed aggregation per source: the failure count, the time of the first failure and of the last success.

How. sshd events (``event.action == ssh_login``) grouped by ``source.ip`` in sliding windows of :data:`WINDOW`
(slide :data:`SLIDE`) on the event-time column; fires when ``failures >= MIN_FAILURES`` and a success comes after
the first failure. Entity: the source address; ``user_name`` the account that logged in.

Known blind spots: a success from a different address than the guesses (distributed guessing, then a login from
elsewhere) — ``new_country_login`` may catch that; key-based logins after leaked keys (no failures); a slow brute
force spreading fewer than ten failures over each window.

Streaming: a watermarked sliding-window aggregation in ``update`` mode; the alert builder merges the overlapping
windows into one alert per source and suppression span.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from alerts.python_rules import EVENT_TIME, conform_candidates, evidence_ids, python_rule, with_event_time

RULE_ID = "ssh_brute_force_success"
WINDOW = "15 minutes"
SLIDE = "5 minutes"
MIN_FAILURES = 10

_FAIL = "<38>Mar  9 10:00:{i:02d} bastion-01 sshd[4242]: Failed password for invalid user admin from 45.155.204.2 port 50022 ssh2"  # noqa: E501
_OK = "<38>Mar  9 10:01:30 bastion-01 sshd[4250]: Accepted password for arivera from 45.155.204.2 port 50031 ssh2"
_MISTYPE = "<38>Mar  9 10:00:{i:02d} bastion-01 sshd[4300]: Failed password for dboone from 10.10.0.20 port 50100 ssh2"
_MISTYPE_OK = "<38>Mar  9 10:00:30 bastion-01 sshd[4300]: Accepted password for dboone from 10.10.0.20 port 50100 ssh2"


def _repeat(line: str, n: int) -> list[str]:
    return [line.replace("{i:02d}", f"{i:02d}") for i in range(n)]


@python_rule(
    id=RULE_ID,
    name="SSH brute force followed by a successful login",
    severity="critical",
    tags=["attack.credential_access", "attack.t1110.001", "attack.initial_access", "attack.t1078"],
    entity_type="ip",
    samples={
        "positive": [*_repeat(_FAIL, 10), _OK],
        # nine failures then a success; ten failures and no success; a user mistyping three times
        "negative": [*_repeat(_FAIL.replace("45.155.204.2", "45.155.204.3"), 9),
                     _OK.replace("45.155.204.2", "45.155.204.3"),
                     *_repeat(_FAIL.replace("45.155.204.2", "45.155.204.4"), 12),
                     *_repeat(_MISTYPE, 3), _MISTYPE_OK],
        "entity": "45.155.204.2",
        "ingested_at": "2026-03-09T12:00:00Z",
    },
)
def detect(events: DataFrame) -> DataFrame:
    """Ten or more failed SSH passwords from one source, then an accepted login from it, within 15 minutes."""
    ev = with_event_time(events)
    ts = F.col("`@timestamp`")
    failed = F.col("event.outcome") == F.lit("failure")
    ok = F.col("event.outcome") == F.lit("success")
    ssh = ev.where((F.col("event.action") == F.lit("ssh_login")) & F.col("source.ip").isNotNull() & ts.isNotNull())
    grouped = ssh.groupBy(F.window(EVENT_TIME, WINDOW, SLIDE).alias("w"), F.col("source.ip").alias("ip")).agg(
        F.count_if(failed).alias("failures"),
        F.min(F.when(failed, ts)).alias("first_failure"),
        F.max(F.when(ok, ts)).alias("last_success"),
        F.min(ts).alias("first_seen"),
        F.max(ts).alias("last_seen"),
        F.count(F.lit(1)).alias("event_count"),
        F.collect_list(F.struct(ts.alias("ts"), F.col("event.id").alias("id"))).alias("pairs"),
        F.max(F.when(ok, F.col("user.name"))).alias("user_name"),
        F.max(F.coalesce(F.col("host.name"), F.col("host.hostname"))).alias("host_name"),
    )
    fired = grouped.where((F.col("failures") >= MIN_FAILURES) & (F.col("last_success") > F.col("first_failure")))
    return conform_candidates(fired.select(
        F.lit(RULE_ID).alias("rule_id"),
        F.struct(F.lit("ip").alias("type"), F.col("ip").alias("value")).alias("entity"),
        F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"),
        "first_seen", "last_seen", "event_count",
        evidence_ids(F.col("pairs")).alias("evidence"),
        "host_name", "user_name",
        F.format_string("%d failed passwords, then a login as %s", F.col("failures"), F.col("user_name"))
        .alias("detail"),
    ))
