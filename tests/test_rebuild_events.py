"""``nightjar rebuild-events``: a lake written by the old events contract is rebuilt from ``bronze`` with nothing lost,
and ``nightjar run`` refuses such a lake in one line that names the command."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from core.config import TABLE_BRONZE, TABLE_DHCP_SESSIONS, TABLE_EVENTS, TABLE_QUARANTINE, Settings
from core.lake import table_dataset
from tests.cli_process import run_nightjar

LINES = [
    b"<30>Mar  9 10:00:00 dhcp-1 dhcpd[77]: DHCPACK on 10.10.1.20 to aa:bb:cc:00:00:01 (ws-20) via eth0",
    b"<86>Mar  9 10:00:01 bastion-1 sshd[411]: Failed password for root from 203.0.113.7 port 50022 ssh2",
    b"<86>Mar  9 10:00:02 bastion-1 sshd[411]: Accepted publickey for alice from 10.10.1.20 port 50100 ssh2: RSA "
    b"SHA256:abc",
    b'{"_path":"conn","ts":1773050405.5,"uid":"C1","id.orig_h":"10.10.1.20","id.orig_p":5000,'
    b'"id.resp_h":"198.51.100.9","id.resp_p":443,"proto":"tcp","conn_state":"SF"}',
    b"\xff\xfe not a log line",
]


def _old_lake(spark, lake):
    """A lake as the old parse left it: bronze with every record, an events table of the wide contract (a ``zeek``
    struct, no ``detail``), and a detection query's checkpoint."""
    from deltalake import write_deltalake

    from ingest.delta_sink import write_batch
    from ingest.file_source import lines_dataframe

    lake.mkdir()
    write_batch(lines_dataframe(spark, LINES, topic="nightjar.raw.syslog"), lake / TABLE_BRONZE, "test.bronze", 0)
    old = pa.table({"@timestamp": pa.array([dt.datetime(2026, 3, 9, tzinfo=dt.UTC)]),
                    "zeek": pa.array([{"session_id": "C1"}]), "message": ["old row"]})
    write_deltalake(str(lake / TABLE_EVENTS), old)
    (lake / "_checkpoints" / "windowed" / "offsets").mkdir(parents=True)
    (lake / "_checkpoints" / "ingest" / "offsets").mkdir(parents=True)


@pytest.mark.e2e
def test_an_old_lake_is_refused_by_run_and_rebuilt_from_bronze_with_nothing_lost(spark, tmp_path):
    lake = tmp_path / "lake"
    _old_lake(spark, lake)

    refused = run_nightjar(["run", "--available-now", "--lake", str(lake), "--bootstrap", "127.0.0.1:1"], timeout=120)
    assert refused.returncode == 1, refused.stderr
    lines = [ln for ln in refused.stderr.splitlines() if ln.strip() and " INFO " not in ln]
    assert len(lines) == 1 and "nightjar rebuild-events" in lines[0] and "old contract" in lines[0], refused.stderr

    done = run_nightjar(["rebuild-events", "--lake", str(lake)], timeout=600)
    assert done.returncode == 0, done.stderr
    assert "rebuilt from 5 bronze records: 4 events, 1 quarantined" in done.stdout
    assert "rebuild-events: parsed and attributed 5 records" in done.stderr  # progress, step by step

    events = table_dataset(lake, TABLE_EVENTS).to_table().to_pylist()
    assert "detail" in table_dataset(lake, TABLE_EVENTS).schema.names
    by_dataset = {e["event"]["dataset"]: e for e in events}
    assert set(by_dataset) == {"system.auth", "zeek.conn", "dhcpd"}
    conn = by_dataset["zeek.conn"]
    assert dict(conn["detail"])["uid"] == "C1"
    # The DHCP lease seen later in the history attributes the connection made from its address.
    assert conn["host"]["name"] == "ws-20"
    assert [q["error"] for q in table_dataset(lake, TABLE_QUARANTINE).to_table().to_pylist()][0]
    assert table_dataset(lake, TABLE_DHCP_SESSIONS).count_rows() >= 1
    # The replaced table is kept whole; the detection query follows the rebuilt table from its end; ingest keeps its
    # checkpoint (its records are in bronze already).
    previous = sorted((lake / "_previous").iterdir())
    kept = [p for p in previous if p.name.startswith(f"{TABLE_EVENTS}-")]
    assert len(kept) == 1 and table_dataset(kept[0].parent, kept[0].name).to_table().column("message").to_pylist() \
        == ["old row"]
    from ingest.delta_source import initial_offset_file

    initial = json.loads((initial_offset_file(lake / "_checkpoints" / "windowed", TABLE_EVENTS)).read_text())
    from deltalake import DeltaTable

    assert initial["offset"]["version"] == DeltaTable(str(lake / TABLE_EVENTS)).version() + 1
    assert (lake / "_checkpoints" / "ingest" / "offsets").is_dir()

    again = run_nightjar(["rebuild-events", "--lake", str(lake)], timeout=120)
    assert again.returncode == 0 and "nothing to do" in again.stdout


def test_rebuild_without_bronze_is_one_line(tmp_path):
    done = run_nightjar(["rebuild-events", "--lake", str(tmp_path)], timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().endswith("nothing to rebuild from (check --lake)")


def test_settings_are_untouched_by_the_contract_check(tmp_path):
    """A lake with no events yet (a new lake) passes the check: there is nothing old in it."""
    from nightjar.rebuild_events import events_contract_of, require_current_events

    assert events_contract_of(Settings(lake=tmp_path).table_path(TABLE_EVENTS)) is None
    require_current_events(tmp_path)
