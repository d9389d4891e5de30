"""Every sample set of a rule pack parsed in one Spark job, then enriched set by set.

``nightjar rules test`` runs each rule's positive and negative samples through parse -> DHCP attribution ->
reference joins -> detect, each set on its own (a set's leases, reference rows and counts must not leak into
another's). Each parse is a Spark job with a fixed cost whatever its size (with the wide contract ~2.3 s on two
cores, 80 of the built-in pack's 98 s). Parsing is per record, so all sets can share one parse: set *i* is bronze partition *i* (offsets 1..n within the set, so "line N" messages
are the same as a set parsed alone), and each set's enrichment starts from its partition of the one parsed frame.
Only the ``event.id`` values differ from a set parsed alone (the partition is part of the id); no rule test looks
at them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from alerts.detection_input import unusable_lines
from alerts.python_rules import enrich_parsed
from ingest.arrow_parse import parse_bronze
from ingest.file_source import records_table


class ParsedSamples:
    """``sets``: key -> (raw lines, ``ingested_at``). One parse of all of them, materialized on construction."""

    def __init__(self, spark: SparkSession, sets: Mapping[Hashable, tuple[Sequence[str], dt.datetime]]) -> None:
        self._index = {key: i for i, key in enumerate(sets)}
        records = ((i, offset, line, None, ingested_at)
                   for i, (lines, ingested_at) in enumerate(sets.values())
                   for offset, line in enumerate(lines, start=1))
        bronze = spark.createDataFrame(records_table(records))
        self.parsed = parse_bronze(bronze).localCheckpoint(eager=True)
        self._unparsed: dict[int, list[str]] = {}  # per set: the lines no rule will see, and why
        for r in unusable_lines(self.parsed).orderBy("partition", "offset").collect():
            self._unparsed.setdefault(r["partition"], []).append(f"line {r['offset']} {r['problem']}")

    def __contains__(self, key: Hashable) -> bool:
        return key in self._index

    def enriched(self, key: Hashable, reference, dhcp: list[str]) -> tuple[DataFrame, list[str]]:
        """(the set's enriched events, materialized, one "line N does not parse (…)" per quarantined line and one "line
        N is dated …" per line detection leaves out): what :func:`alerts.python_rules.enriched_events` returns for the
        set parsed alone."""
        i = self._index[key]
        return enrich_parsed(self.parsed.where(F.col("partition") == i), reference, dhcp), self._unparsed.get(i, [])
