"""Rule lab, from an edited rule to the running pipeline: backtest it over history, then save it into the rules dir.

Both steps reuse the pipeline's own code instead of re-implementing rule semantics in the dashboard:

* :func:`backtest_rule_text` writes the edited file into a temporary rules directory and runs
  ``nightjar backtest --rules TMP --from … --to … --json`` over the lake in a child process (the stream's compiled
  rules and alert builder, in batch, on Spark; the dashboard itself never starts a Spark session). A correlation
  that references a rule defined in another file of the rules directory gets those documents copied beside it
  (they become the correlation's quiet inputs, as in the pipeline). The result: the alerts the rule would have
  raised (same deterministic ``alert_id`` as the stream), each with the verdict analysts gave that alert, and per
  rule how many of its past alerts in the period analysts closed as false positive (``alert_triage``).
* :func:`save_rule` validates the file with the rule loader (``nightjar rules list`` over a copy of the rules
  directory with the file in place, so duplicate ids and cross-file references are checked as the pipeline would
  see them) and only then writes it atomically (temporary file + ``os.replace``) into the directory the pipeline
  re-reads (``Settings.rules`` / ``NIGHTJAR_RULES``; the built-in pack when none is configured). An invalid rule
  is refused with the loader's message and nothing is written; an existing file is only replaced when the caller
  confirms the overwrite.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

# Spark-side modules are imported inside the functions that need them: the dashboard's pages import this module,
# and importing it must not load pyspark (only deploying a rule does).
from core.config import TABLE_ALERTS, TABLE_EVENTS
from dashboard.alerts_data import CURRENT_ALERTS_SQL
from dashboard.lakedb import TABLE_ALERT_TRIAGE, has_table, query
from dashboard.rule_lab import check_rule_text
from dashboard.triage import TRIAGE_SCHEMA, statuses

REPO = Path(__file__).resolve().parent.parent
# A backtest starts a Spark driver (about 20-60 s on a busy 2-core machine) before it reads the period's events.
BACKTEST_TIMEOUT_S = 900.0
VALIDATE_TIMEOUT_S = 300.0
ALERT_COLUMNS = ["first_seen", "last_seen", "severity", "rule_id", "entity_type", "entity_value", "analyst_verdict",
                 "event_count", "host_name", "user_name", "alert_id", "summary"]
# A saved rule file's mode: the rule pack's own (alerts/rule_pack/*.yml), so whoever runs the pipeline can read it;
# mkstemp's temporary file is 0600, which a pipeline running as another user could not load.
RULE_FILE_MODE = 0o644
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\.ya?ml")
Progress = Callable[[float, str], None]  # (seconds elapsed, last log line of the child)


@dataclass
class CliRun:
    returncode: int | None  # None: timed out (the child was stopped)
    stdout: str
    stderr_lines: list[str]
    seconds: float

    def loader_errors(self) -> list[str]:
        """The rule loader's problems (``ERROR <file>: rule 'x': problem``), without the ``ERROR`` prefix."""
        return [ln[len("ERROR "):].removesuffix(" (skipped)") for ln in self.stderr_lines if ln.startswith("ERROR ")]

    def failure(self) -> str:
        """One line on why the command failed: its own one-line error, else the last line it logged."""
        if self.returncode is None:
            return f"stopped after {self.seconds:.0f} s (timeout)"
        ours = [ln for ln in self.stderr_lines if ln.startswith("nightjar ") and ": error: " in ln]
        last = ours[-1] if ours else next((ln for ln in reversed(self.stderr_lines) if ln.strip()), "")
        return f"exit {self.returncode}: {' '.join(last.split())[:300]}"


def run_nightjar(args: list[str], timeout: float, progress: Progress | None = None) -> CliRun:
    """``nightjar ARGS`` in a child process (its own process group, stopped as a whole on timeout); stderr is
    read line by line so ``progress`` can show what the child is doing while the caller waits."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "nightjar.cli", *args], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    out: list[str] = []
    err: list[str] = []
    # one reader per pipe: a child blocked on a full stderr pipe would never finish its stdout
    readers = [threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True),
               threading.Thread(target=lambda: err.extend(ln.rstrip("\n") for ln in proc.stderr), daemon=True)]
    for t in readers:
        t.start()
    timed_out = False
    while proc.poll() is None:
        elapsed = time.monotonic() - started
        if elapsed > timeout:
            timed_out = True
            _stop_group(proc)
            break
        if progress is not None:
            progress(elapsed, next((ln for ln in reversed(err) if ln.strip()), ""))
        time.sleep(0.5)
    for t in readers:
        t.join(10)
    return CliRun(None if timed_out else proc.returncode, "".join(out), err, time.monotonic() - started)


def _stop_group(proc: subprocess.Popen) -> None:
    # SIGTERM reaches the Spark JVM's shutdown hook too (it is in the child's process group)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(15)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


# --- what a rule file defines and references --------------------------------------------------------------------

def _docs(text: str) -> list[dict]:
    try:
        return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError:
        return []


def _names(doc: dict) -> set[str]:
    return {str(doc[k]) for k in ("name", "id") if doc.get(k)}


def rule_ids(text: str) -> list[str]:
    """The rule ids a Sigma file defines (the loader's spelling: name, else id, else title)."""
    return [str(d.get("name") or d.get("id") or d.get("title") or "?") for d in _docs(text)]


def alerting_rule_ids(text: str) -> list[str]:
    """The ids of the file's rules that raise alerts (not a correlation's quiet inputs), as the rule lab sees them."""
    return [r.name for r in check_rule_text(text, compile_predicates=False) if r.alerts]


def referenced_documents(text: str, rules_dirs: list[Path]) -> list[dict]:
    """Documents of other files under ``rules_dirs`` that the file's correlations reference but it does not define."""
    from alerts.rule_loader import rule_files

    docs = _docs(text)
    local = set().union(*(_names(d) for d in docs)) if docs else set()
    wanted = {str(r) for d in docs if isinstance(d.get("correlation"), dict)
              for r in d["correlation"].get("rules") or []} - local
    found: list[dict] = []
    for f in rule_files([p for p in rules_dirs if p.exists()]):
        if not wanted or f.suffix == ".py":
            continue
        for d in _docs(f.read_text(encoding="utf-8", errors="replace")):
            if _names(d) & wanted and "correlation" not in d:
                found.append(d)
                wanted -= _names(d)
    return found


def _one_line(text: str, tmp: Path, file_name: str) -> str:
    """A loader message with the temporary directory's path replaced by the file's own name."""
    return " ".join(text.replace(str(tmp / file_name), file_name).replace(str(tmp) + os.sep, "").split())[:400]


# --- backtest ------------------------------------------------------------------------------------------------------

@dataclass
class BacktestResult:
    alerts: pd.DataFrame  # ALERT_COLUMNS, the file's rules only, oldest first
    past: pd.DataFrame  # per rule id: live alerts in the period, closed as false positive, closed
    problem: str = ""  # one line: why the rule did not load or the backtest failed ('' when it ran)
    seconds: float = 0.0
    log: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problem


def events_period(lake: Path) -> tuple[dt.datetime, dt.datetime] | None:
    """First and last ``@timestamp`` of the lake's events, from the Delta log's file statistics (no scan)."""
    if not has_table(lake, TABLE_EVENTS):
        return None
    import pyarrow as pa
    from deltalake import DeltaTable

    actions = pa.table(DeltaTable(str(lake / TABLE_EVENTS)).get_add_actions(flatten=True)).to_pydict()
    lows = [v for v in actions.get("min.@timestamp", []) if v is not None]
    highs = [v for v in actions.get("max.@timestamp", []) if v is not None]
    if not lows or not highs:
        return None
    return _naive(min(lows)), _naive(max(highs))


def _naive(t: dt.datetime) -> dt.datetime:
    return t.astimezone(dt.UTC).replace(tzinfo=None) if t.tzinfo else t


def _iso(t: dt.datetime) -> str:
    return _naive(t).isoformat(timespec="seconds") + "Z"


def backtest_rule_text(lake: Path, text: str, file_name: str, start: dt.datetime, end: dt.datetime,
                       rules_dirs: list[Path], progress: Progress | None = None,
                       timeout: float = BACKTEST_TIMEOUT_S) -> BacktestResult:
    """The alerts the rules of ``text`` would have raised on the lake's events in ``[start, end)``, via
    ``nightjar backtest`` (see the module docstring), with the verdicts analysts gave those alerts."""
    ids = rule_ids(text)
    past = past_verdicts(lake, alerting_rule_ids(text) or ids, start, end)
    if not ids:
        return BacktestResult(pd.DataFrame(columns=ALERT_COLUMNS), past, "no rule in the text (not valid YAML?)")
    with tempfile.TemporaryDirectory(prefix="nightjar-rule-lab-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / file_name).write_text(text, encoding="utf-8")
        refs = referenced_documents(text, rules_dirs)
        if refs:  # the base rules a correlation counts, from the other files of the rules directory
            (tmp / "referenced-rules.yml").write_text(yaml.safe_dump_all(refs, sort_keys=False), encoding="utf-8")
        done = run_nightjar(["backtest", "--rules", str(tmp), "--no-builtin-rules", "--from", _iso(start), "--to", _iso(end), "--json",
                             "--lake", str(lake)], timeout, progress)
        mine = [e for e in done.loader_errors() if str(tmp / file_name) in e]
        problem = ""
        if mine:
            problem = _one_line(mine[0], tmp, file_name)
        elif done.returncode != 0:
            problem = f"the backtest failed ({_one_line(done.failure(), tmp, file_name)})"
    rows = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
    alerts = _alert_frame([r for r in rows if r.get("rule_id") in set(ids)], lake)
    return BacktestResult(alerts, past, problem, done.seconds, done.stderr_lines[-20:])


def _alert_frame(rows: list[dict], lake: Path) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame(columns=ALERT_COLUMNS)
    df = pd.DataFrame([{**r, "entity_type": r["entity"]["type"], "entity_value": r["entity"]["value"]} for r in rows])
    for col in ("first_seen", "last_seen"):
        df[col] = pd.to_datetime(df[col], utc=True, format="ISO8601").dt.tz_localize(None)
    verdicts = {}
    if has_table(lake, TABLE_ALERT_TRIAGE):
        verdicts = dict(statuses(lake, df["alert_id"].tolist())[["alert_id", "status"]].itertuples(index=False))
    live = set()
    if has_table(lake, TABLE_ALERTS):
        live = set(query(lake, [TABLE_ALERTS], "SELECT DISTINCT alert_id FROM alerts WHERE list_contains($ids, "
                         "alert_id)", {"ids": df["alert_id"].tolist()})["alert_id"])
    # the same alert_id as a live alert (ids are deterministic): what analysts said about it, if anything
    df["analyst_verdict"] = [verdicts.get(a, "new") if a in live else "(not a live alert)" for a in df["alert_id"]]
    for col in ALERT_COLUMNS:
        if col not in df:
            df[col] = None
    return df[ALERT_COLUMNS].sort_values(["first_seen", "rule_id", "entity_value"], ignore_index=True)


def past_verdicts(lake: Path, ids: list[str], start: dt.datetime, end: dt.datetime) -> pd.DataFrame:
    """Per rule id: the live alerts it raised in ``[start, end)`` (by ``first_seen``), how many analysts closed,
    and how many they closed as false positive."""
    cols = ["rule_id", "past_alerts", "closed", "false_positive"]
    if not ids or not has_table(lake, TABLE_ALERTS):
        return pd.DataFrame({"rule_id": ids, "past_alerts": 0, "closed": 0, "false_positive": 0}, columns=cols)

    found = query(lake, [TABLE_ALERTS, TABLE_ALERT_TRIAGE], f"""
        SELECT rule_id, count(*) AS past_alerts,
               count(*) FILTER (WHERE starts_with(status, 'closed')) AS closed,
               count(*) FILTER (WHERE status = 'closed: false positive') AS false_positive
        FROM ({CURRENT_ALERTS_SQL}) WHERE list_contains($ids, rule_id) AND first_seen >= $start AND first_seen < $end
        GROUP BY rule_id""", {"ids": ids, "start": _naive(start), "end": _naive(end)},
        empty={TABLE_ALERT_TRIAGE: TRIAGE_SCHEMA})
    out = pd.DataFrame({"rule_id": ids}).merge(found, on="rule_id", how="left").fillna(0)
    return out.astype({c: int for c in cols[1:]})[cols]


# --- save ----------------------------------------------------------------------------------------------------------

def rules_directory(paths: tuple[Path, ...] | list[Path] = ()) -> Path:
    """Where a saved rule goes: the first configured rules directory (``Settings.rules``; a configured file's own
    directory), else the built-in pack the pipeline runs when none is configured."""
    from alerts.rule_loader import BUILTIN_RULES

    for p in paths:
        p = Path(p)
        return p if p.is_dir() or not p.suffix else p.parent
    return BUILTIN_RULES


@dataclass
class SaveResult:
    path: Path | None = None  # the file written; None when nothing was
    problem: str = ""  # one line: why nothing was written
    exists: bool = False  # refused because the file exists and overwrite was not confirmed
    seconds: float = 0.0


def check_file_name(name: str) -> str:
    """'' when ``name`` is a plain rule file name (``name.yml``/``.yaml``, no directory), else why not."""
    if not _FILE_NAME.fullmatch(name or ""):
        return (f"{name!r} is not a rule file name: letters, digits, '_', '-', '.', ending in .yml or .yaml "
                "(no directory)")
    return ""


def save_rule(text: str, rules_dir: Path, file_name: str, overwrite: bool = False,
              progress: Progress | None = None, timeout: float = VALIDATE_TIMEOUT_S) -> SaveResult:
    """Validate ``text`` with the rule loader as ``rules_dir/file_name`` and write it there atomically.

    Nothing is written when the name is not a plain rule file name, when the file exists and ``overwrite`` is
    false, or when the loader reports a problem with the file (its message is returned, one line)."""
    started = time.monotonic()
    bad = check_file_name(file_name)
    if bad:
        return SaveResult(problem=bad)
    target = rules_dir / file_name
    if target.exists() and not overwrite:
        return SaveResult(problem=f"{target} exists: choose another file name or confirm the overwrite", exists=True)
    if not rule_ids(text):
        return SaveResult(problem="no rule in the text (not valid YAML, or empty)")
    clash = defined_elsewhere(text, rules_dir, file_name)
    if clash:
        return SaveResult(problem=clash)
    with tempfile.TemporaryDirectory(prefix="nightjar-rule-save-") as tmp_name:
        tmp = Path(tmp_name)
        if rules_dir.is_dir():  # the directory as the pipeline will read it after the save
            shutil.copytree(rules_dir, tmp, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", ".*"))
        (tmp / file_name).write_text(text, encoding="utf-8")
        done = run_nightjar(["rules", "list", "--rules", str(tmp)], timeout, progress)
        ours = str(tmp / file_name)
        mine = [e for e in done.loader_errors() if ours in e]
        if mine:
            return SaveResult(problem=_one_line(mine[0], tmp, file_name), seconds=time.monotonic() - started)
        if done.returncode not in (0, 2):  # 2: some other file of the directory has a problem (not ours)
            return SaveResult(problem=f"the rule loader did not run ({_one_line(done.failure(), tmp, file_name)})",
                              seconds=time.monotonic() - started)
    rules_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(target, text)
    return SaveResult(path=target, seconds=time.monotonic() - started)


def defined_elsewhere(text: str, rules_dir: Path, file_name: str) -> str:
    """'' unless a rule name or id of ``text`` is already defined by another Sigma file of ``rules_dir``.

    Checked here because the loader keys base rules by name and id, so a second file defining the same single-event
    rule replaces the first without a word (only duplicate *alerting* ids of different rules are reported)."""
    from alerts.rule_loader import rule_files

    mine = set().union(*(_names(d) for d in _docs(text)))
    if not rules_dir.is_dir():
        return ""
    for f in rule_files([rules_dir]):
        if f.name == file_name or f.suffix == ".py":
            continue
        for d in _docs(f.read_text(encoding="utf-8", errors="replace")):
            both = mine & _names(d)
            if both:
                label = str(d["name"]) if str(d.get("name")) in both else sorted(both)[0]
                return (f"{file_name}: rule {label!r} is already defined in {f.name}: rename it "
                        "(name and id) or edit that file")
    return ""


def write_atomically(target: Path, text: str) -> None:
    """Write ``text`` to ``target`` so a reader sees the old file or the whole new one, never a part: a hidden
    temporary file in the same directory (the loader skips names starting with '.'), flushed, then renamed. The file
    gets the rule pack's mode (:data:`RULE_FILE_MODE`) before the rename, so it is never readable by its owner only."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, RULE_FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
