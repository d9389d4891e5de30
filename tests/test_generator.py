"""The generator: determinism, background statistics, each scenario's pattern, CLI errors, files and Kafka."""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import json
import re
import statistics
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from generator.benign import LEASE_TIME
from generator.command import generate
from generator.engine import Options, Simulation
from generator.reference_tables import networks
from generator.scenarios import ATTACKS, HARD_NEGATIVES, SCENARIOS, WINDOWS_GUESSES
from generator.sinks import FileSink
from generator.timeline import SYSLOG, ZEEK

REPO = Path(__file__).resolve().parent.parent
NIGHTJAR = REPO / ".venv" / "bin" / "nightjar"
MONDAY = dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()  # a Monday, 00:00 UTC
SYSLOG_RE = re.compile(r"^<(\d+)>(?:1 (\S+) (\S+) (\S+) (\d+|-) - - (?:- )?|(\w{3} [ \d]\d \d\d:\d\d:\d\d) (\S+) (\S+)\[(\d+)\]: )(.*)$")


def run_sim(**kw) -> tuple[Simulation, list[tuple]]:
    opts = Options(**{"seed": 11, "hosts": 40, "users": 20, "start": MONDAY + 9 * 3600, **kw})
    sim = Simulation(opts)
    out = []
    end = opts.start + opts.duration if opts.duration else float("inf")
    for ev in sim.events():
        if ev[0] >= end or (opts.events is not None and len(out) >= opts.events):
            break
        out.append(ev)
    sim.emitted_by_tag = Counter(e[6] for e in out if e[6])
    return sim, out


def msg(line: str) -> str:
    m = SYSLOG_RE.match(line)
    assert m, line
    return m.group(10)


# -- determinism ------------------------------------------------------------------------------------------
def _files(tmp: Path, seed: int) -> dict[str, bytes]:
    opts = Options(seed=seed, hosts=60, users=30, start=MONDAY + 8 * 3600, events=6000,
                   scenarios={n: 1 for n in SCENARIOS})
    sink = FileSink(tmp)
    sim, *_ = generate(opts, sink)
    sink.close()
    from generator.reference_tables import write_files

    attacks, negatives, _cut = sim.ground_truth()
    write_files(tmp, sim.org, opts.start, attacks, negatives)
    return {p.name: p.read_bytes() for p in sorted(tmp.iterdir())}


def test_same_seed_and_options_give_byte_identical_files_and_another_seed_does_not(tmp_path):
    a = _files(tmp_path / "a", 5)
    b = _files(tmp_path / "b", 5)
    c = _files(tmp_path / "c", 6)
    assert set(a) >= {"syslog.log", "zeek.log", "ground_truth.jsonl", "assets.jsonl", "users.jsonl",
                      "networks.jsonl", "iocs.jsonl"}
    assert a == b
    assert a["zeek.log"] != c["zeek.log"] and a["syslog.log"] != c["syslog.log"]
    assert sum(v.count(b"\n") for k, v in a.items() if k.endswith(".log")) == 6000


def test_cli_output_is_deterministic_and_complete(tmp_path):
    outs = []
    for name in ("x", "y"):
        r = subprocess.run([str(NIGHTJAR), "generate", "--events", "3000", "--seed", "9", "--hosts", "40",
                            "--users", "20", "--start", "2026-03-02T10:00:00Z", "--quiet", "--out",
                            str(tmp_path / name)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert "3,000 events" in r.stdout and "events per source:" in r.stdout and "zeek.conn" in r.stdout
        outs.append({p.name: p.read_bytes() for p in (tmp_path / name).iterdir()})
    assert outs[0] == outs[1]
    gt = [json.loads(x) for x in outs[0]["ground_truth.jsonl"].splitlines()]
    assert gt and all(set(r) >= {"incident_id", "scenario", "expected_rule_id", "entity", "start", "end"} for r in gt)
    assert len({r["incident_id"] for r in gt}) == len(gt)


def test_cli_org_seed_gives_fresh_activity_of_the_same_organization(tmp_path):
    """A model is evaluated on a day it never saw of the organization it learned: same hosts and users, new events."""
    def run(name, *extra):
        r = subprocess.run([str(NIGHTJAR), "generate", "--events", "2000", "--hosts", "30", "--users", "12",
                            "--start", "2026-03-02T10:00:00Z", "--no-attacks", "--quiet", "--out", str(tmp_path / name),
                            *extra], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return {p.name: p.read_bytes() for p in (tmp_path / name).iterdir()}

    trained, fresh, other = run("a", "--seed", "1"), run("b", "--seed", "3", "--org-seed", "1"), run("c", "--seed", "3")
    assert fresh["assets.jsonl"] == trained["assets.jsonl"] and fresh["users.jsonl"] == trained["users.jsonl"]
    assert fresh["zeek.log"] != trained["zeek.log"] and fresh["syslog.log"] != trained["syslog.log"]
    assert other["assets.jsonl"] != trained["assets.jsonl"]  # without it the seed builds another organization


@pytest.mark.parametrize("args, fragment", [
    (["--events", "-5"], "--events must be positive"),
    (["--scenarios", "ssh_brute_force,nope"], "unknown scenario 'nope'"),
    (["--start", "yesterday"], "is not an ISO 8601 time"),
    (["--rate", "10", "--speedup", "2"], "not both"),
    (["--hosts", "3"], "--hosts must be at least 12"),
])
def test_cli_bad_arguments_give_one_line_and_nonzero_exit(tmp_path, args, fragment):
    r = subprocess.run([str(NIGHTJAR), "generate", *args, "--out", str(tmp_path / "o")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and lines[0].startswith("nightjar generate: error:")
    assert not (tmp_path / "o" / "zeek.log").exists()


# -- the benign background --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_days():
    return run_sim(start=MONDAY, duration=2 * 86400, scenarios={})


def test_dhcp_renewals_come_at_half_the_lease_and_addresses_move_between_hosts(two_days):
    sim, events = two_days
    lines = [e for e in events if e[5] == "dhcpd"]
    renew = defaultdict(list)
    holders = defaultdict(list)  # ip -> macs that got it, in order
    for e in lines:
        m = msg(e[4])
        r = re.match(r"DHCPREQUEST for (\S+) from (\S+) ", m)
        if r:  # renewals name no server id (unicast to the server); initial requests do
            renew[r.group(2)].append(e[0])
        a = re.match(r"DHCPACK on (\S+) to (\S+) ", m)
        if a and (not holders[a.group(1)] or holders[a.group(1)][-1] != a.group(2)):
            holders[a.group(1)].append(a.group(2))
    gaps = [b - a for ts in renew.values() for a, b in zip(ts, ts[1:], strict=False) if b - a < LEASE_TIME]
    assert len(gaps) > 500
    assert abs(statistics.median(gaps) - LEASE_TIME / 2) < 1.0
    assert all(abs(g - LEASE_TIME / 2) < 1.0 for g in gaps)
    # A full DISCOVER/OFFER/REQUEST/ACK cycle happens (laptops arriving) and some leases are released.
    kinds = Counter(msg(e[4]).split()[0] for e in lines)
    assert kinds["DHCPDISCOVER"] > 10 and kinds["DHCPOFFER"] == kinds["DHCPDISCOVER"] and kinds["DHCPRELEASE"] > 5
    # Over two days some address was leased to more than one host.
    assert sum(len(set(macs)) > 1 for macs in holders.values()) >= 3
    # No address is held by two MACs at once: before an address is ACKed to another MAC, the previous holder
    # released it, or its lease ran out (no ACK to the previous holder for at least half a lease).
    last_ack: dict[str, tuple[str, float]] = {}
    released: set[str] = set()
    handovers = 0
    for e in lines:
        m = msg(e[4])
        if m.startswith("DHCPRELEASE of "):
            released.add(m.split()[2])
        a = re.match(r"DHCPACK on (\S+) to (\S+) ", m)
        if a:
            ip, mac = a.groups()
            prev = last_ack.get(ip)
            if prev and prev[0] != mac:
                assert ip in released or e[0] - prev[1] >= LEASE_TIME / 2, (ip, prev, mac, e[0])
                handovers += 1
            released.discard(ip)
            last_ack[ip] = (mac, e[0])
    assert handovers >= 3


def test_load_follows_the_working_day(two_days):
    _sim, events = two_days
    per_hour = Counter(int((e[0] - MONDAY) // 3600) for e in events if e[6] is None)
    day = statistics.mean(per_hour[h] for h in (11, 12, 13, 14, 15))
    night = statistics.mean(per_hour[h] for h in (0, 1, 2, 3, 4, 5) if h not in (1, 2, 3))
    assert day > 4 * night
    # Same shape on the second day (an hourly peak in the afternoon, not at night).
    peak = max(range(24, 48), key=lambda h: per_hour[h]) - 24
    assert 10 <= peak <= 17


def test_every_external_connection_follows_a_dns_lookup_of_its_address(two_days):
    _sim, events = two_days
    answers: dict[tuple[str, str], float] = {}
    checked = 0
    for e in events:
        if e[2] != ZEEK or e[6] is not None:
            continue
        r = json.loads(e[4])
        if r["_path"] == "dns":
            for a in r.get("answers", []):
                answers[(r["id.orig_h"], a)] = r["ts"]
        elif r["_path"] == "conn" and r["proto"] == "tcp" and r["local_orig"] and not r["local_resp"]:
            looked = answers.get((r["id.orig_h"], r["id.resp_h"]))
            assert looked is not None and looked < r["ts"], r
            checked += 1
    assert checked > 1000


def test_the_nightly_backup_beats_every_five_minutes(two_days):
    sim, events = two_days
    ip = sim.org.special("backup").static_ip
    target = sim.org.backup_target[1]
    ts = [json.loads(e[4])["ts"] for e in events if e[2] == ZEEK and f'"id.orig_h":"{ip}"' in e[4]
          and f'"id.resp_h":"{target}"' in e[4] and '"_path":"conn"' in e[4]]
    hours = {int((t % 86400) // 3600) for t in ts}
    assert hours == {1, 2, 3} and len(ts) == 2 * 36
    assert all(270 < b - a < 330 for a, b in zip(ts, ts[1:], strict=False) if b - a < 3600)


# -- scenarios ----------------------------------------------------------------------------------------------
def _incident(name: str):
    sim, events = run_sim(events=9000, scenarios={name: 1})
    attacks, negatives, cut = sim.ground_truth()
    rows = attacks + negatives
    assert not cut and len(rows) == 1, (rows, cut)
    row = rows[0]
    tagged = [e for e in events if e[6] == row["incident_id"]]
    assert len(tagged) == row["event_count"] > 0
    start = dt.datetime.fromisoformat(row["start"]).timestamp()
    end = dt.datetime.fromisoformat(row["end"]).timestamp()
    assert abs(min(e[0] for e in tagged) - start) < 0.002 and abs(max(e[0] for e in tagged) - end) < 0.002
    assert row["expected_rule_id"] == (SCENARIOS[name].rule_id if SCENARIOS[name].attack else None)
    zeek = [json.loads(e[4]) for e in tagged if e[2] == ZEEK]
    sys_msgs = [msg(e[4]) for e in tagged if e[2] == SYSLOG]
    return sim, row, zeek, sys_msgs, events


def _country(ip: str) -> str | None:
    for r in networks().to_pylist():
        if ipaddress.ip_address(ip) in ipaddress.ip_network(r["cidr"]):
            return r["country"]
    return None


def _max_in_window(times: list[float], window: float) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] < t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


@pytest.mark.parametrize("name", ATTACKS + HARD_NEGATIVES)
def test_each_scenario_alone_shows_the_pattern_its_ground_truth_claims(name):
    sim, row, zeek, msgs, events = _incident(name)
    ent = row["entity"]["value"]
    org = sim.org
    if name in ("ssh_brute_force", "ssh_brute_force_success"):
        fails = [m for m in msgs if m.startswith("Failed password") and f" from {ent} " in m]
        assert len(fails) >= 30
        if name == "ssh_brute_force_success":
            ok = [m for m in msgs if m.startswith(f"Accepted password for {row['user_name']} from {ent} ")]
            assert len(ok) == 1 and msgs.index(ok[0]) > msgs.index(fails[-1])
        else:
            assert not any(m.startswith("Accepted") for m in msgs)
    elif name == "password_spraying":
        users = {re.search(r"for (?:invalid user )?(\S+) from", m).group(1) for m in msgs if m.startswith("Failed")}
        assert len(users) >= 15 and users <= set(org.user_by_name)
        assert all(f" from {ent} " in m for m in msgs if m.startswith("Failed"))
    elif name in ("windows_brute_force", "windows_password_spraying"):
        fails = [m for m in msgs if m.startswith("An account failed to log on.")]
        assert fails and len(fails) == len(msgs) and all(f"Source Network Address: {ent} " in m for m in fails)
        target = org.host_by_name[row["host_name"]]
        assert target.windows and all(e[3] == target.name for e in events
                                      if e[6] == row["incident_id"] and e[2] == SYSLOG)
        users = [re.search(r"Account For Which Logon Failed: Security ID: \S+ Account Name: (\S+) ", m).group(1)
                 for m in fails]
        if name == "windows_brute_force":
            assert len(fails) >= 40 and len(set(users)) <= len(WINDOWS_GUESSES) and _country(ent) is not None
            assert _max_in_window([e[0] for e in events if e[6] == row["incident_id"]], 300) >= 20
        else:
            assert len(set(users)) == len(users) >= 15 and set(users) <= set(org.user_by_name)
            assert ipaddress.ip_address(ent).is_private
    elif name == "port_scan_horizontal":
        conns = [z for z in zeek if z["id.orig_h"] == ent]
        assert len({z["id.resp_h"] for z in conns}) >= 50 and len({z["id.resp_p"] for z in conns}) == 1
        assert all(z["conn_state"] in ("S0", "REJ") for z in conns)
        assert not org.host_by_name[row["host_name"]].authorized_scanner
    elif name == "port_scan_vertical":
        conns = [z for z in zeek if z["id.orig_h"] == ent]
        assert len({z["id.resp_h"] for z in conns}) == 1 and len({z["id.resp_p"] for z in conns}) >= 200
    elif name == "dns_tunnelling":
        qs = [z for z in zeek if z["_path"] == "dns" and z["id.orig_h"] == ent]
        domains = Counter(".".join(z["query"].split(".")[-2:]) for z in qs)
        assert domains.most_common(1)[0][1] >= 150 and all(len(z["query"].split(".")[0]) >= 40 for z in qs)
        assert all(z["qtype_name"] == "TXT" for z in qs)
    elif name == "dns_dga":
        qs = [z for z in zeek if z["_path"] == "dns" and z["id.orig_h"] == ent]
        nx = {z["query"] for z in qs if z["rcode_name"] == "NXDOMAIN"}
        assert len(nx) >= 30 and len(nx) >= 0.8 * len(qs)
    elif name == "c2_beaconing":
        conns = [z for z in zeek if z["_path"] == "conn" and z["id.orig_h"] == ent and z["id.resp_p"] == 443]
        assert {z["id.resp_h"] for z in conns} == {row["details"]["destination"]} and len(conns) >= 20
        gaps = [b["ts"] - a["ts"] for a, b in zip(conns, conns[1:], strict=False)]
        cv = statistics.pstdev(gaps) / statistics.mean(gaps)
        assert 0.01 < cv < 0.2
        assert all(z["orig_bytes"] < 1000 for z in conns)
    elif name == "ioc_match":
        bad = {i.indicator for i in org.iocs}
        seen = {z.get("query") for z in zeek} | {z.get("id.resp_h") for z in zeek}
        assert len(seen & bad) >= 2 and all(z["id.orig_h"] == ent for z in zeek)
    elif name == "exfiltration":
        out = sum(z.get("orig_bytes", 0) for z in zeek if z["_path"] == "conn" and z["id.orig_h"] == ent
                  and z["id.resp_h"] == row["details"]["destination"])
        assert out >= 300_000_000
        assert all(z["orig_bytes"] > z["resp_bytes"] for z in zeek if z["_path"] == "conn" and z["id.resp_p"] == 443)
    elif name == "dhcp_starvation":
        macs = {re.search(r"from (\S+)", m).group(1) for m in msgs if m.startswith("DHCPDISCOVER")}
        assert len(macs) >= 300 and not macs & {h.mac for h in org.hosts}
        assert any(m.endswith("no free leases") for m in msgs)
        discovers = [e[0] for e in events if e[6] == row["incident_id"] and "DHCPDISCOVER" in e[4]]
        assert _max_in_window(discovers, 300) >= 300
    elif name == "sudo_non_admin":
        sudo = [m for m in msgs if " : " in m and "COMMAND=" in m]
        assert sudo and all(m.split(" : ")[0] == ent for m in sudo)
        assert not org.user_by_name[ent].is_admin
    elif name == "new_country_login":
        user = org.user_by_name[ent]
        ok = [m for m in msgs if m.startswith(f"Accepted password for {ent} ") or m.startswith(f"Accepted publickey for {ent} ")]
        assert len(ok) == 1
        src = re.search(r" from (\S+) port", ok[0]).group(1)
        assert _country(src) not in (None, user.country)
        # The user's usual login, from home, is in the background just before.
        home = [e for e in events if e[6] is None and e[2] == SYSLOG and "Accepted" in e[4] and f" for {ent} " in e[4]]
        assert home and all(_country(re.search(r" from (\S+) port", msg(e[4])).group(1)) == user.country for e in home)
    elif name == "mistype_3":
        fails = [m for m in msgs if m.startswith("Failed password")]
        assert len(fails) == 3 and msgs.index(next(m for m in msgs if m.startswith("Accepted"))) > msgs.index(fails[-1])
        assert org.user_by_name[row["user_name"]].is_admin
    elif name == "authorized_scanner":
        assert org.host_by_name[row["host_name"]].authorized_scanner and all(z["id.orig_h"] == ent for z in zeek)
        assert len({z["id.resp_h"] for z in zeek}) >= 50
    elif name == "backup_beat":
        conns = [z for z in zeek if z["_path"] == "conn" and z["id.resp_h"] == org.backup_target[1]]
        assert len(conns) >= 6 and all(z["orig_bytes"] > 10_000_000 for z in conns)
        assert row["must_not_fire"].split(",") == ["c2_beaconing", "exfiltration"]
    else:
        raise AssertionError(f"no check for scenario {name}")


def test_every_ssh_login_is_logged_by_sshd_and_by_zeek_conn_and_ssh_with_the_same_four_tuple():
    sim, events = run_sim(events=12000, scenarios={"new_country_login": 1, "ssh_brute_force_success": 1,
                                                   "mistype_3": 1})
    ip_of = {h.name: h.static_ip for h in sim.org.hosts if h.static_ip}
    flows: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for e in events:
        if e[2] == ZEEK and e[5] in ("zeek.conn", "zeek.ssh"):
            r = json.loads(e[4])
            if r["id.resp_p"] == 22:
                flows[(r["id.orig_h"], r["id.orig_p"], r["id.resp_h"], r["id.resp_p"])][r["_path"]] = r
    logins = [(e, re.search(r"^Accepted \S+ for (\S+) from (\S+) port (\d+) ", msg(e[4]))) for e in events
              if e[5] == "sshd" and " Accepted " in e[4]]
    assert len(logins) >= 3
    for e, m in logins:
        flow = flows[(m.group(2), int(m.group(3)), ip_of[e[3]], 22)]
        assert set(flow) == {"conn", "ssh"}, e[4]
        assert flow["conn"]["uid"] == flow["ssh"]["uid"] and flow["ssh"]["auth_success"] is True
        assert flow["ssh"]["ts"] <= e[0] <= flow["ssh"]["ts"] + 120  # within the join's time range
    # Windows logons at workstations and on file servers are in the background, mistakes included.
    win = [msg(e[4]) for e in events if e[5] == "EvntSLog"]
    assert any(m.startswith("An account was successfully logged on.") and "Logon Type: 3 " in m for m in win)
    assert any(m.startswith("An account was successfully logged on.") and "Logon Type: 2 " in m for m in win)


def test_an_unbounded_run_injects_every_scenario_each_simulated_hour():
    opts = Options(seed=4, hosts=60, users=30, start=MONDAY + 9 * 3600, scenarios={n: 1 for n in SCENARIOS})
    sim = Simulation(opts)
    n = 0
    for ev in sim.events():
        if ev[0] >= opts.start + 3 * 3600:
            break
        n += 1
    attacks, negatives, _cut = sim.ground_truth()
    per = Counter(r["scenario"] for r in attacks + negatives)
    assert all(per[name] >= 2 for name in ATTACKS), per
    assert all(r["start"] < dt.datetime.fromtimestamp(opts.start + 3 * 3600, tz=dt.UTC).isoformat() for r in attacks)


def test_no_attacks_means_an_empty_attack_ground_truth():
    sim, events = run_sim(events=3000, scenarios={})
    attacks, negatives, cut = sim.ground_truth()
    assert attacks == negatives == cut == [] and all(e[6] is None for e in events)


def test_cli_args_map_onto_options():
    from generator.command import add_arguments, options_from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    p.add_argument("--lake")
    o = options_from_args(p.parse_args(["--events", "50", "--scenarios", "c2_beaconing=3,dns_dga", "--count", "2",
                                        "--start", "2026-01-05T08:00:00Z", "--seed", "4"]))
    assert o.scenarios == {"c2_beaconing": 3, "dns_dga": 2} and o.events == 50 and o.seed == 4
    assert o.start == MONDAY + 8 * 3600
    o = options_from_args(p.parse_args(["--no-attacks", "--duration", "60"]))
    assert set(o.scenarios) == set(HARD_NEGATIVES) and o.events is None and o.duration == 60


# -- sinks: Kafka and the lake ------------------------------------------------------------------------------
def _consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[tuple[bytes, bytes]]:
    import time
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "enable.partition.eof": True, "fetch.wait.max.ms": 25})
    parts = c.list_topics(topic, timeout=10).topics[topic].partitions
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    out: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
                continue
            assert not m.error(), m.error()
            out.append((m.key(), m.value()))
        # Nothing beyond what was expected.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and not m.error():
                out.append((m.key(), m.value()))
    finally:
        c.close()
    return out


def test_kafka_output_matches_the_file_output_and_the_lake_gets_reference_tables_and_ground_truth(tmp_path):
    from deltalake import DeltaTable

    from core.config import TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK
    from ingest.embedded_broker import EmbeddedBroker, free_port

    common = ["--events", "4000", "--seed", "21", "--hosts", "50", "--users", "25", "--start", "2026-01-06T09:00:00Z",
              "--quiet"]
    files = tmp_path / "files"
    r = subprocess.run([str(NIGHTJAR), "generate", *common, "--out", str(files)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lake = tmp_path / "lake"
    with EmbeddedBroker(port=free_port()) as b:
        r = subprocess.run([str(NIGHTJAR), "generate", *common, "--bootstrap", b.bootstrap, "--lake", str(lake)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        syslog_lines = (files / "syslog.log").read_bytes().splitlines()
        zeek_lines = (files / "zeek.log").read_bytes().splitlines()
        got_syslog = _consume_all(b.bootstrap, TOPIC_RAW_SYSLOG, len(syslog_lines))
        got_zeek = _consume_all(b.bootstrap, TOPIC_RAW_ZEEK, len(zeek_lines))
    assert Counter(v for _k, v in got_syslog) == Counter(syslog_lines)
    assert Counter(v for _k, v in got_zeek) == Counter(zeek_lines)
    # Keys: the emitting host for syslog, the originating address (or lease address) for Zeek.
    assert all(k.decode() in v.decode() for k, v in got_syslog[:200])
    assert all(json.loads(v).get("id.orig_h", k.decode()) == k.decode() for k, v in got_zeek[:200]
               if b'"_path":"dhcp"' not in v)

    def rows(name):
        return DeltaTable(str(lake / name)).to_pyarrow_dataset().to_table().to_pylist()

    assets = rows("assets")
    assert len(assets) == 50 and sum(a["authorized_scanner"] for a in assets) == 1
    assert {a["host"] for a in assets} == {json.loads(x)["host"] for x in (files / "assets.jsonl").read_text().splitlines()}
    users = rows("users")
    assert len(users) == 25 and any(u["is_admin"] for u in users) and not all(u["is_admin"] for u in users)
    nets = rows("networks")
    assert all(ipaddress.ip_network(n["cidr"]) for n in nets) and {"US", "GB", "DE"} <= {n["country"] for n in nets}
    iocs = rows("iocs")
    assert {i["type"] for i in iocs} == {"ip", "domain"} and all(i["first_seen"] is not None for i in iocs)
    gt = rows("ground_truth")
    expected = [json.loads(x) for x in (files / "ground_truth.jsonl").read_text().splitlines()]
    assert sorted(g["incident_id"] for g in gt) == sorted(e["incident_id"] for e in expected) and gt
    by_id = {g["incident_id"]: g for g in gt}
    for e in expected:
        g = by_id[e["incident_id"]]
        assert g["entity"] == e["entity"] and g["expected_rule_id"] == e["expected_rule_id"]
        assert g["start"] == dt.datetime.fromisoformat(e["start"])


# -- through the ingest parse stage -------------------------------------------------------------------------
def test_every_generated_line_parses_with_zero_quarantine(spark, tmp_path):
    from pyspark.sql import functions as F

    from core.config import TOPIC_RAW_SYSLOG, TOPIC_RAW_ZEEK
    from ingest.arrow_parse import parse_bronze, quarantine_of

    # All scenarios plus a background that includes DHCP arrivals, releases and visitors.
    opts = Options(seed=3, hosts=60, users=30, start=MONDAY + 7.5 * 3600, events=8000,
                   scenarios={n: 1 for n in SCENARIOS})
    sim = Simulation(opts)
    events = []
    for ev in sim.events():
        if len(events) >= opts.events:
            break
        events.append(ev)
    assert {e[5] for e in events} >= {"sshd", "sudo", "dhcpd", "zeek.conn", "zeek.dns", "zeek.dhcp", "zeek.http",
                                       "zeek.ssl", "zeek.ssh", "EvntSLog"}
    ingested = dt.datetime(2026, 1, 6, tzinfo=dt.UTC)
    rows = [(e[3].encode(), e[4].encode(), TOPIC_RAW_ZEEK if e[2] == ZEEK else TOPIC_RAW_SYSLOG, 0, i, ingested,
             ingested) for i, e in enumerate(events)]
    bronze = spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long, "
                                         "timestamp timestamp, ingested_at timestamp")
    parsed = parse_bronze(bronze).cache()
    bad = quarantine_of(parsed).select("value", "error").limit(5).collect()
    assert bad == []
    # Every syslog line matched one of its program's message forms (an action), every Zeek line its log type.
    unmatched = (parsed.where(F.col("event.dataset").isin("system.auth", "dhcpd") & F.col("event.action").isNull())
                 .select("event.original").limit(5).collect())
    assert unmatched == []
    datasets = Counter({r["d"]: r["n"] for r in parsed.groupBy(F.col("event.dataset").alias("d"))
                        .agg(F.count(F.lit(1)).alias("n")).collect()})
    expected = Counter("zeek." + e[5][5:] if e[2] == ZEEK else
                       {"dhcpd": "dhcpd", "EvntSLog": "windows.security"}.get(e[5], "system.auth") for e in events)
    assert datasets == expected
    # Every Windows line is a logon, failed logon or logoff, and names the account it is about.
    codes = Counter(r["c"] for r in parsed.where(F.col("event.dataset") == "windows.security")
                    .where(F.col("user.name").isNotNull()).select(F.col("event.code").alias("c")).collect())
    assert set(codes) == {"4624", "4625", "4634"} and codes.total() == expected["windows.security"]
    # Timestamps survive: the first syslog and Zeek event parse to their simulated time (to the second).
    ts = {r["o"]: r["t"] for r in parsed.select(F.col("event.original").alias("o"), F.col("`@timestamp`").alias("t"))
          .where(F.col("event.original").isin(events[0][4], events[1][4])).collect()}
    for e in events[:2]:
        assert abs(ts[e[4]].replace(tzinfo=dt.UTC).timestamp() - e[0]) < 1.0
    parsed.unpersist()


# -- pacing ---------------------------------------------------------------------------------------------------
class _StallingSink:
    """Counts records; stalls once (a slow broker) to check that --rate catches up instead of drifting."""

    def __init__(self, stall_at: int | None = None, stall_s: float = 0.0) -> None:
        self.n, self.stall_at, self.stall_s = 0, stall_at, stall_s

    def send(self, topic, key, line) -> None:
        import time

        self.n += 1
        if self.n == self.stall_at:
            time.sleep(self.stall_s)

    def poll(self) -> None:
        pass


def test_rate_is_sustained_and_catches_up_after_a_stall():
    import time

    opts = Options(seed=2, hosts=40, users=20, start=MONDAY + 10 * 3600, events=3000, scenarios={})
    sink = _StallingSink(stall_at=300, stall_s=0.6)
    t0 = time.monotonic()
    _sim, _src, _scn, n, _ts = generate(opts, sink, rate=1500)
    elapsed = time.monotonic() - t0
    assert n == sink.n == 3000
    # 3000 events at 1500/s is 2.0 s; drifting after the 0.6 s stall would take 2.6 s.
    assert 1.9 < elapsed < 2.4, elapsed


def test_speedup_maps_simulated_time_onto_wall_time():
    import time

    opts = Options(seed=2, hosts=40, users=20, start=MONDAY + 10 * 3600, duration=30.0, scenarios={})
    sink = _StallingSink()
    t0 = time.monotonic()
    _sim, _src, _scn, n, last = generate(opts, sink, speedup=15.0)
    elapsed = time.monotonic() - t0
    assert n > 50 and opts.start <= last < opts.start + 30
    assert 1.7 < elapsed < 2.5, elapsed


# -- properties over seeds and sizes ----------------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), hosts=st.integers(12, 80), users=st.integers(5, 60),
       hour=st.floats(0, 23.9))
def test_any_seed_and_size_gives_ordered_well_formed_lines(seed, hosts, users, hour):
    sim, events = run_sim(seed=seed, hosts=hosts, users=users, start=MONDAY + hour * 3600, events=1500,
                          scenarios={n: 1 for n in SCENARIOS})
    assert len(events) == 1500
    assert all(a[0] <= b[0] for a, b in zip(events, events[1:], strict=False))
    iocs = {i.indicator for i in sim.org.iocs}
    for e in events:
        if e[2] == ZEEK:
            r = json.loads(e[4])
            assert r["_path"] in ("conn", "dns", "dhcp", "http", "ssl", "ssh") and abs(r["ts"] - e[0]) < 1e-5
            if e[6] is None:  # the background never touches an IOC
                assert r.get("id.resp_h") not in iocs and r.get("id.orig_h") not in iocs and r.get("query") not in iocs
        else:
            assert SYSLOG_RE.match(e[4]), e[4]
            assert "\n" not in e[4]
    for row in sim.ground_truth()[0]:
        assert row["start"] <= row["end"] and row["entity"]["value"]


def test_an_unpaced_run_to_kafka_replays_the_recent_past_ending_now():
    """Unpaced, a run starting now would stamp its events hours into the future (detection leaves those out);
    without --start its simulated period ends at the time it is run."""
    from dataclasses import replace

    from generator.command import simulated_span, start_ending_now
    from generator.engine import Options
    from generator.organization import build_organization

    now = 1_790_000_000.0  # a fixed "now" (a Tuesday afternoon, UTC): the diurnal load makes the span depend on it
    opts = Options(seed=3, hosts=60, users=30, events=20_000)
    org = build_organization(opts.seed, opts.hosts, opts.users)
    start = start_ending_now(opts, org, now)
    end = start + simulated_span(replace(opts, start=start), org)
    assert start < now - 600 and abs(end - now) <= 120, (now - start, end - now)
    assert start_ending_now(replace(opts, events=None, duration=900.0), org, now) == now - 900


def test_stealth_scenarios_run_only_when_named_and_are_accepted_by_name():
    """`generate --scenarios slow_lateral_movement` must work (the ML evaluation needs it), while a run that names no
    scenario keeps the rule scenarios only (the rule pack is silent on the stealth ones by design)."""
    from generator.command import parse_scenarios
    from generator.scenarios import SCENARIOS as RULE_SCENARIOS
    from generator.stealth_scenarios import STEALTH_NAMES

    default = parse_scenarios(None, 1, no_attacks=False)
    assert set(default) == set(RULE_SCENARIOS) and not set(default) & set(STEALTH_NAMES)
    named = parse_scenarios(",".join(f"{n}=2" for n in STEALTH_NAMES), 1, no_attacks=False)
    assert named == {n: 2 for n in STEALTH_NAMES}
    assert parse_scenarios(STEALTH_NAMES[0], 1, no_attacks=True) == {}  # they are attacks


def test_every_windows_network_logon_is_logged_by_the_server_and_by_zeek_conn_with_the_same_four_tuple():
    # The auth_sessions join (enrich/auth_sessions.py) pairs a 4624 of logon type 3 (SMB) or 10 (RDP) with the Zeek
    # conn record of its connection: client address and port, the server's address and service port, ±2 minutes.
    sim, events = run_sim(events=12000, scenarios={"windows_brute_force": 1, "windows_password_spraying": 1})
    ip_of = {h.name: h.static_ip for h in sim.org.hosts if h.static_ip}
    conns: dict[tuple, list[dict]] = defaultdict(list)
    for e in events:
        if e[2] == ZEEK and e[5] == "zeek.conn":
            r = json.loads(e[4])
            conns[(r["id.orig_h"], r["id.orig_p"], r["id.resp_h"], r["id.resp_p"])].append(r)
    logons = []
    for e in events:
        m = re.search(r"^An account was successfully logged on\. .* Logon Type: (3|10) .* Source Network Address: "
                      r"(\S+) Source Port: (\d+) ", msg(e[4])) if e[5] == "EvntSLog" else None
        if m:
            logons.append((e, m))
    assert len(logons) >= 3
    for e, m in logons:
        port = 445 if m.group(1) == "3" else 3389
        flow = conns[(m.group(2), int(m.group(3)), ip_of[e[3]], port)]
        assert len(flow) == 1, e[4]
        assert flow[0]["ts"] <= e[0] <= flow[0]["ts"] + 120  # within the join's time range
