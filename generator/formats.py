"""Rendering: RFC 3164 / RFC 5424 syslog lines and Zeek JSON log records, as the real writers spell them.

The hot path of the generator: timestamps are cached per second, JSON is built with ``json.dumps`` on
small dicts in Zeek's own field order.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from dataclasses import dataclass
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


def ssh(ts: float, uid: str, orig_h: str, orig_p: int, resp_h: str, resp_p: int, *, auth_success: bool | None,
        auth_attempts: int, client: str, server: str, direction: str = "INBOUND") -> str:
    """Zeek's ssh.log record of one SSH connection (the same uid and 4-tuple as its conn record)."""
    head = (f'{{"_path":"ssh","ts":{ts:.6f},"uid":"{uid}","id.orig_h":"{orig_h}","id.orig_p":{orig_p},'
            f'"id.resp_h":"{resp_h}","id.resp_p":{resp_p},"version":2')
    if auth_success is not None:
        head += f',"auth_success":{_TF[auth_success]}'
    return (f'{head},"auth_attempts":{auth_attempts},"direction":"{direction}","client":{_q(client)},'
            f'"server":{_q(server)},"cipher_alg":"chacha20-poly1305@openssh.com","mac_alg":"umac-64-etm@openssh.com",'
            f'"compression_alg":"none","kex_alg":"sntrup761x25519-sha512@openssh.com","host_key_alg":"ssh-ed25519",'
            f'"host_key":"c3:5f:0e:6a:91:22:4b:7d:ee:08:13:af:52:c6:90:1b"}}')


# -- Windows Security log through the EvntSLog agent ------------------------------------------------------------
# EvntSLog forwards each event as RFC 5424 ``<PRI>1 TIMESTAMP HOST EvntSLog - - - TEXT``: the rendered message
# with its line breaks and tabs collapsed to single spaces, no event id (the title tells it), Windows' explanation
# paragraph kept (as in ../shared/corpus/zeek-wrccdc-2018/syslog-rfc5424-cee.log).
PRI_EVNTSLOG = 133  # local0.notice, what the agent uses for Security-log events
EVNTSLOG = "EvntSLog"
_EXPLAIN_4624 = (
    "This event is generated when a logon session is created. It is generated on the computer that was accessed. "
    "The subject fields indicate the account on the local system which requested the logon. This is most commonly a "
    "service such as the Server service, or a local process such as Winlogon.exe or Services.exe. The logon type "
    "field indicates the kind of logon that occurred. The most common types are 2 (interactive) and 3 (network). The "
    "New Logon fields indicate the account for whom the new logon was created, i.e. the account that was logged on. "
    "The network fields indicate where a remote logon request originated. Workstation name is not always available "
    "and may be left blank in some cases. The authentication information fields provide detailed information about "
    "this specific logon request. - Logon GUID is a unique identifier that can be used to correlate this event with "
    "a KDC event. - Transited services indicate which intermediate services have participated in this logon request. "
    "- Package name indicates which sub-protocol was used among the NTLM protocols. - Key length indicates the length "
    "of the generated session key. This will be 0 if no session key was requested.")
_EXPLAIN_4625 = (
    "This event is generated when a logon request fails. It is generated on the computer where access was attempted. "
    "The Subject fields indicate the account on the local system which requested the logon. This is most commonly a "
    "service such as the Server service, or a local process such as Winlogon.exe or Services.exe. The Logon Type "
    "field indicates the kind of logon that was requested. The most common types are 2 (interactive) and 3 "
    "(network). The Process Information fields indicate which account and process on the system requested the "
    "logon. The Network Information fields indicate where a remote logon request originated. Workstation name is "
    "not always available and may be left blank in some cases. The authentication information fields provide "
    "detailed information about this specific logon request. - Transited services indicate which intermediate "
    "services have participated in this logon request. - Package name indicates which sub-protocol was used among "
    "the NTLM protocols. - Key length indicates the length of the generated session key. This will be 0 if no "
    "session key was requested.")
_EXPLAIN_4634 = ("This event is generated when a logon session is destroyed. It may be positively correlated with a "
                 "logon event using the Logon ID value. Logon IDs are only unique between reboots on the same "
                 "computer.")
# Sub Status of a 4625: the account exists (bad password) or not (unknown user name).
SUB_STATUS_BAD_PASSWORD = "0xc000006a"
SUB_STATUS_NO_SUCH_USER = "0xc0000064"


def evntslog(ts: float, host: str, text: str, pri: int = PRI_EVNTSLOG) -> str:
    """One Windows event as EvntSLog forwards it (RFC 5424, UTC offset written as ``+00:00`` like the agent)."""
    return f"<{pri}>1 {_cache.at(int(ts)).iso}+00:00 {host} {EVNTSLOG} - - - {text}"


@dataclass(frozen=True)
class WinLogon:
    """What a 4624/4625 says: who logged on (or tried), how, and from where."""

    user: str
    domain: str
    user_sid: str
    logon_type: int  # 2 interactive, 3 network, 10 remote interactive
    source_ip: str  # "-" for none; 127.0.0.1 for a local interactive logon
    source_port: int  # 0 for none
    workstation: str  # the client's NetBIOS name ("-" or "" when unknown)
    logon_id: str = "0x0"
    computer_account: str = "-"  # the Subject of a local logon: the machine account (HOST$), else "-"


def _subject(w: WinLogon, domain: str) -> str:
    if w.logon_type in (2, 10):  # winlogon on the machine itself asks for the logon
        return f"Subject: Security ID: S-1-5-18 Account Name: {w.computer_account} Account Domain: {domain} Logon ID: 0x3e7"
    return "Subject: Security ID: S-1-0-0 Account Name: - Account Domain: - Logon ID: 0x0"


def windows_logon(ts: float, host: str, w: WinLogon, guid: str) -> str:
    """4624 "An account was successfully logged on." as EvntSLog renders it."""
    local = w.logon_type in (2, 10)
    process = "Process ID: 0x26c Process Name: C:\\Windows\\System32\\winlogon.exe" if local else \
        "Process ID: 0x0 Process Name: -"
    auth = "Logon Process: User32 Authentication Package: Negotiate" if local else \
        "Logon Process: NtLmSsp Authentication Package: NTLM"
    package = "-" if local else "NTLM V2"
    key = 0 if local else 128
    text = (f"An account was successfully logged on. {_subject(w, w.domain)} Logon Type: {w.logon_type} "
            f"New Logon: Security ID: {w.user_sid} Account Name: {w.user} Account Domain: {w.domain} "
            f"Logon ID: {w.logon_id} Logon GUID: {{{guid}}} Process Information: {process} "
            f"Network Information: Workstation Name: {w.workstation} Source Network Address: {w.source_ip} "
            f"Source Port: {w.source_port} Detailed Authentication Information: {auth} Transited Services: - "
            f"Package Name (NTLM only): {package} Key Length: {key} {_EXPLAIN_4624}")
    return evntslog(ts, host, text)


def windows_failed_logon(ts: float, host: str, w: WinLogon, sub_status: str = SUB_STATUS_BAD_PASSWORD) -> str:
    """4625 "An account failed to log on." as EvntSLog renders it (Status 0xc000006d: bad user name or password)."""
    local = w.logon_type in (2, 10)
    process = "Caller Process ID: 0x26c Caller Process Name: C:\\Windows\\System32\\winlogon.exe" if local else \
        "Caller Process ID: 0x0 Caller Process Name: -"
    auth = "Logon Process: User32 Authentication Package: Negotiate" if local else \
        "Logon Process: NtLmSsp Authentication Package: NTLM"
    text = (f"An account failed to log on. {_subject(w, w.domain)} Logon Type: {w.logon_type} "
            f"Account For Which Logon Failed: Security ID: S-1-0-0 Account Name: {w.user} Account Domain: {w.domain} "
            f"Failure Information: Failure Reason: Unknown user name or bad password. Status: 0xc000006d "
            f"Sub Status: {sub_status} Process Information: {process} Network Information: Workstation Name: "
            f"{w.workstation} Source Network Address: {w.source_ip} Source Port: {w.source_port} Detailed "
            f"Authentication Information: {auth} Transited Services: - Package Name (NTLM only): - Key Length: 0 "
            f"{_EXPLAIN_4625}")
    return evntslog(ts, host, text)


def windows_logoff(ts: float, host: str, w: WinLogon) -> str:
    """4634 "An account was logged off." (its Subject is the account whose session ended)."""
    text = (f"An account was logged off. Subject: Security ID: {w.user_sid} Account Name: {w.user} "
            f"Account Domain: {w.domain} Logon ID: {w.logon_id} Logon Type: {w.logon_type} {_EXPLAIN_4634}")
    return evntslog(ts, host, text)
