"""The driver JVM's class archive: built by set-up, handed to the JVM only when it fits, and really mapped."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core import class_archive

REPO = Path(__file__).resolve().parent.parent


def _place(directory: Path, key: str | None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / class_archive.ARCHIVE_NAME
    archive.write_bytes(b"not read by these checks")
    if key is not None:
        (directory / class_archive.KEY_NAME).write_text(key + "\n")
    return archive


def test_the_archive_is_passed_only_when_its_key_names_this_jvm_and_spark(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    key = class_archive.archive_key()
    assert key and len(key) == 64
    monkeypatch.setenv(class_archive.ENV_CLASS_ARCHIVE, str(tmp_path / "current"))
    archive = _place(tmp_path / "current", key)
    assert class_archive.usable_archive() == archive
    assert class_archive.driver_java_options() == f"-XX:SharedArchiveFile={archive}"

    monkeypatch.setenv(class_archive.ENV_CLASS_ARCHIVE, str(tmp_path / "stale"))
    _place(tmp_path / "stale", "0" * 64)  # made with another JDK or PySpark
    assert class_archive.usable_archive() is None and class_archive.driver_java_options() == ""

    monkeypatch.setenv(class_archive.ENV_CLASS_ARCHIVE, str(tmp_path / "keyless"))
    _place(tmp_path / "keyless", None)
    assert class_archive.usable_archive() is None

    monkeypatch.setenv(class_archive.ENV_CLASS_ARCHIVE, "off")
    assert class_archive.archive_dir() == Path(sys.prefix) / "share" / "nightjar"
    assert class_archive.usable_archive() is None


def test_the_key_changes_with_the_jvm_and_with_sparks_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = class_archive.archive_key()
    java = class_archive.java_executable()
    assert java is not None
    fake_home = tmp_path / "jdk"
    (fake_home / "bin").mkdir(parents=True)
    (fake_home / "bin" / "java").write_bytes(java.read_bytes()[:1024])
    monkeypatch.setenv("JAVA_HOME", str(fake_home))
    assert class_archive.java_executable() == (fake_home / "bin" / "java").resolve()
    assert class_archive.archive_key() not in (None, key)
    monkeypatch.delenv("JAVA_HOME")
    assert class_archive.archive_key() == key

    from pyspark.find_spark_home import _find_spark_home

    spark_home = tmp_path / "spark"
    (spark_home / "jars").mkdir(parents=True)
    for jar in sorted((Path(_find_spark_home()) / "jars").glob("*.jar"))[1:]:  # one jar fewer
        (spark_home / "jars" / jar.name).touch()
    monkeypatch.setenv("SPARK_HOME", str(spark_home))
    assert class_archive.archive_key() not in (None, key)


def test_a_path_with_blanks_reaches_the_jvm_as_one_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = tmp_path / "with blanks"
    monkeypatch.setenv(class_archive.ENV_CLASS_ARCHIVE, str(directory))
    archive = _place(directory, class_archive.archive_key())
    assert class_archive.driver_java_options() == f'"-XX:SharedArchiveFile={archive}"'


@pytest.mark.slow
def test_setup_builds_an_archive_that_a_spark_session_maps(tmp_path: Path) -> None:
    """The builder as ``scripts/setup`` runs it; then a session started with ``-Xshare:on`` (which makes the JVM
    refuse to start when the archive cannot be mapped) loads Spark's classes from the archive."""
    target = tmp_path / "archive"
    env = {**os.environ, class_archive.ENV_CLASS_ARCHIVE: str(target)}
    built = subprocess.run([sys.executable, "-m", "nightjar.class_archive_build", "--dir", str(target)], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    assert "class archive:" in built.stdout and "MB in" in built.stdout, built.stdout
    assert "[warning]" not in built.stdout  # the dump's warnings go to the JVM's log, not the terminal
    archive = target / class_archive.ARCHIVE_NAME
    assert archive.stat().st_size > 50_000_000
    assert (target / class_archive.KEY_NAME).read_text().strip() == class_archive.archive_key()

    again = subprocess.run([sys.executable, "-m", "nightjar.class_archive_build", "--dir", str(target)], cwd=REPO,
                           env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "up to date" in again.stdout, again.stdout + again.stderr

    loads = tmp_path / "class-load.txt"
    script = textwrap.dedent(f"""
        from pathlib import Path
        from core.config import Settings
        from core.spark_session import build_spark
        spark = build_spark(Settings(lake=Path({str(tmp_path / 'lake')!r})), app_name="archive-check",
                            java_options="-Xshare:on -Xlog:class+load=info:file={loads}")
        options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
        print(spark.range(10).selectExpr("sum(id)").first()[0], options)
        spark.stop()
    """)
    session = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=300)
    assert session.returncode == 0, session.stderr
    total, options = session.stdout.split(" ", 1)
    assert total == "45" and f"-XX:SharedArchiveFile={archive}" in options
    from_archive = [line for line in loads.read_text().splitlines() if "shared objects file (top)" in line]
    assert any(" org.apache.spark.sql.SparkSession " in line for line in from_archive), len(from_archive)
    assert len(from_archive) > 5_000
