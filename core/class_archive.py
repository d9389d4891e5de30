"""A class-data-sharing (CDS) archive for the Spark driver's JVM: where it is and whether it fits this JVM.

Why: every Nightjar command that runs Spark starts a JVM, and a JVM start spends most of its time loading and
verifying Spark's classes. With a dynamic CDS archive of those classes (``-XX:SharedArchiveFile``) the JVM maps them
ready-made: a Spark session was ready after 2.4-2.6 s instead of 4.1-4.2 s (docs/performance.md, twentieth and
twenty-first sessions). That is paid by every ``nightjar`` command, every pipeline restart, and the test suite's
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


def archive_dir(environ: dict[str, str] | None = None) -> Path:
    """``$NIGHTJAR_CLASS_ARCHIVE`` when it names a directory, else beside the interpreter's packages
    (``.venv/share/nightjar`` for the README's set-up)."""
    value = (os.environ if environ is None else environ).get(ENV_CLASS_ARCHIVE, "").strip()
    return Path(value) if value and value.lower() not in OFF_WORDS else Path(sys.prefix) / "share" / "nightjar"


ARCHIVE_NAME = "spark-driver.jsa"
KEY_NAME = "spark-driver.key"  # archive_key() of the JVM and Spark the archive was made with


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


def enabled(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(ENV_CLASS_ARCHIVE, "").strip().lower() not in OFF_WORDS


def usable_archive() -> Path | None:
    """The archive, when it is there, switched on, and made with this JVM and this Spark."""
    archive, key = archive_dir() / ARCHIVE_NAME, archive_dir() / KEY_NAME
    if not enabled() or not archive.is_file() or not key.is_file():
        return None
    try:
        return archive if key.read_text().strip() == archive_key() else None
    except OSError:
        return None


def driver_java_options() -> str:
    """``-XX:SharedArchiveFile=…`` for the driver JVM when :func:`usable_archive` finds one, else ``""``."""
    archive = usable_archive()
    if archive is None:
        return ""
    option = f"-XX:SharedArchiveFile={archive}"
    return f'"{option}"' if any(c.isspace() for c in option) else option  # Spark's launcher splits on blanks
