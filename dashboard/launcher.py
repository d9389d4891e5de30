"""``nightjar dashboard``: start the Streamlit app over the lake, and helpers the demo and tests share.

Streamlit runs as a child process (it owns its event loop and signal handling); the lake reaches the page
through ``NIGHTJAR_LAKE``. :func:`start_dashboard` puts the child in its own session so a caller can stop it
and everything it spawned with one signal to the process group.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from core.config import (
    DEFAULT_DASHBOARD_PORT,
    ENV_ANALYST,
    ENV_BUILTIN_RULES,
    ENV_DASHBOARD_USER_HEADER,
    ENV_HUNT_MAX_BYTES,
    ENV_LAKE,
    ENV_RULES,
    Settings,
    header_name,
)
from core.errors import UserError
from core.process_control import sigterm_as_interrupt
from dashboard.identity import is_loopback
from ingest.embedded_broker import port_is_open

log = logging.getLogger(__name__)

APP = Path(__file__).resolve().parent / "app.py"
REPO_ROOT = APP.parent.parent
HEALTH_PATH = "/_stcore/health"
# Streamlit's toolbar shows developer options (Deploy, Rerun, Clear cache) to anyone who opens the app on localhost;
# analysts get the viewer's menu only (print, theme, about), wherever they connect from.
TOOLBAR_MODE = "viewer"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=DEFAULT_DASHBOARD_PORT,
                        help=f"port to listen on (default {DEFAULT_DASHBOARD_PORT})")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 to serve the network)")
    parser.add_argument("--rules", action="append", type=Path, metavar="DIR",
                        help="rules directory the rule lab saves into; the pages describe its rules beside the "
                             "built-in pack (env NIGHTJAR_RULES; default: the built-in pack itself); run the pipeline "
                             "with the same --rules")
    parser.add_argument("--no-builtin-rules", dest="builtin_rules", action="store_false", default=None,
                        help="describe only the --rules given, not the built-in pack, as `nightjar run "
                             "--no-builtin-rules` runs (env NIGHTJAR_BUILTIN_RULES=0)")
    parser.add_argument("--user-header", metavar="NAME",
                        help="request header a login proxy sets with the analyst's user name, e.g. X-Forwarded-User "
                             "(env NIGHTJAR_DASHBOARD_USER_HEADER; honoured only when given: docs/dashboard.md)")
    parser.add_argument("--analyst", metavar="NAME",
                        help="the analyst name recorded on a dashboard serving loopback only, without a login "
                             "(env NIGHTJAR_ANALYST; default: the OS user)")


def streamlit_argv(port: int, host: str = "127.0.0.1") -> list[str]:
    return [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.port", str(port),
        "--server.address", host,
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", TOOLBAR_MODE,
        # The page only reads the lake; file watching would just burn CPU on a busy machine.
        "--server.fileWatcherType", "none",
    ]


def start_dashboard(settings: Settings, port: int, host: str = "127.0.0.1",
                    log_file: Path | None = None) -> subprocess.Popen:
    """Start Streamlit in its own session (process group) and return at once; see :func:`wait_until_ready`."""
    env = dict(os.environ)
    env[ENV_LAKE] = str(settings.lake.resolve())
    if settings.rules:  # the rule lab saves into the first; every page describes these rules
        env[ENV_RULES] = os.pathsep.join(str(p.resolve()) for p in settings.rules)
    env[ENV_BUILTIN_RULES] = "1" if settings.builtin_rules else "0"
    env[ENV_HUNT_MAX_BYTES] = str(settings.hunt_max_bytes)
    env[ENV_DASHBOARD_USER_HEADER] = settings.dashboard_user_header
    env[ENV_ANALYST] = settings.analyst
    # The app imports `dashboard` and `nightjar` from the repository root, wherever the caller's cwd is.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    out = open(log_file, "ab") if log_file else None  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(streamlit_argv(port, host), stdout=out, stderr=subprocess.STDOUT if out else None,
                            env=env, start_new_session=True, cwd=REPO_ROOT)
    log.info("dashboard starting (pid %d) on http://%s:%d over lake %s", proc.pid, host, port, settings.lake)
    return proc


def wait_until_ready(url: str, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    """Poll Streamlit's health endpoint until it answers ``ok``; raise :class:`UserError` on timeout or exit."""
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise UserError(f"the dashboard exited with code {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url.rstrip("/") + HEALTH_PATH, timeout=2) as resp:
                if resp.status == 200:
                    return
                last_error = f"HTTP {resp.status}"
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(exc)
        time.sleep(0.25)
    raise UserError(f"the dashboard at {url} did not answer within {timeout:.0f}s ({last_error})")


def stop_dashboard(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the dashboard's process group, SIGKILL whatever is left after ``grace_s``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(grace_s)
            if sig == signal.SIGTERM:
                # The leader is gone; make sure no child of its group outlives it.
                continue
        except subprocess.TimeoutExpired:
            log.warning("dashboard did not stop within %.0fs: killing it", grace_s)
    proc.wait()


def run(args: argparse.Namespace, settings: Settings) -> int:
    if not 0 < args.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, not {args.port}", exit_code=2)

    if port_is_open(args.host if args.host != "0.0.0.0" else "127.0.0.1", args.port):
        raise UserError(f"port {args.port} is already in use; pass --port P")
    if args.rules:
        for p in args.rules:
            if not p.is_dir():
                raise UserError(f"--rules {p} is not a directory", exit_code=2)
        settings = settings.with_(rules=tuple(args.rules))
    if args.builtin_rules is not None:
        settings = settings.with_(builtin_rules=args.builtin_rules)
    if not settings.builtin_rules and not settings.rules:
        raise UserError("no rules to describe: --no-builtin-rules needs --rules DIR", exit_code=2)
    if args.user_header is not None:
        settings = settings.with_(dashboard_user_header=header_name(args.user_header, "--user-header"))
    if args.analyst is not None:
        settings = settings.with_(analyst=args.analyst.strip())
    if not is_loopback(args.host) and not settings.dashboard_user_header:
        log.warning("the dashboard serves %s without a login proxy header (--user-header): analysts can triage only "
                    "if Streamlit's OIDC login is configured (docs/dashboard.md)", args.host)
    elif settings.dashboard_user_header and not is_loopback(args.host):
        log.warning("%s is honoured from any client that reaches %s:%d directly: make sure only the login proxy can",
                    settings.dashboard_user_header, args.host, args.port)
    if not settings.lake.exists():
        log.warning("lake %s does not exist yet: the page will say so until the pipeline writes it", settings.lake)

    url = f"http://{'127.0.0.1' if args.host == '0.0.0.0' else args.host}:{args.port}"
    # Streamlit runs in its own session, so a SIGTERM to this launcher (a service manager, `docker stop`) never
    # reaches it: SIGTERM stops the launcher like Ctrl-C, and the `finally` stops the server's process group.
    with sigterm_as_interrupt():
        proc = start_dashboard(settings, args.port, args.host)
        try:
            wait_until_ready(url, timeout=60, proc=proc)
            print(f"Nightjar dashboard: {url} (lake {settings.lake.resolve()}). Ctrl-C stops it.", flush=True)
            return proc.wait()
        except KeyboardInterrupt:
            return 0
        finally:
            stop_dashboard(proc)
