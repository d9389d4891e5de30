"""Python rules: the loader and its errors, the built-in rules on their own samples, the beaconing statistics on
crafted series (jitter fires; random gaps and the backup beat do not), candidate schema, batch/stream parity,
and the rules on real generator output."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import sys
import textwrap
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from alerts.alert_schema import CANDIDATE_SCHEMA, ENTITY_TYPES, MAX_EVIDENCE, SEVERITIES
from alerts.python_rules import (
    EVENT_TIME,
    MODULE_PREFIX,
    WATERMARK_METADATA_KEY,
    PythonRule,
    PythonRuleError,
    dhcp_networks,
    enriched_events,
    load_python_rules,
    load_python_rules_dir,
    reference_data,
    run_samples,
    with_event_time,
)
from generator import formats as fmt

REPO = Path(__file__).resolve().parent.parent
RULE_PACK = REPO / "alerts" / "rule_pack"
T0 = dt.datetime(2026, 1, 5, 10, 0, tzinfo=dt.UTC).timestamp()  # a Monday, 10:00 UTC


@pytest.fixture(scope="module")
def rules() -> dict[str, PythonRule]:
    return {r.id: r for name in ("c2_beaconing", "new_country_login")
            for r in load_python_rules(RULE_PACK / f"{name}.py")}


def rows(df) -> list[dict]:
    return [r.asDict(recursive=True) for r in df.collect()]


# -- the built-in rules ------------------------------------------------------------------------------------------
def test_rule_pack_loads_both_rules_with_valid_metadata(rules):
    assert set(rules) == {"c2_beaconing", "new_country_login"}
    for rule in rules.values():
        assert rule.severity in SEVERITIES and rule.entity_type in ENTITY_TYPES
        assert rule.tags and all(t.startswith("attack.") for t in rule.tags)
        assert any(t.startswith("attack.t") for t in rule.tags)  # at least one technique id
        assert rule.description and rule.source is not None and rule.source.parent == RULE_PACK
        assert rule.samples.positive and rule.samples.negative and rule.samples.entity
    assert rules["c2_beaconing"].entity_type == "ip" and rules["new_country_login"].entity_type == "user"


@pytest.mark.parametrize(("rule_id", "host_name", "user_name"), [
    ("c2_beaconing", "ws-0042", None),  # host name from the sample's DHCPACK (DHCP attribution)
    ("new_country_login", "bastion-01", "jdoe"),
])
def test_each_rules_samples_pass(spark, rules, rule_id, host_name, user_name):
    rule = rules[rule_id]
    result = run_samples(spark, rule)
    assert result.passed, str(result)
    assert result.negative == []
    hits = [c for c in result.positive if c["entity"]["value"] == rule.samples.entity]
    assert hits and all(c["rule_id"] == rule_id and c["entity"]["type"] == rule.entity_type for c in hits)
    assert {c["host_name"] for c in hits} == {host_name}
    assert {c["user_name"] for c in hits} == {user_name}
    for c in hits:
        assert c["window_start"] <= c["first_seen"] <= c["last_seen"] <= c["window_end"]
        assert 0 < len(c["evidence"]) <= MAX_EVIDENCE and c["event_count"] >= len(c["evidence"])


def test_run_samples_reports_what_went_wrong(spark, rules):
    # The beaconing rule's lines given to the login rule: no candidate, and a line that is not a log record.
    rule = rules["new_country_login"]
    broken = PythonRule(id="broken", name="n", severity="low", tags=["attack.t1078"], entity_type="user",
                        detect=rule.detect, samples={"positive": ["<13>garbage without a header"],
                                                     "negative": list(rule.samples.negative),
                                                     "reference": dict(rule.samples.reference)})
    result = run_samples(spark, broken)
    assert not result.passed
    text = str(result)
    assert "positive line 1 does not parse" in text and "positive lines gave no candidate" in text


# -- beaconing on crafted series ---------------------------------------------------------------------------------
JITTERED, RANDOM, BACKUP, MISSED, FEW, PORT_123 = (
    "10.10.0.21", "10.10.0.22", "10.10.8.10", "10.10.0.23", "10.10.0.24", "10.10.0.25")
C2, C2_B, WEB, VAULT, NTP = "103.145.13.104", "185.220.101.9", "142.250.31.7", "13.33.74.12", "151.101.2.15"
NETWORKS = [
    {"cidr": "10.10.0.0/22", "zone": "corp", "site": "hq", "country": "US", "internal": True, "dhcp": True},
    {"cidr": "10.10.8.0/24", "zone": "servers", "site": "hq", "country": "US", "internal": True, "dhcp": False},
    *[{"cidr": c, "zone": "internet", "country": cc, "internal": False, "dhcp": False} for c, cc in (
        ("103.145.13.0/24", "VN"), ("185.220.100.0/22", "NL"), ("142.250.0.0/15", "US"), ("13.32.0.0/15", "US"),
        ("151.101.0.0/16", "US"))],
]


def conn_line(rng: random.Random, ts: float, src: str, dst: str, port: int = 443, out: int = 400,
              back: int = 300, duration: float = 0.5) -> str:
    """A Zeek conn record exactly as the generator (and Zeek) writes it."""
    return fmt.conn(ts, fmt.zeek_uid(rng), src, rng.randrange(32768, 61000), dst, port, "tcp",
                    service="ssl" if port == 443 else None, duration=duration, orig_bytes=out, resp_bytes=back)


def series(start: float, gaps: list[float]) -> list[float]:
    times = [start]
    for g in gaps:
        times.append(times[-1] + g)
    return times


def beacon_lines() -> list[str]:
    rng = random.Random(42)
    n = 30
    lines = []
    # 60-s beacon with +-20 % uniform jitter (the generator's worst case): fires.
    for t in series(T0 + 10, [60 * (1 + rng.uniform(-0.2, 0.2)) for _ in range(n - 1)]):
        lines.append(conn_line(rng, t, JITTERED, C2, out=rng.randint(180, 700), back=rng.randint(90, 500)))
    # The same count of equally small connections at random (Poisson) times, same mean gap: does not fire.
    for t in series(T0 + 20, [rng.expovariate(1 / 60) for _ in range(n - 1)]):
        lines.append(conn_line(rng, t, RANDOM, WEB, out=rng.randint(180, 700), back=rng.randint(90, 500)))
    # The backup job: a regular 5-minute beat (12 per hour) of 40-250 MB uploads: does not fire.
    for k in range(12):
        lines.append(conn_line(rng, T0 + 300 * k + rng.uniform(2, 4), BACKUP, VAULT, out=rng.randint(40_000_000, 250_000_000),
                               back=rng.randint(5000, 40000), duration=rng.uniform(30, 200)))
    # A 45-s beacon (+-15 %) to another C2 that missed two check-ins: still fires.
    times = series(T0 + 5, [45 * (1 + rng.uniform(-0.15, 0.15)) for _ in range(25)])
    for i, t in enumerate(times):
        if i not in (7, 16):
            lines.append(conn_line(rng, t, MISSED, C2_B, out=rng.randint(200, 400)))
    # A perfect beat, but only 6 connections: too few to say.
    for t in series(T0 + 30, [60.0] * 5):
        lines.append(conn_line(rng, t, FEW, C2, out=300))
    # NTP polls its servers on its own clock: excluded by port.
    for t in series(T0 + 40, [64.0] * 20):
        lines.append(fmt.conn(t, fmt.zeek_uid(rng), PORT_123, 123, NTP, 123, "udp", duration=0.02, orig_bytes=48,
                              resp_bytes=48))
    lines.sort(key=lambda line: json.loads(line)["ts"])
    return lines


@pytest.fixture(scope="module")
def beacon_events(spark):
    from ingest.file_source import lines_dataframe

    reference = {"networks": NETWORKS}
    events, unparsed = enriched_events(lines_dataframe(spark, beacon_lines()), reference_data(reference),
                                       dhcp_networks(reference))
    assert unparsed == []
    return events


@pytest.fixture(scope="module")
def beacon_candidates(rules, beacon_events):
    return rules["c2_beaconing"].detect(beacon_events).cache()


def test_jittered_beacon_fires_and_random_gaps_backup_beat_few_and_ntp_do_not(beacon_candidates):
    got = rows(beacon_candidates)
    assert {c["entity"]["value"] for c in got} == {JITTERED, MISSED}
    jittered = [c for c in got if c["entity"]["value"] == JITTERED]
    # 30 beacons over ~30 minutes: the two 1-hour windows (30-minute slide) that hold the series hold all of it.
    assert max(c["event_count"] for c in jittered) == 30
    best = max(jittered, key=lambda c: c["event_count"])
    assert re.search(rf"30 connections to {C2} every (5[5-9]|6[0-5]) s \(CV 0\.[01]", best["detail"])
    assert len(best["evidence"]) == MAX_EVIDENCE
    missed = max((c for c in got if c["entity"]["value"] == MISSED), key=lambda c: c["event_count"])
    assert missed["event_count"] == 24 and C2_B in missed["detail"]


def test_candidates_have_exactly_the_candidate_schema(rules, beacon_candidates, beacon_events):
    assert beacon_candidates.schema == CANDIDATE_SCHEMA  # names, types and nullability
    assert rules["new_country_login"].detect(beacon_events).schema == CANDIDATE_SCHEMA
    beacon_candidates.to(CANDIDATE_SCHEMA)  # what a sink checking the schema does: no error


def test_with_event_time_keeps_the_pipelines_watermark_and_adds_one_when_missing(spark, beacon_events):
    stream = spark.readStream.format("rate").load().select(F.col("timestamp").alias("@timestamp"))
    added = with_event_time(stream)
    assert added.schema[EVENT_TIME].metadata[WATERMARK_METADATA_KEY] == 600_000  # the pipeline's 10 minutes
    piped = stream.withColumn(EVENT_TIME, F.col("`@timestamp`")).withWatermark(EVENT_TIME, "2 minutes")
    assert with_event_time(piped).schema[EVENT_TIME].metadata[WATERMARK_METADATA_KEY] == 120_000
    assert WATERMARK_METADATA_KEY not in with_event_time(beacon_events).schema[EVENT_TIME].metadata  # batch


def _key(c: dict) -> tuple:
    return (c["entity"]["value"], c["window_start"], c["window_end"])


def test_beaconing_runs_on_a_stream_and_gives_the_batch_candidates(spark, rules, beacon_events, beacon_candidates,
                                                                   tmp_path):
    """Events as parquet files in time order, read as a file stream one file per micro-batch; output mode update:
    a window is re-emitted as it grows, so the newest row per (entity, window) is compared with batch."""
    source = tmp_path / "events"
    ts = F.col("`@timestamp`")
    times = sorted(r[0] for r in beacon_events.select(ts).collect())
    cuts = [times[0], times[len(times) // 3], times[2 * len(times) // 3], times[-1] + dt.timedelta(seconds=1)]
    schema = beacon_events.schema
    for i in range(3):  # three time-ordered files: three micro-batches, state carried between them
        part = beacon_events.where((ts >= cuts[i]) & (ts < cuts[i + 1]))
        part.coalesce(1).write.parquet(str(source / f"part{i}"))
    stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).option("recursiveFileLookup", "true")
              .parquet(str(source)))
    assert stream.isStreaming
    emitted: list[tuple[int, dict]] = []

    def collect(df, batch_id: int) -> None:
        emitted.extend((batch_id, r) for r in rows(df))

    query = (rules["c2_beaconing"].detect(stream).writeStream.outputMode("update").foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    assert query.lastProgress is not None and len({b for b, _ in emitted}) >= 2  # it did grow over batches
    latest: dict[tuple, dict] = {}
    for _batch, c in sorted(emitted, key=lambda e: e[0]):
        latest[_key(c)] = c
    batch = {_key(c): c for c in rows(beacon_candidates)}
    assert latest == batch


# -- the loader --------------------------------------------------------------------------------------------------
GOOD = '''
from alerts.python_rules import python_rule

VERSION = "{version}"

@python_rule(id="{rule_id}", name="Test rule", severity="{severity}", tags=["attack.t1071"], entity_type="ip",
             samples={{"positive": ["x"], "negative": ["y"]}})
def detect(events):
    """Returns its version, so that a reload can be seen."""
    return VERSION
'''


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_a_rule_file_loads_and_a_changed_file_reloads_with_its_new_code(tmp_path):
    path = write(tmp_path, "my_rule.py", GOOD.format(version="v1", rule_id="my_rule", severity="low"))
    (rule,) = load_python_rules(path)
    assert (rule.id, rule.severity, rule.detect(None), rule(None)) == ("my_rule", "low", "v1", "v1")
    assert rule.description == "Returns its version, so that a reload can be seen."
    # Same size, same second: a bytecode cache keyed on mtime and size would serve the old code.
    path.write_text(textwrap.dedent(GOOD.format(version="v2", rule_id="my_rule", severity="low")))
    (again,) = load_python_rules(path)
    assert again.detect(None) == "v2" and rule.detect(None) == "v1"  # the old rule object keeps its code
    path.write_text(textwrap.dedent(GOOD.format(version="v3", rule_id="my_rule", severity="high")))
    assert load_python_rules(path)[0].severity == "high"
    assert not [m for m in sys.modules if m.startswith(MODULE_PREFIX)]  # nothing left behind
    assert not (tmp_path / "__pycache__").exists()


BAD_FILES = {
    "syntax": ("def detect(events)\n    return events\n", ["line 1: SyntaxError"]),
    "bad_severity": (GOOD.format(version="v", rule_id="loud", severity="urgent"),
                     ["rule 'loud'", "severity 'urgent' is not one of low, medium, high, critical"]),
    "import_error": ("from alerts.python_rules import python_rule\nx = 1\nundefined_name + 1\n",
                     ["line 3: NameError while importing", "undefined_name"]),
    "missing_id": ('from alerts.python_rules import python_rule\n'
                   '@python_rule(id="", name="n", severity="low", tags=[], entity_type="ip",\n'
                   '             samples={"positive": ["x"], "negative": ["y"]})\n'
                   'def detect(events):\n    return events\n', ["missing id"]),
    "not_callable": ('from alerts.python_rules import PythonRule\n'
                     'RULE = PythonRule(id="nc", name="n", severity="low", tags=[], entity_type="ip", detect=42,\n'
                     '                  samples={"positive": ["x"], "negative": ["y"]})\n',
                     ["rule 'nc': line 2: detect is not callable"]),
    "bad_entity": (GOOD.format(version="v", rule_id="ent", severity="low").replace('"ip"', '"laptop"'),
                   ["rule 'ent'", "entity_type 'laptop'"]),
    "no_samples": (GOOD.format(version="v", rule_id="ns", severity="low").replace('"positive": ["x"], ', ""),
                   ["rule 'ns'", "no positive lines"]),
    "bad_reference": (GOOD.format(version="v", rule_id="ref", severity="low").replace(
        '"negative": ["y"]', '"negative": ["y"], "reference": {"users": [{"name": "a", "colour": "red"}]}'),
        ["rule 'ref'", "unknown column(s) colour"]),
    "two_args": (GOOD.format(version="v", rule_id="args", severity="low").replace("def detect(events)",
                                                                                   "def detect(events, other)"),
                 ["rule 'args'", "detect must take exactly one argument"]),
    "no_rule": ("X = 1\n", ["defines no rule"]),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_loader_errors_name_the_file_the_rule_and_the_problem_in_one_line(tmp_path, case):
    text, fragments = BAD_FILES[case]
    path = write(tmp_path, f"{case}.py", text)
    with pytest.raises(PythonRuleError) as info:
        load_python_rules(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in message, message
    assert not [m for m in sys.modules if m.startswith(MODULE_PREFIX)]


def test_a_rule_imported_from_another_rule_file_belongs_to_that_file(tmp_path, rules):
    path = write(tmp_path, "importer.py", GOOD.format(version="v", rule_id="own", severity="low")
                 + "from alerts.rule_pack.new_country_login import rule as imported  # noqa: F401\n")
    assert [r.id for r in load_python_rules(path)] == ["own"]


def test_duplicate_ids_across_files_are_refused(tmp_path):
    for name in ("a.py", "b.py"):
        write(tmp_path, name, GOOD.format(version="v", rule_id="same", severity="low"))
    write(tmp_path, "_helpers.py", "raise RuntimeError('helpers are not rule files')\n")
    with pytest.raises(PythonRuleError, match=r"b\.py: rule 'same': id already defined in .*a\.py"):
        load_python_rules_dir(tmp_path)


# -- on the generator's output -----------------------------------------------------------------------------------
def test_on_generated_logs_the_beaconing_host_is_found_and_the_backup_host_is_not(spark, rules, tmp_path):
    """Three simulated night hours (01:00-04:00 UTC: the nightly backup beats every 5 minutes on top of the
    backup_beat hard negative) of a 120-host organization with a c2_beaconing incident, written by the generator
    to files, parsed, attributed and enriched with the generator's own reference tables."""
    from generator.command import generate
    from generator.engine import Options
    from generator.reference_tables import write_files
    from generator.sinks import FileSink
    from ingest.file_source import read_files

    out = tmp_path / "logs"
    opts = Options(seed=5, hosts=120, users=60, start=T0 - 9 * 3600, duration=3 * 3600,
                   scenarios={"c2_beaconing": 1, "backup_beat": 1})
    sink = FileSink(out)
    sim, *_ = generate(opts, sink)
    sink.close()
    attacks, negatives, _cut = sim.ground_truth()
    write_files(out, sim.org, opts.start, attacks, negatives)
    (c2,) = [a for a in attacks if a["scenario"] == "c2_beaconing"]
    (backup,) = [n for n in negatives if n["scenario"] == "backup_beat"]

    reference = {name: [json.loads(line) for line in (out / f"{name}.jsonl").open()]
                 for name in ("assets", "users", "networks", "iocs")}
    events, unparsed = enriched_events(read_files(spark, [out / "syslog.log", out / "zeek.log"]),
                                       reference_data(reference), dhcp_networks(reference))
    assert unparsed == []
    found = rows(rules["c2_beaconing"].detect(events))
    assert {c["entity"]["value"] for c in found} == {c2["entity"]["value"]}  # no false positive either
    start = dt.datetime.fromisoformat(c2["start"].replace("Z", "+00:00")).replace(tzinfo=None)
    end = dt.datetime.fromisoformat(c2["end"].replace("Z", "+00:00")).replace(tzinfo=None)
    for c in found:
        assert c["host_name"] == c2["host_name"]
        assert c["window_start"] < end and c["window_end"] > start
        assert c2["details"]["destination"] in c["detail"]
    assert backup["entity"]["value"] not in {c["entity"]["value"] for c in found}
    assert rows(rules["new_country_login"].detect(events)) == []  # remote workers log in from home
