"""``nightjar bench parse``: parse-stage events/s in batch, and bronze -> events in the stream, same workload.

Workload: ``--events`` records from the sample producer's mix (sshd, sudo, dhcpd as RFC 3164 and RFC 5424
syslog; Zeek conn and dns JSON) with ``--bad-percent`` unparseable lines mixed in.

The parse is the events contract's (v2): ``ingest.arrow_parse.parse_bronze``, the source registry's Python parsers
over Arrow batches (one ``mapInArrow``), narrow typed core + ``detail``.

1. Batch, parse stage alone: the records as an in-memory bronze DataFrame (cached and counted first, so
   reading is not timed) -> ``parse_bronze`` -> Spark's ``noop`` sink (every column computed, nothing
   written). A warm-up run on a slice starts the Python workers first.
2. Windows event-log lines vs sshd lines (the issue's bar: Windows within 25 % of sshd), each workload warmed
   up, then timed alternately and repeated (``--rounds``); the medians and their ratio are reported.
3. The parse's cost, warmed up, median of ``--rounds``: events/s, CPU time per event of the JVM and its Python
   workers (local mode), and the build and plan time of one 2,000-line micro-batch (what a streaming query pays
   per micro-batch before it reads a record).
4. Stream, bronze -> events: the records produced to two fresh topics, then Kafka source -> bronze ->
   ``parse_bronze`` -> ``events`` and ``quarantine`` Delta tables with availableNow. Reported steady
   (micro-batches after the first) and end to end (query start to finish, including warm-up).

``--json`` prints one JSON object with every figure and the load average on stdout (the table on stderr).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

# Stage modules are imported inside the functions that use them: the CLI imports this module to parse `nightjar bench
# parse`'s arguments, and --help or a bad argument must not wait for pyspark (nightjar/cli.py).
from core.config import TABLE_EVENTS, TABLE_QUARANTINE, Settings
from core.errors import UserError
from ingest.embedded_broker import EmbeddedBroker, ensure_topics
from ingest.sample_producer import sample_lines

BAD_LINES = (b"not syslog at all", b'{"_path":"conn","ts":15219', b"\xff\xfe\x00 binary", b"")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--events", type=int, default=200_000, help="records in the workload (default 200000)")
    parser.add_argument("--bad-percent", type=float, default=1.0, help="share of unparseable lines (default 1)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=50_000,
                        help="micro-batch size of the streaming run (default 50000)")
    parser.add_argument("--skip-stream", action="store_true", help="measure the batch parse stage only")
    parser.add_argument("--keep-lake", action="store_true", help="keep the streaming run's lake directory")
    parser.add_argument("--skip-windows", action="store_true",
                        help="skip the Windows-event-log vs sshd parse-rate comparison")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds of each of the Windows and sshd workloads, alternated (default 3)")
    parser.add_argument("--skip-cost", action="store_true",
                        help="skip the parse's cost figures (CPU per event, build + plan of a 2,000-line batch)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with every figure (and the load average) on stdout, "
                             "the table on stderr")


def workload(n: int, bad_percent: float, seed: int = 7) -> list[tuple[str, bytes]]:
    """``n`` (kind, raw) records, kind ``syslog`` or ``zeek``."""
    rng = random.Random(seed)
    lines = sample_lines(random.Random(seed), dt.datetime.now(dt.UTC))
    out = []
    for _ in range(n):
        if rng.random() * 100 < bad_percent:
            out.append(("syslog", rng.choice(BAD_LINES)))
            continue
        topic, _key, value = next(lines)
        out.append(("zeek" if topic.endswith("zeek") else "syslog", value))
    return out


# Windows event logs as EvntSLog forwards them (rendered text and @cee JSON), the mix of a domain controller's
# Security log; and sshd lines of the same kinds (logon success/failure, logoff) for the comparison.
_WIN = "<133>1 2018-03-24T08:59:54-07:00 dc-{h}.corp.example EvntSLog - - - "
_WINDOWS_LINES = (
    _WIN + "An account was successfully logged on. Subject: Security ID: S-1-0-0 Account Name: - Account Domain: - "
    "Logon ID: 0x0 Logon Type: 3 New Logon: Security ID: S-1-5-21-1-2-3-{n} Account Name: user{n} Account Domain: "
    "CORP Logon ID: 0x3bad0b8 Logon GUID: {{3927FFCA-9038-917B-C030-965416739BC7}} Process Information: Process ID: "
    "0x0 Process Name: - Network Information: Workstation Name: Source Network Address: 10.0.{h}.25 Source Port: "
    "49361 Detailed Authentication Information: Logon Process: Kerberos Authentication Package: Kerberos Transited "
    "Services: - Package Name (NTLM only): - Key Length: 0 This event is generated when a logon session is created. "
    "It is generated on the computer that was accessed.",
    _WIN + "An account failed to log on. Subject: Security ID: S-1-0-0 Account Name: - Account Domain: - Logon ID: "
    "0x0 Logon Type: 3 Account For Which Logon Failed: Security ID: S-1-0-0 Account Name: admin{n} Account Domain: "
    "WS Failure Information: Failure Reason: Unknown user name or bad password. Status: 0xc000006d Sub Status: "
    "0xc000006a Process Information: Caller Process ID: 0x0 Caller Process Name: - Network Information: Workstation "
    "Name: WS Source Network Address: 10.150.{h}.20 Source Port: 38370 Detailed Authentication Information: Logon "
    "Process: NtLmSsp Authentication Package: NTLM Transited Services: - Package Name (NTLM only): - Key Length: 0",
    _WIN + "An account was logged off. Subject: Security ID: S-1-5-21-1-2-3-{n} Account Name: user{n} Account "
    "Domain: CORP Logon ID: 0x2e76d56 Logon Type: 3 This event is generated when a logon session is destroyed.",
    _WIN + "Special privileges assigned to new logon. Subject: Security ID: S-1-5-18 Account Name: DC{h}$ Account "
    "Domain: CORP Logon ID: 0x3bad0b8 Privileges: SeSecurityPrivilege SeBackupPrivilege SeRestorePrivilege",
    _WIN + "The domain controller attempted to validate the credentials for an account. Authentication Package: "
    "MICROSOFT_AUTHENTICATION_PACKAGE_V1_0 Logon Account: user{n} Source Workstation: WS{h} Error Code: 0x0",
    _WIN + '@cee: {{"source": "dc-{h}.corp.example", "msg": "An account was logged off.\\r\\n\\r\\nSubject:'
    '\\r\\n\\tSecurity ID:\\t\\tS-1-5-21-1-2-3-{n}", "nteventlogtype": "Security", "sourceproc": '
    '"Microsoft-Windows-Security-Auditing", "id": "4634", "user": "N\\\\A", "TargetUserSid": "S-1-5-21-1-2-3-{n}", '
    '"TargetUserName": "user{n}", "TargetDomainName": "CORP", "TargetLogonId": "0x22006e9", "LogonType": "3", '
    '"catname": "Logoff", "keyword": "Audit Success", "level": "Information"}}',
)
_SSHD_LINES = (
    "<38>Mar 24 08:59:54 bastion-{h} sshd[4{n}]: Accepted publickey for user{n} from 10.0.{h}.5 port 50022 ssh2: "
    "ED25519 SHA256:abcdefghijklmnop",
    "<38>Mar 24 08:59:54 bastion-{h} sshd[4{n}]: Failed password for invalid user admin{n} from 203.0.113.{h} "
    "port 4242 ssh2",
    "<38>Mar 24 08:59:54 bastion-{h} sshd[4{n}]: Disconnected from user user{n} 10.0.{h}.5 port 50022",
    "<38>Mar 24 08:59:54 bastion-{h} sshd[4{n}]: Invalid user test{n} from 198.51.100.{h} port 5555",
)


def source_lines(templates: tuple[str, ...], n: int, seed: int = 7) -> list[tuple[str, bytes]]:
    """``n`` syslog records cycling through ``templates`` with varying user/host numbers."""
    rng = random.Random(seed)
    return [("syslog", templates[i % len(templates)].format(n=rng.randrange(1000), h=rng.randrange(1, 250))
             .encode()) for i in range(n)]


def bench_windows_vs_sshd(spark, n: int, max_bytes: int, rounds: int = 3) -> dict[str, float]:
    """Parse-stage events/s of Windows event-log lines and of sshd lines, same method as :func:`bench_batch`.

    Fair to both: each workload is cached and warmed up first (JVM code generation, Python workers), then the
    two are timed alternately (W, S, W, S, …) ``rounds`` times each, so that a change of machine load or a
    late JIT compilation falls on both; the median of each is reported (and the best, for reference)."""
    import statistics

    workloads = {"windows": source_lines(_WINDOWS_LINES, n), "sshd": source_lines(_SSHD_LINES, n)}
    frames = {name: _cached_bronze(spark, records) for name, records in workloads.items()}
    rates: dict[str, list[float]] = {name: [] for name in workloads}
    per_cpu: dict[str, list[float]] = {name: [] for name in workloads}
    jvm = _jvm_pid(spark)
    try:
        for bronze in frames.values():
            _time_parse(bronze, max_bytes)  # warm-up, not counted
        for _ in range(rounds):
            for name, bronze in frames.items():
                cpu = _cpu_seconds(jvm)
                rates[name].append(len(workloads[name]) / _time_parse(bronze, max_bytes))
                if cpu is not None:
                    per_cpu[name].append(len(workloads[name]) / max(_cpu_seconds(jvm) - cpu, 1e-3))
    finally:
        for bronze in frames.values():
            bronze.unpersist()
    windows, sshd = statistics.median(rates["windows"]), statistics.median(rates["sshd"])
    out = {"windows_events_per_s": windows, "sshd_events_per_s": sshd, "windows_to_sshd": windows / sshd,
           "windows_best_events_per_s": max(rates["windows"]), "sshd_best_events_per_s": max(rates["sshd"]),
           "rounds": rounds}
    if per_cpu["windows"] and per_cpu["sshd"]:
        w_cpu, s_cpu = statistics.median(per_cpu["windows"]), statistics.median(per_cpu["sshd"])
        out |= {"windows_events_per_cpu_s": w_cpu, "sshd_events_per_cpu_s": s_cpu, "windows_to_sshd_cpu": w_cpu / s_cpu}
    return out


def _jvm_pid(spark) -> int | None:
    """The driver JVM's pid in local mode, where it also runs every task (elsewhere the executors' CPU is not here)."""
    if not spark.sparkContext.master.startswith("local"):
        return None
    try:
        return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:
        return None


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc), or None.

    Why: on a shared machine a workload's wall-clock rate swings with the neighbours' load (3.6x between rounds was
    seen); the CPU the parse itself spent is steadier, so the Windows/sshd ratio is also reported per CPU second."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cached_bronze(spark, records: list[tuple[str, bytes]]):
    """The records as a cached, counted bronze DataFrame (so reading them is never timed)."""
    from ingest.file_source import lines_dataframe

    bronze = lines_dataframe(spark, [raw for _, raw in records], topic="bench").repartition(2).cache()
    bronze.count()
    return bronze


def _parse(bronze, max_bytes: int):
    from ingest.arrow_parse import parse_bronze

    return parse_bronze(bronze, max_record_bytes=max_bytes)


def _time_parse(bronze, max_bytes: int) -> float:
    """Seconds to compute every column of ``parse_bronze(bronze)`` (Spark's ``noop`` sink writes nothing)."""
    started = time.monotonic()
    _parse(bronze, max_bytes).write.format("noop").mode("overwrite").save()
    return time.monotonic() - started


def bench_batch(spark, records: list[tuple[str, bytes]], max_bytes: int) -> tuple[float, int]:
    from ingest.arrow_parse import ERROR_COLUMN

    bronze = _cached_bronze(spark, records)
    _time_parse(bronze.limit(2000), max_bytes)  # warm-up on a slice
    elapsed = _time_parse(bronze, max_bytes)
    bad = _parse(bronze, max_bytes).where(f"{ERROR_COLUMN} IS NOT NULL").count()
    bronze.unpersist()
    return len(records) / elapsed, bad


def _produce(settings: Settings, topics: dict[str, str], records: list[tuple[str, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer(settings.kafka_config() | {"linger.ms": 20, "batch.num.messages": 10_000,
                                                   "queue.buffering.max.messages": 1_000_000})
    errors: list[str] = []
    for i, (kind, raw) in enumerate(records):
        while True:
            try:
                producer.produce(topics[kind], value=raw, on_delivery=lambda err, _m: err and errors.append(err.str()))
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 9_999:
            producer.poll(0)
    producer.flush(60)
    if errors:
        raise UserError(f"{len(errors)} records were not delivered: {errors[0]}")


def bench_stream(spark, settings: Settings, topics: dict[str, str], n_records: int, lake: Path,
                 max_per_trigger: int) -> tuple[float, float, int, int, int]:
    """Kafka -> bronze -> ``parse_bronze`` -> ``events`` and ``quarantine`` Delta tables, availableNow:
    (steady events/s, end-to-end events/s, micro-batches, events, quarantined)."""
    from core.lake import row_count
    from ingest.arrow_parse import events_of, quarantine_of
    from ingest.delta_sink import write_batch
    from ingest.kafka_source import read_kafka
    from nightjar.pipeline import to_bronze

    settings = settings.with_(lake=lake, max_offsets_per_trigger=max_per_trigger)
    events_path, quarantine_path = lake / TABLE_EVENTS, lake / TABLE_QUARANTINE

    def write(df, batch_id: int) -> None:
        df.persist()
        try:
            write_batch(events_of(df), events_path, "bench.events", batch_id)
            write_batch(quarantine_of(df), quarantine_path, "bench.quarantine", batch_id)
        finally:
            df.unpersist()

    parsed = _parse(to_bronze(read_kafka(spark, settings, tuple(topics.values()))), settings.max_record_bytes)
    started = time.monotonic()
    query = (parsed.writeStream.queryName("bench_events").foreachBatch(write)
             .option("checkpointLocation", str(lake / "_checkpoints" / "bench_events"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.monotonic() - started
    progress = [p for p in query.recentProgress if p.numInputRows]
    events, bad = row_count(lake, TABLE_EVENTS), row_count(lake, TABLE_QUARANTINE)
    if events + bad != n_records:
        raise UserError(f"events ({events}) + quarantine ({bad}) != {n_records} records")
    steady = progress[1:] or progress
    steady_rows = sum(p.numInputRows for p in steady)
    steady_ms = sum(p.durationMs.get("triggerExecution", 0) for p in steady)
    return steady_rows / max(steady_ms / 1000, 1e-9), n_records / elapsed, len(progress), events, bad


def run(args: argparse.Namespace, settings: Settings) -> int:
    from core.spark_session import build_spark

    if args.events <= 0 or args.max_offsets_per_trigger <= 0 or not 0 <= args.bad_percent <= 100 or args.rounds <= 0:
        raise UserError("--events, --rounds and --max-offsets-per-trigger must be positive, --bad-percent 0..100",
                        exit_code=2)
    out = sys.stderr if args.json else sys.stdout
    result: dict[str, object] = {"events": args.events, "load_average_start": list(os.getloadavg())}

    def show(text: str) -> None:
        print(text, file=out, flush=True)

    records = workload(args.events, args.bad_percent)
    spark = build_spark(settings, app_name="nightjar-bench-parse")
    batch_figures(args, settings, spark, records, result, show)
    if not args.skip_cost:
        result |= cost_figures(spark, records, settings.max_record_bytes, args.rounds, show)
    if not args.skip_stream:
        result |= _run_stream(args, settings, spark, records, show)
    result["load_average_end"] = list(os.getloadavg())
    show(f"load average: {' '.join(f'{x:.2f}' for x in result['load_average_start'])} at start, "
         f"{' '.join(f'{x:.2f}' for x in result['load_average_end'])} at end")
    if args.json:
        print(json.dumps(result), flush=True)
    return 0


def batch_figures(args: argparse.Namespace, settings: Settings, spark, records: list[tuple[str, bytes]],
                  result: dict[str, object], show) -> None:
    """The batch parse stage's rate and the Windows vs sshd comparison, into ``result``."""
    rate, bad = bench_batch(spark, records, settings.max_record_bytes)
    result |= {"batch_events_per_s": rate, "batch_quarantined": bad}
    show(f"parse stage (batch):     {rate:>10,.0f} events/s  ({len(records):,} records, {bad:,} quarantined, "
         f"{settings.spark_master})")
    if not args.skip_windows:
        figures = bench_windows_vs_sshd(spark, min(args.events, 100_000), settings.max_record_bytes, args.rounds)
        result |= figures
        show(f"parse stage, sshd lines:    {figures['sshd_events_per_s']:>10,.0f} events/s  "
             f"(median of {args.rounds}, best {figures['sshd_best_events_per_s']:,.0f})")
        show(f"parse stage, Windows lines: {figures['windows_events_per_s']:>10,.0f} events/s  "
             f"(median of {args.rounds}, best {figures['windows_best_events_per_s']:,.0f}; EvntSLog rendered text "
             f"+ @cee JSON, Security log mix)")
        show(f"Windows / sshd:             {figures['windows_to_sshd']:>10.2f} x  (warmed up, rounds alternated)")
        if "windows_to_sshd_cpu" in figures:
            show(f"Windows / sshd per CPU-s:   {figures['windows_to_sshd_cpu']:>10.2f} x  (the JVM's CPU seconds per run: "
                 f"sshd {figures['sshd_events_per_cpu_s']:,.0f}, Windows {figures['windows_events_per_cpu_s']:,.0f} "
                 "events per CPU-s; steadier than wall time on a shared machine)")


def _run_stream(args: argparse.Namespace, settings: Settings, spark, records: list[tuple[str, bytes]],
                show) -> dict[str, object]:
    """bronze -> events in the stream, from two fresh topics holding the workload."""
    broker = None
    if settings.bootstrap is None:
        broker = EmbeddedBroker().start()
        settings = settings.with_(bootstrap=broker.bootstrap)
    lake = Path(tempfile.mkdtemp(prefix="nightjar-bench-parse-"))
    out: dict[str, object] = {}
    try:
        suffix = uuid.uuid4().hex[:6]
        topics = {"syslog": f"bench.parse.syslog.{suffix}", "zeek": f"bench.parse.zeek.{suffix}"}
        ensure_topics(settings, tuple(topics.values()))
        _produce(settings, topics, records)
        steady, overall, batches, events, bad = bench_stream(spark, settings, topics, len(records), lake,
                                                             args.max_offsets_per_trigger)
        show(f"bronze->events (stream): {steady:>10,.0f} events/s steady ({batches} micro-batches, first excluded); "
             f"{overall:,.0f} events/s end to end incl. start-up ({events:,} events + {bad:,} quarantined)")
        out |= {"stream_steady_events_per_s": steady, "stream_end_to_end_events_per_s": overall,
                "stream_micro_batches": batches, "stream_events": events, "stream_quarantined": bad}
    finally:
        if broker is not None:
            broker.stop()
        if args.keep_lake:
            show(f"lake kept at {lake}")
        else:
            shutil.rmtree(lake, ignore_errors=True)
    return out


PLAN_BATCH_LINES = 2000  # the micro-batch whose build and planning time is reported (the yardstick)


def _cpu_tree_seconds(pid: int | None) -> float | None:
    """CPU seconds (user + system) of ``pid`` and every live descendant: in local mode the JVM and its Python
    workers (the v2 parse runs in the workers, so the JVM's own CPU would miss it)."""
    if pid is None:
        return None
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _plan_seconds(bronze, max_bytes: int) -> tuple[float, float]:
    """(build, plan) seconds of one micro-batch-sized parse: building the DataFrame, then Spark's analysis,
    optimization and physical planning (``executedPlan``), as a streaming query pays per micro-batch."""
    started = time.monotonic()
    df = _parse(bronze, max_bytes)
    built = time.monotonic()
    df._jdf.queryExecution().executedPlan()
    return built - started, time.monotonic() - built


def cost_figures(spark, records: list[tuple[str, bytes]], max_bytes: int, rounds: int, show) -> dict[str, object]:
    """The parse's cost on the workload, warmed up: median events/s of ``rounds`` runs, CPU time per event of the JVM
    and its Python workers (local mode), and the build and plan time of one :data:`PLAN_BATCH_LINES`-line
    micro-batch (median of 3, after a first one)."""
    import statistics

    bronze = _cached_bronze(spark, records)
    small = _cached_bronze(spark, records[:PLAN_BATCH_LINES])
    jvm = _jvm_pid(spark)
    rates: list[float] = []
    cpu_us: list[float] = []
    try:
        _time_parse(bronze, max_bytes)  # warm-up
        plans = [_plan_seconds(small, max_bytes) for _ in range(4)]
        for _ in range(rounds):
            cpu = _cpu_tree_seconds(jvm)
            rates.append(len(records) / _time_parse(bronze, max_bytes))
            after = _cpu_tree_seconds(jvm)
            if cpu is not None and after is not None:
                cpu_us.append((after - cpu) / len(records) * 1e6)
    finally:
        bronze.unpersist()
        small.unpersist()
    out: dict[str, object] = {"cost_rounds": rounds, "events_per_s": statistics.median(rates),
                              "build_s": statistics.median(b for b, _ in plans[1:]),
                              "plan_s": statistics.median(p for _, p in plans[1:])}
    if cpu_us:
        out["cpu_us_per_event"] = statistics.median(cpu_us)
    show(f"parse stage cost:        {out['events_per_s']:>10,.0f} events/s  "
         f"cpu {out.get('cpu_us_per_event', float('nan')):,.0f} us/event (the JVM and its Python workers)  "
         f"build+plan of {PLAN_BATCH_LINES:,} lines {out['build_s']:.3f}+{out['plan_s']:.3f} s  "
         f"(median of {rounds}, warmed up)")
    return out
