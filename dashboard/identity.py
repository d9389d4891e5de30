"""Who the analyst is: the name recorded with every triage action (``alert_triage.analyst``) and saved hunt.

The name never comes from a box the analyst types into (anyone who reached the page could triage as anyone). In
order of precedence:

1. **A trusted reverse-proxy header**, when one is configured (``NIGHTJAR_DASHBOARD_USER_HEADER``, e.g.
   ``X-Forwarded-User``): the login proxy in front of the dashboard (oauth2-proxy, Apache ``mod_auth_*``, nginx
   ``auth_request``) authenticates the user and sets the header on every request, WebSocket included. The header is
   honoured only when configured, since a client reaching Streamlit directly could send any header: bind the dashboard
   to loopback (or a network only the proxy reaches) when using it.
2. **Streamlit's OIDC login** (``st.login`` / ``st.user``), when ``.streamlit/secrets.toml`` has an ``[auth]``
   section: the logged-in user's e-mail (else name, else subject).
3. **A local identity**, only when the dashboard serves loopback alone and neither of the above is configured: the
   configured name (``NIGHTJAR_ANALYST``) or the OS user running the dashboard. Beyond loopback without a login there
   is no identity, and triage is disabled with a message saying how to configure one.

:func:`resolve` is the rule, free of Streamlit so it is unit-tested; :func:`current` applies it to this session.
"""

from __future__ import annotations

import getpass
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from core.config import ENV_ANALYST, ENV_DASHBOARD_USER_HEADER, settings_from_env

SOURCE_HEADER, SOURCE_OIDC, SOURCE_LOCAL = "proxy header", "login", "local user"
NO_LOGIN_BEYOND_LOOPBACK = (
    f"no login is configured and the dashboard serves beyond loopback: put it behind a login proxy that sets a user "
    f"header and name it in {ENV_DASHBOARD_USER_HEADER}, or configure Streamlit's OIDC login ([auth] in "
    ".streamlit/secrets.toml); see docs/dashboard.md")


@dataclass(frozen=True)
class Identity:
    name: str  # '' when there is none: triage is disabled
    source: str = ""  # how it was established (SOURCE_*), shown beside the name
    problem: str = ""  # when there is no name: why, and what to do about it
    needs_login: bool = False  # OIDC is configured and this session has not logged in yet

    def label(self) -> str:
        return f"{self.name} ({self.source})" if self.name else ""


def is_loopback(address: str) -> bool:
    """Whether a server bound to ``address`` is reachable from this machine only (``''`` is every interface)."""
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip()).is_loopback
    except ValueError:
        return False


def resolve(headers: Mapping[str, str], *, header_name: str = "", oidc: bool = False,
            oidc_user: Mapping[str, object] | None = None, loopback: bool = False, local_name: str = "",
            os_user: Callable[[], str] = getpass.getuser) -> Identity:
    """The analyst's identity from the request ``headers``, the OIDC user and the server's binding (module doc)."""
    if header_name:
        value = " ".join(str(headers.get(header_name) or "").split())
        if value:
            return Identity(value, f"{SOURCE_HEADER} {header_name}")
        if not oidc:
            return Identity("", problem=f"the request carries no {header_name} header: open the dashboard through "
                                        "its login proxy")
    if oidc:
        user = oidc_user or {}
        if user.get("is_logged_in"):
            name = next((str(user[k]) for k in ("email", "name", "sub") if user.get(k)), "")
            if name:
                return Identity(name, SOURCE_OIDC)
            return Identity("", problem="the login gave no e-mail, name or subject: check the provider's claims")
        return Identity("", problem="log in to triage", needs_login=True)
    if loopback:
        name = local_name.strip() or os_user()
        return Identity(name, f"{SOURCE_LOCAL}, loopback only" if name else "",
                        problem="" if name else f"no local user name: set {ENV_ANALYST}")
    return Identity("", problem=NO_LOGIN_BEYOND_LOOPBACK)


def oidc_configured() -> bool:
    """Whether Streamlit's OIDC login is configured (an ``[auth]`` section in ``.streamlit/secrets.toml``)."""
    import streamlit as st

    try:
        return "auth" in st.secrets
    except Exception:  # no secrets file at all (Streamlit raises rather than answer "no")
        return False


def current() -> Identity:
    """This Streamlit session's identity (:func:`resolve` over its request headers, login and server binding)."""
    import streamlit as st

    settings = settings_from_env()
    oidc = oidc_configured()
    return resolve(st.context.headers, header_name=settings.dashboard_user_header, oidc=oidc,
                   oidc_user=st.user.to_dict() if oidc else None,
                   loopback=is_loopback(str(st.get_option("server.address") or "")), local_name=settings.analyst)
