"""Test helpers for the parser tests: parse many lines in one Spark job, get plain dicts back."""

from __future__ import annotations

import datetime as dt

INGESTED = dt.datetime(2024, 3, 10, 12, 0, 0, tzinfo=dt.UTC)


def parse_lines(spark, lines, fmt: str = "auto", ingested_at: dt.datetime = INGESTED, **kw) -> list[dict]:
    """One dict per line, in input order: the ECS columns (nested dicts) plus ``_error`` and coordinates."""
    from ingest.arrow_parse import parse_bronze
    from ingest.file_source import lines_dataframe

    df = parse_bronze(lines_dataframe(spark, lines, ingested_at=ingested_at), fmt, **kw)
    rows = [r.asDict(recursive=True) for r in df.orderBy("offset").collect()]
    assert [r["offset"] for r in rows] == list(range(1, len(lines) + 1))
    return rows


def utc(*args: int) -> dt.datetime:
    """A naive datetime as Spark returns timestamps with the session zone UTC (the driver runs in UTC)."""
    return dt.datetime(*args)


def get(row: dict, path: str):
    """``row["source"]["ip"]`` for ``"source.ip"``; None when any level is null."""
    if path == "@timestamp":
        return row["@timestamp"]
    node = row
    for part in path.split("."):
        if node is None:
            return None
        node = node[part]
    return node


def parse_samples(spark, samples: dict[str, str]) -> dict[str, dict]:
    """Named sample lines -> their parsed rows, by name (one Spark job for the whole module)."""
    return dict(zip(samples, parse_lines(spark, list(samples.values())), strict=True))


def fields(row: dict, *paths: str) -> dict:
    return {p: get(row, p) for p in paths}
