"""Captured log files read in place: plain lines, gzip, ``.zip`` and ``.tar(.gz)`` archives, and Windows ``.evtx``.

``nightjar replay`` and ``nightjar parse`` take what users have on disk without unpacking by hand: a Zeek or syslog
file, a recording shipped as a ``.zip`` or ``.tar.gz`` of JSON lines (the OTRF Security Datasets), or Windows event
logs as ``.evtx`` (each record rendered as one line of evtx JSON by :mod:`ingest.sources.windows.evtx_files`).
Members of an archive are read in archive order, each by its own name (an ``.evtx`` inside a ``.zip`` too).

Every line comes with where it came from (``archive.zip:member.json`` and its line number), so a report names it.
Nothing is dropped silently: a member or file that cannot be read (a truncated archive, a corrupt ``.evtx``) is
reported through the ``problems`` callback with the reason, after every line that could be read from it.
"""

from __future__ import annotations

import gzip
import io
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# Suffixes read as archives or as evtx; anything else is read as lines (after gunzip for ``.gz``).
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
EVTX_SUFFIX = ".evtx"


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
        for number, raw in enumerate(f, start=1):
            yield Line(where, number, raw.rstrip(b"\n").rstrip(b"\r"))


def _evtx(where: str, open_: Callable[[], IO[bytes]], path: Path | None) -> Iterator[Line]:
    from ingest.sources.windows.evtx_files import evtx_records

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
