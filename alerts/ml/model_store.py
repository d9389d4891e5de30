"""Models as lake artifacts: ``<lake>/models/<name>/<version>/model.joblib`` + ``metadata.json``.

A version directory is written under a temporary name and renamed into place, so a reader never sees half a
model. The metadata says what the model needs to be used safely — its feature set (names and digest), the
scikit-learn version that pickled it, the training window, the threshold and the metrics measured when it was
trained. :func:`load_current` takes the newest version that is *usable here*: one built with another
scikit-learn version, for another feature set, or whose file is unreadable is refused with one clear line (and
logged once), and the newest usable older version is used instead — the stream keeps scoring with the previous
model.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import joblib
import sklearn

from core.config import MODELS_DIR

log = logging.getLogger(__name__)

MODEL_FILE = "model.joblib"
METADATA_FILE = "metadata.json"


class ModelRefused(Exception):
    """A stored model version cannot be used here; the message is one line naming the version and the reason."""


def feature_digest(features: list[str] | tuple[str, ...]) -> str:
    return hashlib.sha256("\n".join(features).encode()).hexdigest()[:16]


@dataclass
class StoredModel:
    name: str
    version: str
    path: Path
    metadata: dict[str, Any]
    bundle: dict[str, Any] = field(default_factory=dict)


def models_root(lake: Path) -> Path:
    return lake / MODELS_DIR


def versions(lake: Path, name: str) -> list[str]:
    """Version directories of model ``name``, oldest first (versions are zero-padded, so they sort)."""
    root = models_root(lake) / name
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("v")
                  and (p / METADATA_FILE).exists())


def save(lake: Path, name: str, bundle: dict[str, Any], metadata: dict[str, Any]) -> StoredModel:
    """Write a new version of ``name`` (atomically: a temporary directory renamed into place)."""
    root = models_root(lake) / name
    root.mkdir(parents=True, exist_ok=True)
    existing = versions(lake, name)
    number = int(existing[-1][1:]) + 1 if existing else 1
    version = f"v{number:04d}"
    meta = {**metadata, "name": name, "version": version, "sklearn_version": sklearn.__version__,
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")}
    tmp = root / f".tmp-{version}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    joblib.dump(bundle, tmp / MODEL_FILE)
    (tmp / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    final = root / version
    tmp.rename(final)
    return StoredModel(name, version, final, meta, bundle)


def read_metadata(lake: Path, name: str, version: str) -> dict[str, Any]:
    path = models_root(lake) / name / version / METADATA_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelRefused(f"model {name} {version}: metadata.json unreadable ({exc})") from None


def check_compatible(meta: dict[str, Any], features: list[str] | tuple[str, ...]) -> None:
    """Raise :class:`ModelRefused` unless ``meta`` was built with this scikit-learn and this feature set."""
    where = f"model {meta.get('name')} {meta.get('version')}"
    built = meta.get("sklearn_version")
    if built != sklearn.__version__:
        raise ModelRefused(f"{where} refused: built with scikit-learn {built}, this is {sklearn.__version__} "
                           f"(retrain with `nightjar ml train`)")
    if meta.get("feature_digest") != feature_digest(features):
        raise ModelRefused(f"{where} refused: trained on another feature set (digest {meta.get('feature_digest')}, "
                           f"expected {feature_digest(features)}; retrain with `nightjar ml train`)")


def load(lake: Path, name: str, version: str, features: list[str] | tuple[str, ...]) -> StoredModel:
    """One version, checked; :class:`ModelRefused` (one line) when it cannot be used."""
    meta = read_metadata(lake, name, version)
    check_compatible(meta, features)
    path = models_root(lake) / name / version
    try:
        bundle = joblib.load(path / MODEL_FILE)
    except Exception as exc:  # truncated, corrupted, or pickled classes that no longer exist
        raise ModelRefused(f"model {name} {version} refused: {MODEL_FILE} unreadable "
                           f"({type(exc).__name__}: {str(exc)[:120]})") from None
    if not isinstance(bundle, dict) or "pipeline" not in bundle or "threshold" not in bundle:
        raise ModelRefused(f"model {name} {version} refused: {MODEL_FILE} is not a Nightjar model bundle")
    return StoredModel(name, version, path, meta, bundle)


class ModelTracker:
    """The model a scorer should use now: re-checked between micro-batches, refused versions reported once.

    :meth:`current` returns the newest usable version (or ``None``); a newer version that is refused leaves the
    previous one in use.
    """

    def __init__(self, lake: Path, name: str, features: list[str] | tuple[str, ...]) -> None:
        self.lake, self.name, self.features = lake, name, tuple(features)
        self.model: StoredModel | None = None
        self.refused: dict[str, str] = {}  # version -> reason (logged once)

    def current(self) -> StoredModel | None:
        for version in reversed(versions(self.lake, self.name)):
            if self.model is not None and version == self.model.version:
                return self.model
            if version in self.refused:
                continue
            try:
                model = load(self.lake, self.name, version, self.features)
            except ModelRefused as exc:
                self.refused[version] = str(exc)
                kept = f"; still scoring with {self.model.version}" if self.model else ""
                log.error("%s%s", exc, kept)
                continue
            if self.model is None or model.version > self.model.version:
                log.info("model %s %s loaded (threshold %.3f)", self.name, model.version, model.bundle["threshold"])
                self.model = model
            return self.model
        return self.model
