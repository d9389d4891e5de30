"""A class-data-sharing (CDS) archive for the Spark driver's JVM: where it is and whether it fits this JVM.

Why: every Nightjar command that runs Spark starts a JVM, and a JVM start spends most of its time loading and
verifying Spark's classes. With a dynamic CDS archive of those classes (``-XX:SharedArchiveFile``) the JVM maps them
ready-made: a Spark session was ready after 2.4-2.6 s instead of 3.8-4.3 s (docs/performance.md, "Start-up").
That is paid by every ``nightjar`` command, every pipeline restart, and the test suite's
many subprocesses.

``scripts/setup`` builds the archive (``python -m nightjar.class_archive_build``) into the virtual environment,
with a key naming the JVM and the Spark it was made with. :func:`driver_java_options` gives the option only when the
key still matches: after a JDK or PySpark upgrade the archive is not used (and a JVM given a stale archive would
silently drop even its own base archive) until set-up runs again. ``NIGHTJAR_CLASS_ARCHIVE=off`` turns it off.

This module starts nothing: the builder is in the assembly layer, because its workload uses the stages.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

# "off" (or 0/false/no): never pass an archive to the JVM; a directory: the archive is there, not in the default place.
ENV_CLASS_ARCHIVE = "NIGHTJAR_CLASS_ARCHIVE"
OFF_WORDS = frozenset({"off", "0", "false", "no"})
ARCHIVE_NAME = "spark-driver.jsa"
KEY_NAME = "spark-driver.key"  # archive_key() of the JVM and Spark the archive was made with


def _setting() -> str:
    return os.environ.get(ENV_CLASS_ARCHIVE, "").strip()


def enabled() -> bool:
    return _setting().lower() not in OFF_WORDS


def archive_dir() -> Path:
    """``$NIGHTJAR_CLASS_ARCHIVE`` when it names a directory, else beside the interpreter's packages
    (``.venv/share/nightjar`` for the README's set-up)."""
    value = _setting()
    return Path(value) if value and enabled() else Path(sys.prefix) / "share" / "nightjar"


def java_executable() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on ``PATH`` (as ``spark-class``)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_key() -> str | None:
    """What the archive depends on: the JVM (its binary and ``libjvm.so``, by path, size and time) and Spark's jars
    (by name). ``None`` when no JVM is found. Cheap: a few ``stat`` calls and one directory listing."""
    java = java_executable()
    if java is None:
        return None
    from pyspark.find_spark_home import _find_spark_home

    parts = [str(java)]
    for path in (java, *sorted(java.parent.parent.glob("lib/server/libjvm.so"))):
        stat = path.stat()
        parts.append(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}")
    jars = Path(_find_spark_home()) / "jars"
    parts.extend(sorted(p.name for p in jars.glob("*.jar")))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def is_current(directory: Path, key: str | None) -> bool:
    """``directory`` holds an archive whose key file says it was made for ``key`` (:func:`archive_key`)."""
    archive, key_file = directory / ARCHIVE_NAME, directory / KEY_NAME
    try:
        return key is not None and archive.is_file() and key_file.read_text().strip() == key
    except OSError:  # no key file, or unreadable
        return False


def usable_archive() -> Path | None:
    """The archive, when it is there, switched on, and made with this JVM and this Spark."""
    directory = archive_dir()
    return directory / ARCHIVE_NAME if enabled() and is_current(directory, archive_key()) else None


def driver_java_options() -> str:
    """``-XX:SharedArchiveFile=…`` for the driver JVM when :func:`usable_archive` finds one, else ``""``."""
    archive = usable_archive()
    if archive is None:
        return ""
    option = f"-XX:SharedArchiveFile={archive}"
    return f'"{option}"' if any(c.isspace() for c in option) else option  # Spark's launcher splits on blanks
