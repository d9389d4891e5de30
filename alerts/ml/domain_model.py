"""The lexical domain model: does a queried name look machine-generated (DGA)?

Trained on **benign names only** (the names the organization queried in the training history), so it cannot learn
the generator's DGA alphabet: it learns what the organization's names look like and scores how far a name is
from that. Features are public-knowledge lexical measures of the name's first label (what a DGA randomizes):
length, Shannon entropy, digit and vowel ratios, the longest consonant run, and the character-bigram rarity of
the label against the benign corpus (mean −log P(bigram), add-one smoothed). A scikit-learn ``Pipeline``:
:class:`LexicalFeatures` (fitted: the bigram table) -> ``StandardScaler`` -> ``IsolationForest`` (fixed seed).
A forest fits here: one population of names, no per-entity baseline needed.

The threshold is the highest score of a held-out share of benign names plus a margin; one name over it is not
an alert — a host-hour alerts when at least :data:`MIN_SUSPICIOUS` of its names are over it (a DGA bot tries
dozens; a typo or an odd CDN name is one).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.ensemble import IsolationForest
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

SEED = 15
MIN_SUSPICIOUS = 5  # suspicious names in one host-hour before it alerts
LEXICAL_FEATURES: tuple[str, ...] = ("length", "entropy", "digit_ratio", "vowel_ratio", "consonant_run",
                                     "bigram_rarity")
VOWELS = set("aeiou")
_BOUNDARY = "^$"


def label_of(name: str) -> str:
    """The label a DGA randomizes: the first label, or the second when the first is ``www``."""
    parts = [p for p in name.lower().strip(".").split(".") if p]
    if not parts:
        return ""
    return parts[1] if parts[0] == "www" and len(parts) > 2 else parts[0]


def entropy(text: str) -> float:
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _bigrams(label: str) -> list[str]:
    s = _BOUNDARY[0] + label + _BOUNDARY[1]
    return [s[i:i + 2] for i in range(len(s) - 1)]


class LexicalFeatures(BaseEstimator, TransformerMixin):
    """Names -> :data:`LEXICAL_FEATURES`; fitting learns the benign bigram frequencies."""

    def fit(self, X: Sequence[str], y: object = None) -> LexicalFeatures:
        counts: Counter = Counter()
        for name in X:
            counts.update(_bigrams(label_of(name)))
        self.bigram_counts_ = dict(counts)
        self.total_ = sum(counts.values())
        self.vocabulary_ = max(len(counts), 1) + 1
        return self

    def _rarity(self, label: str) -> float:
        grams = _bigrams(label)
        denom = self.total_ + self.vocabulary_
        return sum(-math.log((self.bigram_counts_.get(g, 0) + 1) / denom) for g in grams) / len(grams)

    def transform(self, X: Sequence[str]) -> pd.DataFrame:
        rows = []
        for name in X:
            label = label_of(name)
            n = max(len(label), 1)
            run = best = 0
            for ch in label:
                run = run + 1 if ch.isalpha() and ch not in VOWELS else 0
                best = max(best, run)
            rows.append((len(label), entropy(label), sum(c.isdigit() for c in label) / n,
                         sum(c in VOWELS for c in label) / n, best, self._rarity(label)))
        return pd.DataFrame(rows, columns=list(LEXICAL_FEATURES))

    def get_feature_names_out(self, input_features: object = None) -> np.ndarray:
        return np.array(LEXICAL_FEATURES)


def build_pipeline() -> Pipeline:
    return Pipeline([("lexical", LexicalFeatures()), ("scale", StandardScaler()),
                     ("forest", IsolationForest(n_estimators=200, random_state=SEED))])


def score_names(pipeline: Pipeline, names: Sequence[str]) -> np.ndarray:
    """Anomaly score per name, higher = more DGA-like (the negated ``score_samples`` of the forest)."""
    if not len(names):
        return np.zeros(0)
    return -pipeline.score_samples(list(names))


def fit(names: Iterable[str], holdout: float = 0.25) -> tuple[Pipeline, float, dict]:
    """Fit on benign names; the threshold is the highest held-out benign score plus a margin."""
    unique = sorted({n.lower() for n in names if n})
    if len(unique) < 20:
        raise ValueError(f"only {len(unique)} distinct benign domain names in the training window: need 20 or more")
    rng = np.random.default_rng(SEED)
    order = rng.permutation(len(unique))
    cut = max(1, int(len(unique) * holdout))
    held = [unique[i] for i in order[:cut]]
    train = [unique[i] for i in order[cut:]]
    calib = build_pipeline().fit(train)
    threshold = float(np.max(score_names(calib, held))) + 0.02
    pipeline = build_pipeline().fit(unique)
    return pipeline, threshold, {"names": len(unique), "holdout_names": len(held)}

