"""Windows event-log records delivered as JSON, one object per record -> events of module ``windows``.

Three shapes, all read into one form (event id, channel, provider, computer, times, envelope, event data):

* **flat** (NXLog ``im_msvistalog``, Sentinel/WEF exports, the OTRF recordings): ``EventID``, ``Channel``,
  ``SourceName``/``ProviderName``, ``Hostname``, ``TimeCreated``/``EventTime``/``@timestamp`` and the event's own
  data fields at the top level beside the envelope (:data:`FLAT_ENVELOPE`);
* **evtx** (what ``evtx`` converters print, :mod:`ingest.sources.windows.evtx_files`):
  ``{"Event": {"System": {...}, "EventData": {...}}}`` (or ``UserData`` with one child element);
* **Winlogbeat 6** (``event_id``, ``log_name``, ``source_name``, ``computer_name``, ``event_data: {...}``).

Mapping in the style of Elastic's Windows (Sysmon, PowerShell) and System (Security) integrations: ``event.code``
is the id as text, ``event.dataset`` comes from the channel (:func:`dataset_of`), ``event.category/type/action``
from the id's row of :data:`SYSMON`, :data:`SECURITY` or :data:`POWERSHELL`, and ``user``/``process``/``source``/
``destination``/``file``/``dns`` from the event data per id. ``detail`` keeps every event-data field under its
Windows name as written (what Sigma rules name: ``GrantedAccess``, ``TargetObject``, ``LogonType``, ...; ``-`` too,
which the core columns read as "no value"), plus the envelope as ``winlog.*`` keys.

``@timestamp`` is the record's own time: evtx ``SystemTime``, else ``TimeCreated`` (ISO 8601; without a zone it
is UTC), else NXLog's ``EventTime`` (local time without zone: shifted by the offset between NXLog's
``EventReceivedTime`` and Logstash's ``@timestamp``, rounded to 15 minutes; read as UTC and tagged
:data:`TAG_LOCAL_TIME` when those are missing), else ``@timestamp``, else Sysmon's ``UtcTime``. Sysmon's
``UtcTime`` comes last although Elastic prefers it: for network connections and DNS queries it is when the
connection or query began, up to a day before the record (the OTRF corpus), which a streaming watermark drops,
and the record time lines Sysmon events up with the other channels of the same host.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ingest.sources import Event, ParseFailure, Source
from ingest.sources.values import day_micros, ip_or_none, safe_micros

PARSER = "windows"
TAG_LOCAL_TIME = "windows_time_local_as_utc"
SYSMON_CHANNEL = "Microsoft-Windows-Sysmon/Operational"
# Channel -> event.dataset (Elastic's names); any other channel: windows.<channel without "Microsoft-Windows-",
# lower-cased, runs of other characters as "_">; no channel: from the provider, else windows.forwarded.
DATASETS = {
    SYSMON_CHANNEL.lower(): "windows.sysmon_operational",
    "security": "windows.security",
    "microsoft-windows-powershell/operational": "windows.powershell_operational",
    "windows powershell": "windows.powershell",
    "system": "windows.system",
    "application": "windows.application",
    "forwardedevents": "windows.forwarded",
}
PROVIDER_DATASETS = {
    "microsoft-windows-sysmon": "windows.sysmon_operational",
    "microsoft-windows-security-auditing": "windows.security",
    "microsoft-windows-powershell": "windows.powershell_operational",
    "powershell": "windows.powershell",
}
DATASET_OTHER = "windows.forwarded"
_NON_ALNUM = re.compile(r"[^a-z0-9]+")

# (event.category, event.type, event.action[, event.outcome]) per id. Sysmon: Elastic's sysmon_operational table.
SYSMON: dict[str, tuple[Any, ...]] = {
    "1": (("process",), ("start",), "Process creation"),
    "2": (("file",), ("change",), "A process changed a file creation time"),
    "3": (("network",), ("start", "connection", "protocol"), "Network connection"),
    "4": (("process",), ("change",), "Sysmon service state changed"),
    "5": (("process",), ("end",), "Process terminated"),
    "6": (("driver",), ("start",), "Driver loaded"),
    "7": (("process",), ("change",), "Image loaded"),
    "8": (("process",), ("change",), "CreateRemoteThread"),
    "9": (("process",), ("access",), "RawAccessRead"),
    "10": (("process",), ("access",), "ProcessAccess"),
    "11": (("file",), ("creation",), "FileCreate"),
    "12": (("configuration", "registry"), ("change",), "RegistryEvent (Object create and delete)"),
    "13": (("configuration", "registry"), ("change",), "RegistryEvent (Value Set)"),
    "14": (("configuration", "registry"), ("change",), "RegistryEvent (Key and Value Rename)"),
    "15": (("file",), ("access",), "FileCreateStreamHash"),
    "16": (("configuration",), ("change",), "ServiceConfigurationChange"),
    "17": (("file",), ("creation",), "PipeEvent (Pipe Created)"),
    "18": (("file",), ("access",), "PipeEvent (Pipe Connected)"),
    "19": (("process",), ("info",), "WmiEvent (WmiEventFilter activity detected)"),
    "20": (("process",), ("change",), "WmiEvent (WmiEventConsumer activity detected)"),
    "21": (("process",), ("access",), "WmiEvent (WmiEventConsumerToFilter activity detected)"),
    "22": (("network",), ("connection", "protocol", "info"), "DNSEvent (DNS query)"),
    "23": (("file",), ("deletion",), "FileDelete (File Delete archived)"),
    "24": ((), ("change",), "ClipboardChange (New content in the clipboard)"),
    "25": (("process",), ("change",), "ProcessTampering (Process image change)"),
    "26": (("file",), ("deletion",), "FileDeleteDetected (File Delete logged)"),
    "27": (("file",), ("creation",), "FileBlockExecutable", "failure"),
    "28": (("file",), ("deletion",), "FileBlockShredding"),
    "29": (("file",), ("creation",), "FileExecutableDetected"),
    "255": (("process",), (), "Error", "failure"),
}
_AUTH, _IAM = ("authentication",), ("iam",)
# Security: the actions of Elastic's security module (as the syslog Windows source maps them). Outcome None: from
# the status code (Kerberos, NTLM) or the audit keyword.
SECURITY: dict[str, tuple[Any, ...]] = {
    "4624": (_AUTH, ("start",), "logged-in", "success"),
    "4625": (_AUTH, ("start",), "logon-failed", "failure"),
    "4634": (_AUTH, ("end",), "logged-out", "success"),
    "4647": (_AUTH, ("end",), "logged-out", "success"),
    "4648": (_AUTH, ("start",), "logged-in-explicit", "success"),
    "4672": (_IAM, ("admin",), "logged-in-special", "success"),
    "4688": (("process",), ("start",), "created-process", "success"),
    "4689": (("process",), ("end",), "exited-process", "success"),
    "4698": (_IAM, ("creation",), "scheduled-task-created", "success"),
    "4720": (_IAM, ("user", "creation"), "added-user-account", "success"),
    "4722": (_IAM, ("user", "change"), "enabled-user-account", "success"),
    "4723": (_IAM, ("user", "change"), "changed-password", None),
    "4724": (_IAM, ("user", "change"), "reset-password", None),
    "4725": (_IAM, ("user", "change"), "disabled-user-account", "success"),
    "4726": (_IAM, ("user", "deletion"), "deleted-user-account", "success"),
    "4728": (_IAM, ("group", "change"), "added-member-to-group", "success"),
    "4729": (_IAM, ("group", "change"), "removed-member-from-group", "success"),
    "4732": (_IAM, ("group", "change"), "added-member-to-group", "success"),
    "4733": (_IAM, ("group", "change"), "removed-member-from-group", "success"),
    "4738": (_IAM, ("user", "change"), "modified-user-account", "success"),
    "4740": (_IAM, ("user", "change"), "locked-out-user-account", "success"),
    "4756": (_IAM, ("group", "change"), "added-member-to-group", "success"),
    "4768": (_AUTH, ("start",), "kerberos-authentication-ticket-requested", None),
    "4769": (_AUTH, ("start",), "kerberos-service-ticket-requested", None),
    "4770": (_AUTH, ("start",), "kerberos-service-ticket-renewed", None),
    "4771": (_AUTH, ("start",), "kerberos-preauth-failed", "failure"),
    "4776": (_AUTH, ("start",), "credential-validated", None),
    "4778": (("authentication", "session"), ("start",), "session-reconnected", "success"),
    "4779": (("authentication", "session"), ("end",), "session-disconnected", "success"),
    "5140": (("network", "file"), ("connection", "access", "info"), "network-share-object-accessed", None),
    "5145": (("network", "file"), ("connection", "access", "info"), "network-share-object-access-checked", None),
    "1102": (_IAM, ("admin", "change"), "audit-log-cleared", "success"),
}
# PowerShell (both channels): category process; the Windows task names as the action.
POWERSHELL: dict[str, tuple[Any, ...]] = {
    "4103": (("process",), ("info",), "Executing Pipeline"),
    "4104": (("process",), ("info",), "Execute a Remote Command"),
    "4105": (("process",), ("start",), "Starting Command"),
    "4106": (("process",), ("end",), "Stopping Command"),
    "400": (("process",), ("start",), "Engine Lifecycle"),
    "403": (("process",), ("end",), "Engine Lifecycle"),
    "600": (("process",), ("info",), "Provider Lifecycle"),
    "800": (("process",), ("info",), "Pipeline Execution Details"),
}
_TABLES = {"windows.sysmon_operational": SYSMON, "windows.security": SECURITY,
           "windows.powershell_operational": POWERSHELL, "windows.powershell": POWERSHELL}
# Whose account user.* names: the target for logons, logoffs and credential validation; else the subject.
_TARGET_IS_USER = frozenset(("4624", "4625", "4634", "4647", "4768", "4769", "4770", "4771", "4776", "4778",
                             "4779"))
_ACCOUNT_EVENTS = frozenset(("4720", "4722", "4723", "4724", "4725", "4726", "4738", "4740"))
_GROUP_EVENTS = frozenset(("4728", "4729", "4732", "4733", "4756"))
_STATUS_OUTCOME = frozenset(("4768", "4769", "4770", "4776"))
_AUDIT_SUCCESS, _AUDIT_FAILURE = 0x0020000000000000, 0x0010000000000000
LOGON_TYPES = {"0": "System", "2": "Interactive", "3": "Network", "4": "Batch", "5": "Service", "7": "Unlock",
               "8": "NetworkCleartext", "9": "NewCredentials", "10": "RemoteInteractive", "11": "CachedInteractive",
               "12": "CachedRemoteInteractive", "13": "CachedUnlock"}

# Flat records: top-level keys that describe the record (NXLog, Logstash, exports), not the event. Mapped ones
# become winlog.* detail keys (:data:`_FLAT_WINLOG`); the rest of this set is the shipper's bookkeeping, dropped.
FLAT_ENVELOPE = frozenset((
    "EventID", "Channel", "SourceName", "ProviderName", "ProviderGuid", "Hostname", "Computer", "TimeCreated",
    "EventTime", "EventReceivedTime", "@timestamp", "@version", "@metadata", "Message", "Keywords", "SeverityValue",
    "Severity", "Level", "Version", "Task", "Opcode", "OpcodeValue", "Category", "RecordNumber", "EventRecordID",
    "SourceModuleName", "SourceModuleType", "Domain", "AccountName", "UserID", "AccountType", "ExecutionProcessID",
    "ExecutionThreadID", "ThreadID", "ActivityID", "RelatedActivityID", "host", "port", "tags", "UserData",
    "EventTypeOrignal", "ERROR_EVT_UNRESOLVED",
))
_FLAT_WINLOG = (
    ("ProviderGuid", "winlog.provider_guid"), ("RecordNumber", "winlog.record_id"),
    ("EventRecordID", "winlog.record_id"), ("Version", "winlog.version"), ("Opcode", "winlog.opcode"),
    ("Keywords", "winlog.keywords"), ("Level", "winlog.level"), ("ActivityID", "winlog.activity_id"),
    ("RelatedActivityID", "winlog.related_activity_id"), ("ExecutionProcessID", "winlog.process.pid"),
    ("ExecutionThreadID", "winlog.process.thread.id"), ("ThreadID", "winlog.process.thread.id"),
    ("UserID", "winlog.user.identifier"), ("AccountName", "winlog.user.name"), ("Domain", "winlog.user.domain"),
    ("AccountType", "winlog.user.type"),
)
# NXLog's EventType is its own (AUDIT_SUCCESS, INFO, ...), but Sysmon registry events have an EventType field too.
_NXLOG_EVENT_TYPES = frozenset(("AUDIT_SUCCESS", "AUDIT_FAILURE", "INFO", "WARNING", "ERROR", "CRITICAL", "VERBOSE",
                                "DEBUG"))
_WLB6_ENVELOPE = frozenset(("event_id", "log_name", "source_name", "computer_name", "record_number", "@timestamp",
                            "message", "level", "task", "opcode", "keywords", "user", "process_id", "thread_id",
                            "provider_guid", "version", "beat", "host", "type", "@metadata", "event_data",
                            "user_data", "activity_id", "tags", "@version"))
_ISO = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
                  r"(Z|[+-][0-9]{2}:?[0-9]{2})?")
_QUARTER_HOUR_US = 900_000_000
_DN_COMMA = re.compile(r"(?<!\\),")  # the end of a DN's first RDN (an escaped comma is part of it)


def detect(obj: Mapping[str, Any]) -> bool:
    """A Windows event record: the evtx shape, flat keys with ``EventID`` and a channel or provider, or Winlogbeat
    6's ``event_id`` with ``log_name``/``source_name``. Zeek records (``_path``) are never Windows."""
    if "_path" in obj:
        return False
    if "Event" in obj:
        event = obj["Event"]
        return isinstance(event, dict) and "System" in event
    if "EventID" in obj:
        return "Channel" in obj or "SourceName" in obj or "ProviderName" in obj
    return "event_id" in obj and ("log_name" in obj or "source_name" in obj)


def _attr(node: Any, name: str) -> Any:
    """evtx: ``node["#attributes"][name]`` (None when absent)."""
    if isinstance(node, dict):
        attrs = node.get("#attributes")
        if isinstance(attrs, dict):
            return attrs.get(name)
    return None


def _value(value: Any) -> str | None:
    """A core value from event data: text, or None for absent, empty and ``-``."""
    if isinstance(value, str):
        return value if value and value != "-" else None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None  # null, and values that are no text (a list or object where Windows writes text)


def _basename(path: str | None) -> str | None:
    if not path:
        return None
    cut = max(path.rfind("\\"), path.rfind("/"))
    return path[cut + 1:] or None


def _pid(value: Any) -> int | None:
    """``0x1f4`` (Security) or ``500`` (Sysmon) -> 500; None for 0 (no process), ``-`` and garbage."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 < value < (1 << 63) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        number = int(text[2:], 16) if text[:2] in ("0x", "0X") else int(text)
    except ValueError:
        return None
    return number if 0 < number < (1 << 63) else None


def _port(value: Any) -> int | None:
    text = _value(value)
    return int(text) if text is not None and text.isdigit() and int(text) < 65536 else None


def _account(text: str | None) -> tuple[str | None, str | None]:
    """``DOMAIN\\name`` / ``name@REALM`` / ``name`` -> (name, domain)."""
    if text is None:
        return None, None
    if "\\" in text:
        domain, _, name = text.partition("\\")
        return name or None, domain or None
    if "@" in text and text.count("@") == 1:
        name, _, realm = text.partition("@")
        return name or None, realm or None
    return text, None


def _iso_micros(text: str) -> int | None:
    """Epoch microseconds of ``2020-10-18 02:17:12.527`` / ``2023-07-19T09:03:40.710Z`` / ``…+02:00`` (no zone:
    UTC); None when unreadable."""
    m = _ISO.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = m.groups()
    midnight = day_micros(int(year), int(month), int(day))
    if midnight is None or int(hour) > 23 or int(minute) > 59 or int(second) > 60:
        return None
    us = midnight + ((int(hour) * 60 + int(minute)) * 60 + int(second)) * 1_000_000
    if fraction:
        us += int(fraction[:6].ljust(6, "0"))
    if zone and zone != "Z":
        digits = zone[1:].replace(":", "")
        us -= (int(digits[:2]) * 60 + int(digits[2:])) * 60_000_000 * (1 if zone[0] == "+" else -1)
    return safe_micros(us)


def _time(name: str, value: Any) -> int:
    if not isinstance(value, str) or (us := _iso_micros(value)) is None:
        raise ParseFailure(PARSER, f"unreadable time {value!r} in {name}")
    return us


def dataset_of(channel: str | None, provider: str | None) -> str:
    """``event.dataset`` of a channel (Elastic's names for the common ones), or of the provider without one."""
    if channel:
        key = channel.lower()
        found = DATASETS.get(key)
        if found is None:
            short = key.removeprefix("microsoft-windows-")
            found = "windows." + (_NON_ALNUM.sub("_", short).strip("_") or "forwarded")
        return found
    if provider:
        return PROVIDER_DATASETS.get(provider.lower(), DATASET_OTHER)
    return DATASET_OTHER


class _Record:
    """One record in the common form: what the shapes give, before the mapping."""

    __slots__ = ("event_id", "channel", "provider", "computer", "timestamp", "tags", "message", "data", "winlog")

    def __init__(self, event_id: Any = None, channel: Any = None, provider: Any = None, computer: Any = None,
                 message: Any = None) -> None:
        self.event_id = event_id
        self.channel: str | None = channel if isinstance(channel, str) and channel else None
        self.provider: str | None = provider if isinstance(provider, str) and provider else None
        self.computer: str | None = computer if isinstance(computer, str) and computer else None
        self.message: str | None = message if isinstance(message, str) and message else None
        self.timestamp: int | None = None
        self.tags: list[str] | None = None
        self.data: dict[str, Any] = {}
        self.winlog: dict[str, Any] = {}


def _from_evtx(event: dict[str, Any]) -> _Record:
    system = event.get("System")
    if not isinstance(system, dict):
        raise ParseFailure(PARSER, "evtx record without a System element")
    event_id = system.get("EventID")
    qualifiers = None
    if isinstance(event_id, dict):  # <EventID Qualifiers="16384">7036</EventID>
        qualifiers, event_id = _attr(event_id, "Qualifiers"), event_id.get("#text")
    rec = _Record(event_id, system.get("Channel"), _attr(system.get("Provider"), "Name"), system.get("Computer"))
    rec.winlog["winlog.event_id_qualifiers"] = qualifiers
    data = event.get("EventData")
    if data is None and isinstance(event.get("UserData"), dict):
        user_data = event["UserData"]
        for name, child in user_data.items():  # one element: <LogFileCleared xmlns=...>fields</…>
            if name != "#attributes" and isinstance(child, dict):
                rec.winlog["winlog.user_data.xml_name"] = name
                data = child
                break
    if isinstance(data, dict):
        rec.data = {k: v for k, v in data.items() if k != "#attributes"}
        unnamed = rec.data.get("Data")
        if isinstance(unnamed, dict) and "#text" in unnamed:  # <Data>a</Data><Data>b</Data> without names
            rec.data["Data"] = unnamed["#text"]
    elif data is not None:
        rec.data = {"Data": data}
    winlog = rec.winlog
    winlog["winlog.provider_guid"] = _attr(system.get("Provider"), "Guid")
    winlog["winlog.record_id"] = system.get("EventRecordID")
    winlog["winlog.version"] = system.get("Version")
    winlog["winlog.level"] = system.get("Level")
    winlog["winlog.task"] = system.get("Task")
    winlog["winlog.opcode"] = system.get("Opcode")
    winlog["winlog.keywords"] = system.get("Keywords")
    execution = system.get("Execution")
    winlog["winlog.process.pid"] = _attr(execution, "ProcessID")
    winlog["winlog.process.thread.id"] = _attr(execution, "ThreadID")
    winlog["winlog.user.identifier"] = _attr(system.get("Security"), "UserID")
    winlog["winlog.activity_id"] = _attr(system.get("Correlation"), "ActivityID")
    created = _attr(system.get("TimeCreated"), "SystemTime")
    if created is not None:
        winlog["winlog.time_created"] = created
        rec.timestamp = _time("TimeCreated/SystemTime", created)
    return rec


def _from_flat(obj: dict[str, Any]) -> _Record:
    rec = _Record(obj.get("EventID"), obj.get("Channel"), obj.get("SourceName") or obj.get("ProviderName"),
                  obj.get("Hostname") or obj.get("Computer"), obj.get("Message"))
    envelope = FLAT_ENVELOPE
    data = {}
    for key, value in obj.items():
        if key not in envelope and value is not None:
            data[key] = value
    event_type = data.get("EventType")
    if isinstance(event_type, str) and event_type in _NXLOG_EVENT_TYPES:
        rec.winlog["winlog.event_type"] = data.pop("EventType")
    rec.data = data
    winlog = rec.winlog
    get = obj.get
    for key, name in _FLAT_WINLOG:
        value = get(key)
        if value is not None:
            winlog[name] = value
    winlog["winlog.task"] = get("Category") or get("Task")
    if get("Severity") is not None:
        winlog["log.level"] = str(get("Severity")).lower()
    if (created := get("TimeCreated")) is not None:
        winlog["winlog.time_created"] = created
        rec.timestamp = _time("TimeCreated", created)
    elif (local := get("EventTime")) is not None:
        winlog["winlog.event_time"] = local
        us = _time("EventTime", local)
        received, arrived = get("EventReceivedTime"), get("@timestamp")
        if isinstance(received, str) and isinstance(arrived, str):
            received_us, arrived_us = _iso_micros(received), _iso_micros(arrived)
            if received_us is not None and arrived_us is not None:
                rec.timestamp = us + round((arrived_us - received_us) / _QUARTER_HOUR_US) * _QUARTER_HOUR_US
        if rec.timestamp is None:
            rec.timestamp, rec.tags = us, [TAG_LOCAL_TIME]
    elif (stamp := get("@timestamp")) is not None:
        rec.timestamp = _time("@timestamp", stamp)
    return rec


def _from_winlogbeat6(obj: dict[str, Any]) -> _Record:
    rec = _Record(obj.get("event_id"), obj.get("log_name"), obj.get("source_name"), obj.get("computer_name"),
                  obj.get("message"))
    data: dict[str, Any] = {}
    for key in ("event_data", "user_data"):
        if isinstance(obj.get(key), dict):
            data.update(obj[key])
    for key, value in obj.items():
        if key not in _WLB6_ENVELOPE and value is not None:
            data[key] = value
    rec.data = data
    winlog = rec.winlog
    get = obj.get
    winlog["winlog.record_id"] = get("record_number")
    winlog["winlog.provider_guid"] = get("provider_guid")
    winlog["winlog.version"] = get("version")
    winlog["winlog.task"] = get("task")
    winlog["winlog.opcode"] = get("opcode")
    winlog["winlog.keywords"] = get("keywords")
    winlog["winlog.process.pid"] = get("process_id")
    winlog["winlog.process.thread.id"] = get("thread_id")
    winlog["winlog.activity_id"] = get("activity_id")
    if isinstance(get("level"), str):
        winlog["log.level"] = get("level").lower()
    user = get("user")
    if isinstance(user, dict):
        winlog["winlog.user.identifier"] = user.get("identifier")
        winlog["winlog.user.name"] = user.get("name")
        winlog["winlog.user.domain"] = user.get("domain")
        winlog["winlog.user.type"] = user.get("type")
    if (stamp := get("@timestamp")) is not None:
        rec.timestamp = _time("@timestamp", stamp)
    return rec


def _hashes(text: Any, detail: dict[str, Any]) -> None:
    """Sysmon's ``SHA256=…,MD5=…,IMPHASH=…`` -> detail ``hash.sha256``, ``hash.md5``, ``hash.imphash`` (lower-case;
    all-zero hashes left out, as Elastic does)."""
    if not isinstance(text, str):
        return
    for part in text.split(","):
        algo, sep, value = part.partition("=")
        if sep and value and value.strip("0"):
            detail["hash." + algo.strip().lower()] = value.strip().lower()


def _context_info(text: Any, detail: dict[str, Any]) -> None:
    """PowerShell 4103's ``ContextInfo`` (``Host Application = …`` lines) -> detail keys without the spaces
    (``HostApplication``, ``User``, ...), as Elastic's powershell_operational pipeline splits it."""
    if not isinstance(text, str):
        return
    for line in text.splitlines():
        key, sep, value = line.partition(" = ")
        value = value.strip()
        if sep and value:
            detail.setdefault(key.replace(" ", ""), value)


def _resolved_ips(text: Any) -> list[str] | None:
    """Sysmon 22's ``QueryResults`` (``type:  5 name;::ffff:10.0.0.1;``) -> its addresses."""
    if not isinstance(text, str):
        return None
    found = []
    for part in text.split(";"):
        part = part.strip()
        if part.startswith("::ffff:") and "." in part:
            part = part[7:]
        ip = ip_or_none(part)
        if ip is not None and ip not in found:
            found.append(ip)
    return found or None


def _map_sysmon(code: str, d: dict[str, Any], event: Event) -> None:
    source_side = code in ("8", "10")
    image = _value(d.get("SourceImage" if source_side else "Image"))
    event["process.executable"] = image
    event["process.name"] = _basename(image)
    event["process.pid"] = _pid(d.get("SourceProcessId" if source_side else "ProcessId"))
    event["process.command_line"] = _value(d.get("CommandLine"))
    parent = _value(d.get("ParentImage"))
    event["process.parent.executable"] = parent
    event["process.parent.name"] = _basename(parent)
    event["process.parent.pid"] = _pid(d.get("ParentProcessId"))
    event["process.parent.command_line"] = _value(d.get("ParentCommandLine"))
    name, domain = _account(_value(d.get("SourceUser" if source_side else "User")))
    event["user.name"], event["user.domain"] = name, domain
    if code == "3":
        event["source.address"] = _value(d.get("SourceIp"))
        event["source.port"] = _port(d.get("SourcePort"))
        event["source.domain"] = _value(d.get("SourceHostname"))
        event["destination.address"] = _value(d.get("DestinationIp"))
        event["destination.port"] = _port(d.get("DestinationPort"))
        event["destination.domain"] = _value(d.get("DestinationHostname"))
        transport = _value(d.get("Protocol"))
        event["network.transport"] = transport.lower() if transport else None
    elif code == "22":
        event["dns.question.name"] = _value(d.get("QueryName"))
        event["dns.resolved_ip"] = _resolved_ips(d.get("QueryResults"))
    elif code in ("11", "23", "26", "2", "15", "29", "27", "28"):
        path = _value(d.get("TargetFilename"))
        event["file.path"], event["file.name"] = path, _basename(path)
    elif code in ("7", "6"):
        path = _value(d.get("ImageLoaded"))
        event["file.path"], event["file.name"] = path, _basename(path)


def _set_detail(event: Event, key: str, value: Any) -> None:
    """A derived detail key (the event's own fields stay under their Windows names), set only when known."""
    if value is not None:
        event["detail"][key] = value


def _map_security(code: str, d: dict[str, Any], event: Event, related: list[str]) -> None:
    subject = _value(d.get("SubjectUserName"))
    target = _value(d.get("TargetUserName"))
    if code in _TARGET_IS_USER or (subject is None and target is not None and code not in _GROUP_EVENTS):
        name, realm = _account(target)
        event["user.name"] = name
        event["user.domain"] = _value(d.get("TargetDomainName")) or realm
        event["user.id"] = _value(d.get("TargetUserSid")) or _value(d.get("TargetSid"))
    else:
        event["user.name"] = subject
        event["user.domain"] = _value(d.get("SubjectDomainName"))
        event["user.id"] = _value(d.get("SubjectUserSid"))
        # The account acted on, also by SID: a creation names it by account name and the group change by its DN,
        # so rules correlating the two (windows_new_admin_account) match on user.target.id, as the syslog form does.
        if code in _ACCOUNT_EVENTS:
            event["user.target.name"] = _account(target)[0]
            _set_detail(event, "user.target.id", _value(d.get("TargetSid")) or _value(d.get("TargetUserSid")))
        elif code in _GROUP_EVENTS:
            event["group.name"] = target
            member = _value(d.get("MemberName"))
            if member is not None and member.startswith("CN="):
                member = _DN_COMMA.split(member[3:], maxsplit=1)[0].replace("\\,", ",")
            event["user.target.name"] = member
            _set_detail(event, "user.target.id", _value(d.get("MemberSid")))
            related.extend(x for x in (subject, member) if x is not None)
            return _map_logon_fields(code, d, event)
        elif code == "4648":
            event["user.effective.name"] = _account(target)[0]
    related.extend(x for x in (subject, _account(target)[0]) if x is not None)
    _map_logon_fields(code, d, event)


def _map_logon_fields(code: str, d: dict[str, Any], event: Event) -> None:
    """The client (IpAddress, IpPort, WorkstationName) and process fields of a Security event."""
    ip = _value(d.get("IpAddress"))
    if ip is not None and ip.startswith("::ffff:") and "." in ip:
        ip = ip[7:]
    event["source.address"] = ip
    event["source.port"] = _port(d.get("IpPort"))
    event["source.domain"] = _value(d.get("WorkstationName")) or _value(d.get("Workstation"))
    if code == "4688":
        executable = _value(d.get("NewProcessName"))
        event["process.pid"] = _pid(d.get("NewProcessId"))
        event["process.command_line"] = _value(d.get("CommandLine"))
        event["process.parent.pid"] = _pid(d.get("ProcessId"))
        parent = _value(d.get("ParentProcessName"))
        event["process.parent.executable"], event["process.parent.name"] = parent, _basename(parent)
    else:
        executable = _value(d.get("ProcessName"))
        event["process.pid"] = _pid(d.get("ProcessId"))
    event["process.executable"], event["process.name"] = executable, _basename(executable)


def _map_powershell(code: str, d: dict[str, Any], event: Event, detail: dict[str, Any]) -> None:
    if code == "4103":
        _context_info(d.get("ContextInfo"), detail)
    host_application = _value(detail.get("HostApplication"))
    event["process.command_line"] = host_application
    name, domain = _account(_value(detail.get("User")))
    event["user.name"], event["user.domain"] = name, domain
    path = _value(d.get("Path")) or _value(detail.get("ScriptName"))
    event["file.path"], event["file.name"] = path, _basename(path)


def _outcome(code: str, table_outcome: str | None, d: dict[str, Any], winlog: dict[str, Any]) -> str | None:
    if table_outcome is not None:
        return table_outcome
    if code in _STATUS_OUTCOME and (status := _value(d.get("Status"))) is not None:
        return "success" if status.lower() in ("0x0", "0") else "failure"
    event_type = winlog.get("winlog.event_type")
    if event_type == "AUDIT_SUCCESS":
        return "success"
    if event_type == "AUDIT_FAILURE":
        return "failure"
    keywords = winlog.get("winlog.keywords")
    if isinstance(keywords, str) and keywords[:2] in ("0x", "0X"):
        try:
            keywords = int(keywords, 16)
        except ValueError:
            return None
    if isinstance(keywords, int) and not isinstance(keywords, bool):
        if keywords & _AUDIT_SUCCESS:
            return "success"
        if keywords & _AUDIT_FAILURE:
            return "failure"
    return None


def parse(obj: Any, line: str) -> Event:
    """One Windows event record (any of the three shapes) -> an event; :class:`ParseFailure` for a record without
    an event id or a readable time."""
    if not isinstance(obj, dict):
        raise ParseFailure(PARSER, "not a JSON object")
    if "Event" in obj:
        if not isinstance(obj["Event"], dict):
            raise ParseFailure(PARSER, "evtx record: Event is not an object")
        rec = _from_evtx(obj["Event"])
    elif "EventID" in obj:
        rec = _from_flat(obj)
    else:
        rec = _from_winlogbeat6(obj)
    event_id = rec.event_id
    if event_id is None or event_id == "":
        raise ParseFailure(PARSER, "no EventID")
    if isinstance(event_id, bool) or not (isinstance(event_id, int) or str(event_id).strip().isdigit()):
        raise ParseFailure(PARSER, f"EventID {event_id!r} is not a number")
    code = str(int(event_id))
    d = rec.data
    if rec.timestamp is None:
        utc = d.get("UtcTime")
        if utc is None:
            raise ParseFailure(PARSER, "no time: none of TimeCreated, EventTime, @timestamp, UtcTime")
        rec.timestamp = _time("UtcTime", utc)
    channel, provider, computer = rec.channel, rec.provider, rec.computer
    dataset = dataset_of(channel, provider)
    detail: dict[str, Any] = dict(d)
    winlog = rec.winlog
    detail.update(winlog)
    detail["winlog.event_id"] = code
    detail["winlog.channel"] = channel
    detail["winlog.provider_name"] = provider
    detail["winlog.computer_name"] = computer
    event: Event = {
        "@timestamp": rec.timestamp,
        "message": rec.message,
        "tags": rec.tags,
        "event.kind": "event",
        "event.module": "windows",
        "event.dataset": dataset,
        "event.provider": provider,
        "event.code": code,
        "host.name": computer.lower() if computer else None,
        "host.hostname": computer,
        "detail": detail,
    }
    row = _TABLES.get(dataset, {}).get(code)
    related: list[str] = []
    if dataset == "windows.sysmon_operational":
        _map_sysmon(code, d, event)
        if "Hashes" in d or "Hash" in d:
            _hashes(d.get("Hashes") or d.get("Hash"), detail)
    elif dataset == "windows.security" or "SubjectUserName" in d or "TargetUserName" in d:
        _map_security(code, d, event, related)
        logon_type = _value(d.get("LogonType"))
        if logon_type is not None:
            detail["winlog.logon.type"] = LOGON_TYPES.get(logon_type, logon_type)
    elif dataset in ("windows.powershell_operational", "windows.powershell"):
        _map_powershell(code, d, event, detail)
        event["user.id"] = _value(winlog.get("winlog.user.identifier"))
    if row is not None:
        event["event.category"] = list(row[0]) or None
        event["event.type"] = list(row[1]) or None
        event["event.action"] = row[2]
        table_outcome = row[3] if len(row) > 3 else None
    else:
        table_outcome = None
        task = winlog.get("winlog.task")
        event["event.action"] = task if isinstance(task, str) and not task.isdigit() else None
    event["event.outcome"] = _outcome(code, table_outcome, d, winlog)
    if related:
        event["related.user"] = related
    return event


SOURCE = Source(title="Windows event-log records as JSON (NXLog/Winlogbeat flat keys, evtx JSON)",
                transport="json", parse=parse, detect=detect, order=50)
