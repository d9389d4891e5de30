"""A Sigma rule's ``logsource`` (product / service / category) -> the datasets of the source registry it reads.

A Sigma rule says which log it is about (``product: linux, service: sshd``; ``product: zeek, service: dns``;
``product: windows, category: process_creation``). Nightjar's ``events`` holds every source's events, each tagged
with ``event.dataset`` (``system.auth``, ``zeek.dns``, ``windows.security``, see ``ingest/sources/`` and
docs/fields.md). Mapping the logsource to those datasets does two things:

* field names resolve per dataset (:func:`ingest.field_resolver.resolve`): ``query`` is Zeek's DNS query in
  ``zeek.dns``, a Windows event's ``TargetUserName`` a key of that event's own data;
* the rule only sees those events: the compiled predicate starts with ``event.dataset IN (...)``, so a Sysmon rule
  cannot match an sshd line that happens to carry a field of the same name; a Windows category also names the event
  ids (:class:`Scope`): ``process_creation`` is Sysmon's event 1 and Security's 4688, not every Sysmon event.

Windows uses pySigma's maintained maps rather than a table of Nightjar's own: a service is the channel(s)
``sigma.pipelines.common.windows_logsource_mapping`` names (what pysigma-pipeline-windows builds its logsource
pipeline from), a channel's dataset is the one the Windows source gives its events
(:func:`ingest.sources.windows.dataset_of`); a category is the Sysmon event ids of pysigma-pipeline-sysmon and the
channel + event id of pysigma-pipeline-windows (copied below, see :data:`SYSMON_CATEGORY_EVENT_IDS`). Linux and
Zeek keep Nightjar's own dataset table (pySigma has no pipeline for them).

A logsource that names nothing the registry parses (``product: linux, category: process_creation``: no auditd
source; ``product: macos``) is :class:`NotApplicable`: the rule is reported, not run over every event, where it
would match nothing or, worse, the wrong events. A rule whose logsource names only ``category: network`` (Nightjar's
own category, for rules on enrichment fields such as ``threat.indicator.*`` that any source's events carry) reads
every dataset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# pySigma's own map of Sigma's Windows services to event-log channels: the one pysigma-pipeline-windows builds its
# logsource pipeline from (``generate_windows_logsource_items``), maintained in pySigma itself.
from sigma.pipelines.common import windows_logsource_mapping

from ingest.sources import datasets as registry_datasets
from ingest.sources.windows import dataset_of

# Sigma's generic Windows categories -> Sysmon event ids: ``sysmon_generic_logsource_eventid_mapping`` of
# pysigma-pipeline-sysmon 2.0.0 (LGPL-2.1, https://github.com/SigmaHQ/pySigma-pipeline-sysmon), as its
# ``sysmon_pipeline`` adds ``EventID`` conditions for them. Copied, not imported: every release of that package
# requires pySigma < 2.0 and Nightjar runs pySigma 2.0.1 (tests/test_logsource_map.py compares the copy with the
# package when it is importable).
SYSMON_CATEGORY_EVENT_IDS: Mapping[str, int | list[int]] = {
    "process_creation": 1, "file_change": 2, "network_connection": 3, "sysmon_status": [4, 16],
    "process_termination": 5, "driver_load": 6, "image_load": 7, "create_remote_thread": 8,
    "raw_access_thread": 9, "process_access": 10, "file_event": 11, "registry_add": 12, "registry_delete": 12,
    "registry_set": 13, "registry_rename": 14, "registry_event": [12, 13, 14], "create_stream_hash": 15,
    "pipe_created": [17, 18], "wmi_event": [19, 20, 21], "dns_query": 22, "file_delete": 23,
    "clipboard_capture": 24, "process_tampering": 25, "file_delete_detected": 26, "file_block_executable": 27,
    "file_block_shredding": 28, "file_executable_detected": 29, "sysmon_error": 255,
}
# Sigma's generic Windows categories of other channels -> (service, event id): ``windows_generic_category_channel_
# mapping`` of pysigma-pipeline-windows 2.0.1 (LGPL-2.1, https://github.com/SigmaHQ/pySigma-pipeline-windows), plus
# process_creation -> Security 4688 from its ``windows_audit_pipeline`` (the process fields a 4688 carries resolve
# to the same ECS columns as Sysmon 1's, ingest/sources/windows). Its 4657 mapping of the registry categories is
# left out: it also renames fields (TargetObject -> ObjectName), which the resolver does not do per event id.
WINDOWS_CATEGORY_CHANNELS: Mapping[str, tuple[tuple[str, int], ...]] = {
    "ps_module": (("powershell", 4103),), "ps_script": (("powershell", 4104),),
    "ps_classic_start": (("powershell-classic", 400),), "ps_classic_provider_start": (("powershell-classic", 600),),
    "ps_classic_script": (("powershell-classic", 800),),
    "process_creation": (("security", 4688),),
}
SYSMON_SERVICE = "sysmon"

# product -> service -> datasets (exact names; a Zeek service is its log's _path, see _zeek).
_SERVICES: dict[str, dict[str, tuple[str, ...]]] = {
    "linux": {
        "auth": ("system.auth",), "sshd": ("system.auth",), "sudo": ("system.auth",), "pam": ("system.auth",),
        "su": ("system.auth",), "login": ("system.auth",), "useradd": ("system.auth",),
        "groupadd": ("system.auth",), "usermod": ("system.auth",), "passwd": ("system.auth",),
        "syslog": ("system.syslog",), "dhcpd": ("dhcpd",),
    },
}
# Product-less categories of network logs: Zeek's.
_NETWORK_CATEGORIES: dict[str, tuple[str, ...]] = {
    "dns": ("zeek.dns",), "proxy": ("zeek.http",), "webserver": ("zeek.http",), "firewall": ("zeek.conn",),
    "network_connection": ("zeek.conn",),
}
EVERY_DATASET_CATEGORIES = frozenset({"network"})


@dataclass(frozen=True)
class Scope:
    """The events a logsource reads: per dataset, the event codes it is limited to (None: every code).

    ``{product: windows, category: process_creation}`` is Sysmon's events with code 1 and Security's with 4688;
    ``{product: windows, service: security}`` is every event of channel Security."""

    codes: Mapping[str, tuple[str, ...] | None]

    @property
    def datasets(self) -> tuple[str, ...]:
        return tuple(sorted(self.codes))


def windows_service_datasets(service: str) -> tuple[str, ...]:
    """The datasets of the channels pySigma maps a Windows ``service`` to (``powershell`` -> the PowerShell and
    PowerShellCore operational channels), named as the Windows source names a channel's events."""
    channels = windows_logsource_mapping.get(service)
    if channels is None:
        return ()
    return tuple(dataset_of(c, None) for c in ([channels] if isinstance(channels, str) else channels))


def _windows(service: str | None, category: str | None, known: set[str]) -> dict[str, tuple[str, ...] | None]:
    if service is not None:
        return {d: None for d in windows_service_datasets(service)}
    if category is None:
        return {d: None for d in known if d.startswith("windows.")}
    out: dict[str, tuple[str, ...] | None] = {}
    ids = SYSMON_CATEGORY_EVENT_IDS.get(category)
    if ids is not None:
        for d in windows_service_datasets(SYSMON_SERVICE):
            out[d] = tuple(str(i) for i in (ids if isinstance(ids, list) else [ids]))
    for svc, event_id in WINDOWS_CATEGORY_CHANNELS.get(category, ()):
        for d in windows_service_datasets(svc):
            out[d] = (*(out.get(d) or ()), str(event_id))
    return out


NOT_APPLICABLE_PREFIX = "not applicable"  # how a NotApplicable's message (and the RuleError made of it) starts


class NotApplicable(ValueError):
    """A logsource no dataset of the registry serves: the rule cannot run on these events."""


def _lower(value: Any) -> str | None:
    return str(value).strip().lower() if value else None


def logsource_scope(logsource: Any, registry: Iterable[str] | None = None) -> Scope | None:
    """The events ``logsource`` (a pySigma ``SigmaLogSource`` or anything with ``product``/``service``/
    ``category``) reads: datasets and, for Windows categories, event codes; None for every event;
    :class:`NotApplicable` when no dataset Nightjar parses serves it."""
    known = set(registry if registry is not None else registry_datasets())
    product, service, category = (_lower(getattr(logsource, k, None)) for k in ("product", "service", "category"))
    if product is None and service is None and (category is None or category in EVERY_DATASET_CATEGORIES):
        return None
    found: dict[str, tuple[str, ...] | None]
    if product == "zeek" or (product is None and service is not None and f"zeek.{service}" in known):
        found = dict.fromkeys(_zeek(service, category, known))
    elif product == "windows":
        found = _windows(service, category, known)
    elif product in _SERVICES and service is not None:
        found = dict.fromkeys(_SERVICES[product].get(service, ()))
    elif product == "linux":
        found = dict.fromkeys(() if category else ("system.auth", "system.syslog", "dhcpd"))
    elif product is None and category in _NETWORK_CATEGORIES:
        found = dict.fromkeys(_NETWORK_CATEGORIES[category])
    else:
        found = {}
    present = {d: found[d] for d in sorted(found) if d in known}
    if not present:
        parts = ", ".join(f"{k}: {v}" for k, v in (("product", product), ("service", service), ("category", category))
                          if v)
        raise NotApplicable(f"{NOT_APPLICABLE_PREFIX}: logsource {{{parts}}} maps to no dataset Nightjar parses "
                            "(see alerts/logsource_map.py and docs/fields.md)")
    return Scope(present)


def logsource_datasets(logsource: Any, registry: Iterable[str] | None = None) -> tuple[str, ...] | None:
    """The datasets of :func:`logsource_scope` (sorted), None for every dataset."""
    scope = logsource_scope(logsource, registry)
    return None if scope is None else scope.datasets


def _zeek(service: str | None, category: str | None, known: set[str]) -> tuple[str, ...]:
    if service is not None:
        return (f"zeek.{service}",)
    if category is not None:
        return _NETWORK_CATEGORIES.get(category, ())
    return tuple(d for d in known if d.startswith("zeek."))
