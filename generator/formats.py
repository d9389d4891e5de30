"""Rendering: RFC 3164 / RFC 5424 syslog lines and Zeek JSON log records, as the real writers spell them.

The hot path of the generator: timestamps are cached per second, JSON is built with ``json.dumps`` on
small dicts in Zeek's own field order.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from json.encoder import encode_basestring

# Facility*8 + severity: auth(4)/authpriv(10), daemon(3); info(6).
PRI_AUTH_INFO = 38
PRI_AUTHPRIV_INFO = 86
PRI_AUTHPRIV_NOTICE = 85
PRI_AUTHPRIV_ALERT = 81
PRI_DAEMON_INFO = 30

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_UID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


class _SecondCache:
    """``datetime`` pieces of the current simulated second, recomputed only when the second changes."""

    __slots__ = ("_sec", "bsd", "iso")

    def __init__(self) -> None:
        self._sec = None
        self.bsd = ""
        self.iso = ""

    def at(self, sec: int) -> _SecondCache:
        if sec != self._sec:
            d = dt.datetime.fromtimestamp(sec, tz=dt.UTC)
            self._sec = sec
            self.bsd = f"{_MONTHS[d.month - 1]} {d.day:2d} {d.hour:02d}:{d.minute:02d}:{d.second:02d}"
            self.iso = f"{d.year:04d}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
        return self


_cache = _SecondCache()


def rfc3164(ts: float, host: str, program: str, pid: int, message: str, pri: int = PRI_AUTH_INFO) -> str:
    """``<PRI>Mmm dd hh:mm:ss HOST PROG[PID]: MSG`` (what rsyslog forwards with its default template)."""
    c = _cache.at(int(ts))
    return f"<{pri}>{c.bsd} {host} {program}[{pid}]: {message}"


def rfc5424(ts: float, host: str, program: str, pid: int, message: str, pri: int = PRI_AUTH_INFO) -> str:
    """``<PRI>1 TIMESTAMP HOST APP PROCID - - MSG`` with millisecond UTC timestamps (RSYSLOG_SyslogProtocol23Format)."""
    sec = int(ts)
    c = _cache.at(sec)
    ms = int((ts - sec) * 1000)
    return f"<{pri}>1 {c.iso}.{ms:03d}Z {host} {program} {pid} - - {message}"


def syslog(ts: float, host: str, program: str, pid: int, message: str, pri: int, use_5424: bool) -> str:
    return (rfc5424 if use_5424 else rfc3164)(ts, host, program, pid, message, pri)


def zeek_uid(rng: random.Random, prefix: str = "C") -> str:
    """Zeek's connection uid: a letter and 17 base62-looking characters."""
    raw = base64.b64encode(rng.getrandbits(104).to_bytes(13, "little"), b"xQ")
    return prefix + raw[:17].decode()


def zeek(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"))


_q = encode_basestring  # a JSON string literal, quotes included (C-accelerated)
_TF = ("false", "true")


def conn(ts: float, uid: str, orig_h: str, orig_p: int, resp_h: str, resp_p: int, proto: str, *,
         service: str | None = None, duration: float | None = None, orig_bytes: int | None = None,
         resp_bytes: int | None = None, conn_state: str = "SF", history: str | None = None,
         local_orig: bool = True, local_resp: bool = False) -> str:
    head = (f'{{"_path":"conn","ts":{ts:.6f},"uid":"{uid}","id.orig_h":"{orig_h}","id.orig_p":{orig_p},'
            f'"id.resp_h":"{resp_h}","id.resp_p":{resp_p},"proto":"{proto}"')
    if service:
        head += f',"service":"{service}"'
    ob = orig_bytes or 0
    rb = resp_bytes or 0
    if duration is not None:
        head += f',"duration":{duration:.6f},"orig_bytes":{ob},"resp_bytes":{rb}'
    if history is None:
        history = {"SF": "ShADadFf" if proto == "tcp" else "Dd", "S0": "S", "REJ": "Sr", "RSTO": "ShADR"}.get(
            conn_state, "S")
    hdr = 52 if proto == "tcp" else 28
    pkts_o = max(1, ob // 1400 + (3 if proto == "tcp" else 1)) if conn_state not in ("REJ", "S0") else 1
    pkts_r = max(0, rb // 1400 + (2 if proto == "tcp" else 1)) if conn_state == "SF" else (
        1 if conn_state == "REJ" else 0)
    return (f'{head},"conn_state":"{conn_state}","local_orig":{_TF[local_orig]},"local_resp":{_TF[local_resp]},'
            f'"missed_bytes":0,"history":"{history}","orig_pkts":{pkts_o},"orig_ip_bytes":{ob + pkts_o * hdr},'
            f'"resp_pkts":{pkts_r},"resp_ip_bytes":{rb + pkts_r * hdr}}}')


_QTYPES = {"A": 1, "AAAA": 28, "TXT": 16, "CNAME": 5, "MX": 15, "PTR": 12}
_RCODES = {"NOERROR": 0, "NXDOMAIN": 3, "SERVFAIL": 2}


def dns(ts: float, uid: str, orig_h: str, orig_p: int, resp_h: str, query: str, *, qtype: str = "A",
        rcode: str = "NOERROR", answers: list[str] | None = None, ttl: float = 300.0, rtt: float = 0.004,
        trans_id: int = 0) -> str:
    line = (f'{{"_path":"dns","ts":{ts:.6f},"uid":"{uid}","id.orig_h":"{orig_h}","id.orig_p":{orig_p},'
            f'"id.resp_h":"{resp_h}","id.resp_p":53,"proto":"udp","trans_id":{trans_id},"rtt":{rtt:.6f},'
            f'"query":{_q(query)},"qclass":1,"qclass_name":"C_INTERNET","qtype":{_QTYPES.get(qtype, 1)},'
            f'"qtype_name":"{qtype}","rcode":{_RCODES.get(rcode, 0)},"rcode_name":"{rcode}","AA":false,"TC":false,'
            f'"RD":true,"RA":true,"Z":0')
    if answers:
        line += (',"answers":[' + ",".join(_q(a) for a in answers) + '],"TTLs":['
                 + ",".join([f"{ttl:.1f}"] * len(answers)) + "]")
    return line + ',"rejected":false}'


_STATUS = {200: "OK", 204: "No Content", 301: "Moved Permanently", 304: "Not Modified", 404: "Not Found"}


def http(ts: float, uid: str, orig_h: str, orig_p: int, resp_h: str, resp_p: int, host: str, uri: str, *,
         method: str = "GET", status: int = 200, user_agent: str = "", req_len: int = 0, resp_len: int = 0) -> str:
    return (f'{{"_path":"http","ts":{ts:.6f},"uid":"{uid}","id.orig_h":"{orig_h}","id.orig_p":{orig_p},'
            f'"id.resp_h":"{resp_h}","id.resp_p":{resp_p},"trans_depth":1,"method":"{method}","host":{_q(host)},'
            f'"uri":{_q(uri)},"version":"1.1","user_agent":{_q(user_agent)},"request_body_len":{req_len},'
            f'"response_body_len":{resp_len},"status_code":{status},"status_msg":"{_STATUS.get(status, "OK")}",'
            f'"tags":[]}}')


def ssl(ts: float, uid: str, orig_h: str, orig_p: int, resp_h: str, resp_p: int, server_name: str, *,
        version: str = "TLSv13", cipher: str = "TLS_AES_128_GCM_SHA256", established: bool = True,
        resumed: bool = False, ja3: str | None = None) -> str:
    line = (f'{{"_path":"ssl","ts":{ts:.6f},"uid":"{uid}","id.orig_h":"{orig_h}","id.orig_p":{orig_p},'
            f'"id.resp_h":"{resp_h}","id.resp_p":{resp_p},"version":"{version}","cipher":"{cipher}",'
            f'"curve":"x25519","server_name":{_q(server_name)},"resumed":{_TF[resumed]},'
            f'"established":{_TF[established]},"ssl_history":"{"Csxdfi" if established else "CsxF"}"')
    if ja3:
        line += f',"ja3":"{ja3}"'
    return line + "}"


def dhcp(ts: float, uids: list[str], client_addr: str | None, server_addr: str, mac: str, host_name: str | None,
         msg_types: list[str], *, assigned_addr: str | None = None, requested_addr: str | None = None,
         lease_time: float | None = None, duration: float = 0.01) -> str:
    r: dict = {"_path": "dhcp", "ts": float(f"{ts:.6f}"), "uids": uids}
    if client_addr:
        r["client_addr"] = client_addr
    r["server_addr"] = server_addr
    r["mac"] = mac
    if host_name:
        r["host_name"] = host_name
    if requested_addr:
        r["requested_addr"] = requested_addr
    if assigned_addr:
        r["assigned_addr"] = assigned_addr
    if lease_time is not None:
        r["lease_time"] = lease_time
    r["msg_types"] = msg_types
    r["duration"] = round(duration, 6)
    return zeek(r)
