"""Captured log files read in place: plain lines, gzip, ``.zip`` and ``.tar(.gz)`` archives, and Windows ``.evtx``.

``nightjar replay`` and ``nightjar parse`` take what users have on disk without unpacking by hand: a Zeek or syslog
file, a recording shipped as a ``.zip`` or ``.tar.gz`` of JSON lines (the OTRF Security Datasets), or Windows event
logs as ``.evtx`` (each record rendered as one line of evtx JSON by :mod:`ingest.sources.windows.evtx_files`).
Members of an archive are read in archive order, each by its own name (an ``.evtx`` inside a ``.zip`` too).

A file of pretty-printed JSON documents — the evtx JSON rendering as ``evtx_dump -o json`` writes it (``Record N``
lines between the documents), SigmaHQ's regression data, a JSON array of events — is recognised by its first
non-blank line being just ``{`` or ``[``, and gives one compact single-line record per document (per element of an
array), numbered by the line where it starts: the Windows source parses one event per record. A document that does
not decode is one record of its text, so the parser quarantines it with the reason.

Every line comes with where it came from (``archive.zip:member.json`` and its line number), so a report names it.
Nothing is dropped silently: a member or file that cannot be read (a truncated archive, a corrupt ``.evtx``) is
reported through the ``problems`` callback with the reason, after every line that could be read from it.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import re
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# Suffixes read as archives or as evtx; anything else is read as lines (after gunzip for ``.gz``).
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
EVTX_SUFFIX = ".evtx"
# evtx_dump's JSON output puts a "Record N" line before each record's document.
_EVTX_DUMP_SEPARATOR = re.compile(rb"^Record \d+$")


@dataclass(frozen=True)
class Line:
    """One record of a capture: its bytes (no line terminator), the file or archive member, its line number."""

    where: str
    number: int
    value: bytes


Problems = Callable[[str, str], None]  # (where, reason)


def _ignore(_where: str, _reason: str) -> None:
    pass


def kind(name: str) -> str:
    """``zip``, ``tar``, ``evtx``, ``gzip`` or ``lines``, from the file name."""
    lower = name.lower()
    if lower.endswith(".zip"):
        return "zip"
    if lower.endswith((".tar", ".tar.gz", ".tgz")):
        return "tar"
    if lower.endswith(EVTX_SUFFIX):
        return "evtx"
    if lower.endswith(".gz"):
        return "gzip"
    return "lines"


def capture_lines(path: Path, problems: Problems = _ignore) -> Iterator[Line]:
    """Every record of the file at ``path``, whatever its packaging (see the module doc)."""
    yield from _read(str(path), kind(path.name), lambda: path.open("rb"), problems, path)


def _read(where: str, what: str, open_: Callable[[], IO[bytes]], problems: Problems,
          path: Path | None = None) -> Iterator[Line]:
    try:
        if what == "zip":
            with open_() as raw, zipfile.ZipFile(raw) as archive:
                for info in archive.infolist():
                    if info.is_dir():
                        continue
                    yield from _read(f"{where}:{info.filename}", kind(info.filename),
                                     lambda info=info: archive.open(info), problems)
        elif what == "tar":
            yield from _tar(where, open_, problems)
        elif what == "evtx":
            yield from _evtx(where, open_, path)
        elif what == "gzip":
            yield from _lines(where, lambda: gzip.open(open_()))
        else:
            yield from _lines(where, open_)
    except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError, RuntimeError, ValueError) as exc:
        problems(where, f"unreadable ({type(exc).__name__}: {exc}); the lines before were sent")


def _tar(where: str, open_: Callable[[], IO[bytes]], problems: Problems) -> Iterator[Line]:
    # Streaming mode ("r|*"): members are read in order without seeking, so a truncated archive yields every whole
    # member before it fails (random access would fail at open).
    with open_() as raw, tarfile.open(fileobj=raw, mode="r|*") as archive:
        for member in archive:
            if not member.isfile():
                continue
            data = archive.extractfile(member)
            if data is None:
                continue
            name = f"{where}:{member.name}"
            what = kind(member.name)
            if what in ("zip", "evtx"):  # needs random access: read the member whole first
                content = data.read()
                yield from _read(name, what, lambda content=content: io.BytesIO(content), problems)
            else:
                yield from _read(name, what, lambda data=data: data, problems)


def _lines(where: str, open_: Callable[[], IO[bytes]]) -> Iterator[Line]:
    with open_() as f:
        numbered = enumerate(f, start=1)
        head: list[tuple[int, bytes]] = []
        for number, raw in numbered:  # up to the first line with content: JSON lines, or pretty-printed documents?
            head.append((number, raw))
            if raw.strip() and not _EVTX_DUMP_SEPARATOR.match(raw.strip()):
                break
        if head and head[-1][1].strip() in (b"{", b"["):
            yield from _json_documents(where, itertools.chain(head, numbered))
            return
        for number, raw in itertools.chain(head, numbered):
            yield Line(where, number, raw.rstrip(b"\n").rstrip(b"\r"))


def _json_documents(where: str, numbered: Iterable[tuple[int, bytes]]) -> Iterator[Line]:
    """Pretty-printed JSON documents one after the other -> one compact record per document (array: per element).

    A document ends at a line that starts, unindented, with its closing bracket (how pretty-printers end the top
    level); only then is it decoded, so a file is read in one pass, one document in memory at a time."""
    buf: list[bytes] = []
    start = 0

    def flush(final: bool) -> Iterator[Line]:
        try:
            doc = json.loads(b"".join(buf))
        except ValueError:
            if final:  # the rest does not decode: one record of its text, for the parser to quarantine with the reason
                yield Line(where, start, b"".join(buf).strip())
                buf.clear()
            return
        for item in doc if isinstance(doc, list) else [doc]:
            yield Line(where, start, json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode())
        buf.clear()

    for number, raw in numbered:
        stripped = raw.strip()
        if not buf:
            if not stripped or _EVTX_DUMP_SEPARATOR.match(stripped):
                continue
            start = number
        buf.append(raw)
        if raw[:1] in (b"}", b"]"):
            yield from flush(final=False)
    if buf:
        yield from flush(final=True)


def _evtx(where: str, open_: Callable[[], IO[bytes]], path: Path | None) -> Iterator[Line]:
    from ingest.sources.windows.evtx_files import evtx_records  # deferred: ingest.sources imports pyarrow

    if path is not None:
        records = evtx_records(path)
        for number, text in enumerate(records, start=1):
            yield Line(where, number, text.encode())
        return
    # The evtx parser reads a file by name: an archive member goes through a temporary file.
    with tempfile.NamedTemporaryFile(suffix=EVTX_SUFFIX) as tmp:
        with open_() as src:
            while chunk := src.read(1 << 20):
                tmp.write(chunk)
        tmp.flush()
        for number, text in enumerate(evtx_records(tmp.name), start=1):
            yield Line(where, number, text.encode())
