"""Errors that mean "the user asked for something that cannot be done": the CLI prints one line."""

from __future__ import annotations

import re


class UserError(Exception):
    """An expected failure with a message that names the problem and the fix."""

    exit_code = 1

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class DataLossError(UserError):
    """Kafka offsets recorded in a checkpoint no longer exist on the broker."""


_PY_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Loss|Exit)): (.+)$")


def summarize_query_error(text: str) -> str:
    """One line from a streaming query's failure text (a JVM stack trace wrapping a Python traceback).

    The Python exception line (``module.KafkaDataLoss: data loss …``) says what went wrong; the JVM frames
    around it do not. Falls back to the first non-empty line.
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        m = _PY_EXCEPTION_LINE.match(line)
        if m and not line.startswith(("org.apache", "java.", "py4j")):
            name, message = m.groups()
            return message if name == "KafkaDataLoss" else f"{name}: {message}"
    return lines[0] if lines else text
