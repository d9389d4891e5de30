"""Errors that mean "the user asked for something that cannot be done": the CLI prints one line."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any


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
    if "No space left on device" in text:  # ENOSPC anywhere in the chain (executor, delta-rs, checkpoint): say so
        return ("no space left on device: the disk holding the lake (tables, checkpoints) or Spark's local "
                "directory is full; free space and the batch is replayed from its checkpoint")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        m = _PY_EXCEPTION_LINE.match(line)
        if m and not line.startswith(("org.apache", "java.", "py4j")):
            name, message = m.groups()
            return message if name in ("KafkaDataLoss", "MicroBatchError") else f"{name}: {message}"
    return lines[0] if lines else text


# The JVM exceptions that mean "interrupted": Spark treats a foreachBatch failure that names one as a stop.
INTERRUPTION_NAMES = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                      "java.nio.channels.ClosedByInterruptException")


class MicroBatchError(RuntimeError):
    """A micro-batch function's failure, reported to Spark in one short line (see :func:`short_batch_errors`)."""


def short_batch_errors(fn: Callable[[Any, int], Any]) -> Callable[[Any, int], Any]:
    """Wrap a ``foreachBatch`` function so that its failures reach Spark as one short line.

    Why: Spark's stream thread matches the whole text of a failure raised through Py4J against a regular expression
    (``StreamExecution.PROXY_ERROR``, an alternation under ``*``) that recurses once per character. A Py4J error
    carries the JVM's full stack trace (tens of kilobytes), the match overflows the thread's stack, and the
    ``StackOverflowError`` kills the query thread *without recording the failure*: the query looks stopped, not
    failed, and a supervisor cannot tell. A short message keeps the failure a failure (summarized as
    :func:`summarize_query_error` does), and an interruption (a stop while the batch runs) still reads as one.
    """

    @functools.wraps(fn)
    def run(df: Any, batch_id: int) -> Any:
        try:
            return fn(df, batch_id)
        except Exception as exc:
            text = str(exc)
            interrupted = next((name for name in INTERRUPTION_NAMES if name in text), None)
            if interrupted is not None:  # the shape Spark recognizes as "stopped while running"
                raise MicroBatchError("py4j.protocol.Py4JJavaError: An error occurred while calling foreachBatch: "
                                  f"{interrupted}") from None
            raise MicroBatchError(summarize_query_error(text)[:2000]) from None

    return run
