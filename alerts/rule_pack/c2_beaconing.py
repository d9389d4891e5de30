"""Periodic C2 beaconing: an internal host making small outbound connections to one outside address at a
regular interval, with or without jitter.

What it detects. Implants (Cobalt Strike, Sliver, Mythic, commodity RATs) check in with their controller on a
timer: ``sleep`` seconds plus a random jitter, each check-in a small TLS/HTTP request. Over an hour that is a
train of connections from one host to one address whose gaps are nearly equal. People do not browse like that:
their connections come in bursts (a page, then its resources) separated by irregular pauses.

How. Zeek ``conn`` records going out (``network.direction == outbound``; when the ``networks`` table knows
neither end, a private source and a public destination) with at most :data:`MAX_BYTES_OUT` bytes sent, over
sliding windows of :data:`WINDOW` every :data:`SLIDE` of ``_event_time``, grouped by source host. Per
destination, Spark SQL higher-order functions (no Python UDF) sort the ``@timestamp`` values and compute the
inter-arrival gaps; a destination beacons when there are at least :data:`MIN_CONNECTIONS` connections, the
mean gap is at least :data:`MIN_MEAN_INTERVAL_S` and the gaps' coefficient of variation (std / mean) is at most
:data:`MAX_INTERVAL_CV`. One candidate per (host, window) lists every beaconed destination, so the alert id
(rule, entity, window) stays unique.

Thresholds and why:

* ``MIN_CONNECTIONS = 10`` — a 5-minute beacon gives 11–12 per hour, a 60-s one 60; fewer points make the
  gap statistics meaningless.
* ``MAX_INTERVAL_CV = 0.35`` — uniform jitter of ±j gives CV j/√3: ±20 % (the generator) ≈ 0.12, ±50 % ≈ 0.29,
  Cobalt Strike's "reduce sleep by up to 50 %" ≈ 0.19; a missed or extra check-in adds ≈ 0.1. Random
  (Poisson) traffic has CV ≈ 1, uniformly random gaps ≈ 0.58.
* ``MIN_MEAN_INTERVAL_S = 4`` — below that a "series" is a burst or a stream (keep-alives, downloads), not a
  timer; short generator runs squeeze beacons down to a 5-s period, real implants rarely go below that.
* ``MAX_BYTES_OUT = 32 KiB`` per connection — a check-in is small. This is what separates the backup job (a
  hard negative: a perfectly regular 5-minute beat, but 40–250 MB uploaded per connection) from a beacon,
  and it bounds the state: bulk connections are dropped before the aggregation.
* ports 53 and 123 are left out: DNS and NTP clients poll on their own clocks (DNS tunnelling has its own
  rule); the resolver and NTP servers are usually internal anyway.
* ``WINDOW = 1 hour``, ``SLIDE = 30 minutes`` — any burst of up to 30 minutes lies wholly inside one window,
  and each connection is in two windows' state rather than six (a 10-minute slide); a long-running beacon
  raises one candidate per window, which the alert builder's suppression folds together.

Streaming. Windowed aggregation on the watermarked ``_event_time``: state is bounded by the watermark (window +
delay). Written for output mode ``update``: a host's candidate appears in the first micro-batch in which its
window meets the thresholds and is re-emitted, larger, as the window grows (same alert id); ``append`` also
works but reports a window only after the watermark passed its end (an hour or more later). Gaps are measured
on ``@timestamp`` (the log's own time), whatever the caller chose as ``_event_time``. State per (host, window):
one small struct per qualifying connection (time, event id, destination, bytes, domain).

Known blind spots: beacons slower than about one per 6 minutes (fewer than 10 in the hour window — a second
instance with a day window would catch them); jitter beyond ±60 %; beacons that rotate destination addresses
(CDN fronting, fast flux) — each address alone is too sparse; C2 over DNS or over an allowed proxy whose Zeek
sees only the proxy (then the proxy is the destination, mixed with all other traffic); large check-ins. Benign
software with a timer (telemetry agents, update checks, chat presence, web apps polling an API) looks exactly
like this and fires: suppress by destination once reviewed. A DHCP address that changes hands within a window
mixes two hosts (the candidate names the latest holder). Only Zeek ``conn`` is read (``ssl``/``http`` records
of the same connections would count twice).
"""

from __future__ import annotations

import datetime as dt
import json

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from alerts.alert_schema import MAX_EVIDENCE
from alerts.python_rules import Windowed, field, python_rule, with_event_time
from alerts.window_aggregator import candidate_columns, candidates_from, items_of, run_windowed
from core.spark_session import PerContext
from enrich.dhcp_sessions import is_internal

RULE_ID = "c2_beaconing"
WINDOW = "1 hour"
SLIDE = "30 minutes"
MIN_CONNECTIONS = 10
MAX_INTERVAL_CV = 0.35
MIN_MEAN_INTERVAL_S = 4.0
MAX_BYTES_OUT = 32 * 1024
EXCLUDED_PORTS = (53, 123)


def outbound(events_direction: Column, source_ip: Column, destination_ip: Column) -> Column:
    """Internal -> outside: by the ``networks`` table, or by address class when the table knows neither end."""
    return ((events_direction == F.lit("outbound"))
            | ((events_direction == F.lit("external")) & is_internal(source_ip) & ~is_internal(destination_ip)))


def _destination_stats(conns: Column, dst: Column) -> Column:
    """Gap statistics of the connections in ``conns`` (``array<struct<ts, id, dst, out, domain>>``) to ``dst``."""
    mine = F.filter(conns, lambda c: c["dst"] == dst)
    times = F.array_sort(F.transform(mine, lambda c: c["ts"]))  # microseconds
    init = F.struct(F.lit(None).cast("bigint").alias("prev"), F.lit(0.0).alias("s"), F.lit(0.0).alias("ss"))

    def step(acc: Column, t: Column) -> Column:
        gap = F.coalesce((t - acc["prev"]) / F.lit(1e6), F.lit(0.0))  # the first time has no gap: adds 0
        return F.struct(t.alias("prev"), (acc["s"] + gap).alias("s"), (acc["ss"] + gap * gap).alias("ss"))

    k = F.size(times) - 1  # number of gaps

    def finish(acc: Column) -> Column:
        # try_divide: ANSI mode would stop the stream on a destination with one connection (no gap), and a
        # filter's conditions are not guaranteed to be evaluated in the order they are written.
        mean = F.try_divide(acc["s"], k)
        std = F.sqrt(F.greatest(F.try_divide(acc["ss"], k) - mean * mean, F.lit(0.0)))
        return F.struct(mean.alias("mean"), F.when(mean > 0, F.try_divide(std, mean)).alias("cv"))

    stats = F.aggregate(times, init, step, finish)
    return F.struct(
        dst.alias("dst"),
        F.size(times).alias("n"),
        stats["mean"].alias("mean"),
        stats["cv"].alias("cv"),
        F.try_divide(F.aggregate(mine, F.lit(0).cast("bigint"), lambda a, c: a + c["out"]), F.size(times)).alias("out"),
        F.array_max(F.transform(mine, lambda c: c["domain"])).alias("domain"),
        F.element_at(times, 1).alias("first"),
        F.element_at(times, -1).alias("last"),
        F.transform(mine, lambda c: F.struct(c["ts"].alias("ts"), c["id"].alias("id"))).alias("evidence"),
    )


_ITEM = "struct<ts: bigint, id: string, dst: string, out: bigint, domain: string, host: string>"


def beaconing(*, window: str = WINDOW, slide: str = SLIDE, min_connections: int = MIN_CONNECTIONS,
              max_cv: float = MAX_INTERVAL_CV, min_mean_interval_s: float = MIN_MEAN_INTERVAL_S,
              max_bytes_out: int = MAX_BYTES_OUT, rule_id: str = RULE_ID) -> Windowed:
    """The rule with explicit thresholds, as a windowed spec (a variant, e.g. a day window for slow beacons, is
    one call)."""
    ts = F.col("`@timestamp`")
    src, dst = field("source.ip"), field("destination.ip")
    out_bytes = F.coalesce(field("source.bytes"), F.lit(0).cast("bigint"))  # S0 attempts to a dead C2 count too
    where = ((field("event.dataset") == F.lit("zeek.conn")) & ts.isNotNull() & src.isNotNull() & dst.isNotNull()
             & outbound(field("network.direction"), src, dst)
             & (out_bytes <= F.lit(max_bytes_out))
             & ~F.coalesce(field("destination.port").isin(*EXCLUDED_PORTS), F.lit(False)))
    item = F.struct(F.unix_micros(ts).alias("ts"), field("event.id").alias("id"), dst.alias("dst"),
                    out_bytes.alias("out"), field("destination.domain").alias("domain"),
                    field("host.name").alias("host"))

    def columns() -> tuple[Column, Column, tuple[Column, list[Column]]]:
        conns = F.col("c")
        per_dst = F.transform(F.array_distinct(F.transform(conns, lambda c: c["dst"])),
                              lambda d: _destination_stats(conns, d))
        beacons = F.filter(per_dst, lambda p: (p["n"] >= F.lit(min_connections))
                           & (p["mean"] >= F.lit(min_mean_interval_s)) & (p["cv"] <= F.lit(max_cv)))
        describe = F.transform(F.col("b"), lambda p: F.format_string(
            "%d connections to %s%s every %.0f s (CV %.2f), %.0f B out on average", p["n"], p["dst"],
            F.coalesce(F.concat(F.lit(" ("), p["domain"], F.lit(")")), F.lit("")), p["mean"], p["cv"], p["out"]))
        # the latest holder of the address (a DHCP address may change hands within the window)
        latest_host = F.try_element_at(F.array_sort(F.transform(F.filter("c", lambda c: c["host"].isNotNull()),
                                                            lambda c: F.struct(-c["ts"], c["host"]))), F.lit(1))
        return items_of(_ITEM), beacons, candidate_columns(
            rule_id, "ip", 0,
            condition=F.lit(True),
            first=F.timestamp_micros(F.array_min(F.transform("b", lambda p: p["first"]))),
            last=F.timestamp_micros(F.array_max(F.transform("b", lambda p: p["last"]))),
            count=F.aggregate("b", F.lit(0).cast("bigint"), lambda a, p: a + p["n"]),
            evidence_ids=F.transform(F.slice(F.array_sort(F.flatten(F.transform("b", lambda p: p["evidence"]))), 1,
                                             MAX_EVIDENCE), lambda e: e["id"]),
            host=latest_host["host"], user=F.lit(None).cast("string"),
            detail=F.concat(F.lit("beaconing: "), F.array_join(describe, "; ")),
        )

    # The expressions do not depend on the batch: built once per Spark context, not in every windowed micro-batch
    # (tens of lambdas, each a few Py4J round trips: 0.1 s of a batch; docs/performance.md, "Windowed query").
    built = PerContext(columns)

    def finish(agg: DataFrame) -> DataFrame:
        items, beacons, candidate = built.get()
        # Keep the windows with a beacon by an explode of a one-element array, not a filter: Spark pushes a filter
        # below the projection it reads and substitutes ``b`` and ``c`` into it, so every lambda's reference to
        # ``c`` parsed the window's JSON items again (per destination, per statistic): 33 ms per window, 41 of
        # the 73 s that all windowed rules' finish took over 50k events (docs/performance.md, "Windowed query").
        with_b = agg.select("*", items.alias("c")).select("*", beacons.alias("b"))
        found = with_b.select("*", F.explode(F.when(F.size("b") > 0, F.array(F.lit(True)))).alias("_beacon"))
        return candidates_from(found, candidate)

    return Windowed(window=window, slide=slide, where=where, group_by=(src,), item=item, finish=finish)


def detect_beaconing(events: DataFrame, **thresholds) -> DataFrame:
    """``events -> candidates`` for a variant of the rule (thresholds as in :func:`beaconing`)."""
    spec = beaconing(**thresholds)
    return run_windowed(with_event_time(events), [spec.to_rule(thresholds.get("rule_id", RULE_ID))])


# -- samples: Zeek JSON lines as the sensor writes them (the generator's formats) ------------------------------
_T0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC).timestamp()
_HOST_IP, _C2_IP, _C2_NAME = "10.10.0.57", "103.145.13.104", "foqzjwbp.online"
_BACKUP_IP, _VAULT_IP, _VAULT_NAME = "10.10.8.10", "13.33.74.12", "vault.offsite-backup.example.net"
_WEB_IP, _WEB_NAME = "142.250.31.7", "www.example-news.com"


def _conn(ts: float, n: int, src: str, dst: str, dport: int, out: int, back: int, duration: float,
          service: str | None = "ssl") -> str:
    record = {"_path": "conn", "ts": round(ts, 6), "uid": f"CbX{n:04d}q2Lk7uYwPZm", "id.orig_h": src,
              "id.orig_p": 49152 + n, "id.resp_h": dst, "id.resp_p": dport, "proto": "tcp",
              **({"service": service} if service else {}), "duration": duration, "orig_bytes": out,
              "resp_bytes": back, "conn_state": "SF", "local_orig": True, "local_resp": False, "missed_bytes": 0,
              "history": "ShADadFf", "orig_pkts": out // 1400 + 3, "orig_ip_bytes": out + (out // 1400 + 3) * 52,
              "resp_pkts": back // 1400 + 2, "resp_ip_bytes": back + (back // 1400 + 2) * 52}
    return json.dumps(record, separators=(",", ":"))


def _dns(ts: float, n: int, src: str, name: str, answer: str) -> str:
    return json.dumps({"_path": "dns", "ts": round(ts, 6), "uid": f"CdN{n:04d}r8Hq1sVeLTx", "id.orig_h": src,
                       "id.orig_p": 53000 + n, "id.resp_h": "10.10.8.53", "id.resp_p": 53, "proto": "udp",
                       "trans_id": 4000 + n, "rtt": 0.0021, "query": name, "qclass": 1, "qclass_name": "C_INTERNET",
                       "qtype": 1, "qtype_name": "A", "rcode": 0, "rcode_name": "NOERROR", "AA": False, "TC": False,
                       "RD": True, "RA": True, "Z": 0, "answers": [answer], "TTLs": [300.0], "rejected": False},
                      separators=(",", ":"))


# A 60-s beacon with ±10 % jitter (seconds off the period, fixed so the sample is reproducible).
_JITTER = (3.1, -4.7, 5.2, -1.9, 0.8, -5.6, 2.4, 4.9, -3.3, 1.7, -0.6, 5.8, -2.2, 3.6)
_beacon_times = [_T0 + 20.0]
for _j in _JITTER:
    _beacon_times.append(_beacon_times[-1] + 60.0 + _j)
# The same host's browsing: as many small connections to one site, at irregular (bursty) times.
_BROWSE_GAPS = (0.4, 212.0, 0.2, 31.0, 540.0, 0.3, 77.0, 12.0, 403.0, 0.5, 96.0, 260.0, 0.2, 8.0)
_browse_times = [_T0 + 35.0]
for _g in _BROWSE_GAPS:
    _browse_times.append(_browse_times[-1] + _g)

SAMPLE_POSITIVE = [
    # The workstation's DHCP lease (gives the connections their host name), the implant's lookup, its check-ins.
    f"<30>Jan  5 09:58:02 dhcp-01 dhcpd[1712]: DHCPACK on {_HOST_IP} to 3c:52:82:1a:7f:09 (ws-0042) via 10.10.0.1",
    _dns(_T0 + 19.9, 1, _HOST_IP, _C2_NAME, _C2_IP),
    *[_conn(t, i, _HOST_IP, _C2_IP, 443, 212 + 37 * (i % 5), 143 + 29 * (i % 4), 0.41 + 0.07 * (i % 3))
      for i, t in enumerate(_beacon_times)],
]
SAMPLE_NEGATIVE = [
    f"<30>Jan  5 09:58:02 dhcp-01 dhcpd[1712]: DHCPACK on {_HOST_IP} to 3c:52:82:1a:7f:09 (ws-0042) via 10.10.0.1",
    # Browsing: 15 small connections to one site, same count as the beacon, irregular gaps.
    _dns(_T0 + 34.9, 2, _HOST_IP, _WEB_NAME, _WEB_IP),
    *[_conn(t, 100 + i, _HOST_IP, _WEB_IP, 443, 640 + 53 * (i % 7), 18_000 + 911 * i, 0.9 + 0.3 * (i % 4))
      for i, t in enumerate(_browse_times)],
    # The backup job: a perfectly regular 5-minute beat to the off-site vault, 40-250 MB per upload.
    *[_conn(_T0 + 300.0 * k + 3.2, 200 + k, _BACKUP_IP, _VAULT_IP, 443, 40_000_000 + 17_500_000 * k,
            5_000 + 2_700 * k, 31.0 + 13.0 * k) for k in range(12)],
]
SAMPLE_REFERENCE = {
    "networks": [
        {"cidr": "10.10.0.0/22", "zone": "corp", "site": "hq", "country": "US", "internal": True, "dhcp": True},
        {"cidr": "10.10.8.0/24", "zone": "servers", "site": "hq", "country": "US", "internal": True, "dhcp": False},
        {"cidr": "103.145.13.0/24", "zone": "internet", "country": "VN", "internal": False, "dhcp": False},
        {"cidr": "13.32.0.0/15", "zone": "internet", "country": "US", "internal": False, "dhcp": False},
        {"cidr": "142.250.0.0/15", "zone": "internet", "country": "US", "internal": False, "dhcp": False},
    ],
    "assets": [
        {"host": "ws-0042", "mac": "3c:52:82:1a:7f:09", "owner": "jdoe", "zone": "corp", "site": "hq",
         "role": "workstation", "criticality": "low", "authorized_scanner": False, "dhcp": True},
        {"host": "backup-01", "ip": _BACKUP_IP, "owner": "it-ops", "zone": "servers", "site": "hq", "role": "backup",
         "criticality": "high", "authorized_scanner": False, "dhcp": False},
    ],
}


@python_rule(
    id=RULE_ID,
    name="Periodic C2 beaconing",
    severity="high",
    tags=["attack.command_and_control", "attack.t1071", "attack.t1071.001", "attack.t1573"],
    entity_type="ip",
    samples={"positive": SAMPLE_POSITIVE, "negative": SAMPLE_NEGATIVE, "reference": SAMPLE_REFERENCE,
             "entity": _HOST_IP},
    windowed=True,
    description="An internal host makes small outbound connections to one outside address at a regular interval "
                f"(>= {MIN_CONNECTIONS} in {WINDOW}, gap CV <= {MAX_INTERVAL_CV}, <= {MAX_BYTES_OUT // 1024} KiB "
                "sent each): a C2 implant checking in.",
)
def rule() -> Windowed:
    return beaconing()
