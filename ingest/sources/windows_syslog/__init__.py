"""Windows event logs forwarded over syslog (EvntSLog, NXLog, Snare-style agents), as Elastic's Windows / System
integrations map them (docs/windows_events.md).

Two shapes of message:

* the **rendered text** of the event, whitespace collapsed by the agent (``An account was successfully logged on.
  Subject: Security ID: S-1-0-0 Account Name: - … New Logon: …``): the event id is inferred from the rendered title
  (:data:`TITLES`) and the values are read label by label (:data:`SLOTS`) into Windows' own EventData names
  (``TargetUserName``, ``IpAddress``, …), so both shapes feed one mapping;
* **JSON** (``@cee: {"id": "4624", "nteventlogtype": "Security", "TargetUserName": …}`` or a bare object): the
  EventData keys are read directly; the rendered ``msg`` is read only for what the JSON lacks.

A line is a Windows event when its program is a known forwarder (:data:`PROGRAMS`) or its JSON payload carries
``nteventlogtype`` (EvntSLog's channel key), whatever the program. ``event.code`` is the JSON id, else an ``eventID`` structured-data parameter,
else the id of the rendered title; unknown titles keep the header and message with ``event.code`` null.

``user.*`` is the account the event is about: for logons (4624/4625/4634/4647), session and Kerberos/NTLM events
the *target*; for account management, 4648, 4672, 4688, 1102 the *subject* who acted (then the account acted on
is ``user.target.*``, 4648's explicit credentials ``user.effective.*``, a group event's group ``group.*``).
Detail holds the envelope as ``winlog.*`` keys (``winlog.channel``, ``winlog.logon.type``, ...), the fields outside
the core under their ECS paths (``user.target.id``, ``service.name``, ...) and every EventData value under its
Windows name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ingest.sources import Event, Source
from ingest.sources.syslog import Envelope
from ingest.sources.syslog_json import blank as _blank
from ingest.sources.syslog_json import whole_number

PROGRAMS = frozenset(("evntslog", "mswineventlog", "eventlog", "nxlog", "winlogbeat", "snare", "evtsys",
                      "microsoft-windows-security-auditing"))

SECURITY, SYSTEM, APPLICATION = "Security", "System", "Application"
TASKS = "Microsoft-Windows-TaskScheduler/Operational"
GPO = "Microsoft-Windows-GroupPolicy/Operational"
_AUDITING = "Microsoft-Windows-Security-Auditing"
_SCM = "Service Control Manager"
_TASK_PROVIDER = "Microsoft-Windows-TaskScheduler"
_GPO_PROVIDER = "Microsoft-Windows-GroupPolicy"
_SEP = "Symantec AntiVirus"

# Dataset per channel; every other channel arrives through a forwarder ("forwarded", as Elastic calls it).
DATASETS = {SECURITY: "windows.security", SYSTEM: "windows.system", APPLICATION: "windows.application"}
DATASET_OTHER = "windows.forwarded"
_FLAGS = re.ASCII  # \s, \S and \b as Java reads them


@dataclass(frozen=True)
class Title:
    """A rendered message title: ``prefix`` (``startswith``), optionally refined by an anchored ``regex``."""

    event_id: str
    prefix: str
    channel: str
    provider: str
    regex: str | None = None
    contains: str | None = None  # a literal the text must contain before ``regex`` is tried

    @property
    def pattern(self) -> re.Pattern[str] | None:
        return _compiled(self.regex) if self.regex else None


def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex, _FLAGS)


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


def _by_first_word() -> dict[str, list[tuple[Title, re.Pattern[str] | None]]]:
    """Titles grouped by their first word (every prefix has a space after it), in :data:`TITLES` order: a text is
    tested against its own first word's titles only."""
    out: dict[str, list[tuple[Title, re.Pattern[str] | None]]] = {}
    for t in TITLES:
        out.setdefault(t.prefix.split(" ", 1)[0], []).append((t, t.pattern))
    return out


_TITLES_BY_WORD = _by_first_word()


def title_of(text: str) -> Title | None:
    """The first title of :data:`TITLES` the rendered ``text`` starts with (and matches), else None."""
    for t, pattern in _TITLES_BY_WORD.get(text.split(" ", 1)[0], ()):
        if text.startswith(t.prefix) and (t.contains is None or t.contains in text) \
                and (pattern is None or pattern.match(text)):
            return t
    return None


@dataclass(frozen=True)
class Kind:
    """ECS classification of an event id (Elastic's table), and whose account ``user.*`` names."""

    category: tuple[str, ...]
    type: tuple[str, ...]
    action: str
    outcome: str | None = "success"  # None: from the status code / audit keyword
    user: str = "subject"  # "target": the account logged on / validated; "subject": the account that acted


_LOGON = ("authentication",)
_IAM = ("iam",)
EVENTS: dict[str, Kind] = {
    "4624": Kind(_LOGON, ("start",), "logged-in", user="target"),
    "4625": Kind(_LOGON, ("start",), "logon-failed", "failure", user="target"),
    "4634": Kind(_LOGON, ("end",), "logged-out", user="target"),
    "4647": Kind(_LOGON, ("end",), "logged-out", user="target"),
    "4648": Kind(_LOGON, ("start",), "logged-in-explicit"),
    "4662": Kind(("configuration",), ("access",), "object-operation-performed"),
    "4672": Kind(_IAM, ("admin",), "logged-in-special"),
    "4688": Kind(("process",), ("start",), "created-process"),
    "4689": Kind(("process",), ("end",), "exited-process"),
    "4698": Kind(_IAM, ("creation",), "scheduled-task-created"),
    "4720": Kind(_IAM, ("user", "creation"), "added-user-account"),
    "4722": Kind(_IAM, ("user", "change"), "enabled-user-account"),
    "4723": Kind(_IAM, ("user", "change"), "changed-password", None),
    "4724": Kind(_IAM, ("user", "change"), "reset-password", None),
    "4725": Kind(_IAM, ("user", "change"), "disabled-user-account"),
    "4726": Kind(_IAM, ("user", "deletion"), "deleted-user-account"),
    "4728": Kind(_IAM, ("group", "change"), "added-member-to-group"),
    "4729": Kind(_IAM, ("group", "change"), "removed-member-from-group"),
    "4732": Kind(_IAM, ("group", "change"), "added-member-to-group"),
    "4733": Kind(_IAM, ("group", "change"), "removed-member-from-group"),
    "4738": Kind(_IAM, ("user", "change"), "modified-user-account"),
    "4740": Kind(_IAM, ("user", "change"), "locked-out-user-account"),
    "4756": Kind(_IAM, ("group", "change"), "added-member-to-group"),
    "4768": Kind(_LOGON, ("start",), "kerberos-authentication-ticket-requested", None, "target"),
    "4769": Kind(_LOGON, ("start",), "kerberos-service-ticket-requested", None, "target"),
    "4770": Kind(_LOGON, ("start",), "kerberos-service-ticket-renewed", None, "target"),
    "4771": Kind(_LOGON, ("start",), "kerberos-preauth-failed", "failure", "target"),
    "4776": Kind(_LOGON, ("start",), "credential-validated", None, "target"),
    "4778": Kind(("authentication", "session"), ("start",), "session-reconnected", user="target"),
    "4779": Kind(("authentication", "session"), ("end",), "session-disconnected", user="target"),
    "1102": Kind(_IAM, ("admin", "change"), "audit-log-cleared"),
    "7036": Kind(("process",), ("change",), "service-state-changed", None),
    "7040": Kind(("configuration",), ("change",), "service-start-type-changed", None),
    "7045": Kind(("configuration",), ("creation",), "service-installed", None),
    "51": Kind(("malware",), ("info",), "security-risk-found", None),
}
# Events whose id is a status result: 0x0 is success.
_STATUS_OUTCOME = frozenset(("4768", "4769", "4770", "4776"))
# Events whose rendered "Subject:" section is the EventData Target* (the account logged off).
_SUBJECT_IS_TARGET = frozenset(("4634", "4647"))
_GROUP_EVENTS = ("4728", "4729", "4732", "4733", "4756")
_ACCOUNT_EVENTS = frozenset(("4720", "4722", "4723", "4724", "4725", "4726", "4738", "4740"))
LOGON_TYPES = {"0": "System", "2": "Interactive", "3": "Network", "4": "Batch", "5": "Service",
               "7": "Unlock", "8": "NetworkCleartext", "9": "NewCredentials", "10": "RemoteInteractive",
               "11": "CachedInteractive", "12": "CachedRemoteInteractive", "13": "CachedUnlock"}

# JSON keys that describe the record rather than the event (everything else is EventData).
ENVELOPE_KEYS = frozenset((
    # EvntSLog
    "source", "msg", "nteventlogtype", "sourceproc", "id", "categoryid", "category", "keywordid", "user",
    "user_sid", "catname", "keyword", "level",
    # NXLog im_msvistalog
    "EventTime", "Hostname", "Keywords", "EventType", "SeverityValue", "Severity", "EventID", "SourceName",
    "ProviderGuid", "Version", "Task", "OpcodeValue", "RecordNumber", "Channel", "Message", "Category",
    "Opcode", "EventReceivedTime", "SourceModuleName", "SourceModuleType", "Domain", "AccountName",
    "UserID", "AccountType", "ExecutionProcessID", "ExecutionThreadID",
))
_ID_KEYS = ("id", "EventID", "event_id", "EventId")
_CHANNEL_KEYS = ("nteventlogtype", "Channel", "channel", "LogName")
# The channel key that makes a JSON payload a Windows event whatever the program (EvntSLog's). Only this one of
# _CHANNEL_KEYS: NXLog's "Channel" on a program not in PROGRAMS stays a plain JSON payload.
_GATE_KEY = "nteventlogtype"
_PROVIDER_KEYS = ("sourceproc", "SourceName", "ProviderName", "provider")
_COMPUTER_KEYS = ("source", "Hostname", "Computer", "computer_name")
_MESSAGE_KEYS = ("msg", "Message", "message")
_KEYWORD_KEYS = ("keyword", "Keywords", "EventType")

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
_END = r"\Z"


def _kv(prefix: str, until: str) -> str:
    """``prefix`` then the value up to the next label of ``until`` (or the end); an empty value
    (``Workstation Name: Source Network Address:``) gives nothing."""
    end = r" ?\Z" if until == _END else rf"(?: (?:{until}):| ?\Z)"
    return rf"{prefix}(?: (.*?))??{end}"


def _sections(fmt: str, sections: tuple[str, ...] = _TARGET_SECTIONS) -> tuple[str, ...]:
    return tuple(fmt.format(s=s) for s in sections)


# EventData name -> regexes over the rendered text (group 1 is the value; the first non-empty one wins).
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
    "param1": (r"^The (.+?) service entered the .+ state\.", r"The start type of the (.+?) service was changed "),
    "param2": (r"^The .+? service entered the (.+) state\.",
               r"The start type of the .+? service was changed from (.+?) to "),
    "param3": (r"The start type of the .+? service was changed from .+? to (.+?)\.",),
}
# Where a regex's own start is too common (or anchored) to search for: the literal the text must contain.
_GATES = {r"^The (.+?) service entered the .+ state\.": "service entered the ",
          r"^The .+? service entered the (.+) state\.": "service entered the "}

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
_LITERAL_START = re.compile(r"(?:[^\\()\[\]{}?*+|.^$]|\\[.()\[\]{}?*+|^$\\])*")


def _gate(regex: str) -> str:
    """The literal text every match of ``regex`` contains at its start (escapes unescaped; a character followed by
    an optional quantifier dropped): tested with ``in`` before the regex runs."""
    if regex in _GATES:
        return _GATES[regex]
    literal = _LITERAL_START.match(regex).group(0)
    if regex[len(literal):len(literal) + 1] in ("?", "*", "{"):
        literal = literal[:-1]
    return re.sub(r"\\(.)", r"\1", literal)


# Per slot, its (gate, compiled regex) entries, and the slots each event id's rendered text has.
_ENTRIES: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    name: tuple((_gate(r), _compiled(r)) for r in regexes) for name, regexes in SLOTS.items()}
_SLOTS_OF: dict[str, tuple[str, ...]] = {
    code: tuple(n for n, codes in SLOT_CODES.items() if code in codes) for cs in SLOT_CODES.values() for code in cs}
_ALL_SLOTS = tuple(SLOTS)
_SPACES = re.compile(r"\s+", _FLAGS)
_JSON_ID = re.compile(r"\s*([0-9]{1,5})\s*", _FLAGS)
_SD_ID = re.compile(r'\beventID="([0-9]{1,5})"', _FLAGS)
_SD_SOURCE = re.compile(r'\beventSource="([^"]*)"', _FLAGS)
_HEX = re.compile(r"0[xX][0-9a-fA-F]{1,15}")
_BASENAME = re.compile(r"([^\\/]+)$")
_REALM = re.compile(r"[^@]+@[^@]+")
_MEMBER_CN = re.compile(r"CN=((?:[^,\\]|\\.)+)")
_MAPPED_IPV4 = re.compile(r"::ffff:(?=[0-9]+\.)")


def _coalesce(*values: str | None) -> str | None:
    """The first value that is not None (SQL's coalesce: an empty string counts)."""
    return next((v for v in values if v is not None), None)


def _first_key(j: dict[str, str | None] | None, keys: tuple[str, ...]) -> str | None:
    if j is None:
        return None
    for k in keys:
        v = _blank(j.get(k))
        if v is not None:
            return v
    return None


def _from_text(cut: str, slot: str) -> str | None:
    for gate, pattern in _ENTRIES[slot]:
        if gate in cut:
            m = pattern.search(cut)
            if m is not None and m.group(1):
                return m.group(1)
    return None


def _hex_or_int(text: str | None) -> int | None:
    """``0x1f4`` or ``500`` -> 500 (None for 0, which Windows writes when there is no process)."""
    if text is None:
        return None
    if _HEX.fullmatch(text):
        value = int(text[2:], 16)
    else:
        value = whole_number(text, 64)
    return value or None


def _basename(path: str | None) -> str | None:
    if path is None:
        return None
    m = _BASENAME.search(path)
    return m.group(1) if m else None


def _split_account(account: str | None) -> tuple[str | None, str | None]:
    """``DOMAIN\\name`` / ``name@REALM`` / ``name`` -> (name, domain)."""
    if account is None:
        return None, None
    if "\\" in account:
        return account.rsplit("\\", 1)[1], account.split("\\", 1)[0]
    if _REALM.fullmatch(account):
        name, realm = account.split("@")
        return name, realm
    return account, None


def _message_text(j: dict[str, str | None] | None, body: str) -> str:
    """The rendered text to read: the syslog message, or the JSON's message collapsed to one line ("" when the
    JSON has an id and EventData: then nothing is read from the text)."""
    if j is None:
        return body
    if _first_key(j, _ID_KEYS) is not None and any(k not in ENVELOPE_KEYS for k in j):
        return ""
    message = _first_key(j, _MESSAGE_KEYS)
    return "" if message is None else _SPACES.sub(" ", message.strip(" "))


def _given_id(j: dict[str, str | None] | None, sd: str | None) -> str | None:
    m = _JSON_ID.fullmatch(_first_key(j, _ID_KEYS) or "")
    if m is not None:
        return m.group(1)
    if sd and "eventID=" in sd:
        m = _SD_ID.search(sd)
        if m is not None:
            return m.group(1)
    return None


def _sd_channel(sd: str | None) -> str | None:
    if sd and "eventSource=" in sd:
        m = _SD_SOURCE.search(sd)
        if m is not None and m.group(1):
            return m.group(1)
    return None


def _slots(j: dict[str, str | None] | None, cut: str, code: str | None) -> dict[str, str | None]:
    """Every slot's value: from the text for the slots the event id has and the JSON lacks, else the JSON's."""
    wanted = _SLOTS_OF.get(code, ()) if code is not None else _ALL_SLOTS
    values: dict[str, str | None] = dict.fromkeys(_ALL_SLOTS) if j is None else {n: _blank(j.get(n)) for n in SLOTS}
    for n in wanted:
        if j is None or j.get(n) is None:
            values[n] = _blank(_from_text(cut, n))
    return values


def parse(env: Envelope) -> Event | None:
    """A Windows event's fields (core and detail), or None when the line is not a Windows event."""
    j = env.payload
    if env.program_lc not in PROGRAMS and (j is None or j.get(_GATE_KEY) is None):
        return None
    text = _message_text(j, env.body)
    cut = text
    for marker in _EXPLANATIONS:
        cut = cut.split(marker, 1)[0]
    given_id = _given_id(j, env.sd)
    title = title_of(text)
    code = given_id if given_id is not None else (title.event_id if title else None)
    channel = _first_key(j, _CHANNEL_KEYS) or _sd_channel(env.sd) or (title.channel if title else None)
    provider = _first_key(j, _PROVIDER_KEYS) or (title.provider if title else None)
    s = _slots(j, cut, code)
    return _fields(env, j, code, channel, provider, s)


def _fields(env: Envelope, j: dict[str, str | None] | None, code: str | None, channel: str | None,
            provider: str | None, s: dict[str, str | None]) -> Event:
    kind = EVENTS.get(code) if code is not None else None
    # Three-valued as in SQL: an unknown id without JSON reads neither section as the target's.
    subject_is_target: bool | None = (None if code is None else code in _SUBJECT_IS_TARGET) if j is None else False
    own_subject = subject_is_target is False
    subj_name = s["SubjectUserName"] if own_subject else None
    subj_domain = s["SubjectDomainName"] if own_subject else None
    subj_sid = s["SubjectUserSid"] if own_subject else None
    subj_logon = s["SubjectLogonId"] if own_subject else None
    swap = subject_is_target is True
    tgt_name = s["TargetUserName"] or (s["SubjectUserName"] if swap else None)
    tgt_domain = s["TargetDomainName"] or (s["SubjectDomainName"] if swap else None)
    tgt_sid = _coalesce(s["TargetUserSid"], j.get("TargetSid") if j is not None else None,
                        s["SubjectUserSid"] if swap else None)
    tgt_logon = s["TargetLogonId"] or (s["SubjectLogonId"] if swap else None)
    tgt_short, tgt_realm = _split_account(tgt_name)
    is_target = kind.user == "target" if kind is not None else (subj_name is None and tgt_name is not None)
    is_group = code in _GROUP_EVENTS
    is_account = code in _ACCOUNT_EVENTS
    is_4688 = code == "4688"
    is_4648 = code == "4648"

    outcome = kind.outcome if kind is not None else None
    status = s["Status"]
    keyword = (_first_key(j, _KEYWORD_KEYS) or "").lower()
    if outcome is None and code in _STATUS_OUTCOME and status is not None:
        outcome = "success" if status.lower() in ("0x0", "0") else "failure"
    if outcome is None and "audit failure" in keyword:
        outcome = "failure"
    if outcome is None and "audit success" in keyword:
        outcome = "success"
    ip = s["IpAddress"]
    if ip is not None:
        ip = _MAPPED_IPV4.sub("", ip, count=1) if ip.startswith("::ffff:") else ip
    executable = s["NewProcessName"] if is_4688 else s["ProcessName"]
    member = s["MemberName"]
    member_cn = None
    if member is not None:
        m = _MEMBER_CN.match(member)
        member_cn = m.group(1) if m else member
    winlog_user = _blank(j.get("user")) if j is not None and j.get("user") != "N\\A" else None
    wl_user_name, wl_user_domain = _split_account(winlog_user)
    level = _first_key(j, ("level", "Severity"))
    task = _first_key(j, ("catname",))
    task = None if task == "0" else task
    logon_type = s["LogonType"]

    detail: dict[str, Any] = {
        "log.level": level.lower() if level is not None else None,
        "winlog.event_id": code,
        "winlog.channel": channel,
        "winlog.provider_name": provider,
        "winlog.computer_name": _first_key(j, _COMPUTER_KEYS) or env.hostname,
        "winlog.task": task,
        "winlog.keywords": [_first_key(j, ("keyword", "Keywords"))] if keyword else None,
        "winlog.user.name": wl_user_name,
        "winlog.user.domain": wl_user_domain,
        "winlog.user.identifier": _first_key(j, ("user_sid",)),
        "winlog.logon.type": LOGON_TYPES.get(logon_type, logon_type) if logon_type is not None else None,
        "winlog.logon.id": tgt_logon if is_target else (subj_logon or tgt_logon),
        "user.target.domain": (tgt_domain or tgt_realm) if is_account else None,
        "user.target.id": tgt_sid if is_account else (s["MemberSid"] if is_group else None),
        "user.effective.domain": tgt_domain if is_4648 else None,
        "group.domain": tgt_domain if is_group else None,
        "group.id": tgt_sid if is_group else None,
        "service.name": s["param1"] or s["ServiceName"],
        "service.state": s["param2"] if code == "7036" else None,
    }
    _event_data(detail, j, s, swap)
    return {
        "event.kind": "event",
        "event.module": "windows",
        "event.dataset": DATASETS.get(channel, DATASET_OTHER) if channel is not None else DATASET_OTHER,
        "event.code": code,
        "event.provider": provider,
        "event.category": list(kind.category) if kind is not None else None,
        "event.type": list(kind.type) if kind is not None else None,
        "event.action": kind.action if kind is not None else task,
        "event.outcome": outcome,
        "message": _first_key(j, _MESSAGE_KEYS),
        "user.name": tgt_short if is_target else subj_name,
        "user.domain": (tgt_domain or tgt_realm) if is_target else subj_domain,
        "user.id": tgt_sid if is_target else subj_sid,
        "user.target.name": tgt_short if is_account else (member_cn if is_group else None),
        "user.effective.name": tgt_short if is_4648 else None,
        "group.name": tgt_name if is_group else None,
        "source.address": ip or None,
        "source.port": whole_number(s["IpPort"]),
        "source.domain": s["WorkstationName"] or s["Workstation"],
        "process.pid": _hex_or_int(s["NewProcessId"] if is_4688 else s["ProcessId"]),
        "process.executable": executable,
        "process.name": _basename(executable),
        "process.command_line": s["CommandLine"],
        "process.parent.pid": _hex_or_int(s["ProcessId"]) if is_4688 else None,
        "process.parent.executable": s["ParentProcessName"] if is_4688 else None,
        "process.parent.name": _basename(s["ParentProcessName"]) if is_4688 else None,
        "detail": detail,
    }


def _event_data(detail: dict[str, Any], j: dict[str, str | None] | None, s: dict[str, str | None],
                swap: bool) -> None:
    """Every EventData value under its Windows name: the JSON's non-envelope keys, or the slots read from the
    text (4634/4647 render their Target* data under "Subject:")."""
    if j is not None:
        detail.update((k, v) for k, v in j.items() if k not in ENVELOPE_KEYS)
        return
    for name, value in s.items():
        if value is not None:
            detail["Target" + name[len("Subject"):] if swap and name.startswith("Subject") else name] = value


SOURCE = Source(title="Windows event logs forwarded over syslog (EvntSLog, NXLog, Snare): rendered text or JSON",
                transport="syslog", parse=parse, programs=None, layer="event")
