"""A Sigma logsource -> the events it reads, from pySigma's maintained maps: Windows services -> channels (pySigma's
``windows_logsource_mapping``), Sysmon categories -> event ids (pysigma-pipeline-sysmon), PowerShell categories ->
channel + event id (pysigma-pipeline-windows). A Sysmon category rule must see only Sysmon events of its ids, a
``service: security`` rule only channel Security, checked on events parsed by the real Windows source."""

from __future__ import annotations

import json

import pytest
from sigma.rule import SigmaLogSource, SigmaRule

from alerts.logsource_map import (
    SYSMON_CATEGORY_EVENT_IDS,
    WINDOWS_CATEGORY_CHANNELS,
    NotApplicable,
    logsource_datasets,
    logsource_scope,
)

SYSMON = "windows.sysmon_operational"


def _scope(**logsource: str) -> dict:
    scope = logsource_scope(SigmaLogSource.from_dict(logsource))
    return None if scope is None else dict(scope.codes)


def test_windows_categories_read_their_channels_event_ids():
    assert _scope(product="windows", category="process_creation") == {SYSMON: ("1",), "windows.security": ("4688",)}
    assert _scope(product="windows", category="registry_event") == {SYSMON: ("12", "13", "14")}
    assert _scope(product="windows", category="network_connection") == {SYSMON: ("3",)}
    assert _scope(product="windows", category="dns_query") == {SYSMON: ("22",)}
    # PowerShellCore/Operational is a channel of pySigma's map too, but not a dataset the registry lists
    assert _scope(product="windows", category="ps_script") == {"windows.powershell_operational": ("4104",)}
    assert _scope(product="windows", category="ps_classic_start") == {"windows.powershell": ("400",)}


def test_windows_services_read_whole_channels():
    assert _scope(product="windows", service="security") == {"windows.security": None}
    assert _scope(product="windows", service="sysmon") == {SYSMON: None}
    assert _scope(product="windows", service="wmi") == {"windows.wmi_activity_operational": None}
    assert logsource_datasets(SigmaLogSource.from_dict({"product": "zeek", "service": "dns"})) == ("zeek.dns",)
    assert logsource_datasets(SigmaLogSource.from_dict({"product": "linux", "service": "sshd"})) == ("system.auth",)


@pytest.mark.parametrize("logsource", [
    {"product": "windows", "category": "file_access"},  # kernel-file ETW, not a Sysmon event
    {"product": "windows", "service": "no-such-service"},
    {"product": "windows", "category": "antivirus"},
])
def test_windows_logsources_no_channel_serves_are_not_applicable(logsource):
    with pytest.raises(NotApplicable, match="not applicable"):
        logsource_scope(SigmaLogSource.from_dict(logsource))


def test_copied_tables_equal_the_pipeline_packages_when_installed():
    """The copies follow the packages (they cannot be dependencies: they require pySigma < 2.0)."""
    sysmon = pytest.importorskip("sigma.pipelines.sysmon.sysmon")
    windows = pytest.importorskip("sigma.pipelines.windows.windows")
    assert dict(SYSMON_CATEGORY_EVENT_IDS) == sysmon.sysmon_generic_logsource_eventid_mapping
    theirs = windows.windows_generic_category_channel_mapping
    assert {k: v for k, v in WINDOWS_CATEGORY_CHANNELS.items() if k != "process_creation"} == {
        k: ((v["service"], v["EventID"]),) for k, v in theirs.items()}


def _line(channel: str, event_id: int, **data: str) -> str:
    return json.dumps({"EventID": event_id, "Channel": channel, "Hostname": "WS01",
                       "TimeCreated": "2026-03-14T10:00:00.000Z", **data})


def test_category_and_service_rules_match_only_their_events(spark):
    """Real parse of Sysmon 1, Sysmon 3 and Security 4688/4624 events, all naming cmd.exe: a process_creation rule
    matches Sysmon 1 and 4688 only, a service: security rule every Security event and no Sysmon one."""
    from pyspark.sql import functions as F

    from alerts.detection_input import contract_schema
    from alerts.sigma_compiler import compile_detection
    from ingest.arrow_parse import events_of, parse_bronze
    from ingest.file_source import lines_dataframe

    sysmon = "Microsoft-Windows-Sysmon/Operational"
    lines = [
        _line(sysmon, 1, Image="C:\\Windows\\System32\\cmd.exe", CommandLine="cmd.exe /c whoami"),
        _line(sysmon, 3, Image="C:\\Windows\\System32\\cmd.exe", DestinationIp="10.0.0.9", DestinationPort="445"),
        _line("Security", 4688, NewProcessName="C:\\Windows\\System32\\cmd.exe", CommandLine="cmd.exe /c whoami"),
        _line("Security", 4624, ProcessName="C:\\Windows\\System32\\cmd.exe", TargetUserName="alice"),
    ]
    events = events_of(parse_bronze(lines_dataframe(spark, lines))).cache()
    assert events.count() == 4

    def matched(logsource: dict) -> list[tuple[str, str]]:
        rule = SigmaRule.from_dict({"title": "t", "logsource": logsource, "detection": {
            "sel": {"Image|endswith": "\\cmd.exe"}, "condition": "sel"}})
        scope = logsource_scope(rule.logsource)
        sql = compile_detection(rule, contract_schema(), scope.datasets, scope.codes)
        rows = events.where(F.expr(sql)).select("event.dataset", "event.code").collect()
        return sorted((r["dataset"], r["code"]) for r in rows)

    assert matched({"product": "windows", "category": "process_creation"}) == [
        ("windows.security", "4688"), (SYSMON, "1")]
    assert matched({"product": "windows", "category": "network_connection"}) == [(SYSMON, "3")]
    assert matched({"product": "windows", "service": "security"}) == [
        ("windows.security", "4624"), ("windows.security", "4688")]
