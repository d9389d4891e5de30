"""dashboard/rules_catalog.py: the coverage page's rule list counts stock Sigma rules (no `nightjar:` block) that
the pipeline runs, and leaves out those whose logsource Nightjar does not parse — they never run."""

from __future__ import annotations

from pathlib import Path

from dashboard import coverage
from dashboard.rules_catalog import load_catalog

STOCK = """title: LSASS access
id: 1f0c0f7e-0000-4000-8000-000000000001
tags: [attack.credential_access, attack.t1003.001]
logsource: {product: windows, service: security}
detection:
  selection: {EventID: 4656, ObjectName|endswith: '\\\\lsass.exe'}
  condition: selection
level: high
"""
MACOS = """title: osascript
id: 1f0c0f7e-0000-4000-8000-000000000002
tags: [attack.execution, attack.t1059.002]
logsource: {product: macos, category: process_creation}
detection:
  selection: {Image|endswith: /osascript}
  condition: selection
level: low
"""


def test_stock_rules_count_when_applicable_and_not_otherwise(tmp_path: Path) -> None:
    (tmp_path / "stock.yml").write_text(STOCK)
    (tmp_path / "macos.yml").write_text(MACOS)
    catalog = load_catalog([tmp_path])
    assert [(r.rule_id, r.tags, r.tactics, r.level) for r in catalog] == [
        ("1f0c0f7e-0000-4000-8000-000000000001", ("T1003.001",), ("credential_access",), "high")]
    matrix = coverage.attack_matrix(catalog)
    assert list(matrix["technique"]) == ["T1003.001"] and "T1059.002" not in set(matrix["technique"])
