"""Windows event logs over syslog -> ECS: the real EvntSLog capture of ../shared/corpus (skipped when absent)
and hand-written rendered-text and JSON lines, one per event id, with exact field values."""

from __future__ import annotations

import collections
import json
import re

import pytest

from tests.conftest import CORPUS
from tests.parse_helpers import fields, get, parse_lines, parse_samples, utc

CAPTURE = CORPUS / "zeek-wrccdc-2018" / "syslog-rfc5424-cee.log"

H = "<133>1 2024-03-09T10:00:00.000Z dc01.corp.example EvntSLog - - - "
SUBJECT_DC = "Subject: Security ID: S-1-5-18 Account Name: DC01$ Account Domain: CORP Logon ID: 0x3e7 "
SUBJECT_ADMIN = ("Subject: Security ID: S-1-5-21-1-2-3-500 Account Name: Administrator Account Domain: CORP "
                 "Logon ID: 0x1a2b3c ")

SAMPLES = {
    "4624": H + "An account was successfully logged on. Subject: Security ID: S-1-5-18 Account Name: DC01$ "
    "Account Domain: CORP Logon ID: 0x3e7 Logon Information: Logon Type: 10 Restricted Admin Mode: No Virtual "
    "Account: No Elevated Token: Yes Impersonation Level: Impersonation New Logon: Security ID: "
    "S-1-5-21-1-2-3-1104 Account Name: alice Account Domain: CORP Logon ID: 0x8dcdc Linked Logon ID: 0x0 "
    "Network Account Name: - Network Account Domain: - Logon GUID: {00000000-0000-0000-0000-000000000000} "
    "Process Information: Process ID: 0x2f4 Process Name: C:\\Windows\\System32\\svchost.exe Network Information: "
    "Workstation Name: WS-ALICE Source Network Address: 10.1.2.3 Source Port: 51234 Detailed Authentication "
    "Information: Logon Process: User32 Authentication Package: Negotiate Transited Services: - Package Name "
    "(NTLM only): - Key Length: 0 This event is generated when a logon session is created.",
    "4625": H + "An account failed to log on. Subject: Security ID: S-1-0-0 Account Name: - Account Domain: - "
    "Logon ID: 0x0 Logon Type: 3 Account For Which Logon Failed: Security ID: S-1-0-0 Account Name: "
    "Administrator Account Domain: WS-EVIL Failure Information: Failure Reason: Unknown user name or bad "
    "password. Status: 0xc000006d Sub Status: 0xc000006a Process Information: Caller Process ID: 0x0 Caller "
    "Process Name: - Network Information: Workstation Name: WS-EVIL Source Network Address: 203.0.113.9 "
    "Source Port: 0 Detailed Authentication Information: Logon Process: NtLmSsp Authentication Package: NTLM "
    "Transited Services: - Package Name (NTLM only): - Key Length: 0 This event is generated when a logon "
    "request fails.",
    "4634": H + "An account was logged off. Subject: Security ID: S-1-5-21-1-2-3-1104 Account Name: alice "
    "Account Domain: CORP Logon ID: 0x8dcdc Logon Type: 10 This event is generated when a logon session is "
    "destroyed.",
    "4647": H + "User initiated logoff: Subject: Security ID: S-1-5-21-1-2-3-1104 Account Name: alice Account "
    "Domain: CORP Logon ID: 0x8dcdc This event is generated when a logoff is initiated.",
    "4648": H + "A logon was attempted using explicit credentials. " + SUBJECT_ADMIN + "Logon GUID: "
    "{00000000-0000-0000-0000-000000000000} Account Whose Credentials Were Used: Account Name: bob Account "
    "Domain: CORP Logon GUID: {00000000-0000-0000-0000-000000000000} Target Server: Target Server Name: "
    "fs01.corp.example Additional Information: fs01.corp.example Process Information: Process ID: 0x1f4 Process "
    "Name: C:\\Windows\\System32\\runas.exe Network Information: Network Address: 10.1.2.4 Port: 445 This event "
    "is generated when a process attempts to log on an account by explicitly specifying that account's "
    "credentials.",
    "4672": H + "Special privileges assigned to new logon. Subject: Security ID: S-1-5-21-1-2-3-500 Account "
    "Name: Administrator Account Domain: CORP Logon ID: 0x1a2b3c Privileges: SeSecurityPrivilege "
    "SeDebugPrivilege",
    "4688": H + "A new process has been created. Creator Subject: Security ID: S-1-5-21-1-2-3-1104 Account Name: "
    "alice Account Domain: CORP Logon ID: 0x8dcdc Target Subject: Security ID: S-1-0-0 Account Name: - Account "
    "Domain: - Logon ID: 0x0 Process Information: New Process ID: 0x1a2c New Process Name: "
    "C:\\Windows\\System32\\cmd.exe Token Elevation Type: %%1938 Mandatory Label: S-1-16-8192 Creator Process "
    "ID: 0x19c Creator Process Name: C:\\Windows\\explorer.exe Process Command Line: cmd.exe /c whoami /all "
    "Token Elevation Type indicates the type of token that was assigned to the new process.",
    "4720": H + "A user account was created. " + SUBJECT_ADMIN + "New Account: Security ID: S-1-5-21-1-2-3-1105 "
    "Account Name: mallory Account Domain: CORP Attributes: SAM Account Name: mallory Display Name: <value not "
    "set>",
    "4722": H + "A user account was enabled. " + SUBJECT_ADMIN + "Target Account: Security ID: "
    "S-1-5-21-1-2-3-1105 Account Name: mallory Account Domain: CORP",
    "4723": H + "An attempt was made to change an account's password. Subject: Security ID: S-1-5-21-1-2-3-1104 "
    "Account Name: alice Account Domain: CORP Logon ID: 0x8dcdc Target Account: Security ID: S-1-5-21-1-2-3-1104 "
    "Account Name: alice Account Domain: CORP Additional Information: Privileges -",
    "4724": H + "An attempt was made to reset an account's password. " + SUBJECT_ADMIN + "Target Account: "
    "Security ID: S-1-5-21-1-2-3-1104 Account Name: alice Account Domain: CORP",
    "4725": H + "A user account was disabled. " + SUBJECT_ADMIN + "Target Account: Security ID: "
    "S-1-5-21-1-2-3-1105 Account Name: mallory Account Domain: CORP",
    "4726": H + "A user account was deleted. " + SUBJECT_ADMIN + "Target Account: Security ID: "
    "S-1-5-21-1-2-3-1105 Account Name: mallory Account Domain: CORP Additional Information: Privileges -",
    "4732": H + "A member was added to a security-enabled local group. " + SUBJECT_ADMIN + "Member: Security ID: "
    "S-1-5-21-1-2-3-1105 Account Name: CN=mallory,CN=Users,DC=corp,DC=example Group: Security ID: S-1-5-32-544 "
    "Group Name: Administrators Group Domain: Builtin Additional Information: Privileges: -",
    "4740": H + "A user account was locked out. " + SUBJECT_DC + "Account That Was Locked Out: Security ID: "
    "S-1-5-21-1-2-3-1104 Account Name: alice Additional Information: Caller Computer Name: WS-ALICE",
    "4768": H + "A Kerberos authentication ticket (TGT) was requested. Account Information: Account Name: bob "
    "Supplied Realm Name: CORP.EXAMPLE User ID: S-1-5-21-1-2-3-1106 Service Information: Service Name: krbtgt "
    "Service ID: S-1-5-21-1-2-3-502 Network Information: Client Address: ::ffff:10.1.2.5 Client Port: 49162 "
    "Additional Information: Ticket Options: 0x40810010 Result Code: 0x0 Ticket Encryption Type: 0x12 "
    "Pre-Authentication Type: 2",
    "4769": H + "A Kerberos service ticket was requested. Account Information: Account Name: bob@CORP.EXAMPLE "
    "Account Domain: CORP.EXAMPLE Logon GUID: {8FF6D09E-CEC3-F66E-DC50-C07F2B470694} Service Information: "
    "Service Name: MSSQLSvc Service ID: S-1-5-21-1-2-3-1200 Network Information: Client Address: ::ffff:10.1.2.5 "
    "Client Port: 50152 Additional Information: Ticket Options: 0x40810000 Ticket Encryption Type: 0x17 Failure "
    "Code: 0x0 Transited Services: -",
    "4771": H + "Kerberos pre-authentication failed. Account Information: Security ID: S-1-5-21-1-2-3-1106 "
    "Account Name: bob Service Information: Service Name: krbtgt/CORP.EXAMPLE Network Information: Client "
    "Address: ::ffff:10.1.2.6 Client Port: 49165 Additional Information: Ticket Options: 0x40810010 Failure Code: "
    "0x18 Pre-Authentication Type: 2",
    "4776": H + "The computer attempted to validate the credentials for an account. Authentication Package: "
    "MICROSOFT_AUTHENTICATION_PACKAGE_V1_0 Logon Account: carol Source Workstation: WS-CAROL Error Code: "
    "0xc000006a",
    "7036": "<134>1 2024-03-09T10:00:00Z ws01.corp.example EvntSLog - - - The Windows Update service entered the "
    "running state.",
    "7045": "<134>1 2024-03-09T10:00:00Z ws01.corp.example EvntSLog - - - A service was installed in the system. "
    "Service Name: PSEXESVC Service File Name: %SystemRoot%\\PSEXESVC.exe Service Type: user mode service "
    "Service Start Type: demand start Service Account: LocalSystem",
    "1102": H + "The audit log was cleared. Subject: Security ID: S-1-5-21-1-2-3-500 Account Name: Administrator "
    "Domain Name: CORP Logon ID: 0x1a2b3c",
    "json_4625": H + "@cee: " + json.dumps({
        "source": "dc01.corp.example", "msg": "An account failed to log on.\r\n\r\nSubject:\r\n\tSecurity ID:\t\t"
        "S-1-0-0", "nteventlogtype": "Security", "sourceproc": "Microsoft-Windows-Security-Auditing", "id": "4625",
        "user": "N\\A", "SubjectUserSid": "S-1-0-0", "SubjectUserName": "-", "TargetUserName": "root",
        "TargetDomainName": "CORP", "Status": "0xc000006d", "LogonType": "3", "IpAddress": "198.51.100.7",
        "IpPort": "50000", "WorkstationName": "KALI", "catname": "Logon", "keyword": "Audit Failure",
        "level": "Information"}),
    "nxlog_4688": "<14>1 2024-03-09T10:00:00Z ws01 nxlog - - - " + json.dumps({
        "EventID": 4688, "Channel": "Security", "SourceName": "Microsoft-Windows-Security-Auditing",
        "Hostname": "ws01.corp.example", "Keywords": "Audit Success", "Severity": "INFO",
        "SubjectUserName": "alice", "SubjectDomainName": "CORP", "SubjectUserSid": "S-1-5-21-1-2-3-1104",
        "NewProcessId": "0x1a2c", "NewProcessName": "C:\\Windows\\System32\\whoami.exe", "ProcessId": "0x19c",
        "ParentProcessName": "C:\\Windows\\System32\\cmd.exe", "CommandLine": "whoami /priv",
        "Message": "A new process has been created."}),
    "json_unknown_id": H + '@cee: {"source": "ws01", "msg": "Something custom happened.", '
    '"nteventlogtype": "Application", "sourceproc": "MyApp", "id": "9999", "level": "Warning"}',
    "text_unknown": H + "Reliability Analysis execution time was 373 milliseconds.",
    "sd_event_id": '<165>1 2023-10-11T22:14:15.003Z mymachine.example.com evntslog 1234 ID47 '
    '[exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"] An application event log entry',
}
NAMES = list(SAMPLES)


@pytest.fixture(scope="module")
def rows(spark) -> dict[str, dict]:
    return parse_samples(spark, SAMPLES)


def test_every_sample_is_a_windows_event_with_its_code(rows):
    for name, r in rows.items():
        assert r["_error"] is None, name
        assert get(r, "event.module") == "windows", name
        expected = {"json_unknown_id": "9999", "text_unknown": None, "sd_event_id": "1011",
                    "json_4625": "4625", "nxlog_4688": "4688"}.get(name, name)
        assert get(r, "event.code") == expected, name
        assert get(r, "winlog.event_id") == expected, name


def test_4624_names_the_new_logon_not_the_subject(rows):
    r = rows["4624"]
    assert fields(r, "event.dataset", "event.category", "event.type", "event.action", "event.outcome",
                  "event.provider", "winlog.channel", "user.name", "user.domain", "user.id", "source.ip",
                  "source.port", "source.domain", "winlog.logon.type", "winlog.logon.id", "process.pid",
                  "process.name", "process.executable", "related.user", "host.name", "@timestamp") == {
        "event.dataset": "windows.security", "event.category": ["authentication"], "event.type": ["start"],
        "event.action": "logged-in", "event.outcome": "success",
        "event.provider": "Microsoft-Windows-Security-Auditing", "winlog.channel": "Security",
        "user.name": "alice", "user.domain": "CORP", "user.id": "S-1-5-21-1-2-3-1104", "source.ip": "10.1.2.3",
        "source.port": 51234, "source.domain": "ws-alice", "winlog.logon.type": "RemoteInteractive",
        "winlog.logon.id": "0x8dcdc", "process.pid": 756, "process.name": "svchost.exe",
        "process.executable": "C:\\Windows\\System32\\svchost.exe", "related.user": ["alice"],
        "host.name": "dc01.corp.example", "@timestamp": utc(2024, 3, 9, 10, 0, 0),
    }
    data = get(r, "winlog.event_data")
    assert data["SubjectUserName"] == "DC01$" and data["TargetUserName"] == "alice"
    assert data["LogonProcessName"] == "User32" and data["AuthenticationPackageName"] == "Negotiate"


def test_4625_names_the_account_that_failed(rows):
    r = rows["4625"]
    assert fields(r, "event.action", "event.outcome", "user.name", "user.domain", "source.ip", "source.port",
                  "source.domain", "winlog.logon.type", "process.pid", "process.name") == {
        "event.action": "logon-failed", "event.outcome": "failure", "user.name": "Administrator",
        "user.domain": "WS-EVIL", "source.ip": "203.0.113.9", "source.port": 0, "source.domain": "ws-evil",
        "winlog.logon.type": "Network", "process.pid": None, "process.name": "EvntSLog",
    }
    data = get(r, "winlog.event_data")
    assert (data["Status"], data["SubStatus"], data["FailureReason"]) == (
        "0xc000006d", "0xc000006a", "Unknown user name or bad password.")


def test_logoffs_name_the_account_logged_off(rows):
    for code in ("4634", "4647"):
        r = rows[code]
        assert fields(r, "event.category", "event.type", "event.action", "user.name", "user.domain", "user.id",
                      "winlog.logon.id") == {
            "event.category": ["authentication"], "event.type": ["end"], "event.action": "logged-out",
            "user.name": "alice", "user.domain": "CORP", "user.id": "S-1-5-21-1-2-3-1104",
            "winlog.logon.id": "0x8dcdc"}, code
    assert get(rows["4634"], "winlog.logon.type") == "RemoteInteractive"
    assert get(rows["4634"], "winlog.event_data")["TargetUserName"] == "alice"


def test_4648_explicit_credentials(rows):
    r = rows["4648"]
    assert fields(r, "event.action", "user.name", "user.domain", "user.effective.name", "user.effective.domain",
                  "source.ip", "source.port", "process.pid", "process.name") == {
        "event.action": "logged-in-explicit", "user.name": "Administrator", "user.domain": "CORP",
        "user.effective.name": "bob", "user.effective.domain": "CORP", "source.ip": "10.1.2.4",
        "source.port": 445, "process.pid": 500, "process.name": "runas.exe",
    }
    assert get(r, "winlog.event_data")["TargetServerName"] == "fs01.corp.example"


def test_4672_special_privileges(rows):
    r = rows["4672"]
    assert fields(r, "event.category", "event.type", "event.action", "user.name", "user.id") == {
        "event.category": ["iam"], "event.type": ["admin"], "event.action": "logged-in-special",
        "user.name": "Administrator", "user.id": "S-1-5-21-1-2-3-500"}
    assert get(r, "winlog.event_data")["PrivilegeList"] == "SeSecurityPrivilege SeDebugPrivilege"


def test_4688_process_creation(rows):
    for name in ("4688", "nxlog_4688"):
        r = rows[name]
        assert fields(r, "event.category", "event.type", "event.action", "user.name", "user.domain") == {
            "event.category": ["process"], "event.type": ["start"], "event.action": "created-process",
            "user.name": "alice", "user.domain": "CORP"}, name
    assert fields(rows["4688"], "process.pid", "process.name", "process.executable", "process.command_line",
                  "process.parent.pid", "process.parent.name", "process.parent.executable") == {
        "process.pid": 6700, "process.name": "cmd.exe", "process.executable": "C:\\Windows\\System32\\cmd.exe",
        "process.command_line": "cmd.exe /c whoami /all", "process.parent.pid": 412,
        "process.parent.name": "explorer.exe", "process.parent.executable": "C:\\Windows\\explorer.exe"}
    r = rows["nxlog_4688"]
    assert fields(r, "process.pid", "process.name", "process.command_line", "process.parent.name",
                  "winlog.computer_name", "winlog.channel", "event.outcome", "event.dataset", "message") == {
        "process.pid": 6700, "process.name": "whoami.exe", "process.command_line": "whoami /priv",
        "process.parent.name": "cmd.exe", "winlog.computer_name": "ws01.corp.example", "winlog.channel": "Security",
        "event.outcome": "success", "event.dataset": "windows.security", "message": "A new process has been created."}


@pytest.mark.parametrize(("code", "action", "etype", "target"), [
    ("4720", "added-user-account", ["user", "creation"], ("mallory", "S-1-5-21-1-2-3-1105")),
    ("4722", "enabled-user-account", ["user", "change"], ("mallory", "S-1-5-21-1-2-3-1105")),
    ("4723", "changed-password", ["user", "change"], ("alice", "S-1-5-21-1-2-3-1104")),
    ("4724", "reset-password", ["user", "change"], ("alice", "S-1-5-21-1-2-3-1104")),
    ("4725", "disabled-user-account", ["user", "change"], ("mallory", "S-1-5-21-1-2-3-1105")),
    ("4726", "deleted-user-account", ["user", "deletion"], ("mallory", "S-1-5-21-1-2-3-1105")),
    ("4740", "locked-out-user-account", ["user", "change"], ("alice", "S-1-5-21-1-2-3-1104")),
])
def test_account_management_subject_acts_on_target(rows, code, action, etype, target):
    r = rows[code]
    actor = {"4723": ("alice", "CORP"), "4740": ("DC01$", "CORP")}.get(code, ("Administrator", "CORP"))
    assert fields(r, "event.category", "event.type", "event.action", "user.name", "user.domain",
                  "user.target.name", "user.target.id") == {
        "event.category": ["iam"], "event.type": etype, "event.action": action, "user.name": actor[0],
        "user.domain": actor[1], "user.target.name": target[0], "user.target.id": target[1]}


def test_4732_group_membership(rows):
    r = rows["4732"]
    assert fields(r, "event.type", "event.action", "user.name", "group.name", "group.domain", "group.id",
                  "user.target.name", "user.target.id") == {
        "event.type": ["group", "change"], "event.action": "added-member-to-group", "user.name": "Administrator",
        "group.name": "Administrators", "group.domain": "Builtin", "group.id": "S-1-5-32-544",
        "user.target.name": "mallory", "user.target.id": "S-1-5-21-1-2-3-1105"}


def test_kerberos_and_ntlm_validation(rows):
    assert fields(rows["4768"], "event.action", "event.outcome", "user.name", "user.domain", "user.id",
                  "source.ip", "source.port", "service.name") == {
        "event.action": "kerberos-authentication-ticket-requested", "event.outcome": "success", "user.name": "bob",
        "user.domain": "CORP.EXAMPLE", "user.id": "S-1-5-21-1-2-3-1106", "source.ip": "10.1.2.5",
        "source.port": 49162, "service.name": "krbtgt"}
    assert fields(rows["4769"], "event.action", "event.outcome", "user.name", "user.domain", "source.ip",
                  "service.name") == {
        "event.action": "kerberos-service-ticket-requested", "event.outcome": "success", "user.name": "bob",
        "user.domain": "CORP.EXAMPLE", "source.ip": "10.1.2.5", "service.name": "MSSQLSvc"}
    assert get(rows["4769"], "winlog.event_data")["TicketEncryptionType"] == "0x17"
    assert fields(rows["4771"], "event.action", "event.outcome", "user.name", "user.id", "source.ip") == {
        "event.action": "kerberos-preauth-failed", "event.outcome": "failure", "user.name": "bob",
        "user.id": "S-1-5-21-1-2-3-1106", "source.ip": "10.1.2.6"}
    assert get(rows["4771"], "winlog.event_data")["Status"] == "0x18"
    assert fields(rows["4776"], "event.action", "event.outcome", "user.name", "source.domain") == {
        "event.action": "credential-validated", "event.outcome": "failure", "user.name": "carol",
        "source.domain": "ws-carol"}


def test_system_log_services_and_audit_clear(rows):
    assert fields(rows["7036"], "event.dataset", "event.provider", "service.name", "service.state",
                  "process.name") == {
        "event.dataset": "windows.system", "event.provider": "Service Control Manager",
        "service.name": "Windows Update", "service.state": "running", "process.name": "EvntSLog"}
    r = rows["7045"]
    assert fields(r, "event.dataset", "event.action", "service.name") == {
        "event.dataset": "windows.system", "event.action": "service-installed", "service.name": "PSEXESVC"}
    assert {k: get(r, "winlog.event_data")[k] for k in ("ImagePath", "ServiceType", "StartType", "ServiceAccount")} \
        == {"ImagePath": "%SystemRoot%\\PSEXESVC.exe", "ServiceType": "user mode service",
            "StartType": "demand start", "ServiceAccount": "LocalSystem"}
    assert fields(rows["1102"], "event.action", "event.dataset", "user.name", "user.domain",
                  "event.provider") == {
        "event.action": "audit-log-cleared", "event.dataset": "windows.security", "user.name": "Administrator",
        "user.domain": "CORP", "event.provider": "Microsoft-Windows-Eventlog"}


def test_json_payload_is_kept_and_mapped(rows):
    r = rows["json_4625"]
    assert fields(r, "event.outcome", "user.name", "user.domain", "source.ip", "source.port", "source.domain",
                  "winlog.logon.type", "winlog.task", "winlog.keywords", "log.level", "message") == {
        "event.outcome": "failure", "user.name": "root", "user.domain": "CORP", "source.ip": "198.51.100.7",
        "source.port": 50000, "source.domain": "kali", "winlog.logon.type": "Network", "winlog.task": "Logon",
        "winlog.keywords": ["Audit Failure"], "log.level": "information",
        "message": "An account failed to log on.\r\n\r\nSubject:\r\n\tSecurity ID:\t\tS-1-0-0"}
    assert get(r, "syslog.json")["TargetUserName"] == "root"
    assert "msg" not in get(r, "winlog.event_data") and get(r, "winlog.event_data")["Status"] == "0xc000006d"


def test_unknown_events_keep_header_and_message(rows):
    r = rows["json_unknown_id"]
    assert fields(r, "event.code", "event.dataset", "event.provider", "winlog.channel", "message", "host.name",
                  "event.category", "log.level") == {
        "event.code": "9999", "event.dataset": "windows.application", "event.provider": "MyApp",
        "winlog.channel": "Application", "message": "Something custom happened.", "host.name": "dc01.corp.example",
        "event.category": None, "log.level": "warning"}
    r = rows["text_unknown"]
    assert fields(r, "event.code", "event.dataset", "message", "host.name", "user.name") == {
        "event.code": None, "event.dataset": "windows.forwarded",
        "message": "Reliability Analysis execution time was 373 milliseconds.", "host.name": "dc01.corp.example",
        "user.name": None}
    r = rows["sd_event_id"]
    assert fields(r, "event.code", "winlog.channel", "event.dataset", "message") == {
        "event.code": "1011", "winlog.channel": "Application", "event.dataset": "windows.application",
        "message": "An application event log entry"}


# --- the real capture ----------------------------------------------------------------------------------------

# event.code of the 286 lines, counted (titles inferred for the rendered lines, ids read from the JSON ones).
CAPTURE_CODES = {
    "4634": 51, "4672": 39, "4624": 29, "4776": 26, "5320": 18, "4017": 11, "5017": 11, "4769": 9, "7036": 5,
    "4006": 4, "100": 4, "102": 4, "200": 4, "201": 4, "5327": 4, "107": 3, "129": 3, "310": 3, "314": 3,
    "317": 3, "319": 3, "4326": 3, "5308": 3, "5309": 3, "5310": 3, "5311": 3, "5312": 3, "5313": 3, "5314": 3,
    "5315": 3, "5326": 3, "8006": 3, "7040": 2, None: 2, "3": 1, "51": 1, "301": 1, "318": 1, "3005": 1,
    "4097": 1, "4625": 1, "4662": 1,
}


@pytest.mark.skipif(not CAPTURE.is_file(), reason=f"corpus {CAPTURE} not present")
def test_real_capture_every_line_parses_with_its_code_and_logon_account(spark):
    lines = CAPTURE.read_text().splitlines()
    parsed = parse_lines(spark, lines)
    assert len(parsed) == 286
    assert [r["offset"] for r in parsed if r["_error"] is not None] == []
    assert collections.Counter(get(r, "event.code") for r in parsed) == CAPTURE_CODES
    for line, r in zip(lines, parsed, strict=True):
        assert get(r, "event.module") == "windows" and get(r, "event.dataset").startswith("windows.")
        body = line.split(" - - - ", 1)[1]
        if body.startswith("@cee: "):
            data = json.loads(body[len("@cee: "):])
            assert get(r, "event.code") == data["id"]
            assert get(r, "winlog.channel") == data["nteventlogtype"]
            assert get(r, "message") == data["msg"]
            assert get(r, "syslog.json")["id"] == data["id"]
            if data["id"] in ("4624", "4634"):
                assert get(r, "user.name") == data["TargetUserName"]
        elif body.startswith("An account was successfully logged on."):
            new_logon = re.search(r"New Logon: Security ID: (\S+) Account Name: (.+?) Account Domain: (.+?) Logon ID:",
                                  body)
            assert (get(r, "user.id"), get(r, "user.name"), get(r, "user.domain")) == new_logon.groups()
            assert get(r, "source.ip") == re.search(r"Source Network Address: (\S+)", body).group(1)
            assert get(r, "winlog.logon.type") == {"3": "Network", "2": "Interactive", "5": "Service",
                                                   "10": "RemoteInteractive"}[
                re.search(r"Logon Type: ([0-9]+)", body).group(1)]
            assert get(r, "event.outcome") == "success"
        elif body.startswith("An account was logged off."):
            subject = re.search(r"Subject: Security ID: \S+ Account Name: (.+?) Account Domain: (.+?) Logon ID:", body)
            assert (get(r, "user.name"), get(r, "user.domain")) == subject.groups()
        elif body.startswith("Special privileges assigned to new logon."):
            subject = re.search(r"Subject: Security ID: (\S+) Account Name: (.+?) Account Domain:", body)
            assert (get(r, "user.id"), get(r, "user.name")) == subject.groups()
        elif body.startswith("The domain controller attempted to validate"):
            assert get(r, "user.name") == re.search(r"Logon Account: (\S+)", body).group(1)
        elif body.startswith("A Kerberos service ticket was requested."):
            account = re.search(r"Account Name: ([^@ ]+)@(\S+)", body)
            assert (get(r, "user.name"), get(r, "user.domain")) == account.groups()
            assert get(r, "source.ip") == re.search(r"Client Address: (?:::ffff:)?(\S+)", body).group(1)
    by_line = dict(zip(range(1, len(parsed) + 1), parsed, strict=True))
    r = by_line[176]  # the one failed logon: a guess at "administrator" from 10.150.0.20
    assert fields(r, "event.code", "event.outcome", "user.name", "user.domain", "source.ip", "source.domain",
                  "winlog.logon.type", "host.name", "@timestamp") == {
        "event.code": "4625", "event.outcome": "failure", "user.name": "administrator",
        "user.domain": "WORKSTATION", "source.ip": "10.150.0.20", "source.domain": "workstation",
        "winlog.logon.type": "Network", "host.name": "Kramer.jerry.land", "@timestamp": utc(2018, 3, 24, 16, 6, 26)}
    r = by_line[1]
    assert fields(r, "event.code", "event.dataset", "service.name", "service.state", "winlog.provider_name",
                  "winlog.computer_name") == {
        "event.code": "7036", "event.dataset": "windows.system", "service.name": "Multimedia Class Scheduler",
        "service.state": "stopped", "winlog.provider_name": "Service Control Manager",
        "winlog.computer_name": "PC-helen.jerry.land"}
    r = by_line[32]
    assert fields(r, "event.code", "user.name", "user.domain", "source.ip", "source.port", "service.name",
                  "event.outcome") == {
        "event.code": "4769", "user.name": "PC-NEWMAN$", "user.domain": "JERRY.LAND", "source.ip": "172.20.0.80",
        "source.port": 50152, "service.name": "PC-NEWMAN$", "event.outcome": "success"}


@pytest.mark.parametrize("name", ["4624", "4625", "4634", "4648", "4688", "4720", "4732", "4740", "4768", "4776"])
def test_section_regexes_read_what_the_per_slot_regexes_read(spark, rows, name):
    """Text holding the sections' group separator (\\x01) is read by the per-slot regexes instead: inserting it
    after the title must change no value, so both paths agree on every slot of the sample."""
    line = SAMPLES[name]
    head, sep, rest = line.partition(". ")
    assert sep, name
    per_slot = parse_lines(spark, [head + sep + "\x01 " + rest])[0]
    paths = ("user.name", "user.domain", "user.id", "user.target.name", "user.target.id", "user.effective.name",
             "group.name", "winlog.logon.id", "winlog.event_data")
    assert fields(per_slot, *paths) == fields(rows[name], *paths), name


# Edge cases of the section path: a section label present but not followed by its fields (the section regex does
# not match, so every group of it is null), empty values, a value ending the text.
EDGE_LINES = {
    "section_without_fields": H + "An account was successfully logged on. Subject: Security ID: S-1-5-18 Account "
    "Name: DC01$ Account Domain: CORP Logon ID: 0x3e7 New Logon: Logon Type: 3 Network Information: Workstation "
    "Name: Source Network Address: 10.1.2.3 Source Port: 0",
    "empty_values": H + "An account failed to log on. Subject: Security ID: S-1-0-0 Account Name: Account Domain: "
    "Logon ID: 0x0 Logon Type: 3 Account For Which Logon Failed: Security ID: S-1-0-0 Account Name: Account "
    "Domain: Failure Information: Failure Reason: Status: 0xc000006d Process Information: Caller Process ID: "
    "0x0 Caller Process Name: Network Information: Workstation Name: Source Network Address: - Source Port:",
    "section_at_end": H + "An account was logged off. Subject: Security ID: S-1-5-21-1-2-3-1104 Account Name: alice",
}
_EDGE_PATHS = ("user.name", "user.domain", "user.id", "winlog.logon.id", "winlog.logon.type", "source.ip",
               "source.port", "source.domain", "process.pid", "process.name", "winlog.event_data")


@pytest.mark.parametrize("name", list(EDGE_LINES))
def test_section_edge_cases_agree_with_the_per_slot_regexes(spark, name):
    """The section regexes (one pass per section, groups read by position) and the per-slot regexes (taken for
    text holding the separator) give the same values on text that only partly fits a section."""
    line = EDGE_LINES[name]
    head, sep, rest = line.partition(". ")
    by_sections, per_slot = parse_lines(spark, [line, head + sep + "\x01 " + rest])
    assert get(by_sections, "event.module") == "windows", name
    assert fields(by_sections, *_EDGE_PATHS) == fields(per_slot, *_EDGE_PATHS), name


def test_edge_case_values(spark):
    rows = dict(zip(EDGE_LINES, parse_lines(spark, list(EDGE_LINES.values())), strict=True))
    r = rows["section_without_fields"]
    assert fields(r, "event.code", "user.name", "user.id", "source.ip", "source.domain") == {
        "event.code": "4624", "user.name": None, "user.id": None, "source.ip": "10.1.2.3", "source.domain": None}
    assert get(r, "winlog.event_data")["SubjectUserName"] == "DC01$"
    r = rows["empty_values"]
    assert fields(r, "event.code", "user.name", "user.domain", "source.ip", "process.pid") == {
        "event.code": "4625", "user.name": None, "user.domain": None, "source.ip": None, "process.pid": None}
    assert get(r, "winlog.event_data") == {"SubjectUserSid": "S-1-0-0", "SubjectLogonId": "0x0",
                                           "TargetUserSid": "S-1-0-0", "LogonType": "3", "Status": "0xc000006d",
                                           "ProcessId": "0x0"}
    r = rows["section_at_end"]
    assert fields(r, "event.code", "user.name", "user.id") == {
        "event.code": "4634", "user.name": "alice", "user.id": "S-1-5-21-1-2-3-1104"}


def test_every_label_regex_is_written_once_in_the_plan(spark):
    """Each label regex (per slot and per section) appears once in the optimized plan, so it runs at most once per
    row: wrapped in nullif(...) or tested before use inside a CASE branch it appeared twice and ran twice (Spark's
    common-subexpression elimination does not look inside CASE branches)."""
    from ingest.parsers import windows as W
    from tests.test_parse_syslog import optimized_plan

    plan = optimized_plan(spark, SAMPLES["4624"])
    assert "_wt" in plan
    for name, entries in W.SLOTS.items():
        for _gate, regex in map(W._gated, entries):
            assert plan.count(f", {regex}, 1)") == 1, (name, regex)
    for section in W.SECTIONS:
        assert plan.count(f"(?s)^.*?(?:{section.regex}).*$") == 1, section.name
