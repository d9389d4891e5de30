"""``nightjar bench attacks``: alerts traced to their dataset by Kafka coordinates, techniques matched with their
parents, a wrong folder refused in one line — and one run end to end on two tiny recordings whose answer is known."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from core.errors import UserError
from ingest.sources.record_parser import event_id
from nightjar.benchmarks.bench_attacks import attribute, read_manifest, related

CLEARED = ('{"SourceName":"Microsoft-Windows-Eventlog","TimeCreated":"2020-10-18 10:56:05.751","Hostname":"WS5",'
           '"Channel":"Security","Message":"The audit log was cleared.","EventID":1102}')
LOGON = ('{"SourceName":"Microsoft-Windows-Security-Auditing","TimeCreated":"2020-10-18 10:57:00.000",'
         '"Hostname":"WS5","Channel":"Security","EventID":4634,"TargetUserName":"bob"}')


def test_a_technique_matches_itself_its_parent_and_its_sub_techniques_only() -> None:
    assert related("T1003.001", "T1003") and related("T1003", "t1003.001") and related("T1070", "T1070")
    assert not related("T1003", "T1003.001".replace("3", "4")) and not related("T1003", "T10030")


def test_an_alert_belongs_to_every_dataset_its_evidence_came_from() -> None:
    ranges = [{"raw.w": {0: (0, 2)}}, {"raw.w": {0: (2, 3), 1: (0, 1)}}]
    a1 = {"rule_id": "r1", "evidence": [event_id("raw.w", 0, 1)]}
    both = {"rule_id": "r2", "evidence": [event_id("raw.w", 0, 0), event_id("raw.w", 1, 0), "unknown"]}
    none = {"rule_id": "r3", "evidence": [event_id("raw.w", 0, 3)]}  # beyond every replayed range
    assert attribute([a1, both, none], ranges) == [[a1, both], [both]]


def test_a_folder_without_a_manifest_or_with_a_missing_capture_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no manifest.json in") as caught:
        read_manifest(tmp_path)
    assert caught.value.exit_code == 2
    (tmp_path / "manifest.json").write_text(json.dumps([{"file": "gone.zip"}]))
    with pytest.raises(UserError, match=r"names 1 capture\(s\) not found .* gone.zip"):
        read_manifest(tmp_path)


@pytest.mark.e2e
def test_the_recording_with_a_detected_technique_is_detected_and_the_other_is_not(tmp_path: Path) -> None:
    otrf = tmp_path / "otrf"
    otrf.mkdir()
    with zipfile.ZipFile(otrf / "cleared.zip", "w") as z:
        z.writestr("cleared.json", f"{LOGON}\n{CLEARED}\n")
    (otrf / "logoff.json").write_text(LOGON + "\n")
    (otrf / "manifest.json").write_text(json.dumps([
        {"file": "cleared.zip", "title": "Log cleared", "attack_techniques": ["T1070"], "attack_tactics": ["TA0005"]},
        {"file": "logoff.json", "title": "Logoff", "attack_techniques": ["T1070"], "attack_tactics": ["TA0005"]}]))
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "nightjar.cli", "bench", "attacks", "--otrf", str(otrf),
                           "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(out.read_text())["attacks"]
    cleared, logoff = r["per_dataset"]
    assert (cleared["records"], logoff["records"]) == (2, 1)
    assert cleared["detected"] and cleared["detecting_rules"] == ["windows_audit_log_cleared"]
    assert not logoff["detected"] and logoff["alerts"] == 0
    assert (r["detected"], r["datasets"], r["per_tactic"]["TA0005"]["rate"]) == (1, 2, 0.5)
    assert r["events"] + r["quarantine"] == 3 and r["alerts_by_rule"] == {"windows_audit_log_cleared": 1}
    assert "detected (an alert tagged with the dataset's technique): 1 of 2" in done.stderr + done.stdout
