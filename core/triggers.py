"""The pipeline's streaming queries: their names and how often they run.

Every stage starts its own queries (``enrich.auth_sessions``, ``alerts.detection_stream``, ``alerts.ml``) from the
trigger the assembly (``nightjar.pipeline``) was given, and the names are the contract between them, the
supervisor, ``--query``, the checkpoints (``Settings.checkpoint(name)``) and ``pipeline_progress``: so both live
here, below every stage, and import nothing but core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.config import TABLE_AUTH_SESSIONS
from core.durations import parse_duration, spark_interval
from core.errors import UserError

if TYPE_CHECKING:  # for the annotation only: the CLI imports this module before it may start Spark
    from pyspark.sql.streaming import DataStreamWriter

QUERY_INGEST = "ingest"
QUERY_DETECT = "detect"  # every detection query (windowed, windowed-append, one per own-plan Python rule)
QUERY_AUTH_SESSIONS = TABLE_AUTH_SESSIONS  # the query is named after the table it writes
QUERIES = (QUERY_INGEST, QUERY_DETECT, QUERY_AUTH_SESSIONS)  # what `nightjar run --query` selects from
QUERY_WINDOWED = "windowed"  # the detection query of the correlation and windowed Python rules
QUERY_WINDOWED_APPEND = "windowed-append"  # its twin for the rules that need append mode
QUERY_ML = "ml"  # ML scoring (alerts.ml.ml_scoring), started with the detections when a model is usable


@dataclass(frozen=True)
class Trigger:
    """How often micro-batches run: ``available_now`` (drain and stop) or a processing-time interval."""

    available_now: bool = False
    interval: str = "1 second"

    def apply(self, writer: DataStreamWriter) -> DataStreamWriter:
        """``writer`` with this trigger set."""
        if self.available_now:
            return writer.trigger(availableNow=True)
        return writer.trigger(processingTime=self.interval)

    def at_least(self, interval: str) -> str | None:
        """The interval of a query off the alert path that runs every ``interval`` but never more often than this
        trigger; ``None`` for an available-now run (that query drains like every other)."""
        if self.available_now:
            return None
        return max((interval, self.interval), key=parse_duration)

    def slowed_to(self, interval: str) -> Trigger:
        """This trigger for a query that runs at most every ``interval`` (see :meth:`at_least`)."""
        slowed = self.at_least(interval)
        return self if slowed is None else Trigger(interval=slowed)

    def polling(self, interval: str) -> Trigger:
        """This trigger for a query downstream of another that looks for new input every ``interval`` when this
        trigger is slower: it still runs a batch only when its input has a new commit (the mirror of
        :meth:`slowed_to`)."""
        if self.available_now:
            return self
        return Trigger(interval=min((interval, self.interval), key=parse_duration))


def parse_interval(text: str) -> str:
    """``1s`` / ``500ms`` / ``2 minutes`` -> Spark's interval spelling; UserError on anything else."""
    try:
        seconds = parse_duration(text, "--trigger")
    except ValueError as exc:
        raise UserError(str(exc), exit_code=2) from None
    if seconds <= 0:
        raise UserError(f"--trigger {text!r} must be longer than zero", exit_code=2)
    return spark_interval(seconds)
