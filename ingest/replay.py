"""``nightjar replay FILE… [--rate R] [--shift-to-now]``: send captured log files to the raw topics.

Files are read in place (:mod:`ingest.capture_files`): plain or gzipped lines, ``.zip``/``.tar.gz`` archives member by
member, Windows ``.evtx`` as one evtx-JSON record per event. Each line is one Kafka record, its bytes unchanged
(except a shifted timestamp, below), on the topic its content names, as ``nightjar parse --format auto`` tells them
apart: a JSON object the Windows source recognises (NXLog/Winlogbeat keys, the evtx rendering) goes to
``nightjar.raw.windows``, other JSON to ``nightjar.raw.zeek``, anything else to ``nightjar.raw.syslog``. Lines go in
file order, files in argument order, as fast as possible or at ``--rate`` lines per second, keyed like the
generator's records (syslog: the emitting host; Zeek: ``id.orig_h``; Windows: the computer) so that one host's lines
stay in order.

``--shift-to-now`` moves every timestamp by one offset, so that the capture's earliest timestamp becomes the
moment the replay starts and the lines keep their spacing: a capture from 2018 plays as live traffic
(detections' windows, the dashboard's "last hour"). Rewritten in place, in the line's own format: Zeek
``ts`` (epoch seconds or ISO 8601), RFC 5424 timestamps (offset and fraction digits kept), RFC 3164
``Mmm dd hh:mm:ss`` (read in the current year, as the parser reads it) and RFC 3339 timestamps after an
RFC 3164 ``<PRI>``. Windows events are sent with their own times (reported as not shifted).

Nothing is dropped: a line that cannot be read (invalid UTF-8, blank) or whose timestamp cannot be shifted is
sent unchanged (the pipeline quarantines what it cannot parse) and reported on stderr as
``FILE:LINE: reason``. A progress line goes to stderr, a summary to stdout. A missing file or a bad option
is one line and exit code 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from core.config import TOPIC_RAW_SYSLOG, TOPIC_RAW_WINDOWS, TOPIC_RAW_ZEEK, Settings
from core.errors import UserError
from ingest.capture_files import capture_lines
from ingest.embedded_broker import check_reachable, ensure_topics

RAW_TOPICS_BY_CONTENT = (TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK, TOPIC_RAW_WINDOWS)

log = logging.getLogger(__name__)

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_RFC5424 = re.compile(rb"^(<[0-9]{1,3}>[1-9][0-9]{0,2} )(\S+)")
_RFC3339 = re.compile(r"^([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ]([0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]{1,9})?"
                      r"([Zz]|[+-][0-9]{2}:[0-9]{2})?$")
_RFC3164 = re.compile(rb"^(<[0-9]{1,3}>)?((?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9][0-9] "
                      rb"[0-9]{2}:[0-9]{2}:[0-9]{2})(?= )")
_RFC3164_ISO = re.compile(rb"^(<[0-9]{1,3}>)?([0-9]{4}-[0-9]{2}-[0-9]{2}T\S+)(?= )")
_ZEEK_TS = re.compile(rb'("ts"\s*:\s*)("?)([^",}\s]+)("?)')
_EPOCH = re.compile(r"^-?[0-9]+(?:\.([0-9]*))?$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="log files: syslog lines, Zeek JSON lines, Windows events as JSON lines or .evtx; "
                             "gzipped, or in .zip/.tar.gz archives")
    parser.add_argument("--rate", type=float, help="lines per second (default: as fast as possible)")
    parser.add_argument("--shift-to-now", action="store_true",
                        help="move timestamps so the capture's earliest one is now (keeps their spacing)")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


_HOST_5424 = re.compile(rb"^<[0-9]{1,3}>[1-9][0-9]{0,2} \S+ (\S+) ")
_HOST_3164 = re.compile(rb"^(?:<[0-9]{1,3}>)?(?:[A-Z][a-z]{2} [ 0-9][0-9] [0-9:]{8}|[0-9]{4}-[0-9]{2}-[0-9]{2}T\S+) (\S+) ")
_ORIG_H = re.compile(rb'"id\.orig_h"\s*:\s*"([^"]+)"|"orig_h"\s*:\s*"([^"]+)"')
_COMPUTER = re.compile(rb'"(?:Hostname|Computer|computer_name)"\s*:\s*"([^"]+)"')


def key_of(line: bytes, topic: str) -> bytes | None:
    """The record key: the emitting host of a syslog line, the originator of a Zeek record (as the generator
    keys them), so that one host's lines stay in order on one partition."""
    if topic == TOPIC_RAW_ZEEK:
        m = _ORIG_H.search(line)
        return (m.group(1) or m.group(2)) if m else None
    if topic == TOPIC_RAW_WINDOWS:
        m = _COMPUTER.search(line)
        return m.group(1) if m else None
    m = _HOST_5424.match(line) or _HOST_3164.match(line)
    return m.group(1) if m else None


def topic_of(line: bytes) -> str:
    """The raw topic of a line, as ``parse --format auto`` tells formats apart (the Windows source's own test)."""
    if line.lstrip()[:1] not in (b"{", b"["):
        return TOPIC_RAW_SYSLOG
    # deferred: ingest.sources imports pyarrow, which only JSON lines need
    from ingest.sources.windows import detect

    try:
        obj = json.loads(line)
    except ValueError:
        return TOPIC_RAW_ZEEK  # malformed JSON: quarantined by the parse, on the JSON topic
    return TOPIC_RAW_WINDOWS if isinstance(obj, dict) and detect(obj) else TOPIC_RAW_ZEEK


# --- timestamps ------------------------------------------------------------------------------------------

@dataclass
class Stamp:
    """A timestamp found in a line: where it is, its instant, and how to write a shifted one back."""

    start: int
    end: int
    when: dt.datetime
    render: object  # Callable[[dt.datetime], bytes]


def _parse_rfc3339(text: str) -> tuple[dt.datetime, object] | None:
    m = _RFC3339.match(text)
    if not m:
        return None
    date, clock, fraction, zone = m.groups()
    try:
        naive = dt.datetime.fromisoformat(f"{date}T{clock}")
    except ValueError:
        return None
    digits = len(fraction) - 1 if fraction else 0
    micros = int((fraction[1:] + "000000")[:6]) if fraction else 0
    if zone in (None, "Z", "z"):
        tz = dt.UTC
    else:
        sign = 1 if zone[0] == "+" else -1
        tz = dt.timezone(sign * dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    when = naive.replace(microsecond=micros, tzinfo=tz)
    sep = text[10]

    def render(new: dt.datetime) -> bytes:
        local = new.astimezone(tz)
        out = local.strftime(f"%Y-%m-%d{sep}%H:%M:%S")
        if digits:
            out += "." + (f"{local.microsecond:06d}" + "0" * 3)[:digits]
        if zone is not None:
            out += zone if zone in ("Z", "z") else local.strftime("%z")[:3] + ":" + local.strftime("%z")[3:]
        return out.encode()

    return when, render


def find_stamp(line: bytes, year: int) -> Stamp | None:
    """The timestamp of a syslog or Zeek line, or None when it has none that can be read."""
    if topic_of(line) == TOPIC_RAW_ZEEK:
        m = _ZEEK_TS.search(line)
        if not m:
            return None
        text = m.group(3).decode("ascii", "replace")
        quoted = bool(m.group(2))
        epoch = _EPOCH.match(text)
        if epoch:
            decimals = max(len(epoch.group(1) or ""), 6)  # Zeek's microseconds; the shift has them too
            when = dt.datetime.fromtimestamp(float(text), dt.UTC)

            def render_epoch(new: dt.datetime, decimals=decimals) -> bytes:
                return f"{new.timestamp():.{decimals}f}".encode()

            return Stamp(m.start(3), m.end(3), when, render_epoch)
        parsed = _parse_rfc3339(text) if quoted else None
        return Stamp(m.start(3), m.end(3), *parsed) if parsed else None
    m = _RFC5424.match(line)
    if m:
        parsed = _parse_rfc3339(m.group(2).decode("ascii", "replace"))
        return Stamp(m.start(2), m.end(2), *parsed) if parsed else None
    m = _RFC3164_ISO.match(line)
    if m:
        parsed = _parse_rfc3339(m.group(2).decode("ascii", "replace"))
        return Stamp(m.start(2), m.end(2), *parsed) if parsed else None
    m = _RFC3164.match(line)
    if m:
        text = m.group(2).decode()
        try:
            when = dt.datetime.strptime(f"{year} {text.replace('  ', ' 0')}", "%Y %b %d %H:%M:%S").replace(
                tzinfo=dt.UTC)
        except ValueError:
            return None

        def render_bsd(new: dt.datetime) -> bytes:
            new = new.astimezone(dt.UTC)
            return f"{_MONTHS[new.month - 1]} {new.day:>2} {new:%H:%M:%S}".encode()

        return Stamp(m.start(2), m.end(2), when, render_bsd)
    return None


def shifted(line: bytes, stamp: Stamp, offset: dt.timedelta) -> bytes:
    return line[:stamp.start] + stamp.render(stamp.when + offset) + line[stamp.end:]


# --- reading ---------------------------------------------------------------------------------------------

def read_lines(path: Path, problems=None) -> Iterator[tuple[str, int, bytes]]:
    """(where, line number, bytes) of every record of ``path``, whatever its packaging (ingest.capture_files)."""
    for line in capture_lines(path, problems or (lambda _where, _reason: None)):
        yield line.where, line.number, line.value


def unreadable(raw: bytes) -> str | None:
    if not raw.strip():
        return "blank line"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}"
    return None


@dataclass
class Survey:
    lines: int = 0
    earliest: dt.datetime | None = None


def survey(paths: list[Path], year: int) -> Survey:
    """First pass: the number of lines (for the progress line) and the earliest timestamp."""
    out = Survey()
    for path in paths:
        for _where, _number, raw in read_lines(path):
            out.lines += 1
            if unreadable(raw) is None:
                stamp = find_stamp(raw, year)
                if stamp is not None and (out.earliest is None or stamp.when < out.earliest):
                    out.earliest = stamp.when
    return out


# --- sending ---------------------------------------------------------------------------------------------

class Progress:
    """One progress line on stderr (redrawn on a terminal, every 10 s otherwise), like ``nightjar generate``."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.started = self.last = time.monotonic()
        self.every = 0.5 if self.tty else 10.0

    def update(self, n: int, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < self.every and not force):
            return
        self.last = now
        rate = n / max(now - self.started, 1e-9)
        done = n / self.total if self.total else 1.0
        bar = "#" * int(done * 30)
        line = f"replay [{bar:<30}] {n:,}/{self.total:,} lines {100 * done:5.1f}%  {rate:,.0f} lines/s"
        if self.tty:
            sys.stderr.write("\r" + line + "\033[K" + ("\n" if force else ""))
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


@dataclass
class Result:
    sent: dict[str, int] = field(default_factory=lambda: dict.fromkeys(RAW_TOPICS_BY_CONTENT, 0))
    delivered: int = 0
    reported: int = 0
    offset: dt.timedelta | None = None
    seconds: float = 0.0
    interrupted: bool = False  # stopped by Ctrl-C or SIGTERM; what was sent before is flushed and delivered
    unshifted: int = 0  # Windows events sent with their own times under --shift-to-now


def replay(settings: Settings, paths: list[Path], rate: float | None = None, shift_to_now: bool = False,
           progress: bool = True, now: dt.datetime | None = None, err=None,
           stop: threading.Event | None = None) -> Result:
    """Send every line of ``paths`` to its raw topic; returns what was sent and delivered.

    When ``stop`` is set the replay stops before the next line, and still flushes and counts what it produced (a
    flag, not an exception: raised inside a delivery callback, an exception would lose that callback's count).

    Raises :class:`UserError` when Kafka cannot be reached or a record was not delivered.
    """
    from confluent_kafka import Producer

    err = err or sys.stderr
    now = now or dt.datetime.now(dt.UTC)
    year = now.year
    info = survey(paths, year)
    result = Result()
    if shift_to_now and info.earliest is not None:
        result.offset = now - info.earliest
    check_reachable(settings)
    ensure_topics(settings, RAW_TOPICS_BY_CONTENT)
    failures: list[str] = []

    def on_delivery(error, _msg) -> None:
        if error is None:
            result.delivered += 1
        elif len(failures) < 5:
            failures.append(error.str())

    producer = Producer(settings.kafka_config() | {"linger.ms": 5, "queue.buffering.max.messages": 500_000})
    bar = Progress(info.lines, progress)
    started = time.monotonic()
    n = 0
    def unreadable_part(where: str, reason: str) -> None:
        print(f"{where}: {reason}", file=err)
        result.reported += 1

    for path in paths:
        if result.interrupted:
            break
        for where, number, raw in read_lines(path, unreadable_part):
            if stop is not None and stop.is_set():  # Ctrl-C or SIGTERM: deliver what was produced, say how far
                result.interrupted = True
                break
            value, problem = raw, unreadable(raw)
            topic = topic_of(value)
            if problem is None and result.offset is not None and topic == TOPIC_RAW_WINDOWS:
                result.unshifted += 1  # sent with its own time; said once in the summary, not per event
            elif problem is None and result.offset is not None:
                stamp = find_stamp(raw, year)
                if stamp is None:
                    problem = "no readable timestamp to shift"
                else:
                    value = shifted(raw, stamp, result.offset)
            if problem is not None:
                print(f"{where}:{number}: {problem} (sent unchanged)", file=err)
                result.reported += 1
            while True:
                try:
                    producer.produce(topic, value=value, key=key_of(value, topic), on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            result.sent[topic] += 1
            n += 1
            if rate:  # pace to the wall clock, catching up after a stall instead of drifting
                while (ahead := n / rate - (time.monotonic() - started)) > 0 and not (stop and stop.is_set()):
                    producer.poll(min(ahead, 0.5))
            elif n % 10_000 == 0:
                producer.poll(0)
            bar.update(n)
    producer.flush(60)
    bar.update(n, force=True)
    result.seconds = time.monotonic() - started
    if failures or result.delivered != n:
        raise UserError(f"{n - result.delivered} of {n} records were not delivered to "
                        f"{settings.bootstrap_servers}: {failures[0] if failures else 'flush timed out'}")
    return result


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.rate is not None and not args.rate > 0:
        raise UserError("--rate must be a positive number of lines per second", exit_code=2)
    paths = [Path(f) for f in args.files]
    for path in paths:
        if not path.is_file():
            raise UserError(f"{path}: no such file", exit_code=2)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:  # `kill PID`, a service manager, `docker stop`, Ctrl-C
        log.info("received %s: stopping after the lines sent so far", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        result = replay(settings, paths, args.rate, args.shift_to_now, progress=not args.quiet, stop=stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    shift = ""
    if result.offset is not None:
        shift = f", timestamps shifted by {result.offset.total_seconds():+,.0f} s"
        if result.unshifted:
            shift += f" ({result.unshifted:,} Windows events kept their own times)"
    per_topic = ", ".join(f"{result.sent[t]:,} to {t}" for t in RAW_TOPICS_BY_CONTENT)
    print(f"replayed {result.delivered:,} lines ({per_topic}; {result.reported:,} reported on stderr) "
          f"to {settings.bootstrap_servers} in {result.seconds:.1f} s{shift}"
          + (": interrupted before the end of the input" if result.interrupted else ""))
    return 130 if result.interrupted else 0
