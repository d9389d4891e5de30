"""auth_sessions: SSH logins joined with their Zeek conn/ssh records by a stream-stream join, through a real broker.

Each round writes raw lines into ``events`` by the ingest query's steps in batch (one Delta commit per round), then
runs the auth_sessions query available-now over the new commits: flows that arrive before their login and after it
land in different micro-batches, and the watermark's passing is driven by later rounds. A last round goes through
Kafka and the pipeline's own ingest and auth_sessions queries.
"""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from confluent_kafka import Producer
from deltalake import write_deltalake

from core.config import (
    TABLE_ASSETS,
    TABLE_AUTH_SESSIONS,
    TABLE_EVENTS,
    TOPIC_RAW_SYSLOG,
    TOPIC_RAW_ZEEK,
    Settings,
)
from core.lake import table_dataset
from generator import formats as fmt
from ingest.embedded_broker import EmbeddedBroker, free_port

T0 = dt.datetime(2026, 3, 9, 10, 0, tzinfo=dt.UTC).timestamp()
BASTION, BASTION_IP = "bastion-01", "172.16.10.10"
DB, DB_IP = "db-hq-02", "10.10.8.12"
FILESRV, FILESRV_IP = "fs-hq-01", "10.10.8.20"  # a Windows server: SMB shares (445) and RDP (3389)


def login(t: float, host: str, user: str, ip: str, port: int) -> tuple[str, bytes]:
    return TOPIC_RAW_SYSLOG, fmt.rfc3164(t, host, "sshd", 4242, f"Accepted password for {user} from {ip} port {port} "
                                         "ssh2").encode()


def windows_logon(t: float, user: str, ip: str, port: int, logon_type: int) -> tuple[str, bytes]:
    """The file server's 4624 as the EvntSLog agent forwards it (the generator's own rendering)."""
    w = fmt.WinLogon(user, "CORP", "S-1-5-21-1-2-3-1104", logon_type, ip, port, "WS-07", "0x3bad0b8",
                     computer_account="FS-HQ-01$")
    return TOPIC_RAW_SYSLOG, fmt.windows_logon(t, FILESRV, w, "00000000-0000-0000-0000-000000000000").encode()


def windows_flow(t: float, uid: str, ip: str, port: int, server_port: int) -> tuple[str, bytes]:
    """Zeek's conn record of an SMB (445) or RDP (3389) connection to the file server (no ssh record, of course)."""
    conn = json.loads(fmt.conn(t, uid, ip, port, FILESRV_IP, server_port, "tcp",
                               service="smb" if server_port == 445 else "rdp", duration=42.0, orig_bytes=1500,
                               resp_bytes=250000))
    conn["community_id"] = f"1:{uid}="
    return TOPIC_RAW_ZEEK, json.dumps(conn).encode()


def flow(t: float, uid: str, ip: str, port: int, server_ip: str, *, duration: float, out: int, back: int,
         ok: bool = True) -> list[tuple[str, bytes]]:
    """Zeek's conn and ssh records of one SSH connection (conn with a community id, as Zeek's package adds it)."""
    conn = json.loads(fmt.conn(t, uid, ip, port, server_ip, 22, "tcp", service="ssh", duration=duration,
                               orig_bytes=out, resp_bytes=back))
    conn["community_id"] = f"1:{uid}="
    ssh = fmt.ssh(t, uid, ip, port, server_ip, 22, auth_success=ok, auth_attempts=1, client="SSH-2.0-PuTTY_Release_0.81",
                  server="SSH-2.0-OpenSSH_9.2p1")
    return [(TOPIC_RAW_ZEEK, json.dumps(conn).encode()), (TOPIC_RAW_ZEEK, ssh.encode())]


def send(bootstrap: str, records: list[tuple[str, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for topic, value in records:
        producer.produce(topic, value)
    assert producer.flush(30) == 0


def write_events(spark, settings: Settings, records: list[tuple[str, bytes]], round_: int) -> None:
    """``records`` -> one commit of the ``events`` table, by the ingest query's own steps run in batch (parse, DHCP
    attribution, reference joins: ``alerts.python_rules.enriched_events``, the same code as the stream's). Kafka and
    the ingest query are tested elsewhere; here each round must just be one new commit for auth_sessions to read,
    and a pipeline run per round cost ~10 s of the suite (issue 16)."""
    from alerts.python_rules import enriched_events
    from enrich.reference_data import ReferenceCache
    from ingest.delta_sink import write_batch
    from ingest.file_source import records_table

    now = dt.datetime.now(dt.UTC)
    # Offsets far past what the broker holds: no event id of a round equals one of the Kafka round at the end.
    first = 1_000_000 * (round_ + 1)
    tables = [records_table([(0, first + i, value, None, now) for i, (t, value) in enumerate(records) if t == topic],
                            topic) for topic in (TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK)]
    bronze = spark.createDataFrame(pa.concat_tables(tables))
    events, unparsed = enriched_events(bronze, ReferenceCache(settings.lake).current(), [])
    assert unparsed == []
    assert write_batch(events, settings.table_path(TABLE_EVENTS), "test.auth_sessions.events", round_) == len(records)


@pytest.fixture(scope="module")
def own_broker():
    with EmbeddedBroker(port=free_port()) as b:
        yield b


def sessions(lake) -> dict[tuple[str, int], dict]:
    rows = table_dataset(lake, TABLE_AUTH_SESSIONS).to_table().to_pylist()
    keyed = {(r["client_ip"], r["client_port"]): r for r in rows}
    assert len(keyed) == len(rows), rows  # one row per login, never two
    return keyed


def state_rows(query) -> int:
    return sum(int(op["numRowsTotal"]) for op in query.lastProgress["stateOperators"])


@pytest.mark.slow
def test_every_login_is_joined_to_its_flow_once_unmatched_logins_follow_the_watermark_and_state_is_dropped(
        spark, own_broker, tmp_path, caplog):
    import logging

    from alerts.detection_input import events_schema
    from alerts.detection_stream import events_stream
    from core.triggers import QUERY_AUTH_SESSIONS, QUERY_INGEST, Trigger
    from enrich.auth_sessions import start_auth_sessions
    from nightjar.pipeline import run_pipeline

    lake = tmp_path / "lake"
    settings = Settings(bootstrap=own_broker.bootstrap, lake=lake, shuffle_partitions=2)
    write_deltalake(str(lake / TABLE_ASSETS), pa.table({"host": [BASTION, DB, FILESRV],
                                                        "ip": [BASTION_IP, DB_IP, FILESRV_IP]}))
    drain = Trigger(available_now=True)
    caplog.set_level(logging.INFO, logger="core.spark_session")
    rounds = iter(range(100))

    def round_(records: list[tuple[str, bytes]]):
        """One round: one commit of ``events`` (the ingest query's own steps, in batch), then one available-now run
        of auth_sessions over it."""
        write_events(spark, settings, records, next(rounds))
        query = start_auth_sessions(spark, settings, drain, events_stream(spark, settings, events_schema(spark)))
        query.awaitTermination(600)
        assert query.exception() is None, query.exception()
        return query

    # Round 1: alice's flow arrives before her login; bob's login before his flow; carol's flow never comes.
    # A port-22 connection nobody logged in on (a probe) must never produce a row.
    # Windows: frank's SMB flow before his network logon (type 3); grace's RDP logon (type 10) before her flow;
    # heidi's network logon from the probe's client address and port never takes the probe's SSH flow (service);
    # ivan's interactive logon (type 2) is not a network logon: no row.
    q = round_([*flow(T0 + 10, "CAlice0000000001", "73.15.1.2", 50001, BASTION_IP, duration=300.5, out=4100,
                      back=52000),
                login(T0 + 40, DB, "bob", "10.10.0.21", 50002),
                login(T0 + 45, BASTION, "carol", "98.207.3.4", 50003),
                *flow(T0 + 46, "CProbe0000000001", "45.155.204.9", 40000, BASTION_IP, duration=0.4, out=0, back=40,
                      ok=False),
                windows_flow(T0 + 20, "CFrank0000000001", "10.10.0.31", 50006, 445),
                windows_logon(T0 + 30, "grace", "10.10.0.32", 50007, 10),
                windows_logon(T0 + 47, "heidi", "45.155.204.9", 40000, 3),
                windows_logon(T0 + 48, "ivan", "127.0.0.1", 0, 2)])
    assert not (lake / TABLE_AUTH_SESSIONS).exists() or sessions(lake) == {}
    assert state_rows(q) > 0  # the waiting logins and flows are held in the joins' state
    # Off the alert path: its micro-batches run in the low-priority pool (core/resources/fairscheduler.xml).
    assert "auth_sessions query: micro-batches run in scheduler pool 'enrichment' (FAIR mode)" in caplog.text

    # Round 2, a later micro-batch: alice's login (flow already in state), bob's flow (login already in state).
    q = round_([login(T0 + 11, BASTION, "alice", "73.15.1.2", 50001),
                *flow(T0 + 39, "CBob000000000001", "10.10.0.21", 50002, DB_IP, duration=61.0, out=3000, back=9000),
                windows_logon(T0 + 20.1, "frank", "10.10.0.31", 50006, 3),
                windows_flow(T0 + 29.9, "CGrace0000000001", "10.10.0.32", 50007, 3389)])
    got = sessions(lake)
    # (The Windows logons wait in the second join, the one with Zeek ssh records, until the watermark passes.)
    assert set(got) == {("73.15.1.2", 50001), ("10.10.0.21", 50002)}
    alice, bob = got[("73.15.1.2", 50001)], got[("10.10.0.21", 50002)]
    assert (alice["user_name"], alice["host_name"], alice["server_ip"], alice["server_port"]) == \
        ("alice", BASTION, BASTION_IP, 22)
    assert alice["matched"] and alice["zeek_uid"] == "CAlice0000000001" and alice["duration_s"] == pytest.approx(300.5)
    assert (alice["bytes_out"], alice["bytes_in"]) == (4100, 52000)
    assert alice["zeek_auth_success"] is True and alice["client_software"] == "SSH-2.0-PuTTY_Release_0.81"
    assert alice["community_id"] == "1:CAlice0000000001=" and alice["auth_method"] == "password"
    assert (bob["user_name"], bob["server_ip"], bob["zeek_uid"], bob["bytes_out"]) == ("bob", DB_IP,
                                                                                       "CBob000000000001", 3000)
    # Everything of rounds 1-2 is still in state (the watermark is behind them): logins, conns, ssh records, and the
    # two logins the first join passed on to the second.
    held = state_rows(q)
    assert held >= 10, q.lastProgress["stateOperators"]

    # Rounds 3 and 4, ten minutes on: dave's complete session moves every side's watermark past carol's login +
    # 2 minutes, so carol is emitted unmatched (once), and the old logins and flows leave the state.
    q = round_([login(T0 + 600, BASTION, "dave", "24.6.7.8", 50004),
                *flow(T0 + 599, "CDave00000000001", "24.6.7.8", 50004, BASTION_IP, duration=20.0, out=100, back=200)])
    assert sessions(lake)[("98.207.3.4", 50003)]["matched"] is False  # emitted as soon as the watermark passed
    q = round_([login(T0 + 900, BASTION, "erin", "24.6.7.9", 50005),
                *flow(T0 + 899, "CErin00000000001", "24.6.7.9", 50005, BASTION_IP, duration=20.0, out=100, back=200)])
    got = sessions(lake)
    assert set(got) == {("73.15.1.2", 50001), ("10.10.0.21", 50002), ("98.207.3.4", 50003), ("24.6.7.8", 50004),
                        ("24.6.7.9", 50005), ("10.10.0.31", 50006), ("10.10.0.32", 50007), ("45.155.204.9", 40000)}
    frank, grace, heidi = got[("10.10.0.31", 50006)], got[("10.10.0.32", 50007)], got[("45.155.204.9", 40000)]
    assert (frank["service"], frank["user_name"], frank["host_name"], frank["server_ip"], frank["server_port"]) == \
        ("smb", "frank", FILESRV, FILESRV_IP, 445)
    assert frank["matched"] and frank["zeek_uid"] == "CFrank0000000001" and frank["auth_method"] == "ntlm"
    assert (frank["duration_s"], frank["bytes_out"], frank["bytes_in"]) == (42.0, 1500, 250000)
    assert frank["community_id"] == "1:CFrank0000000001=" and frank["zeek_auth_success"] is None
    assert (grace["service"], grace["server_port"], grace["zeek_uid"]) == ("rdp", 3389, "CGrace0000000001")
    assert (heidi["service"], heidi["matched"], heidi["zeek_uid"], heidi["server_ip"]) == ("smb", False, None,
                                                                                           FILESRV_IP)
    assert {r["user_name"] for r in got.values() if r["service"] == "ssh"} == {"alice", "bob", "carol", "dave", "erin"}
    carol = got[("98.207.3.4", 50003)]
    assert carol["user_name"] == "carol" and carol["matched"] is False and carol["zeek_uid"] is None
    assert carol["server_ip"] == BASTION_IP and carol["duration_s"] is None
    assert got[("24.6.7.8", 50004)]["matched"] and got[("24.6.7.9", 50005)]["matched"]
    # State is bounded by the watermark: every row of rounds 1-2 is gone; at most dave's and erin's rows (two per
    # session in each of the two joins) are left — the second join evicts later, its input watermark being the
    # first join's output watermark (docs/enrichment.md).
    ops = [int(op["numRowsTotal"]) for op in q.lastProgress["stateOperators"]]
    assert len(ops) == 2 and max(ops) <= 4 and sum(ops) < held, (held, q.lastProgress["stateOperators"])

    # The pipeline runs the same query from the same checkpoint (registered with the supervisor): nothing new,
    # nothing twice; and a round that came through Kafka and the ingest query is joined like the others.
    send(own_broker.bootstrap, [login(T0 + 1200, BASTION, "judy", "24.6.7.10", 50008),
                                *flow(T0 + 1199, "CJudy00000000001", "24.6.7.10", 50008, BASTION_IP, duration=5.0,
                                      out=10, back=20)])
    run_pipeline(settings, drain, [QUERY_INGEST, QUERY_AUTH_SESSIONS])
    got = sessions(lake)
    assert len(got) == 9 and got[("24.6.7.10", 50008)]["matched"] and got[("24.6.7.10", 50008)]["user_name"] == "judy"


@pytest.mark.slow
def test_the_batch_join_over_history_gives_the_same_sessions(spark):
    from enrich.auth_sessions import auth_sessions_batch
    from ingest.arrow_parse import events_of, parse_bronze
    from ingest.file_source import lines_dataframe

    records = [login(T0 + 11, BASTION, "alice", "73.15.1.2", 50001),
               *flow(T0 + 10, "CAlice0000000001", "73.15.1.2", 50001, BASTION_IP, duration=300.5, out=4100,
                     back=52000),
               login(T0 + 45, BASTION, "carol", "98.207.3.4", 50003),
               # the same client port again 10 minutes later: outside the ±2 minutes, not carol's flow
               *flow(T0 + 645, "CLater0000000001", "98.207.3.4", 50003, BASTION_IP, duration=1.0, out=1, back=1),
               windows_flow(T0 + 20, "CFrank0000000001", "10.10.0.31", 50006, 445),
               windows_logon(T0 + 20.1, "frank", "10.10.0.31", 50006, 3),
               windows_logon(T0 + 48, "ivan", "127.0.0.1", 0, 2)]
    events = events_of(parse_bronze(lines_dataframe(spark, [v.decode() for _t, v in records])))
    servers = spark.createDataFrame([(BASTION.lower(), BASTION_IP), (FILESRV, FILESRV_IP)],
                                    "srv_host string, srv_ip string")
    rows = {r["user_name"]: r for r in auth_sessions_batch(events, servers).collect()}
    assert set(rows) == {"alice", "carol", "frank"}
    assert rows["frank"]["matched"] and rows["frank"]["zeek_uid"] == "CFrank0000000001"
    assert (rows["frank"]["service"], rows["frank"]["server_port"], rows["alice"]["service"]) == ("smb", 445, "ssh")
    assert rows["alice"]["matched"] and rows["alice"]["zeek_uid"] == "CAlice0000000001"
    assert rows["alice"]["bytes_in"] == 52000 and rows["alice"]["zeek_auth_success"] is True
    assert rows["carol"]["matched"] is False and rows["carol"]["server_ip"] == BASTION_IP


def test_live_the_query_runs_on_its_own_slower_trigger_and_a_drain_stays_a_drain():
    """Off the alert path: live, ``auth_sessions`` runs every NIGHTJAR_AUTH_SESSIONS_TRIGGER (default 30 s), never
    more often than the pipeline's trigger; an available-now run drains it like every other query."""
    from core.config import DEFAULT_AUTH_SESSIONS_TRIGGER, settings_from_env
    from core.errors import UserError
    from core.triggers import Trigger

    assert settings_from_env(environ={}).auth_sessions_trigger == DEFAULT_AUTH_SESSIONS_TRIGGER == "30 seconds"
    every = settings_from_env(environ={"NIGHTJAR_AUTH_SESSIONS_TRIGGER": "2m"}).auth_sessions_trigger
    assert every == "120 seconds"
    with pytest.raises(UserError, match="NIGHTJAR_AUTH_SESSIONS_TRIGGER") as err:
        settings_from_env(environ={"NIGHTJAR_AUTH_SESSIONS_TRIGGER": "soon"})
    assert err.value.exit_code == 2
    assert Trigger(interval="1 second").slowed_to(every) == Trigger(interval="120 seconds")
    assert Trigger(interval="5 minutes").slowed_to(every) == Trigger(interval="5 minutes")
    assert Trigger(available_now=True).slowed_to(every) == Trigger(available_now=True)
