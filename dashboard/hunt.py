"""Hunt: ad-hoc, read-only SQL over the lake's tables through DuckDB, sandboxed.

How a hunt runs (:func:`run_hunt`):

1. :func:`check_sql` refuses, with a one-line reason, anything but one ``SELECT``-like statement (``SELECT``,
   ``WITH``, ``FROM``-first, ``VALUES``, ``EXPLAIN``/``DESCRIBE``/``SUMMARIZE``/``SHOW`` of a query or table), and
   any statement naming a DuckDB function that reads or lists files (``read_csv``, ``read_parquet``, ``glob``,
   …) or a string literal in a ``FROM`` (DuckDB's replacement scan of a file path);
2. a fresh in-memory DuckDB connection registers every lake table as an Arrow dataset view (deltalake, the
   table's current version) and, over ``events``, one typed view per dataset of the source registry
   (:func:`ingest.source_views.duckdb_view_sql`: ``zeek_conn`` with Zeek's own ``conn_state``/``history``,
   ``system_auth`` with ``system.auth.ssh.method``, … read from the core columns or ``detail`` and typed), then sets ``enable_external_access=false`` (no file system, no network, no
   extension installs or loads, no ATTACH/COPY/EXPORT), caps ``memory_limit`` and ``threads``, and finally
   ``lock_configuration=true`` so the query cannot undo any of it. The checks in 1 give a readable reason; the
   settings in 2 are what actually enforces the sandbox;
3. the query runs in a worker thread; after ``timeout_s`` the connection is interrupted (``con.interrupt()``);
4. the rows are fetched in small Arrow batches, and fetching stops at ``max_rows`` rows or ``max_bytes`` bytes,
   whichever comes first (:attr:`HuntResult.cut` says which, :attr:`HuntResult.notice` tells the analyst how to
   narrow the query). The bytes bound what the dashboard keeps per session and sends to the browser: eight rows
   of 30 MB each were one 240 MB Streamlit message, which Streamlit refused (its limit is 200 MB).

A field's name — ECS's, a source's own or Sigma's — becomes the DuckDB expression that reads it through the field
resolver (:func:`field_sql`), the same resolution the rules use.

Saved hunts live in the dashboard-owned Delta table ``saved_hunts`` (append-only; the newest row of a name
wins, a row with ``deleted`` hides it); :data:`SHIPPED_HUNTS` are offered on an empty lake and written to the
table with the first save.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from core.config import DEFAULT_HUNT_MAX_BYTES, ENV_HUNT_MAX_BYTES, TABLE_EVENTS
from core.lake import list_tables, table_dataset
from dashboard.lakedb import TABLE_SAVED_HUNTS, has_table, query
from dashboard.triage import append_rows
from ingest.events_contract import DETAIL
from ingest.field_resolver import UnknownField, duckdb_sql, resolve
from ingest.source_views import duckdb_view_sql, view_name
from ingest.sources import datasets

DEFAULT_TIMEOUT_S = 20.0
DEFAULT_MAX_ROWS = 10_000
MEMORY_LIMIT = "1GB"

ALLOWED_STATEMENTS = {"SELECT", "EXPLAIN"}
# Table functions and scalar functions that touch files, other databases or the network.
FORBIDDEN_FUNCTIONS = (
    "read_csv", "read_csv_auto", "read_parquet", "parquet_scan", "parquet_metadata", "parquet_schema",
    "parquet_file_metadata", "parquet_kv_metadata", "read_json", "read_json_auto", "read_json_objects",
    "read_ndjson", "read_ndjson_auto", "read_ndjson_objects", "read_text", "read_blob", "glob", "sniff_csv",
    "delta_scan", "iceberg_scan", "iceberg_metadata", "read_xlsx", "st_read", "sqlite_scan", "sqlite_attach",
    "postgres_scan", "postgres_attach", "mysql_scan", "httpfs", "load_aws_credentials", "duckdb_secrets",
)
FORBIDDEN_KEYWORDS = ("attach", "detach", "copy", "install", "load", "export", "import", "pragma", "set", "reset",
                      "call", "checkpoint", "vacuum", "create", "insert", "update", "delete", "drop", "alter", "use")
_FUNC_RE = re.compile(r"\b(" + "|".join(FORBIDDEN_FUNCTIONS) + r")\s*\(", re.IGNORECASE)
_FROM_PATH_RE = re.compile(r"\b(from|join)\s+'", re.IGNORECASE)
_LEADING_RE = re.compile(r"^\s*([a-z_]+)", re.IGNORECASE)


class HuntRefused(ValueError):
    """The query is not allowed; ``str()`` is a one-line reason."""


class HuntTimeout(TimeoutError):
    pass


# Rows per Arrow batch handed over by DuckDB: each batch costs about 35 us per column (measured: 60 text columns,
# 10,000 rows, 22 s in 1-row batches, 0.45 s in 64-row ones, 0.27 s in 2,048-row ones), and a batch is the most the
# fetch can overshoot the byte cap by. Two rows per column keeps the hand-over near 0.2 s per 10,000 rows at any
# width, and a narrow result of huge values (repeat('x', 30000000)) is read two rows at a time.
ROWS_PER_COLUMN_PER_BATCH = 2
MAX_BATCH_ROWS = 1024


@dataclass(frozen=True)
class HuntResult:
    rows: pd.DataFrame
    seconds: float
    cut: str = ""  # "" (every row), "rows" (more than max_rows) or "bytes" (more than max_bytes)
    max_rows: int = DEFAULT_MAX_ROWS
    max_bytes: int = DEFAULT_HUNT_MAX_BYTES

    @property
    def truncated(self) -> bool:
        return bool(self.cut)

    @property
    def notice(self) -> str:
        """One line for the analyst when the result was cut: which limit, and how to narrow the query."""
        if self.cut == "rows":
            return (f"Cut at {self.max_rows:,} rows: narrow the query (WHERE, GROUP BY, LIMIT) to see the rest.")
        if self.cut == "bytes":
            return (f"Cut at {size_text(self.max_bytes)} (the hunt result limit, {ENV_HUNT_MAX_BYTES}): the first "
                    f"{len(self.rows):,} row(s) fit. Select fewer or shorter columns (name them instead of *, "
                    "substr(col, 1, 200)) or fewer rows (WHERE, LIMIT).")
        return ""


def size_text(n: int) -> str:
    """``n`` bytes for people: 64 MiB, 4.77 MiB, 900 KiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _strip_literals_and_comments(sql: str) -> str:
    """``sql`` with comments removed and string literals emptied (so words inside strings are not checked)."""
    out, i, n = [], 0, len(sql)
    while i < n:
        c = sql[i]
        if sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
        elif c == "'":
            j = i + 1
            while j < n:
                if sql[j] == "'" and sql.startswith("''", j):
                    j += 2
                    continue
                if sql[j] == "'":
                    break
                j += 1
            out.append("''")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_sql(sql: str) -> None:
    """Raise :class:`HuntRefused` unless ``sql`` is one read-only query that touches no file."""
    if not sql or not sql.strip():
        raise HuntRefused("the query is empty")
    bare = _strip_literals_and_comments(sql)
    match = _FUNC_RE.search(bare)
    if match:
        raise HuntRefused(f"{match.group(1).lower()}() reads files: hunts query the lake's tables by name")
    if _FROM_PATH_RE.search(bare):
        raise HuntRefused("reading a file path is not allowed: hunts query the lake's tables by name")
    lead = _LEADING_RE.match(bare)
    first = lead.group(1).lower() if lead else ""
    if first in FORBIDDEN_KEYWORDS:
        raise HuntRefused(f"{first.upper()} is not allowed: hunts are read-only queries (SELECT …)")
    try:
        with duckdb.connect(":memory:") as probe:
            statements = probe.extract_statements(sql)
    except duckdb.Error as exc:
        raise HuntRefused(_one_line(exc)) from None
    if len(statements) != 1:
        raise HuntRefused(f"one statement at a time ({len(statements)} given)")
    kind = statements[0].type.name
    if kind not in ALLOWED_STATEMENTS:
        raise HuntRefused(f"{kind} statements are not allowed: hunts are read-only queries (SELECT …)")


def dataset_views() -> dict[str, str]:
    """View name -> dataset, for every dataset of the source registry (``zeek.conn`` -> ``zeek_conn``)."""
    return {view_name(d): d for d in sorted(datasets())}


def field_sql(name: str, datasets: list[str] | None = None) -> str:
    """The DuckDB expression over ``events`` reading field ``name`` for ``datasets`` (all when None): a core column,
    or ``detail['key']`` typed, or a CASE on ``event.dataset`` where datasets place it differently;
    :class:`HuntRefused` naming the field when no source of the datasets has it."""
    try:
        return duckdb_sql(resolve(name.strip(), datasets or None))
    except UnknownField as exc:
        raise HuntRefused(str(exc.args[0]) if exc.args else f"unknown field {name!r}") from None


def sandbox(lake: Path, threads: int = 2) -> duckdb.DuckDBPyConnection:
    """A connection with every lake table registered, a typed view per dataset over ``events``, and external access
    disabled and locked."""
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    tables = list_tables(lake)
    for name in tables:
        con.register(name, table_dataset(lake, name))
    if TABLE_EVENTS in tables:
        _create_dataset_views(con, set(tables))
    con.execute(f"SET threads = {int(threads)}")
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con


def _create_dataset_views(con: duckdb.DuckDBPyConnection, tables: set[str]) -> None:
    """One view per registry dataset over ``events``, unless a lake table has its name. An ``events`` without the
    contract's ``detail`` column (a lake written before contract v2) gets none."""
    if DETAIL not in con.table(TABLE_EVENTS).columns:
        return
    for view, dataset in dataset_views().items():
        if view not in tables:
            con.execute(duckdb_view_sql(dataset, TABLE_EVENTS))


def run_hunt(lake: Path, sql: str, timeout_s: float = DEFAULT_TIMEOUT_S, max_rows: int = DEFAULT_MAX_ROWS,
             max_bytes: int = DEFAULT_HUNT_MAX_BYTES) -> HuntResult:
    """Run one checked, sandboxed query and fetch at most ``max_rows`` rows and ``max_bytes`` bytes of it;
    :class:`HuntRefused` (not allowed or failed, one line) or :class:`HuntTimeout`."""
    check_sql(sql)
    con = sandbox(lake)
    box: dict = {}

    def work() -> None:
        try:
            rel = con.sql(sql)
            columns = sum(_leaves(t) for t in rel.types)
            batch_rows = max(2, min(MAX_BATCH_ROWS, ROWS_PER_COLUMN_PER_BATCH * columns))
            box["table"], box["cut"] = fetch_capped(rel.to_arrow_reader(batch_rows), max_rows, max_bytes)
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    started = time.monotonic()
    worker = threading.Thread(target=work, name="hunt", daemon=True)
    worker.start()
    worker.join(timeout_s)
    try:
        if worker.is_alive():
            con.interrupt()
            worker.join(10)
            raise HuntTimeout(f"the query ran longer than {timeout_s:g} s and was stopped")
        if "error" in box:
            exc = box["error"]
            # A query that fails while its rows stream (error(), a bad cast on row 150,000) reaches us through the
            # Arrow reader as a bare OSError carrying DuckDB's message: a refusal like any other failed query.
            if isinstance(exc, duckdb.Error | OSError):
                raise HuntRefused(_one_line(exc)) from None
            raise exc
    finally:
        if not worker.is_alive():
            con.close()
    return HuntResult(box["table"].to_pandas(), time.monotonic() - started, box["cut"], max_rows, max_bytes)


def _leaves(t: duckdb.DuckDBPyType) -> int:
    """How many Arrow columns a DuckDB type becomes (a struct's or map's fields, a list's element)."""
    if t.id in ("struct", "map", "list", "array", "union"):
        return sum(_leaves(child) for _, child in t.children) or 1
    return 1


def fetch_capped(reader: pa.RecordBatchReader, max_rows: int, max_bytes: int) -> tuple[pa.Table, str]:
    """The reader's rows up to ``max_rows`` rows and ``max_bytes`` Arrow bytes, and why it stopped early ("rows",
    "bytes") or "" when it read everything. Reading stops at the first batch over a cap: what is kept never exceeds
    the caps, and what is read at most by one batch."""
    batches: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in reader:
        cut = ""
        if rows + batch.num_rows > max_rows:
            batch, cut = batch.slice(0, max_rows - rows), "rows"
        if size + batch.nbytes > max_bytes:
            batch, cut = batch.slice(0, _rows_within(batch, max_bytes - size)), "bytes"
        batches.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if cut:
            return pa.Table.from_batches(batches, schema=reader.schema), cut
    return pa.Table.from_batches(batches, schema=reader.schema), ""


def _rows_within(batch: pa.RecordBatch, budget: int) -> int:
    """The most leading rows of ``batch`` whose Arrow bytes fit in ``budget`` (a slice counts its own bytes)."""
    lo, hi = 0, batch.num_rows
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if batch.slice(0, mid).nbytes <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _one_line(exc: object) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


def page(df: pd.DataFrame, number: int, size: int = 100) -> pd.DataFrame:
    """Rows of 1-based page ``number`` of ``size`` rows."""
    number = max(1, int(number))
    return df.iloc[(number - 1) * size: number * size]


def page_count(rows: int, size: int = 100) -> int:
    return max(1, -(-rows // size))


# --- saved hunts -------------------------------------------------------------------------------------------------

SAVED_HUNTS_SCHEMA = pa.schema([
    ("name", pa.string()),
    ("sql", pa.string()),
    ("description", pa.string()),
    ("author", pa.string()),
    ("saved_at", pa.timestamp("us", tz="UTC")),
    ("deleted", pa.bool_()),
])


@dataclass(frozen=True)
class SavedHunt:
    name: str
    sql: str
    description: str = ""
    author: str = "nightjar"


SHIPPED_HUNTS: tuple[SavedHunt, ...] = (
    SavedHunt("Failed SSH logins by source", """SELECT "source".ip AS source_ip, "source".geo.country_iso_code AS country,
       count(*) AS failures, count(DISTINCT "user".name) AS users, min("@timestamp") AS first, max("@timestamp") AS last
FROM events
WHERE "event".dataset = 'system.auth' AND "event".outcome = 'failure'
GROUP BY ALL ORDER BY failures DESC LIMIT 50""", "Brute force and spraying candidates: failed SSH by source address"),
    SavedHunt("Successful logins from abroad", """SELECT "@timestamp", "user".name AS "user", "source".ip AS source_ip,
       "source".geo.country_iso_code AS country, "nightjar".user.country AS home_country, "host".name AS host
FROM events
WHERE "event".action = 'ssh_login' AND "event".outcome = 'success'
  AND "source".geo.country_iso_code IS DISTINCT FROM "nightjar".user.country
ORDER BY "@timestamp" DESC""", "Accepted SSH logins from a country other than the user's home"),
    SavedHunt("Threat-intel matches", """SELECT "@timestamp", "event".dataset AS dataset, "threat".indicator.value AS indicator,
       "threat".indicator.type AS type, coalesce("host".name, "source".ip) AS who, "event".original
FROM events WHERE "threat".indicator.value IS NOT NULL ORDER BY "@timestamp" DESC""",
              "Every event that matched an indicator of the iocs table"),
    SavedHunt("Top outbound talkers", """SELECT "source".ip AS source_ip, any_value("host".name) AS host,
       sum("source".bytes) AS bytes_out, count(*) AS connections, count(DISTINCT "destination".ip) AS peers
FROM events
WHERE "event".dataset = 'zeek.conn' AND "network".direction = 'outbound'
GROUP BY ALL ORDER BY bytes_out DESC NULLS LAST LIMIT 25""", "Hosts that sent the most bytes out (exfiltration)"),
    SavedHunt("Alerts per rule and status", """SELECT a.rule_id, a.severity, count(DISTINCT a.alert_id) AS alerts,
       max(a.detected_at) AS last_detected
FROM alerts a GROUP BY ALL ORDER BY alerts DESC""", "Alert counts per rule"),
    SavedHunt("Long DNS names", """SELECT "dns".question.name AS name, "source".ip AS source_ip, length("dns".question.name) AS len,
       "@timestamp"
FROM events WHERE "event".dataset = 'zeek.dns' AND length("dns".question.name) > 50
ORDER BY len DESC LIMIT 100""", "Possible DNS tunnelling: very long query names"),
)


def saved_hunts(lake: Path) -> list[SavedHunt]:
    """The saved hunts (newest version of each name, deleted ones left out), or the shipped ones on a new lake."""
    if not has_table(lake, TABLE_SAVED_HUNTS):
        return list(SHIPPED_HUNTS)
    df = query(lake, [TABLE_SAVED_HUNTS], """
        SELECT name, sql, description, author FROM saved_hunts
        QUALIFY row_number() OVER (PARTITION BY name ORDER BY saved_at DESC) = 1 AND NOT coalesce(deleted, false)
        ORDER BY name""")
    return [SavedHunt(r.name, r.sql, r.description or "", r.author or "") for r in df.itertuples()]


def save_hunt(lake: Path, hunt: SavedHunt, deleted: bool = False) -> None:
    """Append a hunt (a new version of it if the name exists; ``deleted`` hides it). The first save also
    writes the shipped hunts, so the table holds everything the page offers."""
    name = hunt.name.strip()
    if not name:
        raise HuntRefused("a saved hunt needs a name")
    if not deleted:
        check_sql(hunt.sql)
    now = dt.datetime.now(dt.UTC)
    rows = []
    if not has_table(lake, TABLE_SAVED_HUNTS):
        rows += [{"name": h.name, "sql": h.sql, "description": h.description, "author": h.author,
                  "saved_at": now - dt.timedelta(microseconds=1), "deleted": False}
                 for h in SHIPPED_HUNTS if h.name != name]
    rows.append({"name": name, "sql": hunt.sql, "description": hunt.description, "author": hunt.author,
                 "saved_at": now, "deleted": deleted})
    lake.mkdir(parents=True, exist_ok=True)
    append_rows(lake / TABLE_SAVED_HUNTS, pa.Table.from_pylist(rows, schema=SAVED_HUNTS_SCHEMA))
