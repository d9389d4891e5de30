"""Windows event logs forwarded over syslog (EvntSLog, NXLog, Snare-style agents) -> ECS, as Elastic's
Windows / System integrations map them.

Two shapes of message, both handled (see docs/windows_events.md):

* the **rendered text** of the event, whitespace collapsed by the agent: ``An account was successfully logged
  on. Subject: Security ID: S-1-0-0 Account Name: - … New Logon: Security ID: … Account Name: KRAMER$ …``.
  The event id is not in the line: it is inferred from the rendered title (:data:`TITLES`), and the values
  are read label by label (:data:`SLOTS`) into Windows' own EventData names (``TargetUserName``,
  ``IpAddress``, …), so both shapes feed one mapping;
* **JSON** (``@cee: {"id": "4624", "nteventlogtype": "Security", "TargetUserName": …}``): the EventData keys
  are read directly, and the rendered ``msg`` fills what the JSON lacks.

A line is a Windows event when its syslog program is a known forwarder (:data:`PROGRAMS`) or its JSON carries
a Windows channel key. ``event.code`` = the id from JSON, else an ``eventID`` structured-data parameter, else
the id of the rendered title; unknown titles keep the header and message with ``event.code`` null.

Mapped (``event.category/type/action/outcome``, ``user.*`` per :data:`EVENTS`): 4624, 4625, 4634, 4647, 4648,
4672, 4688, 4689, 4720, 4722-4726, 4728, 4729, 4732, 4733, 4738, 4740, 4756, 4768, 4769, 4770, 4771, 4776,
4778, 4779, 1102, 7036, 7040, 7045, plus titles of Task Scheduler, Group Policy, CAPI2 and Symantec events.
``user.*`` is the account the event is about: for logons (4624/4625/4634/4647) and Kerberos/NTLM
validations the *target* (New Logon / Account For Which Logon Failed / Account Information), for account
management, 4648, 4672, 4688, 1102 the *subject* who acted (then the account acted on is ``user.target.*``,
4648's explicit credentials ``user.effective.*``, a group event's group ``group.*``).

Everything is Spark SQL (``from_json``, ``regexp_extract`` with literal-prefixed patterns, constant lookup
arrays); no Python UDF.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from ingest.parsers import values as V
from ingest.parsers.field_map import Fields
from ingest.parsers.regex_forms import literal_prefix

PROGRAMS = ("evntslog", "mswineventlog", "eventlog", "nxlog", "winlogbeat", "snare", "evtsys",
            "microsoft-windows-security-auditing")

SECURITY, SYSTEM, APPLICATION = "Security", "System", "Application"
TASKS = "Microsoft-Windows-TaskScheduler/Operational"
GPO = "Microsoft-Windows-GroupPolicy/Operational"
_AUDITING = "Microsoft-Windows-Security-Auditing"
_SCM = "Service Control Manager"
_TASK_PROVIDER = "Microsoft-Windows-TaskScheduler"
_GPO_PROVIDER = "Microsoft-Windows-GroupPolicy"
_SEP = "Symantec AntiVirus"

# Dataset per channel (Elastic names the Security/System/Application channels this way; every other channel
# arrives through a forwarder, which Elastic's Windows integration calls "forwarded").
DATASETS = {SECURITY: "windows.security", SYSTEM: "windows.system", APPLICATION: "windows.application"}
DATASET_OTHER = "windows.forwarded"


@dataclass(frozen=True)
class Title:
    """A rendered message title: ``prefix`` (``startswith``), optionally refined by an anchored ``regex``."""

    event_id: str
    prefix: str
    channel: str
    provider: str
    regex: str | None = None
    contains: str | None = None  # a literal the text must contain before ``regex`` is tried


# Order matters: the first title that matches wins (more specific before more general).
TITLES: tuple[Title, ...] = (
    Title("4624", "An account was successfully logged on.", SECURITY, _AUDITING),
    Title("4625", "An account failed to log on.", SECURITY, _AUDITING),
    Title("4634", "An account was logged off.", SECURITY, _AUDITING),
    Title("4647", "User initiated logoff", SECURITY, _AUDITING),
    Title("4648", "A logon was attempted using explicit credentials.", SECURITY, _AUDITING),
    Title("4662", "An operation was performed on an object.", SECURITY, _AUDITING),
    Title("4672", "Special privileges assigned to new logon.", SECURITY, _AUDITING),
    Title("4688", "A new process has been created.", SECURITY, _AUDITING),
    Title("4689", "A process has exited.", SECURITY, _AUDITING),
    Title("4698", "A scheduled task was created.", SECURITY, _AUDITING),
    Title("4720", "A user account was created.", SECURITY, _AUDITING),
    Title("4722", "A user account was enabled.", SECURITY, _AUDITING),
    Title("4723", "An attempt was made to change an account's password.", SECURITY, _AUDITING),
    Title("4724", "An attempt was made to reset an account's password.", SECURITY, _AUDITING),
    Title("4725", "A user account was disabled.", SECURITY, _AUDITING),
    Title("4726", "A user account was deleted.", SECURITY, _AUDITING),
    Title("4728", "A member was added to a security-enabled global group.", SECURITY, _AUDITING),
    Title("4729", "A member was removed from a security-enabled global group.", SECURITY, _AUDITING),
    Title("4732", "A member was added to a security-enabled local group.", SECURITY, _AUDITING),
    Title("4733", "A member was removed from a security-enabled local group.", SECURITY, _AUDITING),
    Title("4738", "A user account was changed.", SECURITY, _AUDITING),
    Title("4740", "A user account was locked out.", SECURITY, _AUDITING),
    Title("4756", "A member was added to a security-enabled universal group.", SECURITY, _AUDITING),
    Title("4768", "A Kerberos authentication ticket (TGT) was requested.", SECURITY, _AUDITING),
    Title("4769", "A Kerberos service ticket was requested.", SECURITY, _AUDITING),
    Title("4770", "A Kerberos service ticket was renewed.", SECURITY, _AUDITING),
    Title("4771", "Kerberos pre-authentication failed.", SECURITY, _AUDITING),
    Title("4776", "The domain controller attempted to validate the credentials for an account.", SECURITY,
          _AUDITING),
    Title("4776", "The computer attempted to validate the credentials for an account.", SECURITY, _AUDITING),
    Title("4778", "A session was reconnected to a Window Station.", SECURITY, _AUDITING),
    Title("4779", "A session was disconnected from a Window Station.", SECURITY, _AUDITING),
    Title("1102", "The audit log was cleared.", SECURITY, "Microsoft-Windows-Eventlog"),
    Title("7036", "The ", SYSTEM, _SCM, r"The .+ service entered the .+ state\..*", " service entered the "),
    Title("7040", "The start type of the ", SYSTEM, _SCM),
    Title("7045", "A service was installed in the system.", SYSTEM, _SCM),
    Title("4097", "Successful auto update of third-party root certificate", APPLICATION, "Microsoft-Windows-CAPI2"),
    Title("51", "Security Risk Found!", APPLICATION, _SEP),
    Title("3", "Scan Complete:", APPLICATION, _SEP),
    # Task Scheduler (Operational channel)
    Title("100", 'Task Scheduler started "', TASKS, _TASK_PROVIDER),
    Title("102", 'Task Scheduler successfully finished "', TASKS, _TASK_PROVIDER),
    Title("107", 'Task Scheduler launched "', TASKS, _TASK_PROVIDER, r'.* due to a time trigger condition\..*',
          " due to a time trigger condition."),
    Title("129", 'Task Scheduler launch task "', TASKS, _TASK_PROVIDER),
    Title("200", 'Task Scheduler launched action "', TASKS, _TASK_PROVIDER),
    Title("201", 'Task Scheduler successfully completed task "', TASKS, _TASK_PROVIDER),
    Title("301", "Task Scheduler is shutting down Task Engine", TASKS, _TASK_PROVIDER),
    Title("310", "Task Scheduler started Task Engine", TASKS, _TASK_PROVIDER, r".* process\. Command=.*",
          "Command="),
    Title("317", "Task Scheduler started Task Engine", TASKS, _TASK_PROVIDER),
    Title("314", "Task Scheduler has no tasks running for Task Engine", TASKS, _TASK_PROVIDER),
    Title("318", "Task Scheduler shutdown Task Engine", TASKS, _TASK_PROVIDER),
    Title("319", 'Task Engine "', TASKS, _TASK_PROVIDER,
          r".* received a message from Task Scheduler service requesting to launch task.*",
          "received a message from Task Scheduler service"),
    # Group Policy (Operational channel)
    Title("4006", "Starting periodic policy processing for computer", GPO, _GPO_PROVIDER),
    Title("4007", "Starting periodic policy processing for user", GPO, _GPO_PROVIDER),
    Title("8006", "Completed periodic policy processing for computer", GPO, _GPO_PROVIDER),
    Title("8007", "Completed periodic policy processing for user", GPO, _GPO_PROVIDER),
    Title("4017", "Making system call", GPO, _GPO_PROVIDER),
    Title("4017", "Making LDAP calls", GPO, _GPO_PROVIDER),
    Title("5017", "The system call", GPO, _GPO_PROVIDER),
    Title("5017", "The LDAP call", GPO, _GPO_PROVIDER),
    Title("4326", "Group Policy is trying to discover the Domain Controller information.", GPO, _GPO_PROVIDER),
    Title("5326", "Group Policy successfully discovered the Domain Controller", GPO, _GPO_PROVIDER),
    Title("5308", "Domain Controller details:", GPO, _GPO_PROVIDER),
    Title("5309", "Computer details:", GPO, _GPO_PROVIDER),
    Title("5310", "Account details:", GPO, _GPO_PROVIDER),
    Title("5311", "The loopback policy processing mode is", GPO, _GPO_PROVIDER),
    Title("5312", "List of applicable Group Policy objects:", GPO, _GPO_PROVIDER),
    Title("5313", "The following Group Policy objects were not applicable", GPO, _GPO_PROVIDER),
    Title("5314", "A fast link was detected.", GPO, _GPO_PROVIDER),
    Title("5314", "A slow link was detected.", GPO, _GPO_PROVIDER),
    Title("5315", "Next policy processing for", GPO, _GPO_PROVIDER),
    Title("5327", "Estimated network bandwidth on one of the connections:", GPO, _GPO_PROVIDER),
    Title("5320", "Attempting to retrieve the account information.", GPO, _GPO_PROVIDER),
    Title("5320", "Retrieved account information.", GPO, _GPO_PROVIDER),
    Title("5320", "Retrieving Domain Controller details.", GPO, _GPO_PROVIDER),
    Title("5320", "Checking for Group Policy client extensions that are not part of the system.", GPO,
          _GPO_PROVIDER),
    Title("5320", "Service configuration update to standalone is not required", GPO, _GPO_PROVIDER),
    Title("5320", "Finished checking for non-system extensions.", GPO, _GPO_PROVIDER),
)


@dataclass(frozen=True)
class Event:
    """ECS classification of an event id (Elastic's table), and whose account ``user.*`` names."""

    category: tuple[str, ...]
    type: tuple[str, ...]
    action: str
    outcome: str | None = "success"  # None: from the status code / audit keyword
    user: str = "subject"  # "target": the account logged on / validated; "subject": the account that acted


_LOGON = ("authentication",)
_IAM = ("iam",)
EVENTS: dict[str, Event] = {
    "4624": Event(_LOGON, ("start",), "logged-in", user="target"),
    "4625": Event(_LOGON, ("start",), "logon-failed", "failure", user="target"),
    "4634": Event(_LOGON, ("end",), "logged-out", user="target"),
    "4647": Event(_LOGON, ("end",), "logged-out", user="target"),
    "4648": Event(_LOGON, ("start",), "logged-in-explicit"),
    "4662": Event(("configuration",), ("access",), "object-operation-performed"),
    "4672": Event(_IAM, ("admin",), "logged-in-special"),
    "4688": Event(("process",), ("start",), "created-process"),
    "4689": Event(("process",), ("end",), "exited-process"),
    "4698": Event(_IAM, ("creation",), "scheduled-task-created"),
    "4720": Event(_IAM, ("user", "creation"), "added-user-account"),
    "4722": Event(_IAM, ("user", "change"), "enabled-user-account"),
    "4723": Event(_IAM, ("user", "change"), "changed-password", None),
    "4724": Event(_IAM, ("user", "change"), "reset-password", None),
    "4725": Event(_IAM, ("user", "change"), "disabled-user-account"),
    "4726": Event(_IAM, ("user", "deletion"), "deleted-user-account"),
    "4728": Event(_IAM, ("group", "change"), "added-member-to-group"),
    "4729": Event(_IAM, ("group", "change"), "removed-member-from-group"),
    "4732": Event(_IAM, ("group", "change"), "added-member-to-group"),
    "4733": Event(_IAM, ("group", "change"), "removed-member-from-group"),
    "4738": Event(_IAM, ("user", "change"), "modified-user-account"),
    "4740": Event(_IAM, ("user", "change"), "locked-out-user-account"),
    "4756": Event(_IAM, ("group", "change"), "added-member-to-group"),
    "4768": Event(_LOGON, ("start",), "kerberos-authentication-ticket-requested", None, "target"),
    "4769": Event(_LOGON, ("start",), "kerberos-service-ticket-requested", None, "target"),
    "4770": Event(_LOGON, ("start",), "kerberos-service-ticket-renewed", None, "target"),
    "4771": Event(_LOGON, ("start",), "kerberos-preauth-failed", "failure", "target"),
    "4776": Event(_LOGON, ("start",), "credential-validated", None, "target"),
    "4778": Event(("authentication", "session"), ("start",), "session-reconnected", user="target"),
    "4779": Event(("authentication", "session"), ("end",), "session-disconnected", user="target"),
    "1102": Event(_IAM, ("admin", "change"), "audit-log-cleared"),
    "7036": Event(("process",), ("change",), "service-state-changed", None),
    "7040": Event(("configuration",), ("change",), "service-start-type-changed", None),
    "7045": Event(("configuration",), ("creation",), "service-installed", None),
    "51": Event(("malware",), ("info",), "security-risk-found", None),
}
# Events whose id is a status result: 0x0 is success.
_STATUS_OUTCOME = ("4768", "4769", "4770", "4776")
# Events whose rendered "Subject:" section is the EventData Target* (the account logged off).
_SUBJECT_IS_TARGET = ("4634", "4647")
_GROUP_EVENTS = ("4728", "4729", "4732", "4733", "4756")
_ACCOUNT_EVENTS = ("4720", "4722", "4723", "4724", "4725", "4726", "4738", "4740")
LOGON_TYPES = {"0": "System", "2": "Interactive", "3": "Network", "4": "Batch", "5": "Service",
               "7": "Unlock", "8": "NetworkCleartext", "9": "NewCredentials", "10": "RemoteInteractive",
               "11": "CachedInteractive", "12": "CachedRemoteInteractive", "13": "CachedUnlock"}

# JSON keys that describe the record rather than the event (everything else is winlog.event_data).
ENVELOPE_KEYS = (
    # EvntSLog
    "source", "msg", "nteventlogtype", "sourceproc", "id", "categoryid", "category", "keywordid", "user",
    "user_sid", "catname", "keyword", "level",
    # NXLog im_msvistalog
    "EventTime", "Hostname", "Keywords", "EventType", "SeverityValue", "Severity", "EventID", "SourceName",
    "ProviderGuid", "Version", "Task", "OpcodeValue", "RecordNumber", "Channel", "Message", "Category",
    "Opcode", "EventReceivedTime", "SourceModuleName", "SourceModuleType", "Domain", "AccountName",
    "UserID", "AccountType", "ExecutionProcessID", "ExecutionThreadID",
)
_ID_KEYS = ("id", "EventID", "event_id", "EventId")
_CHANNEL_KEYS = ("nteventlogtype", "Channel", "channel", "LogName")
_PROVIDER_KEYS = ("sourceproc", "SourceName", "ProviderName", "provider")
_COMPUTER_KEYS = ("source", "Hostname", "Computer", "computer_name")
_MESSAGE_KEYS = ("msg", "Message", "message")

# Cut the rendered text before Windows' explanatory paragraphs (they repeat labels and cost regex time).
_EXPLANATIONS = (" This event is generated", " Token Elevation Type indicates", " The subject fields indicate")

_TARGET_SECTIONS = ("New Logon", "Account For Which Logon Failed", "Target Account", "New Account",
                    "Account Whose Credentials Were Used", "Account That Was Locked Out", "Account Information",
                    "Target Subject")
_NAME_END = ("Account Domain|Supplied Realm Name|Additional Information|Service Information|Logon ID|"
             "Attributes|Failure Information|Logon GUID|Group|Process Information|Network Information|"
             "Target Server|Changed Attributes|Security ID|User ID|Privileges")
_DOMAIN_END = ("Logon ID|Logon GUID|User ID|Failure Information|Attributes|Additional Information|"
               "Service Information|Process Information|Target Server|Changed Attributes|Linked Logon ID|"
               "Network Account Name|Network Information|Privileges")
_END = r"\z"


def _kv(prefix: str, until: str) -> str:
    """``prefix`` (a literal start, so Java can search it fast) then the value up to the next label of
    ``until`` (or the end); an empty value (``Workstation Name: Source Network Address:``) gives nothing."""
    end = r" ?\z" if until == _END else rf"(?: (?:{until}):| ?\z)"
    return rf"{prefix}(?: (.*?))??{end}"


def _sections(fmt: str, sections=_TARGET_SECTIONS) -> tuple[str, ...]:
    return tuple(fmt.format(s=s) for s in sections)


# EventData name -> regexes over the rendered text (group 1 is the value; the first that matches wins).
SLOTS: dict[str, tuple[str, ...]] = {
    "SubjectUserSid": (r"Subject ?: Security ID: (\S+)",),
    "SubjectUserName": (_kv(r"Subject ?: Security ID: \S+ Account Name:", "Account Domain|Domain Name"),),
    "SubjectDomainName": (_kv(r"Subject ?: Security ID: \S+ Account Name:[^:]*? (?:Account Domain|Domain Name):",
                              "Logon ID"),),
    "SubjectLogonId": (r"Subject ?: Security ID: \S+ Account Name:[^:]*? (?:Account Domain|Domain Name):[^:]*? "
                       r"Logon ID: (\S+)",),
    "TargetUserSid": (*_sections(r"{s}: Security ID: (\S+)"), r"Supplied Realm Name: \S* ?User ID: (\S+)",
                      r"Group: Security ID: (\S+)"),
    "TargetUserName": (*_sections(_kv(r"{s}:(?: Security ID: \S+)? Account Name:", _NAME_END)),
                       _kv("Logon Account:", "Source Workstation"),
                       _kv(r"Group: Security ID: \S+ (?:Group|Account) Name:", "Group Domain|Account Domain")),
    "TargetDomainName": (*_sections(_kv(r"{s}:(?: Security ID: \S+)? Account Name:[^:]*? "
                                        r"(?:Account Domain|Supplied Realm Name):", _DOMAIN_END)),
                         _kv(r"Group: Security ID: \S+ (?:Group|Account) Name:[^:]*? (?:Group|Account) Domain:",
                             "Additional Information|Changed Attributes")),
    "TargetLogonId": _sections(r"{s}: Security ID: \S+ Account Name:[^:]*? Account Domain:[^:]*? Logon ID: (\S+)",
                               ("New Logon", "Target Subject")),
    "MemberSid": (r"Member: Security ID: (\S+)",),
    "MemberName": (_kv(r"Member: Security ID: \S+ Account Name:", "Group|Additional Information"),),
    "LogonType": (r"Logon Type: ([0-9]+)",),
    "WorkstationName": (_kv("Workstation Name:", "Source Network Address|Network Address"),),
    "Workstation": (_kv("Source Workstation:", "Error Code"),),
    "IpAddress": (r"Source Network Address: (\S+)", r"Network Information: Network Address: (\S+)",
                  r"Client Address: (\S+)"),
    "IpPort": (r"Source Port: ([0-9]+)", r"Network Address: \S+ Port: ([0-9]+)", r"Client Port: ([0-9]+)"),
    "ProcessId": (r"Caller Process ID: (\S+)", r"Creator Process ID: (\S+)", r"Process Information: Process ID: (\S+)"),
    "ProcessName": (_kv("Caller Process Name:", "Network Information"),
                    _kv(r"Process Information: Process ID: \S+ Process Name:",
                        "Network Information|Detailed Authentication Information|Impersonation Level|Exit Status")),
    "NewProcessId": (r"New Process ID: (\S+)",),
    "NewProcessName": (_kv("New Process Name:", "Token Elevation Type|Creator Process ID|Mandatory Label"),),
    "ParentProcessName": (_kv("Creator Process Name:", "Process Command Line"),),
    "CommandLine": (_kv("Process Command Line:", _END),),
    "LogonProcessName": (r"Logon Process: (\S+)",),
    "AuthenticationPackageName": (r"Authentication Package: (\S+)",),
    "FailureReason": (_kv("Failure Reason:", "Status"),),
    "Status": (r"Failure Reason:[^:]*? Status: (\S+)", r"Failure Code: (\S+)", r"Result Code: (\S+)",
               r"Error Code: (\S+)"),
    "SubStatus": (r"Sub Status: (\S+)",),
    "ServiceName": (_kv("Service Information: Service Name:", "Service ID|Network Information"),
                    _kv("A service was installed in the system. Service Name:", "Service File Name")),
    "ServiceSid": (r"Service ID: (\S+)",),
    "TicketOptions": (r"Ticket Options: (\S+)",),
    "TicketEncryptionType": (r"Ticket Encryption Type: (\S+)",),
    "PreAuthType": (r"Pre-Authentication Type: (\S+)",),
    "TargetServerName": (_kv("Target Server Name:", "Additional Information"),),
    "PrivilegeList": (_kv("Privileges:", _END),),
    "ImagePath": (_kv("Service File Name:", "Service Type"),),
    "ServiceType": (_kv("Service Type:", "Service Start Type"),),
    "StartType": (_kv("Service Start Type:", "Service Account"),),
    "ServiceAccount": (_kv("Service Account:", _END),),
    # (literal the text must contain, regex) where the regex's own start is too common to search for.
    "param1": (("service entered the ", r"^The (.+?) service entered the .+ state\."),
               r"The start type of the (.+?) service was changed "),
    "param2": (("service entered the ", r"^The .+? service entered the (.+) state\."),
               r"The start type of the .+? service was changed from (.+?) to "),
    "param3": (r"The start type of the .+? service was changed from .+? to (.+?)\.",),
}


@dataclass(frozen=True)
class Section:
    """One regex over a labelled section of the rendered text whose groups fill several slots in one pass.

    ``groups`` names the slot each group fills (``None``: a group read only to check another, see
    ``_section_value``); ``replaces[slot]`` is the per-slot regex of :data:`SLOTS` whose value that group gives
    (same start, same value boundaries), so the slot's chain keeps its order. The section's regex is tried
    once, at the first occurrence of its start, where every per-slot regex it replaces matched too in the
    lines Windows renders (a section label is not repeated before the explanations, which are cut)."""

    name: str
    gate: str
    regex: str
    groups: tuple[str | None, ...]
    replaces: dict[str, str]


def _subject_section() -> Section:
    start = r"Subject ?: Security ID: "
    regex = (rf"{start}(\S+)(?: Account Name:(?: (.*?))??(?: (?:Account Domain|Domain Name):(?: (.*?))??"
             rf"(?: Logon ID:(?: (\S+))?| ?\z)| ?\z))?")
    slots = ("SubjectUserSid", "SubjectUserName", "SubjectDomainName", "SubjectLogonId")
    return Section("Subject", "Subject", regex, slots, {n: SLOTS[n][0] for n in slots})


def _target_section(section: str, index: int) -> Section:
    name_end = "|".join(x for x in _NAME_END.split("|") if x not in ("Account Domain", "Supplied Realm Name"))
    domain_end = "|".join(x for x in _DOMAIN_END.split("|") if x != "Logon ID")
    # Groups: SID, name, the label after the name, domain, logon id.
    regex = (rf"{section}:(?= Security ID: \S| Account Name:)(?: Security ID: (\S+))?(?: Account Name:"
             rf"(?: (.*?))??(?: (Account Domain|Supplied Realm Name):(?: (.*?))??"
             rf"(?: Logon ID:(?: (\S+))?| (?:{domain_end}):| ?\z)| (?:{name_end}):| ?\z))?")
    replaces = {"TargetUserSid": SLOTS["TargetUserSid"][index], "TargetUserName": SLOTS["TargetUserName"][index],
                "TargetDomainName": SLOTS["TargetDomainName"][index]}
    if section in ("New Logon", "Target Subject"):
        replaces["TargetLogonId"] = SLOTS["TargetLogonId"][("New Logon", "Target Subject").index(section)]
    return Section(section, f"{section}:", regex,
                   ("TargetUserSid", "TargetUserName", None, "TargetDomainName", "TargetLogonId"), replaces)


SECTIONS: tuple[Section, ...] = (_subject_section(),
                                 *(_target_section(s, i) for i, s in enumerate(_TARGET_SECTIONS)))
# Separates the groups of a section in ``regexp_replace``'s output (text containing it takes the per-slot path).
_GROUP_SEP = "\x01"


_KERBEROS = ("4768", "4769", "4770", "4771")
_LOGONS = ("4624", "4625", "4648")
_TARGETS = (*_LOGONS, "4688", "4720", "4722", "4723", "4724", "4725", "4726", "4738", "4740", *_KERBEROS, "4776",
            "4728", "4729", "4732", "4733", "4756", "4778", "4779")
_SECURITY_SUBJECT = tuple(sorted({t.event_id for t in TITLES if t.channel == SECURITY} - {*_KERBEROS, "4776"}))
# The event ids whose rendered text has a slot (a slot is read only for those, or when the id is unknown).
SLOT_CODES: dict[str, tuple[str, ...]] = {
    "SubjectUserSid": _SECURITY_SUBJECT, "SubjectUserName": _SECURITY_SUBJECT,
    "SubjectDomainName": _SECURITY_SUBJECT, "SubjectLogonId": _SECURITY_SUBJECT,
    "TargetUserSid": _TARGETS, "TargetUserName": _TARGETS, "TargetDomainName": _TARGETS,
    "TargetLogonId": ("4624", "4688"),
    "MemberSid": _GROUP_EVENTS, "MemberName": _GROUP_EVENTS,
    "LogonType": ("4624", "4625", "4634"),
    "WorkstationName": ("4624", "4625"), "Workstation": ("4776",),
    "IpAddress": (*_LOGONS, *_KERBEROS, "4778", "4779"), "IpPort": (*_LOGONS, *_KERBEROS, "4778", "4779"),
    "ProcessId": (*_LOGONS, "4688", "4689"), "ProcessName": (*_LOGONS, "4688", "4689"),
    "NewProcessId": ("4688",), "NewProcessName": ("4688",), "ParentProcessName": ("4688",),
    "CommandLine": ("4688",),
    "LogonProcessName": ("4624", "4625"), "AuthenticationPackageName": ("4624", "4625", "4776"),
    "FailureReason": ("4625",), "Status": ("4625", *_KERBEROS, "4776"), "SubStatus": ("4625",),
    "ServiceName": (*_KERBEROS, "7045"), "ServiceSid": _KERBEROS, "TicketOptions": _KERBEROS,
    "TicketEncryptionType": _KERBEROS, "PreAuthType": _KERBEROS,
    "TargetServerName": ("4648",), "PrivilegeList": ("4672",),
    "ImagePath": ("7045",), "ServiceType": ("7045",), "StartType": ("7045",), "ServiceAccount": ("7045",),
    "param1": ("7036", "7040"), "param2": ("7036", "7040"), "param3": ("7040",),
}


def _lookup(values: list, index: Column, typ: str = "string") -> Column:
    """``values[index]`` (1-based) from a constant array; null for index null/0."""
    null = F.lit(None).cast(typ)
    array = F.array(*[(F.array(*[F.lit(x) for x in v]) if isinstance(v, tuple) else F.lit(v))
                      if v is not None else null for v in values])
    return F.try_element_at(array, F.nullif(index, F.lit(0)))


def is_windows(program_lc: Column, j: Column) -> Column:
    has_channel = F.coalesce(*[F.try_element_at(j, F.lit(k)).isNotNull() for k in _CHANNEL_KEYS], F.lit(False))
    return program_lc.isin(*PROGRAMS) | has_channel


def _first_key(j: Column, keys: tuple[str, ...]) -> Column:
    return F.coalesce(*[V.blank_to_null(F.try_element_at(j, F.lit(k))) for k in keys])


def _title_index(text: Column) -> Column:
    """1-based index into :data:`TITLES` of the rendered title ``text`` starts with; null when none.

    The titles are tried in their order within groups of the same first words (``An …``, ``A user …``, ``Task …``):
    a text starts with at most one group's words, so a row tests its group's titles, not all ~80 in turn (a text
    that is no title, such as JSON's empty one, tests one word per group)."""
    return _title_case(text, list(enumerate(TITLES, start=1)), 1)


def _title_case(text: Column, titles: list[tuple[int, Title]], words: int) -> Column:
    groups: dict[str, list[tuple[int, Title]]] = {}
    for i, t in titles:
        parts = t.prefix.split(" ")
        # Grouped by the title's first ``words`` words and the space after them (every title has one after its first).
        key = " ".join(parts[:words]) + " " if len(parts) > words else None
        groups.setdefault(key, []).append((i, t))
    if None in groups or len(titles) <= 4 or len(groups) == 1 and words > 1:
        case = None
        for i, t in titles:
            cond = text.startswith(t.prefix)
            if t.contains:
                cond = cond & text.contains(t.contains)
            if t.regex:
                cond = cond & text.rlike(f"^(?:{t.regex})")
            case = F.when(cond, F.lit(i)) if case is None else case.when(cond, F.lit(i))
        return case
    case = None
    for key, members in groups.items():
        value = _title_case(text, members, words + 1) if len(members) > 1 else _title_case(text, members, 99)
        cond = text.startswith(key)
        case = F.when(cond, value) if case is None else case.when(cond, value)
    return case


def add_match(df, sys: Column, j: Column):
    """Internal columns of Windows rows (null for other rows), each step materialized so that no regular
    expression runs twice: ``_wtext`` (the rendered text, whitespace collapsed), ``_win`` (true: a Windows row)
    with ``_wcode``/``_wchannel``/``_wprovider``, ``_wcut`` (the text cut before Windows' explanations),
    ``_wslots`` (the slots to read from the text) and ``_wplain``, ``_ws_<section>`` (a section's groups) with the
    event id's flags for :func:`fields` (``_wevent``, ``_wsubj_tgt``, ``_wgroup``, ``_waccount``),
    ``_wt_<slot>_<k>`` (each label regex's raw value, only where the JSON lacks the slot) and ``_wd_<slot>`` (the
    slots, JSON first; "-" and blanks are null). These are top-level
    columns, not fields of a struct: Spark reads a struct field through a new row object each time, and the slots
    are read hundreds of times per Windows row."""
    body = sys.getField("body")
    win = is_windows(sys.getField("program_lc"), j)
    # JSON with an id and EventData needs no text: the rendered message is read only when the JSON lacks them.
    json_complete = _first_key(j, _ID_KEYS).isNotNull() & (F.size(_event_data(j)) > 0)
    raw_text = (F.when(j.isNull(), body).when(json_complete, F.lit(""))
                .otherwise(F.regexp_replace(F.trim(_first_key(j, _MESSAGE_KEYS)), r"\s+", " ")))
    df = df.withColumn("_wtext", F.when(win, F.coalesce(raw_text, F.lit(""))))
    text = F.col("_wtext")
    cut = text
    for marker in _EXPLANATIONS:
        cut = F.substring_index(cut, marker, 1)
    json_id = F.regexp_extract(F.coalesce(_first_key(j, _ID_KEYS), F.lit("")), r"^\s*([0-9]{1,5})\s*$", 1)
    sd = F.coalesce(sys.getField("sd"), F.lit(""))
    sd_id = F.when(sd.contains("eventID="), F.regexp_extract(sd, r'\beventID="([0-9]{1,5})"', 1))
    sd_source = F.when(sd.contains("eventSource="), F.regexp_extract(sd, r'\beventSource="([^"]*)"', 1))
    df = df.withColumn("_wpre", F.when(text.isNotNull(), F.struct(
        cut.alias("cut"),
        F.coalesce(F.nullif(json_id, F.lit("")), F.nullif(sd_id, F.lit(""))).alias("given_id"),
        F.coalesce(_first_key(j, _CHANNEL_KEYS), F.nullif(sd_source, F.lit(""))).alias("given_channel"),
        _title_index(text).alias("title"),
    )))
    pre = F.col("_wpre")
    title = pre.getField("title")
    given_id = pre.getField("given_id")
    present = pre.isNotNull()
    # Flat columns, not struct fields: a struct field is read through a new row object per read (getStruct), and
    # the text, mask and slots below are read ~300 times per Windows row.
    df = df.select(
        "*", F.when(present, F.lit(True)).alias("_win"),
        F.when(present, F.coalesce(given_id, _lookup([t.event_id for t in TITLES], title))).alias("_wcode"),
        F.when(present, F.coalesce(pre.getField("given_channel"), _lookup([t.channel for t in TITLES], title)))
        .alias("_wchannel"),
        F.when(present, F.coalesce(_first_key(j, _PROVIDER_KEYS), _lookup([t.provider for t in TITLES], title)))
        .alias("_wprovider"),
        pre.getField("cut").alias("_wcut"),
        # The slots still to read from the text: the event's slots less those the JSON gives (null: not Windows).
        F.when(present, _slot_mask(given_id, title).bitwiseAND(F.bitwise_not(_json_slots(j)))).alias("_wslots"),
        # Text containing the group separator keeps the per-slot regexes (same values); tested once per row.
        (present & ~pre.getField("cut").contains(_GROUP_SEP)).alias("_wplain"))
    w = F.col("_win")
    cut = F.col("_wcut")

    def json_value(name: str) -> Column:
        return F.try_element_at(j, F.lit(name))

    slot_mask = F.col("_wslots")

    def wanted(names) -> Column:
        # Same as code.isin(<the codes of these slots>) | code.isNull(), as one bit test instead of up to 30
        # string comparisons per slot entry (a row tests ~100 entries).
        return (slot_mask.bitwiseAND(F.lit(_slot_bits(names))) != F.lit(0))

    # Each section regex runs once (materialized in _ws_<section>), only when the event has one of its slots and
    # its start is in the text.
    by_sections = F.col("_wplain")
    code = F.col("_wcode")
    df = df.select("*", *[
        F.when(by_sections & wanted(sec.replaces) & cut.contains(sec.gate), _section_groups(cut, sec))
        .alias(_section_column(sec)) for sec in SECTIONS],
        # What fields() asks of the event id, once per row (each was read through a common-subexpression cache,
        # a hash lookup per read in interpreted projections).
        F.array_position(F.array(*[F.lit(i) for i in EVENTS]), code).cast("int").alias("_wevent"),
        (code.isin(*_SUBJECT_IS_TARGET) & j.isNull()).alias("_wsubj_tgt"),
        code.isin(*_GROUP_EVENTS).alias("_wgroup"),
        code.isin(*_ACCOUNT_EVENTS).alias("_waccount"))
    sections = {(slot, regex): _section_value(F.col(_section_column(sec)), sec, slot)
                for sec in SECTIONS for slot, regex in sec.replaces.items()}

    def raw_entry(name: str, gate: str, r: str) -> Column:
        # Each regex runs only when its literal start is in the text (a byte search, no String conversion). The
        # raw value ("" for no match) is materialized and only then compared with "": nullif(regexp_extract(…))
        # in place would run the regex twice (nullif becomes if(x = '', null, x), and Spark's common-subexpression
        # elimination does not look inside CASE branches, where every slot expression sits).
        value = F.regexp_extract(cut, r, 1)
        section = sections.get((name, r))
        value = (F.when(cut.contains(gate), value) if section is None
                 else F.when(by_sections, section).when(cut.contains(gate), value))
        # One bit test per entry: _wslots is null on other rows and has no bit for a slot the JSON gives.
        return F.when(wanted((name,)), value)

    entries = {name: [_entry_column(name, k) for k in range(len(SLOTS[name]))] for name in SLOTS}
    df = df.select("*", *[raw_entry(name, gate, r).alias(entries[name][k])
                          for name in SLOTS for k, (gate, r) in enumerate(map(_gated, SLOTS[name]))])

    def from_text(name: str) -> Column:
        return F.coalesce(*[F.nullif(F.col(e), F.lit("")) for e in entries[name]])

    # A slot's value is its text entries' (when its bit is set, the JSON lacks it) or else the JSON's: the same as
    # blank_to_null(coalesce(json, text)), as the entries are null when the bit is not set, and the text chain is
    # walked only for the slots the event has (the chain's coalesce of nullifs is read twice per value, not three
    # times: one trim, tested against both blanks at once).
    return df.select("*", *[F.when(wanted((n,)), _blank_to_null(from_text(n)))
                            .when(w.isNotNull() & j.isNotNull(), _blank_to_null(json_value(n)))
                            .alias(_slot_column(n))
                            for n in SLOTS])


def _json_slots(j: Column) -> Column:
    """The mask bits of the slots the JSON ``j`` gives (a non-null value under the slot's name); 0 without JSON."""
    bits = [F.when(F.try_element_at(j, F.lit(name)).isNotNull(), F.lit(bit)).otherwise(F.lit(0))
            for name, bit in _SLOT_BIT.items()]
    return F.when(j.isNull(), F.lit(0)).otherwise(functools.reduce(Column.bitwiseOR, bits))


def _blank_to_null(text: Column) -> Column:
    """:func:`values.blank_to_null` with one ``trim`` per row (``text`` is read twice, not three times)."""
    return F.when(~F.trim(text).isin("", "-"), text)


def _section_column(section: Section) -> str:
    return "_ws_" + section.name.replace(" ", "_")


def _slot_column(slot: str) -> str:
    """The column of slot ``slot``'s value (``_wd_<slot>``)."""
    return "_wd_" + slot


_SLOT_BIT = {name: 1 << i for i, name in enumerate(SLOT_CODES)}  # 41 slots: one bigint holds them all
assert len(_SLOT_BIT) < 63
_ALL_SLOTS = -1  # an unknown event id: every slot is read


def _slot_bits(names) -> int:
    """The mask bits of the slots ``names``."""
    bits = 0
    for name in names:
        bits |= _SLOT_BIT[name]
    return bits


def _code_mask(code: str) -> int:
    """Bits of the slots event ``code``'s rendered text has (:data:`SLOT_CODES`)."""
    return _slot_bits(n for n, codes in SLOT_CODES.items() if code in codes)


def _slot_mask(given_id: Column, title: Column) -> Column:
    """The slots to read for a row (bigint, a bit per :data:`SLOT_CODES` entry), from the event id the row's
    ``code`` is made of: the given id (JSON / structured data) if any, else the title's id; every slot when there
    is neither (``code`` null). A title's mask is a constant array lookup; a given id is looked up once per row."""
    codes = sorted({c for cs in SLOT_CODES.values() for c in cs})
    by_code = F.try_element_at(F.array(*[F.lit(_code_mask(c)) for c in codes]),
                               F.nullif(F.array_position(F.array(*[F.lit(c) for c in codes]), given_id).cast("int"),
                                       F.lit(0)))
    by_title = _lookup([_code_mask(t.event_id) for t in TITLES], title, "bigint")
    return (F.when(given_id.isNotNull(), F.coalesce(by_code, F.lit(0)))
            .when(title.isNotNull() & (title != F.lit(0)), by_title)
            .otherwise(F.lit(_ALL_SLOTS)))


def _entry_column(slot: str, index: int) -> str:
    """The column (``_wt_<slot>_<k>``) of the raw value of ``SLOTS[slot][index]``."""
    return f"_wt_{slot}_{index}"


def _section_groups(text: Column, section: Section) -> Column:
    """``section``'s first match in ``text`` in one regex pass: ``regexp_replace`` of the whole text by the
    separated groups, then ``split``. A match gives ``["", group 1, …]`` ("" for a group that did not take part),
    no match gives ``[text]`` (such text has no separator), so group ``i`` is element ``i + 2`` either way, and the
    regex runs once (a test of the result before the split would run it again: no common-subexpression
    elimination inside CASE branches)."""
    n = len(section.groups)
    marked = F.regexp_replace(text, rf"(?s)^.*?(?:{section.regex}).*$",
                              _GROUP_SEP + _GROUP_SEP.join(f"${i}" for i in range(1, n + 1)))
    return F.split(marked, _GROUP_SEP)


def _section_value(groups: Column, section: Section, slot: str) -> Column:
    """``slot``'s value from a section's groups (null for none or ""), as its per-slot regex would read it."""
    def group(i: int) -> Column:
        return F.nullif(F.try_element_at(groups, F.lit(i + 2)), F.lit(""))

    value = group(section.groups.index(slot))
    if slot == "TargetLogonId":
        # The per-slot regex needs the SID and "Account Domain" (not "Supplied Realm Name") before Logon ID.
        sid, label = group(section.groups.index("TargetUserSid")), group(2)
        value = F.when(sid.isNotNull() & (label == F.lit("Account Domain")), value)
    return value


def _event_data(j: Column) -> Column:
    """The JSON keys that are EventData (not the forwarder's envelope)."""
    return F.map_filter(j, lambda k, _v: ~k.isin(*ENVELOPE_KEYS))


def _gated(entry: str | tuple[str, str]) -> tuple[str, str]:
    return entry if isinstance(entry, tuple) else (literal_prefix(entry), entry)


def _hex_or_int(text: Column) -> Column:
    """``0x1f4`` or ``500`` -> 500 (null for 0, which Windows writes when there is no process)."""
    value = F.when(text.rlike(r"^0[xX][0-9a-fA-F]{1,15}$"), F.conv(F.substring(text, 3, 16), 16, 10).try_cast("bigint")) \
        .otherwise(text.try_cast("bigint"))
    return F.nullif(value, F.lit(0))


def _basename(path: Column) -> Column:
    return F.nullif(F.regexp_extract(path, r"([^\\/]+)$", 1), F.lit(""))


def _split_account(account: Column) -> tuple[Column, Column]:
    """``DOMAIN\\name`` / ``name@REALM`` / ``name`` -> (name, domain)."""
    name = (F.when(account.contains("\\"), F.substring_index(account, "\\", -1))
            .when(account.rlike(r"^[^@]+@[^@]+$"), F.substring_index(account, "@", 1)).otherwise(account))
    domain = (F.when(account.contains("\\"), F.substring_index(account, "\\", 1))
              .when(account.rlike(r"^[^@]+@[^@]+$"), F.substring_index(account, "@", -1)))
    return name, domain


def fields(j: Column) -> Fields:
    """ECS fields of Windows rows (null elsewhere)."""
    present = F.col("_win").isNotNull()
    code = F.col("_wcode")
    channel = F.col("_wchannel")
    provider = F.col("_wprovider")

    def s(name: str) -> Column:
        return F.col(_slot_column(name))

    idx = F.col("_wevent")
    events = list(EVENTS.values())
    category = _lookup([e.category for e in events], idx, "array<string>")
    etype = _lookup([e.type for e in events], idx, "array<string>")
    action = _lookup([e.action for e in events], idx)
    table_outcome = _lookup([e.outcome for e in events], idx)
    role = _lookup([e.user for e in events], idx)

    subject_is_target = F.col("_wsubj_tgt")
    subj_name = F.when(~subject_is_target, s("SubjectUserName"))
    subj_domain = F.when(~subject_is_target, s("SubjectDomainName"))
    subj_sid = F.when(~subject_is_target, s("SubjectUserSid"))
    subj_logon = F.when(~subject_is_target, s("SubjectLogonId"))
    tgt_name = F.coalesce(s("TargetUserName"), F.when(subject_is_target, s("SubjectUserName")))
    tgt_domain = F.coalesce(s("TargetDomainName"), F.when(subject_is_target, s("SubjectDomainName")))
    tgt_sid = F.coalesce(s("TargetUserSid"), F.try_element_at(j, F.lit("TargetSid")),
                         F.when(subject_is_target, s("SubjectUserSid")))
    tgt_logon = F.coalesce(s("TargetLogonId"), F.when(subject_is_target, s("SubjectLogonId")))
    tgt_short, tgt_realm = _split_account(tgt_name)

    is_target = F.coalesce(role == F.lit("target"), subj_name.isNull() & tgt_name.isNotNull())
    is_group = F.col("_wgroup")
    is_account = F.col("_waccount")
    is_4688 = code == F.lit("4688")
    is_4648 = code == F.lit("4648")

    status = F.lower(s("Status"))
    keyword = F.lower(F.coalesce(_first_key(j, ("keyword", "Keywords", "EventType")), F.lit("")))
    outcome = F.coalesce(
        table_outcome,
        F.when(code.isin(*_STATUS_OUTCOME) & status.isNotNull(),
               F.when(status.isin("0x0", "0"), F.lit("success")).otherwise(F.lit("failure"))),
        F.when(keyword.contains("audit failure"), F.lit("failure")),
        F.when(keyword.contains("audit success"), F.lit("success")),
    )
    logon_type = s("LogonType")
    ip = F.regexp_replace(s("IpAddress"), r"^::ffff:(?=[0-9]+\.)", "")
    process_executable = F.when(is_4688, s("NewProcessName")).otherwise(s("ProcessName"))
    process_pid = _hex_or_int(F.when(is_4688, s("NewProcessId")).otherwise(s("ProcessId")))
    member = s("MemberName")
    member_cn = F.coalesce(F.nullif(F.regexp_extract(member, r"^CN=((?:[^,\\]|\\.)+)", 1), F.lit("")), member)
    winlog_user = V.blank_to_null(F.nullif(F.try_element_at(j, F.lit("user")), F.lit("N\\A")))
    wl_user_name, wl_user_domain = _split_account(winlog_user)
    level = _first_key(j, ("level", "Severity"))
    data_names = list(SLOTS)
    def data_key(n: str) -> Column:
        # 4634/4647 render their Target* EventData under "Subject:" (Target* slots are not read for them).
        if n.startswith("Subject"):
            return F.when(subject_is_target, F.lit("Target" + n[len("Subject"):])).otherwise(F.lit(n))
        return F.lit(n)

    # The slots that have a value, in SLOTS order: concatenated one-element arrays, not filter() over an array of
    # structs (a higher-order function is interpreted, and its result was built twice: once for the size test).
    no_strings = F.array().cast("array<string>")
    text_data = F.map_from_arrays(
        F.concat(*[F.when(s(n).isNotNull(), F.array(data_key(n))).otherwise(no_strings) for n in data_names]),
        F.concat(*[F.when(s(n).isNotNull(), F.array(s(n))).otherwise(no_strings) for n in data_names]))
    json_data = _event_data(j)
    event_data = (F.when(j.isNotNull(), F.when(F.size(json_data) > 0, json_data))
                  .when(F.coalesce(*[s(n) for n in data_names]).isNotNull(), text_data))
    service = F.coalesce(s("param1"), s("ServiceName"))
    return {
        "event.kind": F.when(present, F.lit("event")),
        "event.module": F.when(present, F.lit("windows")),
        "event.dataset": F.when(present, F.coalesce(
            _lookup(list(DATASETS.values()), F.array_position(F.array(*[F.lit(c) for c in DATASETS]),
                                                              channel).cast("int")),
            F.lit(DATASET_OTHER))),
        "event.code": code,
        "event.provider": provider,
        "event.category": category,
        "event.type": etype,
        "event.action": F.coalesce(action, F.nullif(V.blank_to_null(F.try_element_at(j, F.lit("catname"))),
                                                    F.lit("0"))),
        "event.outcome": F.when(present, outcome),
        "message": F.when(j.isNotNull(), _first_key(j, _MESSAGE_KEYS)),
        "log.level": F.lower(level),
        "winlog.event_id": code,
        "winlog.channel": channel,
        "winlog.provider_name": provider,
        "winlog.computer_name": F.when(present, F.coalesce(_first_key(j, _COMPUTER_KEYS),
                                                           F.col("_sys").getField("hostname"))),
        "winlog.task": F.nullif(V.blank_to_null(F.try_element_at(j, F.lit("catname"))), F.lit("0")),
        "winlog.keywords": F.when(keyword != F.lit(""), F.array(_first_key(j, ("keyword", "Keywords")))),
        "winlog.user.name": wl_user_name,
        "winlog.user.domain": wl_user_domain,
        "winlog.user.identifier": V.blank_to_null(F.try_element_at(j, F.lit("user_sid"))),
        "winlog.logon.type": F.coalesce(_lookup(list(LOGON_TYPES.values()), F.array_position(
            F.array(*[F.lit(k) for k in LOGON_TYPES]), logon_type).cast("int")), logon_type),
        "winlog.logon.id": F.when(is_target, tgt_logon).otherwise(F.coalesce(subj_logon, tgt_logon)),
        "winlog.event_data": F.when(present, event_data),
        "user.name": F.when(is_target, tgt_short).otherwise(subj_name),
        "user.domain": F.when(is_target, F.coalesce(tgt_domain, tgt_realm)).otherwise(subj_domain),
        "user.id": F.when(is_target, tgt_sid).otherwise(subj_sid),
        "user.target.name": F.when(is_account, tgt_short).when(is_group, member_cn),
        "user.target.domain": F.when(is_account, F.coalesce(tgt_domain, tgt_realm)),
        "user.target.id": F.when(is_account, tgt_sid).when(is_group, s("MemberSid")),
        "user.effective.name": F.when(is_4648, tgt_short),
        "user.effective.domain": F.when(is_4648, tgt_domain),
        "group.name": F.when(is_group, tgt_name),
        "group.domain": F.when(is_group, tgt_domain),
        "group.id": F.when(is_group, tgt_sid),
        "source.address": F.nullif(ip, F.lit("")),
        "source.port": V.to_int(s("IpPort")),
        "source.domain": F.coalesce(s("WorkstationName"), s("Workstation")),
        "process.pid": process_pid,
        "process.executable": process_executable,
        "process.name": _basename(process_executable),
        "process.command_line": s("CommandLine"),
        "process.parent.pid": F.when(is_4688, _hex_or_int(s("ProcessId"))),
        "process.parent.executable": F.when(is_4688, s("ParentProcessName")),
        "process.parent.name": F.when(is_4688, _basename(s("ParentProcessName"))),
        "service.name": service,
        "service.state": F.when(code == F.lit("7036"), s("param2")),
    }
