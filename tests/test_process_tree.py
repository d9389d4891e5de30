"""Process trees on an alert's detail page (dashboard/process_tree.py): a real Delta lake of Windows events parsed
and enriched by the pipeline's own steps (``ingest.arrow_parse.parse_bronze`` and on) and written by its Delta
sink, alerts written by the alert sink; the trees read back through DuckDB as the dashboard reads them; one check
of the page in a real Streamlit server and headless Chromium.

The lines are NXLog-style flat JSON records as in ``ingest/sources/windows/fixtures``: a chain explorer.exe →
cmd.exe → powershell.exe → whoami.exe on three hosts — as Sysmon 1 with ProcessGuids (ws-guid), as Security
4688 with pids only (ws-pid), and as 4688 with the same pids on another host (ws-other, whose powershell has one
more child, net.exe) — plus, on each, an unrelated sibling (notepad.exe), an earlier process with cmd.exe's pid
(svchost.exe and its child wermgr.exe), and powershell.exe's pid reused later by calc.exe with a child conhost.exe.
"""

from __future__ import annotations

import datetime as dt
import json
import zlib
from pathlib import Path

import pytest

from core.config import TABLE_EVENTS, Settings

T0 = dt.datetime(2026, 3, 14, 10, 0, tzinfo=dt.UTC)
GUID, PID, OTHER = "ws-guid.corp.example", "ws-pid.corp.example", "ws-other.corp.example"
SYS32 = "C:\\Windows\\System32\\"
ENCODED = "SQBFAFgAIAAoAE4AZQB3AC0ATwBiAGoAZQBjAHQAIABOAGUAdAAuAFcAZQBiAEMAbABpAGUAbgB0ACkA" * 3
PS_CMD = f"powershell.exe -NoProfile -ExecutionPolicy Bypass -EncodedCommand {ENCODED}"

# (minutes after T0, pid, image, command line, parent pid, name of the parent process in this list or None)
CHAIN = [
    (-30, 4000, SYS32 + "svchost.exe", "C:\\Windows\\system32\\svchost.exe -k netsvcs", 700, None),
    (-29, 4100, SYS32 + "wermgr.exe", "C:\\Windows\\system32\\wermgr.exe -upload", 4000, "svchost.exe"),
    (0, 1000, "C:\\Windows\\explorer.exe", "C:\\Windows\\Explorer.EXE", 900, None),
    (1, 4000, SYS32 + "cmd.exe", '"C:\\Windows\\system32\\cmd.exe" ', 1000, "explorer.exe"),
    (2, 5000, SYS32 + "WindowsPowerShell\\v1.0\\powershell.exe", PS_CMD, 4000, "cmd.exe"),
    (3, 6000, SYS32 + "whoami.exe", "whoami /all", 5000, "powershell.exe"),
    (4, 6100, SYS32 + "notepad.exe", "notepad.exe C:\\Users\\alice\\todo.txt", 1000, "explorer.exe"),
    (20, 5000, SYS32 + "calc.exe", "calc.exe", 1000, "explorer.exe"),
    (21, 7000, SYS32 + "conhost.exe", "\\??\\C:\\Windows\\system32\\conhost.exe 0xffffffff", 5000, "calc.exe"),
]
USERINIT = SYS32 + "userinit.exe"


def _guid(host: str, name: str) -> str:
    """A stable GUID per (host, process) in Sysmon's spelling."""
    return "{" + f"{zlib.crc32(f'{host}/{name}'.encode()):08x}-1234-5678-9abc-{len(name):012x}" + "}"


def _time(minutes: float) -> str:
    return (T0 + dt.timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def sysmon1(host: str, minutes: float, pid: int, image: str, cmd: str, ppid: int, parent: str | None,
            parent_image: str, parent_cmd: str) -> str:
    name = image.rsplit("\\", 1)[-1]
    return json.dumps({
        "SourceName": "Microsoft-Windows-Sysmon", "Channel": "Microsoft-Windows-Sysmon/Operational",
        "Hostname": host.upper(), "TimeCreated": _time(minutes), "EventID": 1, "RuleName": "-",
        "UtcTime": _time(minutes).replace("T", " ").rstrip("Z"),
        "ProcessGuid": _guid(host, f"{name}@{minutes}"), "ProcessId": str(pid), "Image": image, "CommandLine": cmd,
        "CurrentDirectory": "C:\\Users\\alice\\", "User": "CORP\\alice", "LogonId": "0x627b7",
        "IntegrityLevel": "High", "ParentProcessGuid": _guid(host, parent or f"parent of {name}"), "ParentProcessId": str(ppid), "ParentImage": parent_image,
        "ParentCommandLine": parent_cmd, "ParentUser": "CORP\\alice"})


def security4688(host: str, minutes: float, pid: int, image: str, cmd: str, ppid: int, parent_image: str) -> str:
    return json.dumps({
        "SourceName": "Microsoft-Windows-Security-Auditing", "Channel": "Security", "Hostname": host.upper(),
        "TimeCreated": _time(minutes), "EventID": 4688, "SubjectUserSid": "S-1-5-21-1-2-3-1104",
        "SubjectUserName": "alice", "SubjectDomainName": "CORP", "SubjectLogonId": "0x627b7",
        "NewProcessId": hex(pid), "NewProcessName": image, "TokenElevationType": "%%1937", "ProcessId": hex(ppid),
        "CommandLine": cmd, "TargetUserSid": "S-1-0-0", "TargetUserName": "-", "ParentProcessName": parent_image,
        "MandatoryLabel": "S-1-16-12288"})


def sysmon3(host: str, minutes: float, pid: int, image: str, guid: str) -> str:
    """A network connection by a process (not a creation): found in its tree by its ProcessGuid."""
    return json.dumps({
        "SourceName": "Microsoft-Windows-Sysmon", "Channel": "Microsoft-Windows-Sysmon/Operational",
        "Hostname": host.upper(), "TimeCreated": _time(minutes), "EventID": 3, "RuleName": "-",
        "UtcTime": _time(minutes).replace("T", " ").rstrip("Z"), "ProcessGuid": guid, "ProcessId": str(pid),
        "Image": image, "User": "CORP\\alice", "Protocol": "tcp", "Initiated": "true", "SourceIp": "10.1.2.3",
        "SourcePort": "50123", "DestinationIp": "198.51.100.7", "DestinationPort": "443"})


def logon4624(host: str, minutes: float) -> str:
    """A network logon without a calling process (ProcessId 0x0): no tree."""
    return json.dumps({
        "SourceName": "Microsoft-Windows-Security-Auditing", "Channel": "Security", "Hostname": host.upper(),
        "TimeCreated": _time(minutes), "EventID": 4624, "SubjectUserSid": "S-1-0-0", "SubjectUserName": "-",
        "TargetUserName": "alice", "TargetDomainName": "CORP", "LogonType": "3", "IpAddress": "10.1.2.9",
        "IpPort": "50000", "ProcessId": "0x0", "ProcessName": "-", "WorkstationName": "WS-9"})


def lines() -> list[str]:
    out = []
    by_name = {image.rsplit("\\", 1)[-1]: (image, cmd) for _m, _p, image, cmd, _pp, _par in CHAIN}
    by_name[None] = (USERINIT, "C:\\Windows\\system32\\userinit.exe")
    for host in (GUID, PID, OTHER):
        for minutes, pid, image, cmd, ppid, parent in CHAIN:
            p_image, p_cmd = by_name[parent]
            if parent is None and image.endswith("svchost.exe"):
                p_image, p_cmd = SYS32 + "services.exe", "C:\\Windows\\system32\\services.exe"
            if host == GUID:
                # each parent's guid: the one its creation line got (its name at its minute)
                pmin = next((m for m, _p, im, _c, _pp, _par in CHAIN if im.rsplit("\\", 1)[-1] == parent
                             and m <= minutes), None)
                out.append(sysmon1(host, minutes, pid, image, cmd, ppid,
                                   f"{parent}@{pmin}" if parent else None, p_image, p_cmd))
            else:
                out.append(security4688(host, minutes, pid, image, cmd, ppid, p_image))
    out.append(security4688(OTHER, 2.5, 6200, SYS32 + "net.exe", "net user /domain", 5000,
                            SYS32 + "WindowsPowerShell\\v1.0\\powershell.exe"))
    out.append(sysmon3(GUID, 2.5, 5000, SYS32 + "WindowsPowerShell\\v1.0\\powershell.exe",
                       _guid(GUID, "powershell.exe@2")))
    out.append(logon4624(PID, 2.5))
    return out


@pytest.fixture(scope="module")
def proc_lake(spark, tmp_path_factory) -> Path:
    """The lines through the ingest query's own steps in batch (``parse_bronze``, host attribution, reference joins:
    ``alerts.python_rules.enriched_events``), written to ``events`` by its Delta sink: the columns the pipeline's
    ``events`` has, which the detail page's other sections read."""
    from alerts.python_rules import enriched_events
    from enrich.reference_data import ReferenceCache
    from ingest.delta_sink import write_batch
    from ingest.file_source import lines_dataframe

    lake = tmp_path_factory.mktemp("proctree") / "lake"
    lake.mkdir()
    events, unparsed = enriched_events(lines_dataframe(spark, lines()), ReferenceCache(lake).current(), [])
    assert unparsed == []
    assert write_batch(events, Settings(lake=lake).table_path(TABLE_EVENTS), "test.proctree", 0) == len(lines())
    return lake


@pytest.fixture(scope="module")
def ids(proc_lake: Path) -> dict[tuple[str, str, str], str]:
    """event.id by (host, process name, event code), read back from the lake."""
    from dashboard.lakedb import query

    df = query(proc_lake, [TABLE_EVENTS], 'SELECT "host".name AS host, "process".name AS name, '
               '"event".code AS code, "@timestamp" AS ts, "event".id AS id FROM events ORDER BY ts')
    out: dict[tuple[str, str, str], str] = {}
    for r in df.itertuples():
        out.setdefault((r.host, r.name, r.code), r.id)  # the first (oldest) of a name: calc's pid reuse is later
    return out


def _alert(evidence: list[str], minutes: float = 2.0, host: str | None = None) -> dict:
    at = T0 + dt.timedelta(minutes=minutes)
    return {"alert_id": "a", "evidence": evidence, "host_name": host, "first_seen": at, "last_seen": at}


def _shape(tree) -> list[tuple[int, str, str | None, int | None, bool]]:
    return [(n.depth, n.relation, n.name, n.pid, n.event_id is not None) for n in tree.nodes]


EXPECTED = [(0, "ancestor", "userinit.exe", 900, False), (1, "ancestor", "explorer.exe", 1000, True),
            (2, "ancestor", "cmd.exe", 4000, True), (3, "evidence", "powershell.exe", 5000, True),
            (4, "child", "whoami.exe", 6000, True)]


def test_sysmon_tree_matched_by_process_guid_from_a_network_event(proc_lake: Path, ids: dict) -> None:
    from dashboard.process_tree import process_trees

    trees = process_trees(proc_lake, _alert([ids[(GUID, "powershell.exe", "3")]]))
    assert len(trees) == 1
    tree = trees[0]
    assert tree.host == GUID and tree.evidence_event_id == ids[(GUID, "powershell.exe", "3")]
    assert _shape(tree) == EXPECTED
    # the nodes are the creation events of ws-guid, the evidence process's its Sysmon 1
    assert [n.event_id for n in tree.nodes[1:]] == [ids[(GUID, n, "1")] for n in
                                                    ("explorer.exe", "cmd.exe", "powershell.exe", "whoami.exe")]
    ps = tree.evidence_node
    assert ps.command_line == PS_CMD and ps.user == "CORP\\alice" and ps.guid == _guid(GUID, "powershell.exe@2").lower()
    assert ps.time == T0 + dt.timedelta(minutes=2) and ps.executable.endswith("\\powershell.exe")
    # the top ancestor, whose creation is not in the lake, is what explorer.exe's event says of its parent
    assert tree.nodes[0].executable == USERINIT and tree.nodes[0].command_line.endswith("userinit.exe")
    assert tree.nodes[0].time is None and not tree.children_truncated


def test_security_4688_tree_matched_by_pid_and_time_despite_pid_reuse(proc_lake: Path, ids: dict) -> None:
    """Without GUIDs: cmd.exe's pid 4000 was svchost.exe's 31 minutes before, powershell.exe's pid 5000 is
    calc.exe's 18 minutes after (its conhost.exe child is not powershell's), and ws-other's powershell.exe with
    the same pid at the same time has a child net.exe that is not on this host."""
    from dashboard.process_tree import process_trees

    trees = process_trees(proc_lake, _alert([ids[(PID, "powershell.exe", "4688")]]))
    assert len(trees) == 1 and trees[0].host == PID
    assert _shape(trees[0]) == EXPECTED
    assert [n.event_id for n in trees[0].nodes[1:]] == [ids[(PID, n, "4688")] for n in
                                                        ("explorer.exe", "cmd.exe", "powershell.exe", "whoami.exe")]
    assert trees[0].evidence_node.user == "CORP\\alice"


def test_children_of_an_ancestor_and_a_leaf_as_evidence(proc_lake: Path, ids: dict) -> None:
    """Evidence cmd.exe: its one child is powershell.exe (not notepad.exe, explorer's, nor wermgr.exe, the child of
    the earlier pid 4000). Evidence whoami.exe: four ancestors, no child."""
    from dashboard.process_tree import process_trees

    for host, code in ((GUID, "1"), (PID, "4688")):
        (cmd,) = process_trees(proc_lake, _alert([ids[(host, "cmd.exe", code)]], minutes=1))
        assert _shape(cmd) == [(0, "ancestor", "userinit.exe", 900, False), (1, "ancestor", "explorer.exe", 1000, True),
                               (2, "evidence", "cmd.exe", 4000, True), (3, "child", "powershell.exe", 5000, True)]
        (who,) = process_trees(proc_lake, _alert([ids[(host, "whoami.exe", code)]], minutes=3))
        assert [(n.name, n.relation) for n in who.nodes] == [
            ("userinit.exe", "ancestor"), ("explorer.exe", "ancestor"), ("cmd.exe", "ancestor"),
            ("powershell.exe", "ancestor"), ("whoami.exe", "evidence")]


def test_window_bounds_and_caps_are_parameters(proc_lake: Path, ids: dict) -> None:
    """A window that starts after explorer.exe's creation shows it from cmd.exe's parent fields; children come only
    from within the window and beyond the cap are cut and flagged."""
    from dashboard.process_tree import process_trees

    (tree,) = process_trees(proc_lake, _alert([ids[(PID, "powershell.exe", "4688")]]),
                            before=dt.timedelta(minutes=1), after=dt.timedelta(seconds=30))
    assert _shape(tree) == [(0, "ancestor", "explorer.exe", 1000, False), (1, "ancestor", "cmd.exe", 4000, True),
                            (2, "evidence", "powershell.exe", 5000, True)]  # whoami.exe at +3 min is past the window
    (tree,) = process_trees(proc_lake, _alert([ids[(PID, "explorer.exe", "4688")]], minutes=0), max_children=1)
    assert [(n.name, n.relation) for n in tree.nodes] == [("userinit.exe", "ancestor"), ("explorer.exe", "evidence"),
                                                          ("cmd.exe", "child")]
    assert tree.children_truncated
    (tree,) = process_trees(proc_lake, _alert([ids[(PID, "explorer.exe", "4688")]], minutes=0))
    # explorer's children in time order: calc.exe too (a new process with pid 5000, whose parent is explorer)
    assert [n.name for n in tree.nodes if n.relation == "child"] == ["cmd.exe", "notepad.exe", "calc.exe"]
    (tree,) = process_trees(proc_lake, _alert([ids[(PID, "powershell.exe", "4688")]]), max_depth=1)
    assert [n.name for n in tree.nodes] == ["cmd.exe", "powershell.exe", "whoami.exe"]


def test_one_tree_per_process_and_none_without_a_process(proc_lake: Path, ids: dict) -> None:
    from dashboard.process_tree import process_trees

    # the Sysmon 3 and the Sysmon 1 of one powershell.exe, and a logon without a process: one tree
    both = process_trees(proc_lake, _alert([ids[(GUID, "powershell.exe", "1")], ids[(GUID, "powershell.exe", "3")],
                                            ids[(PID, None, "4624")]]))
    assert [(t.host, t.evidence_node.name) for t in both] == [(GUID, "powershell.exe")]
    assert process_trees(proc_lake, _alert([ids[(PID, None, "4624")]])) == []
    assert process_trees(proc_lake, _alert(["no-such-event"])) == []
    assert process_trees(proc_lake, _alert([])) == []
    # evidence outside the alert's window widened by `before`/`after` is not looked for
    assert process_trees(proc_lake, _alert([ids[(GUID, "whoami.exe", "1")]], minutes=200)) == []


def test_fields_are_read_through_the_resolver() -> None:
    """The Sysmon GUIDs are the resolver's typed detail lookups for the Sysmon dataset, not hand-written ones."""
    from dashboard import process_tree

    source = Path(process_tree.__file__).read_text()
    assert "detail[" not in source and "detail'" not in source
    assert "CASE WHEN event.dataset IN ('windows.sysmon_operational') THEN detail['ParentProcessGuid'] END" in \
        process_tree._columns_sql()


FIXTURES = Path(__file__).resolve().parent.parent / "ingest" / "sources" / "windows" / "fixtures"


@pytest.fixture(scope="module")
def otrf_lake(spark, tmp_path_factory) -> Path:
    """Real OTRF records from the Windows source's golden fixtures: DC01's cmd.exe as both Sysmon 1 and Security 4688
    (one process, two logs), and WORKSTATION5's cvtres.exe as NXLog shipped it (no ProcessId: GUIDs only)."""
    from alerts.python_rules import enriched_events
    from enrich.reference_data import ReferenceCache
    from ingest.delta_sink import write_batch
    from ingest.file_source import lines_dataframe

    sysmon = (FIXTURES / "otrf-sysmon.log").read_text().splitlines()
    security = (FIXTURES / "otrf-security.log").read_text().splitlines()
    chosen = [sysmon[0], security[6], sysmon[12]]
    assert [json.loads(line)["EventID"] for line in chosen] == [1, 4688, 1]
    lake = tmp_path_factory.mktemp("otrf") / "lake"
    lake.mkdir()
    events, unparsed = enriched_events(lines_dataframe(spark, chosen), ReferenceCache(lake).current(), [])
    assert unparsed == []
    assert write_batch(events, Settings(lake=lake).table_path(TABLE_EVENTS), "test.proctree.otrf", 0) == 3
    return lake


def test_real_otrf_records_one_process_logged_twice_and_a_guid_only_record(otrf_lake: Path) -> None:
    from dashboard.lakedb import query
    from dashboard.process_tree import process_trees

    df = query(otrf_lake, [TABLE_EVENTS], 'SELECT "event".id AS id, "event".code AS code, "host".name AS host, '
               '"@timestamp" AS ts FROM events')
    ev = {(r.host, r.code): (r.id, r.ts) for r in df.itertuples()}

    def alert(key):
        event_id, ts = ev[key]
        return {"evidence": [event_id], "first_seen": ts, "last_seen": ts}

    # The 4688 is the evidence; its Sysmon 1 twin (49 ms later, same pid and image) is the same process: one node,
    # the Sysmon event's (it carries the GUIDs). explorer.exe's creation is not recorded: it comes from the fields.
    (tree,) = process_trees(otrf_lake, alert(("dc01.pandalab.com", "4688")))
    assert [(n.relation, n.name, n.pid, n.event_id) for n in tree.nodes] == [
        ("ancestor", "explorer.exe", 2088, None), ("evidence", "cmd.exe", 3824, ev[("dc01.pandalab.com", "1")][0])]
    assert tree.nodes[0].command_line == '"C:\\Windows\\Explorer.EXE" /NoUACCheck'
    assert tree.evidence_node.guid == "{fe86be69-090f-64b8-0903-000000001000}"
    assert tree.evidence_node.user == "PANDALAB\\Administrator"
    # NXLog dropped Sysmon's ProcessId: the process is known by its GUID alone, its parent from the fields
    (tree,) = process_trees(otrf_lake, alert(("workstation5.theshire.local", "1")))
    assert [(n.relation, n.name, n.pid) for n in tree.nodes] == [("ancestor", "csc.exe", 1796),
                                                                  ("evidence", "cvtres.exe", None)]
    assert tree.evidence_node.guid == "{b34bc01c-b453-5f69-c602-000000000900}"


# --- the page, in a real browser -----------------------------------------------------------------------------

@pytest.mark.browser
def test_alert_page_shows_the_process_tree_only_for_an_alert_with_a_process(proc_lake: Path, ids: dict, rules_dir,
                                                                           tmp_path: Path) -> None:
    from alerts.alert_sink import write_alert_rows
    from tests.test_alert_sink import make_alert
    from tests.test_dashboard import _chrome, _wait_for_text, serve_dashboard

    start = T0 + dt.timedelta(minutes=2)
    with_proc = make_alert("suspicious_powershell", ("host", GUID), event_count=1, window_start=start,
                           first_seen=start, last_seen=start, host_name=GUID, user_name="alice",
                           evidence=[ids[(GUID, "powershell.exe", "3")]], summary="encoded PowerShell")
    without = make_alert("network_logon", ("host", PID), event_count=1, window_start=start, first_seen=start,
                         last_seen=start, host_name=PID, evidence=[ids[(PID, None, "4624")]], summary="a logon")
    write_alert_rows([with_proc, without], Settings(lake=proc_lake), "tests", 0)

    with serve_dashboard(Settings(lake=proc_lake, rules=(rules_dir,)), tmp_path / "dashboard.log") as url:
        driver = _chrome()
        try:
            driver.get(f"{url}/alert?alert_id={with_proc['alert_id']}")
            text = _wait_for_text(driver, lambda t: "Process tree" in t and "whoami.exe" in t and "Related alerts" in t)
            tree = text.split("Process tree", 1)[1]
            for name in ("userinit.exe", "explorer.exe", "cmd.exe", "powershell.exe", "whoami.exe"):
                assert name in tree
            assert tree.index("explorer.exe") < tree.index("cmd.exe") < tree.index("whoami.exe")
            assert "whoami /all" in tree and "evidence" in tree
            assert ENCODED not in text  # the long command line is cut on the tree; the full text is one click away
            driver.get(f"{url}/alert?alert_id={without['alert_id']}")
            text = _wait_for_text(driver, lambda t: "a logon" in t and "Related alerts" in t)
            assert "Process tree" not in text
        finally:
            driver.quit()


def test_the_fixture_lines_parse_as_the_windows_source_says(proc_lake: Path) -> None:
    """The hand-made lines land where the real OTRF records do (dataset, code, process fields)."""
    from dashboard.lakedb import query

    df = query(proc_lake, [TABLE_EVENTS], 'SELECT "event".dataset AS dataset, "event".code AS code, '
               'count(*) AS n, count("process".pid) AS pids FROM events GROUP BY ALL ORDER BY ALL')
    got = {(r.dataset, r.code): (r.n, r.pids) for r in df.itertuples()}
    assert got == {("windows.security", "4624"): (1, 0), ("windows.security", "4688"): (19, 19),
                   ("windows.sysmon_operational", "1"): (9, 9), ("windows.sysmon_operational", "3"): (1, 1)}
