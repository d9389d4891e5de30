"""JSON payloads after a syslog header (``@cee:`` and a bare object): kept whole in ``syslog.json``, known keys
mapped onto ECS, malformed payloads still events; the quarantine contract is unchanged."""

from __future__ import annotations

import json

import pytest

from tests.parse_helpers import fields, get, parse_samples, utc

SAMPLES = {
    "cee_lumberjack": '<13>1 2024-03-09T10:00:00Z web01 myapp 77 - - @cee: {"msg": "login ok", "pname": "authsvc", '
                      '"pid": 4242, "user": "alice", "src_ip": "10.0.0.5", "src_port": "50022", '
                      '"outcome": "Success", "level": "INFO", "extra": {"a": [1, 2]}, "flag": true, "none": null}',
    "bare_rfc5424": '<14>1 2024-03-09T10:00:01Z fw01 filterlog - - - {"action": "block", "source": {"ip": '
                    '"203.0.113.9", "port": 4444}, "destination": {"ip": "10.0.0.9", "port": 22}, '
                    '"event.outcome": "failure"}',
    "bare_rfc3164": 'Mar  9 10:00:02 api01 gateway[9]: {"method": "POST", "url": "/login", "status": 401, '
                    '"user_agent": "curl/8.0", "client_ip": "198.51.100.7", "username": "bob"}',
    "nested_user_object": '<14>1 2024-03-09T10:00:03Z h app - - - {"user": {"name": "carol", "id": "1001"}, '
                          '"message": "hello"}',
    "malformed": '<14>1 2024-03-09T10:00:04Z h app - - - @cee: {"msg": "cut off',
    "not_an_object": '<14>1 2024-03-09T10:00:05Z h app - - - {this is not json}',
    "plain": '<14>1 2024-03-09T10:00:06Z h app - - - plain text {with braces}',
}
NAMES = list(SAMPLES)


@pytest.fixture(scope="module")
def rows(spark) -> dict[str, dict]:
    return parse_samples(spark, SAMPLES)


def test_all_are_events(rows):
    for name, r in rows.items():
        assert r["_error"] is None, name
        assert get(r, "event.module") == "system", name


def test_cee_payload_is_kept_whole_and_mapped(rows):
    r = rows["cee_lumberjack"]
    assert get(r, "syslog.json") == {"msg": "login ok", "pname": "authsvc", "pid": "4242", "user": "alice",
                                     "src_ip": "10.0.0.5", "src_port": "50022", "outcome": "Success",
                                     "level": "INFO", "extra": '{"a":[1,2]}', "flag": "true", "none": None}
    assert fields(r, "message", "process.name", "process.pid", "user.name", "source.ip", "source.port",
                  "event.outcome", "log.level", "host.name", "related.user", "@timestamp") == {
        "message": "login ok", "process.name": "authsvc", "process.pid": 4242, "user.name": "alice",
        "source.ip": "10.0.0.5", "source.port": 50022, "event.outcome": "success", "log.level": "info",
        "host.name": "web01", "related.user": ["alice"], "@timestamp": utc(2024, 3, 9, 10, 0, 0)}
    assert get(r, "event.original") == SAMPLES["cee_lumberjack"]


def test_bare_object_with_nested_and_dotted_ecs_keys(rows):
    r = rows["bare_rfc5424"]
    assert fields(r, "event.action", "event.outcome", "source.ip", "source.port", "destination.ip",
                  "destination.port", "process.name", "message") == {
        "event.action": "block", "event.outcome": "failure", "source.ip": "203.0.113.9", "source.port": 4444,
        "destination.ip": "10.0.0.9", "destination.port": 22, "process.name": "filterlog",
        "message": SAMPLES["bare_rfc5424"].split(" - - - ", 1)[1]}
    assert json.loads(get(r, "syslog.json")["source"]) == {"ip": "203.0.113.9", "port": 4444}


def test_bare_object_after_rfc3164_header(rows):
    r = rows["bare_rfc3164"]
    assert fields(r, "http.request.method", "url.original", "http.response.status_code", "user_agent.original",
                  "source.ip", "user.name", "process.name", "process.pid") == {
        "http.request.method": "POST", "url.original": "/login", "http.response.status_code": 401,
        "user_agent.original": "curl/8.0", "source.ip": "198.51.100.7", "user.name": "bob",
        "process.name": "gateway", "process.pid": 9}


def test_nested_user_object(rows):
    r = rows["nested_user_object"]
    assert fields(r, "user.name", "message") == {"user.name": "carol", "message": "hello"}
    assert json.loads(get(r, "syslog.json")["user"]) == {"name": "carol", "id": "1001"}


def test_not_json_stays_a_plain_event(rows):
    for name in ("malformed", "not_an_object", "plain"):
        r = rows[name]
        assert get(r, "syslog.json") is None, name
        assert r["message"] == SAMPLES[name].split(" - - - ", 1)[1], name
        assert get(r, "host.name") == "h" and get(r, "process.name") == "app", name
