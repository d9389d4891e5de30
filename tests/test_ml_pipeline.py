"""ML over generated events, with Spark: feature parity between batch and stream, the stealth scenarios (the rule
pack stays silent, the models find them), and quality figures at reduced scale on a fixed seed.

Scale (the machine is two shared cores): an organization of 20 hosts and 10 users; training history 6 simulated
hours of benign activity (Monday 00:00–06:00 UTC), evaluation 5 hours of a fresh seed of the same organization
(Tuesday 00:00–05:00) with one incident of each stealth scenario.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pandas as pd
import pytest

from alerts.ml.features import FEATURE_COLUMNS, entity_features, shannon_entropy
from generator.command import generate_files
from generator.stealth_scenarios import STEALTH_NAMES

# Parsing the generated logs through the pipeline's transformations takes minutes on the shared two-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.timeout(2400)]

MONDAY = dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()
HOSTS, USERS = 20, 10
TRAIN_H, EVAL_H = 6, 5
EVAL_SEED = 2


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ml")
    generate_files(root / "train", seed=1, hosts=HOSTS, users=USERS, start=MONDAY, duration=TRAIN_H * 3600,
                   scenarios={})
    attacks, _n = generate_files(root / "eval", seed=EVAL_SEED, org_seed=1, hosts=HOSTS, users=USERS,
                                 start=MONDAY + 86400, duration=EVAL_H * 3600, scenarios={s: 1 for s in STEALTH_NAMES})
    assert sorted(a["scenario"] for a in attacks) == sorted(STEALTH_NAMES)  # every scenario ran on this seed
    return {"train": root / "train", "eval": root / "eval", "root": root}


@pytest.fixture(scope="module")
def events(spark, generated):
    from alerts.ml.history import events_from_generated

    train = events_from_generated(spark, generated["train"]).cache()
    evaluation = events_from_generated(spark, generated["eval"]).cache()
    yield {"train": train, "eval": evaluation}
    train.unpersist()
    evaluation.unpersist()


@pytest.fixture(scope="module")
def trained(events, generated):
    """Both models fitted on the training history's features, exactly as `nightjar ml train` fits them."""
    from pyspark.sql import functions as F

    from alerts.ml import domain_model
    from alerts.ml.ml_command import fit_behaviour

    features = entity_features(events["train"]).toPandas()
    behaviour, metrics = fit_behaviour(features)
    names = [r[0] for r in events["train"].where(F.col("event.dataset") == "zeek.dns")
             .select(F.lower(F.col("dns.question.name"))).distinct().collect() if r[0]]
    pipeline, threshold, _ = domain_model.fit(names)
    return {"behaviour": behaviour, "domain": {"pipeline": pipeline, "threshold": threshold}, "metrics": metrics}


def _entropy(text: str) -> float:
    n = len(text)
    return -sum(text.count(c) / n * math.log2(text.count(c) / n) for c in set(text)) if n else 0.0


def test_entropy_in_spark_sql_is_shannon_entropy(spark):
    words = ["", "aaaa", "abcd", "google", "x7k2q9zr1m", "bcdfghjkl"]
    got = spark.createDataFrame([(w,) for w in words], "w string").select(shannon_entropy("w").alias("h")).collect()
    assert [round(r.h, 9) for r in got] == [round(_entropy(w), 9) for w in words]


EVENT_DDL = ("`@timestamp` timestamp, event struct<id:string,dataset:string,action:string,outcome:string>, "
             "network struct<direction:string>, source struct<ip:string,bytes:bigint>, "
             "destination struct<ip:string,port:int,bytes:bigint,geo:struct<country_iso_code:string>>, "
             "dns struct<question:struct<name:string>>, host struct<name:string,hostname:string,ip:array<string>,"
             "mac:string>, user struct<name:string>, process struct<name:string>")


def test_admin_peers_span_three_hours_every_other_feature_the_rows_last_hour(spark):
    """Slow lateral movement spreads its peers over hours, so a row's peers are its three hours'; volumes and the
    other sets are its last hour's (an upload is judged against the entity's busiest hour), and a window whose last
    hour holds no event of the entity has no row."""
    def conn(eid: str, hh: int, mm: int, dst: str, port: int, direction: str, out_bytes: int) -> tuple:
        return (dt.datetime(2026, 1, 5, hh, mm), (eid, "zeek.conn", None, None), (direction,),
                ("10.10.0.5", out_bytes), (dst, port, 0, ("DE" if direction == "outbound" else None,)), (None,),
                ("ws-1", None, None, None), (None,), (None,))

    rows = [conn("a", 10, 5, "10.30.0.1", 445, "internal", 0), conn("b", 10, 10, "203.0.113.9", 443, "outbound", 1_000),
            conn("c", 10, 40, "10.30.0.2", 3389, "internal", 0), conn("d", 11, 20, "10.30.0.3", 445, "internal", 0),
            conn("e", 11, 30, "203.0.113.9", 443, "outbound", 2_000)]
    got = {r.window_end.hour: r for r in entity_features(spark.createDataFrame(rows, EVENT_DDL)).collect()}
    # windows ending 11:00, 12:00 and 13:00 hold events; the one ending 13:00 has none in 12:00-13:00, so no row
    assert sorted(got) == [11, 12]
    assert got[11].window_start.hour == 8 and got[12].window_start.hour == 9
    assert got[11].peers == ["10.30.0.1", "10.30.0.2"] and got[12].peers == ["10.30.0.1", "10.30.0.2", "10.30.0.3"]
    assert (got[11].bytes_out, got[12].bytes_out) == (1_000.0, 2_000.0)  # each its last hour's upload only
    assert (got[11].events, got[12].events) == (3.0, 2.0)
    assert (got[11].admin_port_peers, got[12].admin_port_peers) == (2.0, 1.0)  # a count: the last hour's
    assert (got[11].countries, got[12].countries) == (["DE"], ["DE"])
    # what the row's features describe: first and last of those events, their ids as evidence
    assert (got[12].first_seen.hour, got[12].first_seen.minute) == (10, 5)
    assert sorted(got[12].evidence) == ["a", "c", "d", "e"]


def _key(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    for c in ("peers", "countries", "login_machines", "login_hosts", "domains", "evidence"):
        out[c] = out[c].map(lambda v: tuple(v) if v is not None else ())
    return out.sort_values(["entity_type", "entity", "window_start"]).reset_index(drop=True)[list(FEATURE_COLUMNS)]


def time_ordered_thirds(ev):
    """``ev`` cut into three parts by event time (each part's events all before the next part's)."""
    from pyspark.sql import functions as F

    hours = ev.select("`@timestamp`").toPandas()["@timestamp"]
    cut1, cut2 = hours.quantile(0.33), hours.quantile(0.66)
    ts = F.col("`@timestamp`")
    return [ev.where(ts < F.lit(cut1)), ev.where((ts >= F.lit(cut1)) & (ts < F.lit(cut2))), ev.where(ts >= F.lit(cut2))]


def write_in_three_commits(ev, lake: Path) -> None:
    """The events into ``lake/events`` as three Delta commits, so a stream runs several micro-batches."""
    from ingest.delta_sink import write_batch

    for i, part in enumerate(time_ordered_thirds(ev)):
        write_batch(part.coalesce(1), lake / "events", "test.events", i)


def test_batch_and_stream_give_the_same_features_and_the_same_ml_alerts(spark, events, trained, tmp_path):
    """The eval events in a Delta table; features in batch over the table and in the scoring query's watermarked
    streaming aggregation (production watermark, update mode, the newest row per entity-hour) over the same table,
    fed commit by commit as the pipeline writes them, are equal, and so are the alerts the models raise on them.

    Commit by commit, as production writes them. (A stream that *starts* on a table of several commits used to read
    its snapshot by file path, so a later commit could push the watermark past earlier ones: 8 of 57 entity-hours
    lost here once. The source now reads a snapshot in commit order; tests/test_delta_source.py covers that case,
    docs/ml.md "Parity".)

    The stream reads only the features' INPUT_COLUMNS, as the scoring query does, and the batch the whole table: a
    column the features use but the list lacks fails the stream's analysis, a leaf read wrongly changes a feature."""
    from alerts.backtest import read_events
    from alerts.detection_input import detection_input, events_schema
    from alerts.detection_stream import events_stream
    from alerts.ml.features import INPUT_COLUMNS
    from alerts.ml.ml_command import score_window
    from core.config import DEFAULT_ML_WATERMARK, Settings
    from ingest.arrow_parse import EVENT_TIME_COLUMN
    from ingest.delta_sink import write_batch

    lake = tmp_path / "lake"
    seen: list[pd.DataFrame] = []
    for i, part in enumerate(time_ordered_thirds(events["eval"])):
        write_batch(part.coalesce(1), lake / "events", "test.events", i)
        stream = events_stream(spark, Settings(lake=lake), events_schema(spark), columns=INPUT_COLUMNS)
        assert len(stream.columns) < 12  # pruned: not the table's ~30 top-level columns
        stream = detection_input(stream).withWatermark(EVENT_TIME_COLUMN, DEFAULT_ML_WATERMARK)  # the query's
        q = (entity_features(stream, time_col=EVENT_TIME_COLUMN).writeStream.outputMode("update")
             .foreachBatch(lambda df, _id: seen.append(df.toPandas()))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
        q.awaitTermination(600)
        assert q.exception() is None
    assert len([s for s in seen if len(s)]) >= 3  # every commit's micro-batch carried rows, with state between

    batch = _key(entity_features(read_events(spark, lake)).toPandas())
    newest = pd.concat(seen).drop_duplicates(["entity_type", "entity", "window_start"], keep="last")
    streamed = _key(newest)
    assert len(streamed) == len(batch) > 20
    pd.testing.assert_frame_equal(streamed, batch, check_dtype=False)

    bundles = {"behaviour": trained["behaviour"], "domain": trained["domain"]}
    a_batch = [(a["alert_id"], a["summary"]) for a in score_window(batch, bundles)]
    a_stream = [(a["alert_id"], a["summary"]) for a in score_window(streamed, bundles)]
    assert a_batch == a_stream and a_batch  # same alerts (ids and reasons), and some at all


def test_a_login_comes_from_the_machine_behind_the_address_not_the_address(events, generated):
    """Under DHCP an address is a weak identity: the night login's source is the MAC of the desktop that held the
    address (the pipeline's DHCP attribution), so the same machine on another address tomorrow is no new source."""
    import json

    from alerts.ml.history import ground_truth

    night = next(i for i in ground_truth(generated["eval"]) if i["scenario"] == "night_service_login")
    assets = {a["host"]: a for a in map(json.loads, (generated["eval"] / "assets.jsonl").read_text().splitlines())}
    mac = assets[night["details"]["source_host"]]["mac"].upper().replace(":", "-")
    features = entity_features(events["eval"]).toPandas()
    rows = features[(features["entity_type"] == "user") & (features["entity"] == night["user_name"])]
    machines = {m for ms in rows["login_machines"] for m in ms}
    assert f"mac:{mac}" in machines and night["details"]["source_ip"] not in machines
    # outside clients have no lease: their address is the identity
    assert any(not m.startswith("mac:") for ms in features["login_machines"] for m in ms)


def test_the_rule_pack_stays_silent_on_the_stealth_scenarios(spark, events, generated):
    from alerts.backtest import backtest
    from alerts.detection_input import events_schema
    from alerts.ml.history import ground_truth
    from alerts.rule_loader import BUILTIN_RULES, load_rules

    rules, errors = load_rules([BUILTIN_RULES], events_schema(spark))
    assert not errors
    alerts = backtest(spark, events["eval"], rules)
    involved = set()
    for inc in ground_truth(generated["eval"]):
        d = inc["details"]
        involved |= {inc["entity"]["value"], inc.get("host_name"), inc.get("user_name"), d.get("source_ip"),
                     d.get("destination"), d.get("domain"), d.get("source_host")} - {None}
        involved |= set(d.get("peers", []))
    hits = [(a["rule_id"], a["entity"]["value"]) for a in alerts
            if a["entity"]["value"] in involved or a.get("host_name") in involved or a.get("user_name") in involved]
    assert hits == []


def test_the_models_find_every_stealth_scenario_with_few_false_alerts_at_reduced_scale(events, trained, generated):
    from alerts.ml.history import ground_truth
    from alerts.ml.ml_command import evaluate_alerts, score_window

    features = entity_features(events["eval"]).toPandas()
    alerts = score_window(features, {"behaviour": trained["behaviour"], "domain": trained["domain"]})
    report = evaluate_alerts(alerts, ground_truth(generated["eval"]), EVAL_H / 24)
    for name in STEALTH_NAMES:
        assert report["scenarios"][name]["recall"] >= 0.8, report
    # Measured at this scale: 0 false alerts in the 5 hours (logins compared by machine, not address; the night
    # login's source desktop counts as involved). Before, 1 (an admin from an address its account never used:
    # DHCP churn), i.e. 4.8 per day. At most 1 = 4.8 per day: this pins the scale's figure, not the bar of
    # 3 per day for 500 hosts (see docs/ml.md).
    assert report["false_alerts"] <= 1, report
    # the analyst sees why: score and the features that contributed, in the summary
    exfil = next(a for a in alerts if a["rule_id"] == "ml.behaviour" and "bytes_out" in a["summary"])
    assert "score" in exfil["summary"] and "z " in exfil["summary"]


def _save(lake: Path, name: str, bundle: dict) -> str:
    from alerts.ml.ml_scoring import MODEL_FEATURES
    from alerts.ml.model_store import feature_digest, save

    feats = list(MODEL_FEATURES[name])
    return save(lake, name, bundle, {"features": feats, "feature_digest": feature_digest(feats),
                                     "threshold": bundle["threshold"]}).version


def test_the_scoring_query_alerts_once_to_kafka_and_delta_through_the_alert_path(spark, events, trained, settings):
    """``start_ml_scoring`` over the events table: ML alerts (rule ml.behaviour, the contract's schema, score and
    reasons in the summary) on the alerts topic and in the alerts table, the same ids the batch scoring gives; a
    second run on the same checkpoint publishes nothing again."""
    from alerts.alert_schema import ALERT_SCHEMA
    from alerts.ml.ml_command import score_window
    from alerts.ml.ml_scoring import start_ml_scoring
    from core.config import TABLE_ALERTS
    from core.lake import table_dataset
    from core.triggers import Trigger
    from tests.test_detections import alert_messages

    write_in_three_commits(events["eval"], settings.lake)
    _save(settings.lake, "behaviour", trained["behaviour"])
    _save(settings.lake, "domain", trained["domain"])
    for _run in range(2):
        q = start_ml_scoring(spark, settings, Trigger(available_now=True))
        q.awaitTermination(900)
        assert q.exception() is None
    rows = table_dataset(settings.lake, TABLE_ALERTS).to_table().to_pylist()
    assert rows and {r["rule_id"] for r in rows} <= {"ml.behaviour", "ml.domain"}
    assert set(rows[0]) == {f.name for f in ALERT_SCHEMA.fields}
    batch = score_window(entity_features(events["eval"]).toPandas(),
                         {"behaviour": trained["behaviour"], "domain": trained["domain"]})
    assert {r["alert_id"] for r in rows} == {a["alert_id"] for a in batch}
    assert all("score" in r["summary"] for r in rows if r["rule_id"] == "ml.behaviour")
    revisions = [(r["alert_id"], r["revision"]) for r in rows]
    assert len(revisions) == len(set(revisions))  # each revision once in Delta, also after the second run
    messages = [(k, v) for k, v in alert_messages(settings.bootstrap_servers) if v["rule_id"].startswith("ml.")]
    assert sorted((v["alert_id"], v["revision"]) for _k, v in messages) == sorted(revisions)
    assert all(k == v["alert_id"] for k, v in messages)


def test_a_new_model_version_is_broadcast_once_and_a_refused_one_leaves_the_previous_scoring(spark, trained,
                                                                                            tmp_path):
    import json

    from alerts.ml.ml_scoring import BroadcastModels
    from core.config import Settings

    lake = tmp_path / "lake"
    settings = Settings(lake=lake)
    models = BroadcastModels(spark, settings)
    assert models.current()[0] is None  # no model yet: nothing to score with
    _save(lake, "behaviour", trained["behaviour"])
    bc1, versions = models.current()
    assert versions["behaviour"] == "v0001" and models.current()[0] is bc1  # same version: same broadcast
    v2 = _save(lake, "behaviour", {**trained["behaviour"], "threshold": 99.0})
    bc2, versions = models.current()
    assert versions["behaviour"] == v2 and bc2 is not bc1 and bc2.value["behaviour"]["threshold"] == 99.0
    v3 = _save(lake, "behaviour", trained["behaviour"])
    meta = lake / "models" / "behaviour" / v3 / "metadata.json"
    m = json.loads(meta.read_text())
    m["sklearn_version"] = "1.0.0"
    meta.write_text(json.dumps(m))
    bc3, versions = models.current()
    assert versions["behaviour"] == v2 and bc3 is bc2  # refused: the previous version keeps scoring


# -- the scoring query's cost in the live pipeline (issue #15): its own trigger, the FAIR scheduler's "ml" pool --
def test_the_ml_trigger_setting_one_duration_syntax_never_faster_than_the_pipeline():
    from alerts.ml.ml_scoring import ml_interval
    from core.config import DEFAULT_ML_TRIGGER, Settings, settings_from_env
    from core.errors import UserError
    from core.triggers import Trigger

    assert settings_from_env(environ={}).ml_trigger == DEFAULT_ML_TRIGGER == "60 seconds"
    assert settings_from_env(environ={"NIGHTJAR_ML_TRIGGER": "30s"}).ml_trigger == "30 seconds"
    assert settings_from_env(environ={"NIGHTJAR_ML_TRIGGER": "2 minutes"}).ml_trigger == "120 seconds"
    assert settings_from_env(environ={}, ml_trigger="1m").ml_trigger == "60 seconds"  # a CLI override
    for bad in ("soon", "0", "-5s"):
        with pytest.raises(UserError, match="NIGHTJAR_ML_TRIGGER") as err:
            settings_from_env(environ={"NIGHTJAR_ML_TRIGGER": bad})
        assert err.value.exit_code == 2
    live = Trigger(interval="1 second")
    assert ml_interval(Settings(), live) == "60 seconds"
    assert ml_interval(Settings(ml_trigger="30 seconds"), live) == "30 seconds"
    # a pipeline slower than the ML setting: scoring never runs more often than the rules
    assert ml_interval(Settings(ml_trigger="30 seconds"), Trigger(interval="120 seconds")) == "120 seconds"
    assert ml_interval(Settings(), Trigger(available_now=True)) is None
    # ... and from the command line: one line naming the variable, exit 2, no traceback
    import os
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "nightjar.cli", "tables", "--lake", "/nonexistent-nightjar-lake"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NIGHTJAR_ML_TRIGGER": "soon"}, cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().startswith("nightjar tables: error: NIGHTJAR_ML_TRIGGER"), out.stderr


def test_the_session_schedules_fair_with_low_priority_ml_and_enrichment_pools(spark):
    """The allocation file is loaded (not silently replaced by defaults): "default" always below its minShare, so
    served first; "ml" and "enrichment" (the queries off the alert path) never are."""
    from alerts.ml.ml_scoring import SCHEDULER_POOL
    from enrich.auth_sessions import SCHEDULER_POOL as ENRICHMENT_POOL

    sc = spark.sparkContext
    assert sc.getConf().get("spark.scheduler.mode") == "FAIR"
    pools = {name: sc._jsc.sc().getPoolForName(name) for name in ("default", SCHEDULER_POOL, ENRICHMENT_POOL)}
    assert all(p.isDefined() for p in pools.values())
    default = pools.pop("default").get()
    assert str(default.schedulingMode()) == "FIFO" and default.minShare() >= 1000
    for low in (p.get() for p in pools.values()):
        assert str(low.schedulingMode()) == "FIFO" and low.minShare() == 0 and low.weight() < default.weight()


def test_the_live_scoring_query_runs_on_its_own_trigger_in_the_ml_pool(spark, events, trained, broker, tmp_path,
                                                                      caplog):
    """A live (processing-time) ``ml`` query: the running query's trigger is the ML setting's, not the pipeline's
    1 s; its micro-batches run in the "ml" pool; the starting thread is back in the default pool at once, so the
    queries started after it (the rules) are not demoted."""
    import logging
    import time

    from alerts.ml.ml_scoring import start_ml_scoring
    from core.config import Settings
    from core.spark_session import POOL_PROPERTY
    from core.triggers import Trigger

    settings = Settings(bootstrap=broker.bootstrap, lake=tmp_path / "lake", shuffle_partitions=2,
                        ml_trigger="45 seconds")
    write_in_three_commits(events["eval"], settings.lake)
    _save(settings.lake, "behaviour", trained["behaviour"])
    caplog.set_level(logging.INFO, logger="core.spark_session")
    q = start_ml_scoring(spark, settings, Trigger(interval="1 second"))
    try:
        assert spark.sparkContext.getLocalProperty(POOL_PROPERTY) is None
        assert str(q._jsq.streamingQuery().trigger()) == "ProcessingTimeTrigger(45000)"
        deadline = time.monotonic() + 600  # a wait for the first micro-batch, not a speed assertion
        while q.lastProgress is None and q.isActive and time.monotonic() < deadline:
            time.sleep(0.5)
        assert q.exception() is None, str(q._jsq.exception().get().getCause())[:2000]
        assert q.lastProgress is not None and q.lastProgress["numInputRows"] > 0
    finally:
        q.stop()
    assert "micro-batches run in scheduler pool 'ml' (FAIR mode)" in caplog.text


def test_without_a_usable_model_the_scoring_query_still_runs_its_batches(spark, events, tmp_path):
    """Every model refused (or none yet): nothing is scored, but each micro-batch still runs, so the features state
    advances and Spark's check that a stateful foreachBatch committed its state stores passes (it used to fail the
    query, which then restarted for ever)."""
    from alerts.ml.ml_scoring import start_ml_scoring
    from core.config import Settings
    from core.triggers import Trigger

    settings = Settings(lake=tmp_path / "lake", shuffle_partitions=2)
    write_in_three_commits(events["eval"], settings.lake)
    q = start_ml_scoring(spark, settings, Trigger(available_now=True))
    q.awaitTermination(900)
    assert q.exception() is None
    assert sum(p["numInputRows"] for p in q.recentProgress) >= events["eval"].count()  # the whole table was read
    assert q.lastProgress["stateOperators"][0]["numRowsTotal"] > 0  # the open entity-hours are held in state
