"""A Sigma rule's ``logsource`` (product / service / category) -> the datasets of the source registry it reads.

A Sigma rule says which log it is about (``product: linux, service: sshd``; ``product: zeek, service: dns``;
``product: windows, category: process_creation``). Nightjar's ``events`` holds every source's events, each tagged
with ``event.dataset`` (``system.auth``, ``zeek.dns``, ``windows.security``, see ``ingest/sources/`` and
docs/fields.md). Mapping the logsource to those datasets does two things:

* field names resolve per dataset (:func:`ingest.field_resolver.resolve`): ``query`` is Zeek's DNS query in
  ``zeek.dns``, a Windows event's ``TargetUserName`` a key of that event's own data;
* the rule only sees those events: the compiled predicate starts with ``event.dataset IN (...)``, so a Sysmon rule
  cannot match an sshd line that happens to carry a field of the same name.

A logsource that names nothing the registry parses (``product: linux, category: process_creation``: no auditd
source; ``product: macos``) is :class:`NotApplicable`: the rule is reported, not run over every event, where it
would match nothing or, worse, the wrong events. A rule whose logsource names only ``category: network`` (Nightjar's
own category, for rules on enrichment fields such as ``threat.indicator.*`` that any source's events carry) reads
every dataset.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ingest.sources import datasets as registry_datasets

# product -> service -> datasets (exact names; a Zeek service is its log's _path, see _zeek).
_SERVICES: dict[str, dict[str, tuple[str, ...]]] = {
    "linux": {
        "auth": ("system.auth",), "sshd": ("system.auth",), "sudo": ("system.auth",), "pam": ("system.auth",),
        "su": ("system.auth",), "login": ("system.auth",), "useradd": ("system.auth",),
        "groupadd": ("system.auth",), "usermod": ("system.auth",), "passwd": ("system.auth",),
        "syslog": ("system.syslog",), "dhcpd": ("dhcpd",),
    },
    "windows": {
        "security": ("windows.security",), "system": ("windows.system",),
        "application": ("windows.application",), "sysmon": ("windows.sysmon_operational",),
        "powershell": ("windows.powershell_operational",), "powershell-classic": ("windows.powershell",),
        "wmi": ("windows.wmi_activity_operational",), "forwarded": ("windows.forwarded",),
    },
}
# Windows categories (Sigma's taxonomy): Sysmon events; process creation is also Security 4688.
_WINDOWS_CATEGORIES: dict[str, tuple[str, ...]] = {
    "process_creation": ("windows.sysmon_operational", "windows.security"),
    "ps_module": ("windows.powershell_operational",), "ps_script": ("windows.powershell_operational",),
    "ps_classic_start": ("windows.powershell",), "ps_classic_provider_start": ("windows.powershell",),
    **{c: ("windows.sysmon_operational",) for c in (
        "network_connection", "process_access", "process_termination", "image_load", "driver_load",
        "create_remote_thread", "raw_access_thread", "file_event", "file_change", "file_delete", "file_access",
        "file_rename", "file_block", "registry_event", "registry_add", "registry_delete", "registry_set",
        "registry_rename", "pipe_created", "dns_query", "wmi_event", "create_stream_hash", "clipboard_capture",
        "process_tampering", "sysmon_status", "sysmon_error")},
}
# Product-less categories of network logs: Zeek's.
_NETWORK_CATEGORIES: dict[str, tuple[str, ...]] = {
    "dns": ("zeek.dns",), "proxy": ("zeek.http",), "webserver": ("zeek.http",), "firewall": ("zeek.conn",),
    "network_connection": ("zeek.conn",),
}
EVERY_DATASET_CATEGORIES = frozenset({"network"})


class NotApplicable(ValueError):
    """A logsource no dataset of the registry serves: the rule cannot run on these events."""


def _lower(value: Any) -> str | None:
    return str(value).strip().lower() if value else None


def logsource_datasets(logsource: Any, registry: Iterable[str] | None = None) -> tuple[str, ...] | None:
    """The datasets ``logsource`` (a pySigma ``SigmaLogSource`` or anything with ``product``/``service``/
    ``category``) reads, sorted; None for every dataset; :class:`NotApplicable` when none serves it."""
    known = set(registry if registry is not None else registry_datasets())
    product, service, category = (_lower(getattr(logsource, k, None)) for k in ("product", "service", "category"))
    if product is None and service is None and (category is None or category in EVERY_DATASET_CATEGORIES):
        return None
    if product == "zeek" or (product is None and service is not None and f"zeek.{service}" in known):
        found = _zeek(service, category, known)
    elif product in _SERVICES and service is not None:
        found = _SERVICES[product].get(service, ())
    elif product == "windows":
        prefix = ("windows.",)
        found = _WINDOWS_CATEGORIES.get(category, ()) if category else tuple(d for d in known if d.startswith(prefix))
    elif product == "linux":
        found = () if category else ("system.auth", "system.syslog", "dhcpd")
    elif product is None and category in _NETWORK_CATEGORIES:
        found = _NETWORK_CATEGORIES[category]
    else:
        found = ()
    present = tuple(sorted(d for d in found if d in known))
    if not present:
        parts = ", ".join(f"{k}: {v}" for k, v in (("product", product), ("service", service), ("category", category))
                          if v)
        raise NotApplicable(f"not applicable: logsource {{{parts}}} maps to no dataset Nightjar parses "
                            "(see alerts/logsource_map.py and docs/fields.md)")
    return present


def _zeek(service: str | None, category: str | None, known: set[str]) -> tuple[str, ...]:
    if service is not None:
        return (f"zeek.{service}",)
    if category is not None:
        return _NETWORK_CATEGORIES.get(category, ())
    return tuple(d for d in known if d.startswith("zeek."))
