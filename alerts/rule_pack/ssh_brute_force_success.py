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

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from alerts.python_rules import Windowed, field, python_rule
from alerts.window_aggregator import candidate_columns, candidates_from, items_of
from core.spark_session import PerContext

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
    windowed=True,
)
def rule() -> Windowed:
    """Ten or more failed SSH passwords from one source, then an accepted login from it, within 15 minutes."""
    ts = F.col("`@timestamp`")
    where = (field("event.action") == F.lit("ssh_login")) & field("source.ip").isNotNull() & ts.isNotNull()
    item = F.struct(F.unix_micros(ts).alias("t"), (field("event.outcome") == F.lit("success")).alias("ok"),
                    field("user.name").alias("user"), F.coalesce(field("host.name"), field("host.hostname")).alias("host"))

    def columns() -> tuple[Column, tuple[Column, list[Column]]]:
        tries = F.col("tries")
        failures = F.filter(tries, lambda x: ~x["ok"])
        successes = F.filter(tries, lambda x: x["ok"])
        first_failure = F.array_min(F.transform(failures, lambda x: x["t"]))
        last_success = F.array_max(F.transform(successes, lambda x: x["t"]))
        user = F.array_max(F.transform(successes, lambda x: x["user"]))
        return items_of("struct<t: bigint, ok: boolean, user: string, host: string>"), candidate_columns(
            RULE_ID, "ip", 0,
            condition=(F.size(failures) >= MIN_FAILURES) & (last_success > first_failure),
            user=user, host=F.array_max(F.transform(tries, lambda x: x["host"])),
            detail=F.format_string("%d failed passwords, then a login as %s", F.size(failures), user))

    # The expressions do not depend on the batch: built once per Spark context, not in every windowed micro-batch.
    built = PerContext(columns)

    def finish(agg: DataFrame) -> DataFrame:
        tries, candidate = built.get()
        return candidates_from(agg.select("*", tries.alias("tries")), candidate)

    return Windowed(window=WINDOW, slide=SLIDE, where=where, group_by=(field("source.ip"),), item=item,
                    finish=finish)
