"""``nightjar ml train|evaluate|list``: the models' lifecycle.

- ``train [--from T] [--to T]`` computes the entity-hour features over the ``events`` history in batch (the same
  function the stream aggregates), fits the behavioural model and the lexical domain model (benign names of the
  window), calibrates their thresholds on the last quarter of the window held out, refits on the whole window and
  writes a new version of each under ``<lake>/models/`` with its metadata.
- ``evaluate [--from T] [--to T]`` scores a window with the current models, exactly as the stream would, and prints
  per scenario of the ground truth the recall of the ML alerts, and the false ML alerts per simulated day.
- ``list`` shows every stored version and its metadata.

``--generated DIR`` reads a ``nightjar generate --out DIR`` directory instead of the lake's ``events`` (through the
pipeline's own parse, attribution and enrichment: :mod:`alerts.ml.history`) — how the quality figures are
measured on this machine without pushing days of events through Kafka.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import pandas as pd
from pyspark.sql import functions as F

# The lake readers (core.lake, alerts.ml.ml_scoring: pyarrow.dataset) and alerts.ml.history (pyspark's data source
# API) are imported in the functions that use them: the CLI imports this module to parse `nightjar ml`'s arguments,
# and --help or a bad argument must not wait for them (nightjar/cli.py).
from alerts.alert_builder import AlertBuilder, naive_utc
from alerts.backtest import read_events
from alerts.ml import behaviour_model, domain_model
from alerts.ml.features import SLIDE_SECONDS, entity_features
from alerts.ml.model_store import (
    ModelRefused,
    check_compatible,
    feature_digest,
    load,
    read_metadata,
    save,
    versions,
)
from core.config import ML_BEHAVIOUR_MODEL, ML_DOMAIN_MODEL, ML_MODELS, TABLE_GROUND_TRUTH, Settings
from core.durations import parse_time
from core.errors import UserError
from core.spark_session import build_spark

HOLDOUT = 0.25  # the last quarter of the training window calibrates the thresholds


def _progress(msg: str) -> None:
    print(f"ml: {msg}", file=sys.stderr, flush=True)


def feature_frame(spark, settings: Settings, generated: Path | None, start: dt.datetime | None,
                  end: dt.datetime | None) -> tuple[pd.DataFrame, list[str]]:
    """(entity-hour features of the window as pandas, distinct queried names of the window)."""
    if generated is not None:
        from alerts.ml.history import events_from_generated

        events = events_from_generated(spark, generated)
    else:
        events = read_events(spark, settings.lake)
    ts = F.col("`@timestamp`")
    if start is not None:
        events = events.where(ts >= F.lit(start))
    if end is not None:
        events = events.where(ts < F.lit(end))
    events = events.cache()
    try:
        _progress("computing entity-hour features")
        features = entity_features(events).toPandas()
        names = [r[0] for r in events.where(F.col("event.dataset") == "zeek.dns")
                 .select(F.lower(F.col("dns.question.name"))).distinct().collect() if r[0]]
    finally:
        events.unpersist()
    return features, names


def _split(features: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    hours = sorted(features["window_start"].unique())
    cut = hours[int(len(hours) * (1 - HOLDOUT))] if len(hours) >= 4 else hours[-1]
    return features[features["window_start"] < cut], features[features["window_start"] >= cut]


def _span_days(features: pd.DataFrame) -> float:
    if not len(features):
        return 0.0
    # from the first window's close less one slide (where the events start) to the last close: sliding windows
    # start up to WINDOW before the first event
    span = (pd.Timestamp(features["window_end"].max()) - pd.Timestamp(features["window_end"].min())
            + pd.Timedelta(seconds=SLIDE_SECONDS))
    return max(span.total_seconds() / 86400.0, 1 / 24)


def fit_behaviour(features: pd.DataFrame) -> tuple[dict, dict]:
    """Fit on the first part, calibrate on the held-out last part, refit on everything."""
    fit_part, held = _split(features)
    known = behaviour_model.known_sets(fit_part)
    common = behaviour_model.prevalence(known)
    calib = behaviour_model.build_pipeline().fit(behaviour_model.with_new_counts(fit_part, known, common))
    held_frame = behaviour_model.with_new_counts(held, known, common)
    held_scores = behaviour_model.score(calib, held_frame)
    threshold = behaviour_model.calibrate_threshold(held_scores, holdout_days=_span_days(held))
    known_all = behaviour_model.known_sets(features)
    common_all = behaviour_model.prevalence(known_all)
    pipeline = behaviour_model.build_pipeline().fit(behaviour_model.with_new_counts(features, known_all, common_all))
    metrics = {"rows": int(len(features)), "entities": int(features[["entity_type", "entity"]].drop_duplicates().shape[0]),
               "holdout_rows": int(len(held)), "holdout_max_score": round(float(max(held_scores, default=0.0)), 3),
               "holdout_days": round(_span_days(held), 3), "holdout_top": _top_held(calib, held_frame, held_scores)}
    return {"pipeline": pipeline, "known": known_all, "prevalence": common_all, "threshold": float(threshold)}, metrics


def _top_held(calib, held: pd.DataFrame, scores, k: int = 5) -> list[dict]:
    """The ``k`` highest held-out benign entity-hours with their leading features: what set the threshold."""
    if not len(held):
        return []
    order = sorted(range(len(held)), key=lambda i: -float(scores[i]))[:k]
    rows = held.iloc[order]
    why = behaviour_model.top_features(calib, rows)
    return [{"score": round(float(scores[i]), 2), "entity": f"{r['entity_type']}:{r['entity']}",
             "hour": str(r["window_start"]), "features": dict(w)} for i, (_, r), w in zip(order, rows.iterrows(), why, strict=True)]


def train(spark, settings: Settings, generated: Path | None, start: dt.datetime | None,
          end: dt.datetime | None) -> list[dict]:
    features, names = feature_frame(spark, settings, generated, start, end)
    return train_on_features(settings, features, names)


def train_on_features(settings: Settings, features: pd.DataFrame, names: list[str]) -> list[dict]:
    """Fit and store both models from a feature frame (:func:`feature_frame`'s output): the part of ``ml train``
    after Spark, separate so that a measurement can fit again on the same features without recomputing them."""
    if features.empty or features["window_start"].nunique() < 4:
        raise UserError("too little history to train on: need at least 4 hours of events in the window "
                        "(check --from/--to and that the pipeline has written events)")
    window = {"from": str(pd.Timestamp(features["window_start"].min())),
              "to": str(pd.Timestamp(features["window_end"].max())), "days": round(_span_days(features), 3)}
    _progress(f"fitting the behavioural model on {len(features):,} entity-hours")
    bundle, metrics = fit_behaviour(features)
    saved = [save(settings.lake, ML_BEHAVIOUR_MODEL, bundle, {
        "features": list(behaviour_model.SIGNATURE), "feature_digest": feature_digest(behaviour_model.SIGNATURE),
        "training_window": window, "threshold": bundle["threshold"], "metrics": metrics,
        "kind": "per-entity baseline (training max, MAD of log1p), max one-sided z"})]
    _progress(f"fitting the domain model on {len(names):,} benign names")
    try:
        pipeline, threshold, dmetrics = domain_model.fit(names)
    except ValueError as exc:
        _progress(f"domain model not trained: {exc}")
    else:
        saved.append(save(settings.lake, ML_DOMAIN_MODEL, {"pipeline": pipeline, "threshold": threshold}, {
            "features": list(domain_model.LEXICAL_FEATURES),
            "feature_digest": feature_digest(domain_model.LEXICAL_FEATURES), "training_window": window,
            "threshold": threshold, "metrics": dmetrics, "seed": domain_model.SEED,
            "kind": "lexical features -> StandardScaler -> IsolationForest, benign names only"}))
    return [s.metadata for s in saved]


def _overlaps(alert: dict, inc: dict, slack: dt.timedelta = dt.timedelta(minutes=5)) -> bool:
    return (naive_utc(alert["first_seen"]) <= naive_utc(inc["end"]) + slack
            and naive_utc(alert["last_seen"]) >= naive_utc(inc["start"]) - slack)


def evaluate_alerts(alerts: list[dict], incidents: list[dict], days: float) -> dict:
    """Per scenario: incidents, detected by any ML alert on the incident's entity; false ML alerts per day."""
    per: dict[str, dict] = {}
    for inc in incidents:
        s = per.setdefault(inc["scenario"], {"incidents": 0, "detected": 0})
        s["incidents"] += 1
        ent = (inc["entity"]["type"], inc["entity"]["value"])
        if any((a["entity"]["type"], a["entity"]["value"]) == ent and _overlaps(a, inc) for a in alerts):
            s["detected"] += 1
    for s in per.values():
        s["recall"] = round(s["detected"] / s["incidents"], 3) if s["incidents"] else None

    def involved(a: dict) -> bool:
        for inc in incidents:
            # the attack's own machines count too: the desktop a night login came from opened the SSH connection
            details = inc.get("details") or {}
            names = {inc["entity"]["value"], inc.get("host_name"), inc.get("user_name"), details.get("source_host"),
                     details.get("source_ip")} - {None}
            if a["entity"]["value"] in names and _overlaps(a, inc):
                return True
        return False

    false = [a for a in alerts if not involved(a)]
    by_rule: dict[str, int] = {}
    for a in false:
        by_rule[a["rule_id"]] = by_rule.get(a["rule_id"], 0) + 1
    return {"scenarios": per, "alerts": len(alerts), "false_alerts": len(false), "days": round(days, 3),
            "false_alerts_per_day": round(len(false) / days, 2) if days else None, "false_by_rule": by_rule,
            "false_examples": [f"{a['rule_id']} {a['entity']['value']} {a['window_start']}: {a.get('summary', '')}"
                               for a in false[:10]]}


def current_bundles(settings: Settings) -> dict[str, dict]:
    """The newest usable version of each model (a refused one is reported in one line and skipped)."""
    from alerts.ml.ml_scoring import MODEL_FEATURES

    out = {}
    for name in ML_MODELS:
        for version in reversed(versions(settings.lake, name)):
            try:
                out[name] = load(settings.lake, name, version, MODEL_FEATURES[name]).bundle
                break
            except ModelRefused as exc:
                print(f"nightjar ml: {exc}", file=sys.stderr)
    return out


def score_window(features: pd.DataFrame, bundles: dict[str, dict]) -> list[dict]:
    """Features -> alerts (newest revision each), through the alert builder the stream uses."""
    from alerts.ml.ml_scoring import RULES, candidates_from_features

    cands = candidates_from_features(features, bundles.get(ML_BEHAVIOUR_MODEL), bundles.get(ML_DOMAIN_MODEL))
    cands = [{**c, "window_start": pd.Timestamp(c["window_start"]).to_pydatetime(),
              "window_end": pd.Timestamp(c["window_end"]).to_pydatetime(),
              "first_seen": pd.Timestamp(c["first_seen"]).to_pydatetime(),
              "last_seen": pd.Timestamp(c["last_seen"]).to_pydatetime()} for c in cands]
    builder = AlertBuilder(dict(RULES))
    revisions = builder.add(sorted(cands, key=lambda c: c["window_start"]), dt.datetime.now(dt.UTC).replace(tzinfo=None))
    newest: dict[str, dict] = {}
    for r in revisions:
        newest[r["alert_id"]] = r
    return sorted(newest.values(), key=lambda a: (a["first_seen"], a["rule_id"]))


def _incidents(settings: Settings, generated: Path | None) -> list[dict]:
    if generated is not None:
        from alerts.ml.history import ground_truth

        return ground_truth(generated)
    from core.lake import is_delta_table, table_dataset

    if not is_delta_table(settings.lake / TABLE_GROUND_TRUTH):
        return []
    return table_dataset(settings.lake, TABLE_GROUND_TRUTH).to_table().to_pylist()


def evaluate_features(settings: Settings, features: pd.DataFrame, bundles: dict[str, dict],
                      generated: Path | None) -> dict:
    """The ``ml evaluate`` report for a feature frame: scored as the stream would, against the ground truth."""
    alerts = score_window(features, bundles)
    incidents = [i for i in _incidents(settings, generated) if i.get("is_attack", True)]
    return evaluate_alerts(alerts, incidents, _span_days(features))


def print_evaluation(report: dict, out=sys.stdout) -> None:
    print(f"{'scenario':<26} {'incidents':>9} {'detected':>8} {'recall':>7}", file=out)
    for name, s in sorted(report["scenarios"].items()):
        print(f"{name:<26} {s['incidents']:>9} {s['detected']:>8} {s['recall']:>7.2f}", file=out)
    print(f"ML alerts {report['alerts']}, false {report['false_alerts']} over {report['days']:.2f} simulated days: "
          f"{report['false_alerts_per_day']} false ML alerts per day {report['false_by_rule'] or ''}", file=out)
    for line in report["false_examples"]:
        print(f"  false: {line}", file=out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ml_command", metavar="ACTION")
    sub.required = True
    for name, text in (("train", "fit both models on a window of history and store a new version of each"),
                       ("evaluate", "score a window with the current models against the ground truth"),
                       ("list", "list the stored model versions")):
        p = sub.add_parser(name, help=text, description=text)
        # the common options are also accepted after the action (`nightjar ml train --lake DIR`); SUPPRESS keeps
        # a value given before it
        p.add_argument("--lake", metavar="DIR", default=argparse.SUPPRESS, help="lake directory (default ./lake)")
        p.add_argument("--bootstrap", metavar="HOST:PORT", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log at DEBUG")
        if name != "list":
            p.add_argument("--from", dest="start", metavar="TIME", help="first event time (ISO 8601, inclusive)")
            p.add_argument("--to", dest="end", metavar="TIME", help="last event time (ISO 8601, exclusive)")
            p.add_argument("--generated", type=Path, metavar="DIR",
                           help="read a `nightjar generate --out DIR` directory instead of the lake's events")
        if name == "evaluate":
            p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
        if name == "list":
            p.add_argument("--json", action="store_true", help="one JSON metadata object per version")


def _list(settings: Settings, as_json: bool) -> int:
    from alerts.ml.ml_scoring import MODEL_FEATURES

    found = False
    for name in ML_MODELS:
        for version in versions(settings.lake, name):
            found = True
            try:
                meta = read_metadata(settings.lake, name, version)
                check_compatible(meta, MODEL_FEATURES[name])
                status = "usable"
            except ModelRefused as exc:
                meta = meta if "meta" in locals() else {}
                status = str(exc)
            if as_json:
                print(json.dumps({**meta, "status": status}, default=str))
            else:
                w = meta.get("training_window", {})
                print(f"{name:<10} {version}  sklearn {meta.get('sklearn_version')}  threshold "
                      f"{meta.get('threshold', float('nan')):.3f}  trained on {w.get('from')} .. {w.get('to')}  "
                      f"created {meta.get('created_at')}  {status}")
    if not found:
        print(f"no models under {settings.lake / 'models'}: train one with `nightjar ml train`", file=sys.stderr)
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.ml_command == "list":
        return _list(settings, args.json)
    start, end = parse_time(args.start, "--from"), parse_time(args.end, "--to")
    if start and end and start >= end:
        raise UserError("--from must be before --to", exit_code=2)
    if args.generated is not None and not args.generated.is_dir():
        raise UserError(f"--generated {args.generated} is not a directory", exit_code=2)
    bundles = current_bundles(settings) if args.ml_command == "evaluate" else {}
    if args.ml_command == "evaluate" and not bundles:
        raise UserError(f"no usable model under {settings.lake / 'models'}: run `nightjar ml train` first")
    spark = build_spark(settings, app_name=f"nightjar-ml-{args.ml_command}")
    t0 = time.monotonic()
    if args.ml_command == "train":
        for meta in train(spark, settings, args.generated, start, end):
            print(f"{meta['name']} {meta['version']}: threshold {meta['threshold']:.3f}, {json.dumps(meta['metrics'])}")
        _progress(f"trained in {time.monotonic() - t0:.0f}s")
        return 0
    features, _names = feature_frame(spark, settings, args.generated, start, end)
    report = evaluate_features(settings, features, bundles, args.generated)
    if args.json:
        print(json.dumps(report, default=str))
    else:
        print_evaluation(report)
    return 0
