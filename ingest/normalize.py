"""bronze -> events: parse raw records into ECS events, with a quarantine that loses nothing.

Plain ``DataFrame -> DataFrame`` functions, used unchanged by the stream (``nightjar run``), by
``nightjar parse FILE…`` and by tests::

    parsed = parse_records(bronze)              # exactly one row per input row
    events = to_events(parsed)                  # good rows, ECS columns only, fixed schema
    bad = to_quarantine(parsed)                 # raw bytes + coordinates + parser + error

Input ("bronze-shaped"): ``key`` binary, ``value`` binary, ``topic``, ``partition``, ``offset``,
``timestamp`` (Kafka's), ``ingested_at``; an optional ``headers`` column; other columns are ignored.

Each record's format is detected from its content (a record starting with ``{`` or ``[`` is Zeek JSON,
anything else syslog), not from its topic, unless ``fmt`` forces one. Everything runs as Spark SQL expressions in
the JVM: ``from_json`` with an explicit schema, ``regexp_*``, ``try_to_timestamp``, ``try_cast`` and
higher-order array functions; there is no Python UDF (see docs/parsing.md). ANSI mode is on in Spark 4,
so only ``try_*`` conversions are used: no input value can make an expression throw and stop the stream.

Quarantine reasons (``_error.parser`` / ``_error.reason``): ``decode`` (empty record, record over
``max_record_bytes``, invalid UTF-8), ``zeek`` (malformed JSON, no ``_path`` and none inferable, no or
unreadable ``ts``), ``syslog_rfc5424`` / ``syslog_rfc3164`` (no or malformed header, unreadable timestamp).
"""

from __future__ import annotations

import functools
import itertools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.config import DEFAULT_MAX_RECORD_BYTES
from ingest.ecs_schema import ECS_COLUMNS, assemble
from ingest.parsers import syslog, zeek
from ingest.parsers import values as V
from ingest.parsers.field_map import Fields, coalesce_fields, dispatch_cases, non_empty

FORMATS = ("auto", "syslog", "zeek")
RAW_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "headers", "ingested_at")
QUARANTINE_COLUMNS = ("value", "topic", "partition", "offset", "timestamp", "ingested_at", "parser", "error")
ERROR_COLUMN = "_error"
EVENT_TIME_COLUMN = "_event_time"
PARSER_DECODE = "decode"
# A record header naming the file a line came from (set by ingest.file_source): part of event.id, so that
# line 7 of two different files gets two ids.
SOURCE_FILE_HEADER = "nightjar.source_file"
HEADERS_TYPE = "array<struct<key: string, value: binary>>"  # Kafka record headers
EVENT_ID_HEX_CHARS = 32  # 128 bits of SHA-256: collision-free in practice, short enough to read


def parse_records(bronze: DataFrame, fmt: str = "auto",
                  max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, planning_barriers: bool | None = None) -> DataFrame:
    """ECS columns + the raw coordinates (:data:`RAW_COLUMNS`) + ``_error`` (null when the record parsed).

    Exactly one output row per input row, in batch and in streaming alike; never raises on bad data.
    ``planning_barriers`` (default: when ``bronze`` is a stream) puts an observation between every second step, so
    that a streaming query's per-micro-batch planning stays linear in the plan's depth (see
    :data:`PLANNING_BARRIER_EVERY`). A batch plan is planned once, and over in-memory lines Spark evaluates the whole
    unbroken parse at planning time, which is faster there; the rows are the same either way.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    cols = set(bronze.columns)
    missing = {"value", "topic", "partition", "offset"} - cols
    if missing:
        raise ValueError(f"not a bronze-shaped DataFrame: no column(s) {', '.join(sorted(missing))}")
    optional = frozenset(cols & {"key", "timestamp", "ingested_at", "headers"})
    from pyspark import SparkContext

    # The format and the size limit are literal columns, so that one cached plan serves every call.
    params = bronze.select("*", F.lit(fmt).alias("_p_fmt"), F.lit(int(max_record_bytes)).alias("_p_max"))
    barriers = bronze.isStreaming if planning_barriers is None else planning_barriers
    return _Plan.replay(_parse_plan(optional, id(SparkContext._active_spark_context)), params, barriers)


class _Plan:
    """Records ``withColumn`` / ``select`` calls so that the (large) expression trees are built once per
    process and replayed onto each DataFrame: building them costs tens of thousands of Py4J calls (seconds),
    and Spark Columns are unresolved expressions that can be applied to any DataFrame with the input columns.
    """

    def __init__(self, columns: frozenset[str]) -> None:
        self.columns = sorted(columns)
        self.steps: list[tuple] = []

    def withColumn(self, name: str, col: Column) -> _Plan:  # noqa: N802 (DataFrame's spelling)
        self.steps.append(("with", name, col))
        return self

    def select(self, *cols: Column | str) -> _Plan:
        self.steps.append(("select", cols))
        return self

    @staticmethod
    def replay(plan: _Plan, df: DataFrame, barriers: bool = False) -> DataFrame:
        last, call = len(plan.steps) - 1, next(_barrier_calls) if barriers else 0
        for i, step in enumerate(plan.steps):
            df = df.withColumn(step[1], step[2]) if step[0] == "with" else df.select(*step[1])
            if barriers and i % PLANNING_BARRIER_EVERY == PLANNING_BARRIER_EVERY - 1 and i < last:
                df = _planning_barrier(df, f"nightjar.parse.{call}.{i}")
        return df


# In a stream, every second projection of the parse is followed by an observation (a ``CollectMetrics`` node counting rows).
# Why: the ~20 stacked projections are not collapsible (each step's wide expressions are used many times by the
# next), and Spark's scan patterns (``PhysicalOperation`` in four planner strategies, ``V2ScanRelationPushDown``,
# the cache lookup) walk down every projection from every node, substituting aliases as they go: planning cost grows
# with the square of the depth, and a streaming query pays it on every micro-batch. The walk stops at any node that
# is not a projection or filter; an observation is the cheapest such node that changes no row. Planning the parse
# of 200 lines: physical planning 1.29 -> 0.12 s, optimizer 1.82 -> 1.41 s, same rows (docs/performance.md,
# "Ingest query: planning").
PLANNING_BARRIER_EVERY = 2
PLANNING_BARRIER_METRIC = "rows"
_barrier_calls = itertools.count()


def _planning_barrier(df: DataFrame, name: str) -> DataFrame:
    # The name is unique per parse_records call (_barrier_calls): two parsed frames may meet in one plan (a union),
    # and Spark rejects two observations of one name there.
    return df.observe(name, F.count(F.lit(1)).alias(PLANNING_BARRIER_METRIC))


@functools.lru_cache(maxsize=16)
def _parse_plan(optional: frozenset[str], _context: int) -> _Plan:
    """The steps of :func:`parse_records` for a bronze frame with the base columns plus ``optional`` (and the
    parameter columns ``_p_fmt``, ``_p_max``)."""
    df = _decode(_Plan(optional | {"value", "topic", "partition", "offset"}))
    line = F.col("_line")
    is_zeek = F.col("_kind") == F.lit("zeek")
    is_syslog = F.col("_kind") == F.lit("syslog")
    df = zeek.add_json(df, line, is_zeek)
    df = syslog.add_header(df, line, is_syslog)
    df = syslog.add_envelope(df, F.col("ingested_at"), F.col("timestamp"))
    df = syslog.add_message_match(df)

    error = (F.when(F.col("_decode_error").isNotNull(),
                    F.struct(F.lit(PARSER_DECODE).alias("parser"), F.col("_decode_error").alias("reason")))
             .when(is_zeek, zeek.error())
             .when(is_syslog, syslog.error(line)))
    # Each parser's fields are materialized as structs, one per case (Zeek log type) or layer (Windows event, JSON
    # payload, message form, header), null where the case does not apply; the leaves then read them. So a row
    # evaluates its own parser's expressions only, and tests its format and log type once, not once per field:
    # -19 % per-row parse time, same rows (docs/performance.md, "Parse").
    zeek_cases, zeek_fields = dispatch_cases(zeek.cases(is_zeek), "_zc")
    syslog_layers: list[Column] = []

    def layer(prefix: str, condition: Column, layer_fields: Fields) -> Fields:
        structs, read = dispatch_cases([(condition, layer_fields)], prefix)
        syslog_layers.extend(structs)
        return read

    syslog_fields = syslog.fields(layer)
    df = df.select(*RAW_COLUMNS, error.alias(ERROR_COLUMN), "_line", "_source_file", *zeek_cases, *syslog_layers)
    fields = coalesce_fields(zeek_fields, syslog_fields, _record_fields())
    # Materialize every leaf once (as _f_<path>), then build the nested structs from those columns.
    leaves = [expr.alias(_flat(path)) for path, expr in fields.items()]
    df = df.select(*RAW_COLUMNS, ERROR_COLUMN, *leaves)
    values = {path: F.col(_flat(path)) for path in fields}
    # Two steps, each materialized: validated addresses first, then the pivots computed from them (so that no
    # address regex is evaluated more than once per field and row).
    for derive in (_normalized_addresses, _pivots):
        derived = derive(values)
        kept = [col for path, col in values.items() if path not in derived]
        df = df.select(*RAW_COLUMNS, ERROR_COLUMN, *kept, *[e.alias(_flat(p)) for p, e in derived.items()])
        values.update({path: F.col(_flat(path)) for path in derived})
    return df.select(*assemble(values), *RAW_COLUMNS, ERROR_COLUMN)


def _flat(path: str) -> str:
    return "_f_" + path.replace("@", "at_").replace(".", "__")


def _decode(bronze: _Plan) -> _Plan:
    """Raw bytes -> ``_line`` (text without line terminator or byte-order mark), ``_kind``, ``_decode_error``."""
    cols = set(bronze.columns)
    value = F.col("value")
    max_bytes = F.col("_p_max")
    raw = [
        F.col("key") if "key" in cols else F.lit(None).cast("binary").alias("key"),
        value, F.col("topic"), F.col("partition"), F.col("offset"),
        F.col("timestamp") if "timestamp" in cols else F.lit(None).cast("timestamp").alias("timestamp"),
        F.col("headers") if "headers" in cols else F.lit(None).cast(HEADERS_TYPE).alias("headers"),
        (F.coalesce(F.col("ingested_at"), F.current_timestamp()) if "ingested_at" in cols
         else F.current_timestamp()).alias("ingested_at"),
    ]
    source_file = (F.try_element_at(F.filter(F.col("headers"), lambda h: h["key"] == F.lit(SOURCE_FILE_HEADER)),
                                    F.lit(1))["value"].cast("string")
                   if "headers" in cols else F.lit(None).cast("string"))
    size = F.octet_length(value)
    text = F.when(size <= max_bytes, value.cast("string"))
    valid = F.is_valid_utf8(text)
    line = F.ltrim(F.rtrim(text, F.lit("\r\n")), F.lit("\ufeff"))
    df = bronze.select(*raw, F.col("_p_fmt"), max_bytes, source_file.alias("_source_file"), size.alias("_size"),
                       F.when(valid, line).alias("_line"))
    decode_error = (
        F.when(F.col("value").isNull(), F.lit("empty record (no value)"))
        .when(F.col("_size") > max_bytes,
              F.format_string("oversized record: %d bytes, the limit is %d", F.col("_size"), max_bytes))
        .when(F.col("_line").isNull(), F.lit("invalid UTF-8"))
        .when(_ltrim_space(F.col("_line")) == F.lit(""), F.lit("empty record (blank line)"))
    )
    fmt = F.col("_p_fmt")
    content = _ltrim_space(F.col("_line"))
    kind = (F.when(fmt == F.lit("zeek"), F.lit("zeek")).when(fmt == F.lit("syslog"), F.lit("syslog"))
            .when(content.startswith("{") | content.startswith("["), F.lit("zeek")).otherwise(F.lit("syslog")))
    return (df.withColumn("_decode_error", decode_error)
              .withColumn("_kind", F.when(F.col("_decode_error").isNull(), kind)))


# Java's regex \s: what a blank line may consist of and what may precede a JSON record.
_REGEX_SPACE = " \t\n\x0b\f\r"


def _ltrim_space(text: Column) -> Column:
    """``text`` without leading regex ``\\s`` characters: the same tests as ``rlike("^\\s*…")`` without running a
    regular expression (and converting the whole line to a Java string) on every record."""
    return F.ltrim(text, F.lit(_REGEX_SPACE))


def event_id(topic: Column, partition: Column, offset: Column, source_file: Column | None = None) -> Column:
    """Deterministic ``event.id`` from the record's coordinates: a replay of the same record gets the same id."""
    parts = [topic, partition.cast("string"), offset.cast("string")]
    if source_file is not None:
        parts.append(source_file)
    return F.substring(F.sha2(F.concat_ws("/", *parts), 256), 1, EVENT_ID_HEX_CHARS)


def _record_fields() -> Fields:
    """Fields every row gets, whatever its format."""
    return {
        "event.id": event_id(F.col("topic"), F.col("partition"), F.col("offset"), F.col("_source_file")),
        "event.original": F.col("_line"),
        "event.created": F.col("timestamp"),
        "event.ingested": F.col("ingested_at"),
    }


def _normalized_addresses(values: dict[str, Column]) -> Fields:
    """Addresses validated into ``*.ip`` / ``*.domain`` and MACs in ECS spelling, whatever the source.

    Parsers emit addresses as written (``source.address``); doing the validation here, once per field,
    keeps the generated code small and the rules identical for every format.
    """

    def get(path: str) -> Column:
        return values.get(path, F.lit(None).cast("string"))

    out: Fields = {
        "source.ip": V.ip_or_null(get("source.address")),
        "source.domain": V.hostname_or_null(F.coalesce(get("source.domain"), get("source.address"))),
        "destination.ip": V.ip_or_null(get("destination.address")),
        "destination.domain": V.hostname_or_null(F.coalesce(get("destination.domain"), get("destination.address"))),
        "source.mac": V.mac(get("source.mac")),
        "destination.mac": V.mac(get("destination.mac")),
        "dhcp.interface": F.when(~V.is_ip(get("dhcp.interface")), get("dhcp.interface")),
    }
    for path in ("dhcp.assigned_ip", "dhcp.requested_ip", "dhcp.server_ip", "dhcp.relay_ip"):
        out[path] = V.ip_or_null(get(path))
    return out


def _pivots(values: dict[str, Column]) -> Fields:
    """The ECS pivot fields ``related.*`` and ``network.type``, from the validated addresses."""

    def get(path: str) -> Column:
        return values.get(path, F.lit(None).cast("string"))

    ips = F.array(*[get(p) for p in ("source.ip", "destination.ip", "dhcp.assigned_ip", "dhcp.requested_ip",
                                     "dhcp.server_ip", "dhcp.relay_ip")])
    if "dns.resolved_ip" in values:
        ips = F.concat(ips, F.coalesce(values["dns.resolved_ip"], F.array().cast("array<string>")))
    users = F.array(*[get(p) for p in ("user.name", "user.effective.name", "system.auth.pam.by")])
    hosts = F.array(get("host.hostname"), get("source.domain"), get("destination.domain"),
                    get("dhcp.client_hostname"))
    source_ip, destination_ip = get("source.ip"), get("destination.ip")
    return {
        "related.ip": non_empty(ips),
        "related.user": non_empty(users),
        "related.hosts": non_empty(F.transform(hosts, F.lower)),
        "network.type": (F.when(F.coalesce(source_ip, destination_ip).contains(":"), F.lit("ipv6"))
                         .when(F.coalesce(source_ip, destination_ip).isNotNull(), F.lit("ipv4"))),
    }


def to_events(parsed: DataFrame) -> DataFrame:
    """The rows that parsed, ECS columns only, in :data:`ingest.ecs_schema.ECS_SCHEMA` order and types."""
    return parsed.where(F.col(ERROR_COLUMN).isNull()).select(*[F.col(f"`{c}`") for c in ECS_COLUMNS])


def to_quarantine(parsed: DataFrame) -> DataFrame:
    """The rows that did not parse: raw bytes, coordinates, the parser tried and the reason."""
    err = F.col(ERROR_COLUMN)
    return parsed.where(err.isNotNull()).select(
        "value", "topic", "partition", "offset", "timestamp", "ingested_at",
        err["parser"].alias("parser"), err["reason"].alias("error"))
