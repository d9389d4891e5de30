"""The behavioural model: how far an entity-hour is from *that entity's own* normal, per feature.

Why a per-entity robust baseline and not an IsolationForest over all entity-hours: the attacks this model is for
are unremarkable *in the population* — 100 MB uploaded in an hour is what the backup server does every night,
SMB to another machine is what every file-server client does, an admin logging in at 23:00 happens. A forest
fitted on the pooled rows learns "the organization's normal" and isolates the busy servers, not a quiet desktop
that suddenly uploads 100 MB. What is abnormal is the change against the entity's own history, so the model keeps
per entity and feature the most it did in any training hour and a robust spread (MAD of ``log1p`` of the value)
and scores an hour by its largest one-sided robust z-score above that (only *more* than ever is suspicious). The
first-seen counters compare the hour's sets with everything the entity did in training: new admin-port peers
(each weighed by its rarity in the organization, :func:`prevalence`), new destination countries, new login machines
(see ``features.login_machine``) and login hosts.

It is a scikit-learn ``Pipeline``: a ``ColumnTransformer`` (``log1p`` of the volume/count features, the first-seen
counts and the entity key passed through) followed by :class:`EntityBaseline`, an estimator with
``score_samples`` like scikit-learn's outlier detectors. Fitting is deterministic (no randomness at all).
Entities without history are scored against the population's baseline (the median entity of their type).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from alerts.ml.features import COUNT_FEATURES, SLIDE, WINDOW, WINDOW_SETS

# The first-seen counters: hour's set column -> the counter derived against the entity's training history.
NEW_FEATURES: dict[str, str] = {"peers": "new_rare_admin_peers", "countries": "new_countries",
                                "login_machines": "new_login_machines", "login_hosts": "new_rare_login_hosts"}
MODEL_FEATURES: tuple[str, ...] = (*COUNT_FEATURES, *NEW_FEATURES.values())
# What an artifact must have been trained on: the features and the span each covers (a model that learned
# three-hour maxima must not judge hourly volumes, nor hourly peers three-hour sets), as one list for the
# artifact's feature digest.
SIGNATURE: tuple[str, ...] = (*MODEL_FEATURES, f"{', '.join(WINDOW_SETS)} over {WINDOW}, the rest over the last {SLIDE}")
ENTITY_KEY = "entity_key"  # "<type>:<value>"
MIN_SCALE = 0.5  # log units (≈ ×1.65) — an entity that never varies must not alert on the smallest change
NEW_SCALE = 0.5  # one first-seen item is two z units of surprise; thresholds are calibrated on held-out history
# Set columns whose new items are weighed by rarity: an admin-port peer that many hosts used in training is
# infrastructure (a file server, a jump host), not novelty; so is a server many users log into (at 500 hosts the
# next top held-out hours after the peers: users' first logins to 3-6 common servers, z 6-12). Renamed counters
# ("new_rare_*", were "new_admin_peers", "new_login_hosts"), so an artifact without the learned prevalence is
# refused as another feature set.
RARITY_WEIGHTED: tuple[str, ...] = ("peers", "login_hosts")
NIGHT_NEW_MACHINE_WEIGHT = 2.0  # a login machine never used, at night: two anomalies of one login (see with_new_counts)
# Counts that only ever matter when higher than usual for the entity (all of them, here): one-sided z-scores.


def entity_key(frame: pd.DataFrame) -> pd.Series:
    return frame["entity_type"].astype(str) + ":" + frame["entity"].astype(str)


def known_sets(frame: pd.DataFrame) -> dict[str, dict[str, set]]:
    """Per set feature and entity key, every value seen in ``frame`` (the training history)."""
    keys = entity_key(frame)
    out: dict[str, dict[str, set]] = {}
    for col in NEW_FEATURES:
        seen: dict[str, set] = {}
        for key, values in zip(keys, frame[col], strict=True):
            if values is not None and len(values):
                seen.setdefault(key, set()).update(values)
        out[col] = seen
    return out


def prevalence(known: dict[str, dict[str, set]]) -> dict[str, dict[str, int]]:
    """Per :data:`RARITY_WEIGHTED` set column, value -> how many distinct entities had it in training.

    Learned with the model (from :func:`known_sets` of the training window, the same feature rows) and stored in
    its bundle, so batch evaluation and the stream weigh a new item identically."""
    out: dict[str, dict[str, int]] = {}
    for col in RARITY_WEIGHTED:
        counts: dict[str, int] = {}
        for values in known.get(col, {}).values():
            for v in values:
                counts[v] = counts.get(v, 0) + 1
        out[col] = counts
    return out


def rarity(users: int) -> float:
    """Weight of a new item that ``users`` other entities had in training: 1 when nobody did, 1/(1+n) after.

    Why 1/(1+n) and not a cut-off: a peer one other host uses (an admin's desktop, a shared workstation) is half
    as surprising, a server thirty hosts use adds 0.03 — no bound to tune per organization size."""
    return 1.0 / (1.0 + users)


def with_new_counts(frame: pd.DataFrame, known: dict[str, dict[str, set]],
                    prevalent: dict[str, dict[str, int]]) -> pd.DataFrame:
    """``frame`` plus the first-seen counters (values of the hour's sets the entity never had in training; for
    :data:`RARITY_WEIGHTED` columns each new value counts :func:`rarity` of its training prevalence)."""
    out = frame.copy()
    keys = entity_key(frame)
    out[ENTITY_KEY] = keys
    for col, new in NEW_FEATURES.items():
        seen = known.get(col, {})
        counts = prevalent.get(col) if col in RARITY_WEIGHTED else None
        out[new] = [0.0 if v is None else _new_weight(set(v) - seen.get(k, set()), counts)
                    for k, v in zip(keys, frame[col], strict=True)]
    # A login from a machine the account never used is ordinary in office hours (a colleague's desk, a new
    # laptop) and two login anomalies at once at night: such an hour's new *machines* (``mac:``, the DHCP lease
    # holder) count NIGHT_NEW_MACHINE_WEIGHT times, so one of them passes the threshold floor that one new item
    # alone stays under. Not new outside addresses (no lease: the address is the identity): a home or mobile
    # address is new nearly every night (at 500 hosts, 16 benign night logins to the bastion a day, docs/ml.md).
    night = frame["night_logins"].fillna(0).to_numpy() > 0
    seen = known.get("login_machines", {})
    extra = [sum(1 for m in set(v) - seen.get(k, set()) if str(m).startswith("mac:")) if v is not None and n else 0
             for k, v, n in zip(keys, frame["login_machines"], night, strict=True)]
    out["new_login_machines"] = out["new_login_machines"] + (NIGHT_NEW_MACHINE_WEIGHT - 1.0) * np.asarray(extra, float)
    return out


def _new_weight(new: set, counts: dict[str, int] | None) -> float:
    if counts is None:
        return float(len(new))
    return float(sum(rarity(counts.get(v, 0)) for v in new))


class EntityBaseline(BaseEstimator):
    """Per-entity baseline (training maximum, MAD) of every column but ``entity_key``; score = max one-sided z."""

    def __init__(self, min_scale: float = MIN_SCALE, new_scale: float = NEW_SCALE) -> None:
        self.min_scale = min_scale
        self.new_scale = new_scale

    def fit(self, X: pd.DataFrame, y: object = None) -> EntityBaseline:
        values = X.drop(columns=[ENTITY_KEY])
        self.feature_names_ = list(values.columns)
        grouped = values.groupby(X[ENTITY_KEY].to_numpy())
        median = grouped.median()
        spread = (values - median.loc[X[ENTITY_KEY].to_numpy()].to_numpy()).abs().groupby(
            X[ENTITY_KEY].to_numpy()).median() * 1.4826
        # The reference is the most the entity did in any training hour, not its typical hour: entities with a
        # daily rhythm (the backup server uploads 01:00-04:00 only) are normal at their peak, not 20 z over their
        # median. The spread (MAD around the median) says how much one unit of excess is.
        self.centre_ = grouped.max()
        self.scale_ = spread.clip(lower=self.min_scale)
        for new in NEW_FEATURES.values():  # the first-seen counts are already "surprise" units
            if new in self.scale_.columns:
                self.centre_[new] = 0.0
                self.scale_[new] = self.new_scale
        types = pd.Series(self.centre_.index.str.split(":", n=1).str[0], index=self.centre_.index)
        self.type_centre_ = self.centre_.groupby(types.to_numpy()).median()
        self.type_scale_ = self.scale_.groupby(types.to_numpy()).median().clip(lower=self.min_scale)
        return self

    def deviations(self, X: pd.DataFrame) -> pd.DataFrame:
        """One-sided robust z-score per feature (0 when at or below the entity's normal)."""
        keys = X[ENTITY_KEY].to_numpy()
        values = X[self.feature_names_].astype(float)
        known = pd.Index(self.centre_.index)
        types = np.array([k.split(":", 1)[0] for k in keys])
        centre = np.empty(values.shape)
        scale = np.empty(values.shape)
        for i, (k, t) in enumerate(zip(keys, types, strict=True)):
            if k in known:
                centre[i], scale[i] = self.centre_.loc[k].to_numpy(), self.scale_.loc[k].to_numpy()
            elif t in self.type_centre_.index:
                centre[i], scale[i] = self.type_centre_.loc[t].to_numpy(), self.type_scale_.loc[t].to_numpy()
            else:
                centre[i], scale[i] = 0.0, self.min_scale
        z = np.clip((values.to_numpy() - centre) / scale, 0.0, None)
        return pd.DataFrame(z, columns=self.feature_names_, index=X.index)

    def score_samples(self, X: pd.DataFrame) -> np.ndarray:
        """Anomaly score (higher = more anomalous): the largest one-sided z-score of the hour."""
        z = self.deviations(X)
        return z.max(axis=1).to_numpy() if len(z) else np.zeros(0)


def build_pipeline() -> Pipeline:
    """ColumnTransformer (log1p of volumes and counts, first-seen counts and entity key as they are) -> baseline."""
    prepare = ColumnTransformer(
        [("log", FunctionTransformer(np.log1p, feature_names_out="one-to-one"), list(COUNT_FEATURES)),
         ("new", "passthrough", list(NEW_FEATURES.values())),
         ("entity", "passthrough", [ENTITY_KEY])],
        verbose_feature_names_out=False,
    ).set_output(transform="pandas")
    return Pipeline([("prepare", prepare), ("baseline", EntityBaseline())])


def top_features(pipeline: Pipeline, frame: pd.DataFrame, k: int = 3) -> list[list[tuple[str, float]]]:
    """Per row, the ``k`` features that contribute most to its score: (name, z) with z > 0, largest first."""
    z = pipeline.named_steps["baseline"].deviations(pipeline.named_steps["prepare"].transform(frame))
    out = []
    for row in z.to_numpy():
        order = np.argsort(-row)[:k]
        out.append([(z.columns[j], round(float(row[j]), 2)) for j in order if row[j] > 0])
    return out


def score(pipeline: Pipeline, frame: pd.DataFrame) -> np.ndarray:
    return pipeline.score_samples(frame) if len(frame) else np.zeros(0)


FALSE_ALERTS_PER_DAY = 3.0  # the budget the thresholds are calibrated to (the bar)


def calibrate_threshold(scores: Iterable[float], margin: float = 1.0, new_scale: float = NEW_SCALE,
                        holdout_days: float = 0.0, budget_per_day: float = FALSE_ALERTS_PER_DAY) -> float:
    """The alert threshold: above all but the ``⌊budget_per_day × holdout_days⌋`` highest scores of held-out benign
    history, plus a margin (z units), and never below one first-seen item plus the margin.

    Why not simply above the highest: with hundreds of entities the largest of thousands of benign entity-hours
    grows with their number (measured at 500 hosts: one held-out score of 18 put the threshold at 19 and no stealth
    incident reached it). The budget lets the held-out period itself raise what a day may raise. A held-out period
    under a third of a day allows none, which is the highest score as before.

    The floor: one new peer, country, login machine or login host on its own (z = 1 / ``new_scale``) is what a
    day of an organization brings — people use another server, a laptop gets its first SMB share — and a held-out
    quarter that happens to hold none of them calibrated the threshold under it (measured: 18 false alerts in a
    day of 30 hosts, nearly all one new item). An hour alerts on two new items of one kind, or on one well above
    the entity's own volumes."""
    values = sorted(scores, reverse=True)
    allowed = int(budget_per_day * holdout_days)
    reference = values[allowed] if allowed < len(values) else 0.0
    return max(reference, 1.0 / new_scale) + margin
