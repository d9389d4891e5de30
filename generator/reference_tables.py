"""Reference tables (assets, users, networks, iocs) and the ground truth, as Arrow tables, Delta or JSONL.

Reference tables are overwritten by each run (they describe the organization the run simulated);
``ground_truth`` and ``ground_truth_negatives`` are appended to (every injected incident of every run).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa

from core.address_plan import network_rows
from core.config import (
    TABLE_ASSETS,
    TABLE_GROUND_TRUTH,
    TABLE_GROUND_TRUTH_NEGATIVES,
    TABLE_IOCS,
    TABLE_NETWORKS,
    TABLE_USERS,
)
from generator.organization import Organization

_TS = pa.timestamp("us", tz="UTC")


def _ts(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def assets(org: Organization) -> pa.Table:
    rows = [{"host": h.name, "mac": h.mac, "ip": h.static_ip, "owner": h.owner, "zone": h.zone, "site": h.site,
             "role": h.role, "criticality": h.criticality, "authorized_scanner": h.authorized_scanner,
             "dhcp": h.dhcp} for h in org.hosts]
    schema = pa.schema([("host", pa.string()), ("mac", pa.string()), ("ip", pa.string()), ("owner", pa.string()),
                        ("zone", pa.string()), ("site", pa.string()), ("role", pa.string()),
                        ("criticality", pa.string()), ("authorized_scanner", pa.bool_()), ("dhcp", pa.bool_())])
    return pa.Table.from_pylist(rows, schema)


def users(org: Organization) -> pa.Table:
    rows = [{"name": u.name, "full_name": u.full_name, "department": u.department, "is_admin": u.is_admin,
             "site": u.site, "country": u.country, "uid": u.uid, "workstation": u.workstation} for u in org.users]
    schema = pa.schema([("name", pa.string()), ("full_name", pa.string()), ("department", pa.string()),
                        ("is_admin", pa.bool_()), ("site", pa.string()), ("country", pa.string()),
                        ("uid", pa.int32()), ("workstation", pa.string())])
    return pa.Table.from_pylist(rows, schema)


def networks() -> pa.Table:
    rows = network_rows()
    schema = pa.schema([("cidr", pa.string()), ("zone", pa.string()), ("site", pa.string()), ("country", pa.string()),
                        ("internal", pa.bool_()), ("dhcp", pa.bool_())])
    return pa.Table.from_pylist(rows, schema)


def iocs(org: Organization, start: float) -> pa.Table:
    rows = [{"indicator": i.indicator, "type": i.type, "threat": i.threat, "source": i.source,
             "first_seen": _ts(start - 86400 * (3 + k % 60))} for k, i in enumerate(org.iocs)]
    schema = pa.schema([("indicator", pa.string()), ("type", pa.string()), ("threat", pa.string()),
                        ("source", pa.string()), ("first_seen", _TS)])
    return pa.Table.from_pylist(rows, schema)


GROUND_TRUTH_SCHEMA = pa.schema([
    ("incident_id", pa.string()), ("scenario", pa.string()), ("expected_rule_id", pa.string()),
    ("entity", pa.struct([("type", pa.string()), ("value", pa.string())])),
    ("start", _TS), ("end", _TS), ("host_name", pa.string()), ("user_name", pa.string()),
    ("event_count", pa.int64()), ("is_attack", pa.bool_()), ("must_not_fire", pa.string()),
    ("description", pa.string()), ("details", pa.string()),
])


def ground_truth_table(rows: list[dict]) -> pa.Table:
    out = []
    for r in rows:
        out.append({**r, "start": dt.datetime.fromisoformat(r["start"]), "end": dt.datetime.fromisoformat(r["end"]),
                    "must_not_fire": r.get("must_not_fire"), "details": json.dumps(r["details"], sort_keys=True)})
    return pa.Table.from_pylist(out, GROUND_TRUTH_SCHEMA)


def reference_tables(org: Organization, start: float) -> dict[str, pa.Table]:
    return {TABLE_ASSETS: assets(org), TABLE_USERS: users(org), TABLE_NETWORKS: networks(),
            TABLE_IOCS: iocs(org, start)}


def write_lake(lake: Path, org: Organization, start: float, attacks: list[dict] | None,
               negatives: list[dict] | None, reference: bool = True) -> None:
    """Reference tables (overwritten, when ``reference``) and ground truth rows (appended, when given)."""
    from deltalake import write_deltalake

    lake.mkdir(parents=True, exist_ok=True)
    if reference:
        for name, table in reference_tables(org, start).items():
            write_deltalake(str(lake / name), table, mode="overwrite", schema_mode="overwrite")
    for name, rows in ((TABLE_GROUND_TRUTH, attacks), (TABLE_GROUND_TRUTH_NEGATIVES, negatives)):
        if rows is not None:
            write_deltalake(str(lake / name), ground_truth_table(rows), mode="append")


def _jsonable(v):
    return v.isoformat().replace("+00:00", "Z") if isinstance(v, dt.datetime) else v


def write_files(out: Path, org: Organization, start: float, attacks: list[dict], negatives: list[dict]) -> None:
    for name, table in reference_tables(org, start).items():
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for row in table.to_pylist():
                f.write(json.dumps({k: _jsonable(v) for k, v in row.items()}, sort_keys=False) + "\n")
    for fname, rows in (("ground_truth.jsonl", attacks), ("ground_truth_negatives.jsonl", negatives)):
        with open(out / fname, "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
