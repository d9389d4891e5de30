"""Scoring entity-hours with the current models, in batch (evaluate) and in the stream (the ``ml`` query).

One function, :func:`candidates_from_features`, turns feature rows (pandas) into alert *candidates* (the rule
pack's :data:`~alerts.alert_schema.CANDIDATE_SCHEMA`), with rule id ``ml.<model>``, the score and the features
that contributed most in ``detail`` — so the summary tells the analyst *why*. The stream and ``nightjar ml
evaluate`` both call it, so they raise the same alerts for the same features.

The streaming query (:func:`start_ml_scoring`) reads the ``events`` table through the Delta source, aggregates
:func:`~alerts.ml.features.entity_features` with a watermark (state: the open entity-hours only), and in
``foreachBatch`` scores the entity-hours the batch updated with ``mapInPandas`` on the executors. The models are
broadcast once per version (:class:`BroadcastModels`), never read from driver globals by executors; a new version
trained while the query runs is picked up at the next micro-batch, a refused one leaves the previous model
scoring. Candidates go through the detection path every rule uses (:class:`~alerts.detection_stream.AlertFolder`:
suppression, revisions, Kafka then Delta, exactly once per batch through the app id ``nightjar.ml``).

The query must not delay the rule path (issue #15: scoring adds <= 20 % to the rule alerts' p50), so live it runs
on its own slower trigger (:func:`ml_interval`, ``Settings.ml_trigger``) and its jobs go to the FAIR scheduler's
low-priority pool ``ml`` (core/resources/fairscheduler.xml), served only when no ingest or rule task waits.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from typing import Any

import pandas as pd

from alerts.alert_builder import RuleMeta
from alerts.detection_input import detection_input, events_schema
from alerts.detection_stream import BATCH_TS, AlertFolder, batch_time, events_stream
from alerts.ml import behaviour_model, domain_model
from alerts.ml.features import INPUT_COLUMNS, entity_features
from alerts.ml.model_store import ModelTracker, versions
from core.batch_gate import batch_function
from core.config import DEFAULT_ML_WATERMARK, ML_BEHAVIOUR_MODEL, ML_DOMAIN_MODEL, Settings
from core.spark_session import PoolCheck, scheduler_pool
from core.triggers import QUERY_ML, Trigger
from ingest.arrow_parse import EVENT_TIME_COLUMN

log = logging.getLogger(__name__)

APP_ID = f"nightjar.{QUERY_ML}"
SCHEDULER_POOL = "ml"  # a pool of core/resources/fairscheduler.xml
BEHAVIOUR_FEATURES: tuple[str, ...] = behaviour_model.SIGNATURE
DOMAIN_FEATURES: tuple[str, ...] = domain_model.LEXICAL_FEATURES
MODEL_FEATURES: dict[str, tuple[str, ...]] = {ML_BEHAVIOUR_MODEL: BEHAVIOUR_FEATURES,
                                              ML_DOMAIN_MODEL: DOMAIN_FEATURES}
RULES: dict[str, RuleMeta] = {
    f"ml.{ML_BEHAVIOUR_MODEL}": RuleMeta(rule_id=f"ml.{ML_BEHAVIOUR_MODEL}",
                                         name="Behaviour far from the entity's own normal (ML)", severity="medium",
                                         tags=("T1021", "T1048", "T1078"), suppress_s=4 * 3600.0, count_merge="max"),
    f"ml.{ML_DOMAIN_MODEL}": RuleMeta(rule_id=f"ml.{ML_DOMAIN_MODEL}", name="Machine-generated domain names (ML)",
                                      severity="medium", tags=("T1568.002",), suppress_s=4 * 3600.0,
                                      count_merge="max"),
}


def _explain(top: list[tuple[str, float]], row: pd.Series) -> str:
    parts = []
    for name, z in top:
        value = row.get(name)
        if not isinstance(value, (int, float)) or value != value:
            shown = "?"
        else:  # rarity-weighted first-seen counts are fractions: 0.3 must not read as 0
            shown = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
        parts.append(f"{name}={shown} (z {z:.1f})")
    return ", ".join(parts)


def _candidate(row: pd.Series, rule_id: str, detail: str) -> dict[str, Any]:
    host = row["entity"] if row["entity_type"] == "host" else None
    user = row["entity"] if row["entity_type"] == "user" else None
    return {"rule_id": rule_id, "entity": {"type": row["entity_type"], "value": row["entity"]},
            "window_start": row["window_start"], "window_end": row["window_end"],
            "first_seen": row["first_seen"], "last_seen": row["last_seen"], "event_count": int(row["events"]),
            "evidence": list(row["evidence"] if row["evidence"] is not None else [])[:20],
            "host_name": host, "user_name": user, "detail": detail}


def candidates_from_features(features: pd.DataFrame, behaviour: dict | None, domain: dict | None) -> list[dict]:
    """Feature rows -> ML alert candidates (score over the model's threshold), with score and reasons."""
    if features is None or not len(features):
        return []
    out: list[dict] = []
    if behaviour is not None:
        frame = behaviour_model.with_new_counts(features, behaviour["known"], behaviour["prevalence"])
        pipeline, threshold = behaviour["pipeline"], behaviour["threshold"]
        scores = behaviour_model.score(pipeline, frame)
        hot = frame[scores > threshold]
        if len(hot):
            tops = behaviour_model.top_features(pipeline, hot)
            for (_, row), s, top in zip(hot.iterrows(), scores[scores > threshold], tops, strict=True):
                detail = f"score {s:.1f} over threshold {threshold:.1f}: {_explain(top, row)}"
                out.append(_candidate(row, f"ml.{ML_BEHAVIOUR_MODEL}", detail))
    if domain is not None:
        hosts = features[(features["entity_type"] == "host")
                         & features["domains"].map(lambda d: d is not None and len(d) >= domain_model.MIN_SUSPICIOUS)]
        # every distinct name of the batch scored once (one forest pass), then looked up per host-hour
        names = sorted({n for d in hosts["domains"] for n in d if n})
        score_of = dict(zip(names, domain_model.score_names(domain["pipeline"], names), strict=True))
        for _, row in hosts.iterrows():
            domains = row["domains"]
            hits = sorted(((n, round(float(score_of[n]), 3)) for n in set(domains) if n and score_of[n] > domain["threshold"]),
                          key=lambda x: (-x[1], x[0]))
            if len(hits) >= domain_model.MIN_SUSPICIOUS:
                names = ", ".join(f"{n} ({s:.2f})" for n, s in hits[:3])
                detail = (f"{len(hits)} of {len(domains)} queried names look machine-generated "
                          f"(threshold {domain['threshold']:.2f}): {names}")
                out.append(_candidate(row, f"ml.{ML_DOMAIN_MODEL}", detail))
    return out


# -- the stream -------------------------------------------------------------------------------------------------
CANDIDATE_COLUMNS = ("rule_id", "entity_type", "entity", "window_start", "window_end", "first_seen", "last_seen",
                     "event_count", "evidence", "host_name", "user_name", "detail")


class BroadcastModels:
    """The current model bundles as one Spark broadcast, rebuilt only when a model version changes."""

    def __init__(self, spark, settings: Settings) -> None:
        self.spark = spark
        self.trackers = {name: ModelTracker(settings.lake, name, feats) for name, feats in MODEL_FEATURES.items()}
        self.versions: dict[str, str | None] = {}
        self.broadcast = None

    def current(self):
        """``(broadcast or None, {model: version})``; re-checks the model store (cheap: a directory listing)."""
        models = {name: t.current() for name, t in self.trackers.items()}
        versions = {name: m.version if m else None for name, m in models.items()}
        if versions != self.versions:
            if self.broadcast is not None:
                self.broadcast.unpersist()
            bundles = {name: m.bundle for name, m in models.items() if m is not None}
            self.broadcast = self.spark.sparkContext.broadcast(bundles) if bundles else None
            self.versions = versions
            log.info("ml scoring uses %s", ", ".join(f"{n} {v or '(none)'}" for n, v in versions.items()))
        return self.broadcast, versions


def _score_partitions(bc):
    def score(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        bundles = bc.value  # the executor's copy of the broadcast: no driver state
        for frame in frames:
            cands = candidates_from_features(frame, bundles.get(ML_BEHAVIOUR_MODEL), bundles.get(ML_DOMAIN_MODEL))
            rows = [{**{k: v for k, v in c.items() if k != "entity"}, "entity_type": c["entity"]["type"],
                     "entity": c["entity"]["value"]} for c in cands]
            yield pd.DataFrame(rows, columns=list(CANDIDATE_COLUMNS))
    return score


CANDIDATE_DDL = ("rule_id string, entity_type string, entity string, window_start timestamp, window_end timestamp, "
                 "first_seen timestamp, last_seen timestamp, event_count long, evidence array<string>, "
                 "host_name string, user_name string, detail string")


def score_batch(features, bc) -> list[dict]:
    """Spark feature rows -> candidate dicts, scored on the executors with the broadcast models."""
    rows = features.mapInPandas(_score_partitions(bc), CANDIDATE_DDL).collect()
    out = []
    for r in rows:
        d = r.asDict(recursive=True)
        d["entity"] = {"type": d.pop("entity_type"), "value": d.pop("entity")}
        out.append(d)
    return out


def models_available(settings: Settings) -> bool:
    """Whether any model version is stored (the scoring query is not started before the first ``ml train``)."""
    return any(versions(settings.lake, name) for name in MODEL_FEATURES)


def ml_interval(settings: Settings, trigger: Trigger) -> str | None:
    """The scoring query's processing-time interval: ``settings.ml_trigger``, but never shorter than the pipeline's
    own trigger; ``None`` for an available-now run (the query drains like every other)."""
    return trigger.at_least(settings.ml_trigger)


def start_ml_scoring(spark, settings: Settings, trigger: Trigger, health=None):
    """The ``ml`` streaming query: events -> entity-hour features (watermarked) -> scored -> alerts.

    Started with the driver thread's scheduler pool set to :data:`SCHEDULER_POOL`: the query's thread copies the
    starting thread's local properties when it is created, so every job of its micro-batches runs in that pool; the
    property is reset at once so that queries started later from this thread stay in the default pool.
    """
    from pyspark.sql import functions as F

    models = BroadcastModels(spark, settings)
    folder = AlertFolder(settings, APP_ID, dict(RULES))
    rule_ids = list(RULES)
    if health is not None:
        health.track(rule_ids, QUERY_ML)

    pool_check = PoolCheck(spark, QUERY_ML, SCHEDULER_POOL)  # once per start: say where the batches run

    def write(df, batch_id: int) -> None:
        pool_check()
        bc, _versions = models.current()
        if bc is None:
            # No usable model (all refused): nothing to score, but the batch is still run so that the features'
            # state advances and its stores commit; Spark fails a stateful foreachBatch that skips its input
            # (STATE_STORE_COMMIT_VALIDATION_FAILED), and the query would restart for ever.
            df.write.format("noop").mode("overwrite").save()
            return
        batch = df.persist()
        try:
            cands = score_batch(batch.drop(BATCH_TS), bc)
            at = (batch_time(batch, settings.checkpoint(QUERY_ML), batch_id) if cands
                  else dt.datetime.now(dt.UTC).replace(tzinfo=None))
        finally:
            batch.unpersist()
        published = folder.process(cands, batch_id, at) if cands else []
        if health is not None:
            health.batch_done(QUERY_ML, rule_ids, at, {a["rule_id"] for a in published})
        if published:
            log.info("%s batch %d: %d ML alert revision(s)", QUERY_ML, batch_id, len(published))

    # Only the features' columns are read (INPUT_COLUMNS: ~20 core and enrichment leaves; event.original and detail
    # are most of a row's bytes): the query's batches cost mostly reading, and they share the cores with the rules.
    events = detection_input(events_stream(spark, settings, events_schema(spark), settings.checkpoint(QUERY_ML),
                                           columns=INPUT_COLUMNS), observe_as=QUERY_ML)
    events = events.withWatermark(EVENT_TIME_COLUMN, DEFAULT_ML_WATERMARK)
    feats = entity_features(events, time_col=EVENT_TIME_COLUMN).withColumn(BATCH_TS, F.current_timestamp())
    writer = (feats.writeStream.queryName(QUERY_ML).outputMode("update").foreachBatch(batch_function(write))
              .option("checkpointLocation", str(settings.checkpoint(QUERY_ML))))
    interval = ml_interval(settings, trigger)
    writer = writer.trigger(availableNow=True) if interval is None else writer.trigger(processingTime=interval)
    with scheduler_pool(spark, SCHEDULER_POOL):
        query = writer.start()
    log.info("started query %s (trigger %s, scheduler pool %s): models %s", QUERY_ML, interval or "available-now",
             SCHEDULER_POOL, ", ".join(MODEL_FEATURES))
    return query

