"""Build the driver JVM's class archive that ``core/class_archive.py`` hands to every Spark session.

Run by ``scripts/setup`` (``python -m nightjar.class_archive_build``; ``--dir`` for another place, ``--force`` to
rebuild a current one). It starts a Spark session whose JVM has ``-XX:ArchiveClassesAtExit``, runs a small workload
that loads the classes a Nightjar command loads (SQL planning and execution, the parse, the DHCP operator's pandas
exchange, a stateful streaming query with ``foreachBatch``), stops Spark and waits for the JVM to exit, which is when
it writes the archive. The archive and its key (the JVM and Spark it fits) are then moved into place atomically, so a
command starting meanwhile sees the old pair or the new one, never half of one.

A class the workload did not load is simply loaded from its jar as before; the archive only saves time.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from core import class_archive
from core.config import Settings
from core.spark_session import build_spark
from enrich.dhcp_sessions import attribute_batch, events_from
from ingest.arrow_parse import parse_bronze
from ingest.file_source import lines_dataframe

log = logging.getLogger(__name__)

# One line of each kind the workload parses: an sshd login (syslog) and a Zeek conn record.
_SAMPLE_LINES = (
    "<38>Nov 27 10:00:00 web-01 sshd[4242]: Accepted password for alice from 10.1.2.3 port 50000 ssh2",
    '{"_path":"conn","ts":1764237600.0,"uid":"C1x","id.orig_h":"10.1.2.3","id.orig_p":50000,'
    '"id.resp_h":"93.184.216.34","id.resp_p":443,"proto":"tcp","duration":1.5,"orig_bytes":10,"resp_bytes":20}',
)
JVM_EXIT_TIMEOUT_S = 300.0


def build(target_dir: Path, force: bool = False) -> Path | None:
    """Build the archive into ``target_dir`` unless a current one is there; return it (``None``: no JVM found)."""
    key = class_archive.archive_key()
    if key is None:
        print("class archive: no java found; skipped (Spark commands need one)", file=sys.stderr)
        return None
    archive, key_file = target_dir / class_archive.ARCHIVE_NAME, target_dir / class_archive.KEY_NAME
    if not force and class_archive.is_current(target_dir, key):
        print(f"class archive: up to date ({archive})")
        return archive
    target_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print("class archive: building (a Spark session runs a small workload, then its JVM writes the archive)…",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="nightjar-class-archive-") as tmp:
        work = Path(tmp)
        dumped = target_dir / f".{archive.name}.{os.getpid()}.tmp"
        try:
            _run_workload_and_exit(work, dumped)
            if not dumped.is_file() or dumped.stat().st_size == 0:
                raise RuntimeError(f"the JVM exited without writing {dumped}")
            os.replace(dumped, archive)
        finally:
            dumped.unlink(missing_ok=True)
    tmp_key = target_dir / f".{key_file.name}.{os.getpid()}.tmp"
    tmp_key.write_text(key + "\n")
    os.replace(tmp_key, key_file)
    size_mb = archive.stat().st_size / 1e6
    print(f"class archive: {size_mb:.0f} MB in {time.monotonic() - started:.1f} s ({archive})")
    return archive


def _run_workload_and_exit(work: Path, dumped: Path) -> None:
    # The builder's own JVM must not map an archive: -XX:SharedArchiveFile naming a dynamic archive beside
    # -XX:ArchiveClassesAtExit is an error.
    os.environ[class_archive.ENV_CLASS_ARCHIVE] = "off"
    from pyspark import SparkContext

    settings = Settings(lake=work / "lake")
    # The dump names every class it cannot keep (generated, signed, pre-Java-6) at warning level on stdout: errors only,
    # to the JVM's log.
    spark = build_spark(settings, app_name="class-archive",
                        java_options=f"-XX:ArchiveClassesAtExit={dumped} -Xlog:disable -Xlog:all=error:stderr")
    try:
        _workload(spark, work)
    finally:
        spark.stop()
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)
        if gateway is not None:
            gateway.shutdown()
        if proc is not None:  # the JVM exits when its stdin closes, and writes the archive on the way out
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=JVM_EXIT_TIMEOUT_S)
        SparkContext._gateway = None
        SparkContext._jvm = None


def _workload(spark, work: Path) -> None:  # type: ignore[no-untyped-def]
    """What most Nightjar commands load: a parse, the DHCP operator's Arrow exchange, a stateful stream."""
    parsed = parse_bronze(lines_dataframe(spark, _SAMPLE_LINES))
    rows = events_from(attribute_batch(parsed, ["10.0.0.0/8"])).collect()
    if len(rows) != len(_SAMPLE_LINES):
        raise RuntimeError(f"the workload parsed {len(rows)} of {len(_SAMPLE_LINES)} sample lines")
    source = work / "stream"
    source.mkdir()
    (source / "part-0.json").write_text('{"k": "a", "n": 1}\n{"k": "b", "n": 2}\n')
    query = (spark.readStream.schema("k string, n long").json(str(source))
             .groupBy("k").count()
             .writeStream.outputMode("update")
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True)
             .foreachBatch(lambda df, _batch_id: df.collect())
             .start())
    query.awaitTermination()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nightjar.class_archive_build", description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, default=class_archive.archive_dir(),
                        help="where the archive and its key go (default: %(default)s)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the archive is current")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        build(args.dir, force=args.force)
    except Exception as exc:  # set-up goes on without it: commands work, each start is ~2 s slower
        print(f"class archive: not built ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

