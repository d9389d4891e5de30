"""``nightjar rules check``: stock Sigma rules compile without a ``nightjar:`` block and without Spark, duplicates and
refused modifiers are reported by name, a logsource Nightjar does not ingest is ``not_applicable``.

The rules below are written in SigmaHQ's style (no Nightjar keys); the corpus test reads SigmaHQ's own rules
(DRL 1.1, https://github.com/SigmaHQ/sigma) in place from the shared corpus and skips when it is absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from alerts.rules_check import check, summary
from nightjar.cli import main
from tests.conftest import CORPUS as _DEFAULT_CORPUS

# NIGHTJAR_CORPUS: the corpus elsewhere than ../shared/corpus (a worktree beside the main checkout).
CORPUS = Path(os.environ.get("NIGHTJAR_CORPUS") or _DEFAULT_CORPUS)
SIGMAHQ_RULES = CORPUS / "sigmahq" / "rules"

SYSMON_RULE = """\
title: Procdump dumping lsass
id: 5afee48e-67dd-4e03-a783-f74259dcf998
status: test
author: SigmaHQ style
tags: [attack.credential-access, attack.t1003.001]
logsource: {product: windows, category: process_creation}
detection:
  selection:
    Image|endswith: '\\\\procdump.exe'
    CommandLine|contains: lsass
  condition: selection
level: high
"""
ZEEK_RULE = """\
title: RDP listener reachable from outside
id: 1b3c9d2e-0000-4000-8000-000000000001
logsource: {product: zeek, service: rdp}
detection:
  selection:
    id.resp_p: 3389
  condition: selection
level: low
"""
MACOS_RULE = """\
title: macOS thing
id: 1b3c9d2e-0000-4000-8000-000000000002
logsource: {product: macos, category: process_creation}
detection:
  selection: {Image|endswith: /osascript}
  condition: selection
level: low
"""
EXPAND_RULE = """\
title: Uses a placeholder
id: 1b3c9d2e-0000-4000-8000-000000000003
logsource: {product: windows, service: security}
detection:
  selection: {TargetUserName|expand: '%admins%'}
  condition: selection
level: low
"""
UNKNOWN_MODIFIER_RULE = """\
title: Unknown modifier
id: 1b3c9d2e-0000-4000-8000-000000000004
logsource: {product: windows, service: security}
detection:
  selection: {TargetUserName|sounds_like: admin}
  condition: selection
level: low
"""


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_stock_rules_compile_with_inferred_entities_and_unservable_logsources_are_not_applicable(tmp_path):
    _write(tmp_path, "sysmon.yml", SYSMON_RULE)
    _write(tmp_path, "zeek.yml", ZEEK_RULE)
    _write(tmp_path, "macos.yml", MACOS_RULE)
    by_id = {c.id: c for c in check([tmp_path])}
    assert by_id["5afee48e-67dd-4e03-a783-f74259dcf998"].status == "compiled"
    assert by_id["5afee48e-67dd-4e03-a783-f74259dcf998"].reason == "entity host"  # a Windows event's host
    assert by_id["1b3c9d2e-0000-4000-8000-000000000001"].reason == "entity ip"  # a Zeek log's source address
    macos = by_id["1b3c9d2e-0000-4000-8000-000000000002"]
    assert macos.status == "not_applicable" and "product: macos" in macos.reason
    assert macos.logsource == {"product": "macos", "category": "process_creation"}


def test_loaded_stock_rule_keeps_its_sigma_id_and_attack_tags(tmp_path):
    from alerts.detection_input import contract_schema
    from alerts.rule_loader import load_rules

    _write(tmp_path, "sysmon.yml", SYSMON_RULE)
    rules, errors = load_rules([tmp_path], contract_schema())
    assert errors == []
    (rule,) = rules
    assert rule.rule_id == "5afee48e-67dd-4e03-a783-f74259dcf998"
    assert rule.meta.tags == ("T1003.001",) and rule.entity_type == "host"


def test_duplicate_id_across_files_is_reported_with_both_files_and_the_first_kept(tmp_path):
    first = _write(tmp_path / "a", "one.yml", SYSMON_RULE)
    second = _write(tmp_path / "b", "two.yml", SYSMON_RULE.replace("Procdump dumping lsass", "Same id, other file"))
    checks = check([tmp_path])
    assert [(c.path, c.status) for c in checks] == [(str(first), "compiled"), (str(second), "refused")]
    assert "duplicate rule id" in checks[1].reason and str(first) in checks[1].reason


def test_unsupported_and_unknown_modifiers_are_refused_by_name(tmp_path):
    _write(tmp_path, "expand.yml", EXPAND_RULE)
    _write(tmp_path, "unknown.yml", UNKNOWN_MODIFIER_RULE)
    by_id = {c.id: c for c in check([tmp_path])}
    expand = by_id["1b3c9d2e-0000-4000-8000-000000000003"]
    assert expand.status == "refused" and "unsupported modifier 'expand'" in expand.reason
    unknown = by_id["1b3c9d2e-0000-4000-8000-000000000004"]
    assert unknown.status == "refused" and "sounds_like" in unknown.reason


def test_cli_json_lines_summary_and_exit_codes(tmp_path, capsys):
    _write(tmp_path, "sysmon.yml", SYSMON_RULE)
    _write(tmp_path, "macos.yml", MACOS_RULE)
    _write(tmp_path, "expand.yml", EXPAND_RULE)
    assert main(["rules", "check", str(tmp_path), "--json"]) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["status"] for r in rows) == ["compiled", "not_applicable", "refused"]
    assert all({"path", "id", "title", "logsource", "status", "reason"} <= set(r) for r in rows)
    assert "3 rules: 1 compiled, 1 not_applicable, 1 refused" in err
    assert main(["rules", "check", str(tmp_path), "--strict"]) == 1  # a refused rule
    capsys.readouterr()
    assert main(["rules", "check", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.skipif(not SIGMAHQ_RULES.is_dir(), reason="SigmaHQ corpus not present")
def test_sigmahq_windows_and_zeek_rules_compile():
    """Floors measured on this code (docs/sigma_compiler.md, "SigmaHQ coverage"); a regression lowers them."""
    checks = check([SIGMAHQ_RULES / "windows" / "process_creation", SIGMAHQ_RULES / "network" / "zeek"])
    s = summary(checks)
    assert s["refused"] == 0, [c for c in checks if c.status == "refused"][:3]
    assert s["per_product"]["windows"]["compiled"] >= 1000
    assert s["per_product"]["zeek"]["compiled"] >= 20
    assert len({c.id for c in checks}) == len(checks)  # every rule reported once


def test_contract_schema_is_the_events_schema_without_spark(spark):
    """The schema ``rules check`` compiles against (built from the contract, no JVM) has every leaf of the one the
    pipeline's rules compile against, with the same type: a rule that compiles here compiles there."""
    from pyspark.sql.types import StructType

    from alerts.detection_input import contract_schema, events_schema

    def leaves(schema: StructType, prefix: str = "") -> dict[str, str]:
        out: dict[str, str] = {}
        for f in schema.fields:
            if isinstance(f.dataType, StructType):
                out.update(leaves(f.dataType, f"{prefix}{f.name}."))
            else:
                out[prefix + f.name] = f.dataType.simpleString()
        return out

    assert leaves(contract_schema()) == leaves(events_schema(spark))
