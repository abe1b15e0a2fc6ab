#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets under fuzz/corpus/<target>/.

Small, meaningful seeds: one valid frame of each message type (client and
lease protocols), streams of several frames, valid limits and configuration
files, and valid HTTP requests (single, pipelined, chunked). Rerun after a
protocol change: python3 fuzz/seeds.py
"""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def frame(type_, payload=b"", rid=1, flags=0, version=1):
    return struct.pack(">IBBHI", 8 + len(payload), version, type_, flags, rid) + payload


def s(text):
    b = text.encode()
    return bytes([len(b)]) + b


def u8(v):
    return struct.pack(">B", v)


def u16(v):
    return struct.pack(">H", v)


def u32(v):
    return struct.pack(">I", v)


def u64(v):
    return struct.pack(">Q", v)


def i64(v):
    return struct.pack(">q", v)


TOKEN = "tly_fuzzFUZZfuzzFUZZfuzzFUZZfuzzFUZZ"  # the live link of fuzz_http
LINK = "lnk_0123456789abcdef"

# --- client protocol ------------------------------------------------------
hello = frame(32, u8(1) + u8(1), 1)
check = frame(34, s(TOKEN) + s("search") + i64(0), 2)
check_cost = frame(34, s(TOKEN) + s("export") + i64(3), 3)
reply = frame(35, u8(0) + u8(4) + i64(0) + i64(10) + i64(1000) + i64(-1) + i64(400) + i64(0)
              + s(""), 2)
refused = frame(35, u8(1) + u8(1) + i64(1500) + i64(60) + i64(60000) + i64(0) + i64(0) + i64(0)
                + s(""), 3, flags=0)
never = frame(35, u8(1) + u8(3) + i64(-1) + i64(10) + i64(1000) + i64(0) + i64(0) + i64(0)
              + s(""), 4, flags=4)
bad = frame(35, u8(4) + u8(0) + i64(0) + i64(-1) + i64(0) + i64(-1) + i64(0) + i64(0)
            + s("unknown endpoint"), 5)
release = frame(36, s(TOKEN) + i64(7), 6)


def callers(*cs):
    return u8(len(cs)) + b"".join(u16(len(c)) + c.encode() for c in cs)


client = {
    "check_callers": frame(43, s("login") + i64(0) + callers("ip:203.0.113.7"), 7),
    "check_callers_two": frame(43, s("login") + i64(2)
                               + callers("ip:203.0.113.7", "account:alice@example.com"), 8),
    "hello": hello,
    "hello_reply": frame(33, u8(1) + u32(65536) + u32(128), 1),
    "check": check,
    "check_cost": check_cost,
    "check_reply_admitted": reply,
    "check_reply_refused": refused,
    "check_reply_never": never,
    "check_reply_bad": bad,
    "release": release,
    "release_reply": frame(37, u8(0), 6),
    "reload": frame(38, b"", 9),
    "reload_reply": frame(39, u8(0), 9),
    "error": frame(40, u32(0xFFFFFFEF) + s("protocol error"), 0),
    "pipelined": hello + check + check_cost + release + frame(38, b"", 10),
}
for k, v in client.items():
    put("client", k, v)

# --- lease protocol -------------------------------------------------------
def origin(child="search", inc=1, seq=1):
    return s(child) + u64(inc) + u64(seq)


lease = {
    "hello": frame(1, origin() + s("acme")),
    "welcome": frame(2, origin() + u64(1) + u32(2) + u32(4) + i64(5000) + i64(1000)),
    "acquire": frame(3, origin() + s("search") + s(LINK) + i64(8) + i64(1) + i64(2500) + u64(0)
                     + i64(0) + i64(0) + u8(0)),
    "acquire_report": frame(3, origin(seq=2) + s("search") + s(LINK) + i64(16) + i64(0)
                            + i64(9000) + u64(4) + i64(3) + i64(1) + u8(0)),
    # flagged NEXT: a lease for the windows after the current ones (need 0)
    "acquire_next": frame(3, origin(seq=3) + s("search") + s(LINK) + i64(1) + i64(0) + i64(2500)
                          + u64(0) + i64(0) + i64(0) + u8(1)),
    "grant": frame(4, origin() + s("search") + s(LINK) + u64(4) + i64(8) + i64(5000) + u32(0)
                   + u32(1) + u64(1) + i64(0)),
    "grant_pass": frame(4, origin() + s("search") + s(LINK) + u64(5) + i64(1) + i64(900) + u32(1)
                        + u32(3) + u64(2) + i64(0)),
    # kept, ending with its windows, starting 30 s from now (the answer to acquire_next)
    "grant_next": frame(4, origin(seq=3) + s("search") + s(LINK) + u64(6) + i64(37)
                        + i64(90000) + u32(2 | 4 | 8) + u32(2) + u64(1) + i64(30000)),
    "deny": frame(5, origin() + s("search") + s(LINK) + u8(1) + u8(0) + i64(1200) + i64(60)),
    "deny_never": frame(5, origin() + s("search") + s(LINK) + u8(3) + u8(1) + i64(-1) + i64(10)),
    "return": frame(6, origin() + u64(4) + i64(5)),
    "return_ack": frame(7, origin() + u64(4) + i64(3)),
    "heartbeat": frame(8, origin() + s("search") + u8(2) + s(LINK) + i64(1000) + i64(0)
                       + s("lnk_fedcba9876543210") + i64(0) + i64(2)),
    "hb_ack": frame(9, origin() + u64(1) + u32(2)),
    "slot_acquire": frame(10, origin() + s("export") + s(LINK)),
    "slot_grant": frame(11, origin() + s(LINK) + i64(12) + i64(30000)),
    "slot_deny": frame(12, origin() + s(LINK) + i64(2000) + i64(4)),
    "slot_release": frame(13, origin() + s(LINK) + i64(12)),
    "slot_release_ack": frame(14, origin() + s(LINK) + i64(12) + u8(1)),
    "error": frame(15, origin() + u16(1) + i64(0)),
    "recall": frame(16, origin(seq=4) + s("search") + s(LINK) + u64(4)),
}
for k, v in lease.items():
    put("lease", k, v)
put("lease", "stream", lease["hello"] + lease["acquire"] + lease["heartbeat"] + lease["return"])

# --- frames (first byte seeds the cutting) ----------------------------------
put("frame", "one", b"\x00" + hello)
put("frame", "glued", b"\x07" + hello + check + reply + release + lease["grant"])
put("frame", "empty_payload", b"\x03" + frame(38, b"", 1) * 4)
put("frame", "truncated", b"\x05" + (hello + check)[:-3])
put("frame", "bad_version", b"\x01" + hello + frame(34, b"", 2, version=2))
put("frame", "too_long", b"\x02" + struct.pack(">I", 65533) + b"\x01\x22\x00\x00\x00\x00\x00\x01")
put("frame", "too_short", b"\x02" + struct.pack(">I", 7) + b"\x01\x22\x00\x00\x00\x00\x00")

# --- model parsers (first byte: 0 limit, 1 list, 2 cost, 3 duration, 4 name, 5 token) --------
model = {
    "limit_1m": "\x00600/1m", "limit_1h": "\x0036000/1h", "limit_10s": "\x00100/10s",
    "limit_max": "\x004294967296/365d", "limit_60s": "\x005/60s",
    "list": "\x0110/1s,600/1m,36000/1h,1000000/1d", "list_empty": "\x01",
    "cost": "\x023", "cost_max": "\x024294967296",
    "duration": "\x0330d", "duration_s": "\x0390s",
    "name": "\x04acme", "name_full": "\x04a-b_c0123456789",
    "token": "\x05" + TOKEN, "link": "\x05" + LINK,
    "limit_month": "\x00100000/month", "list_month": "\x01600/1m,100000/month",
}
for k, v in model.items():
    put("model", k, v)

# --- configuration files ------------------------------------------------------
readme = """# plans
plan free --limit 60/1m --limit 1000/1h
plan pro  --limit 600/1m --limit 36000/1h --link-limit 100/1m --concurrency 10

# endpoint policies: a line without --plan is the default for every plan
endpoint search --limit 60/1m --tenant-limit 1000/1m
endpoint search --plan pro --limit 120/1m --algorithm gcra
endpoint export --limit 10/1h --expensive --on-unavailable open --degraded-limit 2/1h
"""
put("config", "readme", readme)
put("config", "every_option",
    "plan p --limit=5/1s --link-limit 7/1m --concurrency 1024\n"
    "endpoint e --plan p --limit 1/1s --tenant-limit 2/2s --algorithm window --cost 4 "
    "--on-unavailable closed --shadow\r\n\t# comment\n")
put("config", "contracts",
    "plan pro --limit 600/1m --limit 100000/month\n"
    "endpoint export --limit 100/month --tenant-limit 500/month\n"
    "tenant acme --plan pro --billing-day 15 --limit 600/1m --limit 200000/month "
    "--link-limit 5/1m --concurrency 8\n"
    "tenant beta --plan pro\n")
put("config", "empty", "")
put("config", "comments", "# nothing\n\n   # more\n")

# --- HTTP -----------------------------------------------------------------------
auth = "Authorization: Bearer " + TOKEN + "\r\n"
get_check = "GET /v1/check HTTP/1.1\r\nHost: x\r\n" + auth + "X-Tally-Endpoint: search\r\n\r\n"
http = {
    "check": get_check,
    "check_query": "GET /v1/check?endpoint=search HTTP/1.1\r\n" + auth + "X-Tally-Cost: 2\r\n\r\n",
    "check_post_403": "POST /v1/check HTTP/1.1\r\n" + auth
                      + "X-Tally-Endpoint: search\r\nX-Tally-Deny-Status: 403\r\n"
                      + "Content-Length: 0\r\n\r\n",
    "release": "POST /v1/release HTTP/1.1\r\n" + auth + "X-Tally-Lease: 12\r\n"
               + "Content-Length: 2\r\n\r\n{}",
    "healthz": "GET /healthz HTTP/1.1\r\n\r\n",
    "healthz_head": "HEAD /healthz HTTP/1.1\r\n\r\n",
    "metrics_10": "GET /metrics HTTP/1.0\r\n\r\n",
    "pipelined": get_check + "GET /healthz HTTP/1.1\r\n\r\n"
                 + "GET /v1/check HTTP/1.1\r\nConnection: close\r\n\r\n",
    "chunked": "POST /v1/check HTTP/1.1\r\n" + auth + "X-Tally-Endpoint: search\r\n"
               + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    "not_found": "GET /nope HTTP/1.1\r\n\r\n",
    "method": "DELETE /v1/check HTTP/1.1\r\n\r\n",
    "garbage": "\x00\x01 GET / HTTP/9.9\r\n\r\n",
    "export_release": "GET /v1/check HTTP/1.1\r\n" + auth + "X-Tally-Endpoint: export\r\n\r\n"
                      + "POST /v1/release HTTP/1.1\r\n" + auth + "X-Tally-Lease: 1\r\n"
                      + "Content-Length: 0\r\n\r\n",
}
http["caller"] = ("GET /v1/check HTTP/1.1\r\nX-Tally-Endpoint: login\r\n"
                  "X-Tally-Caller: ip:203.0.113.7\r\n\r\n")
http["callers_four"] = ("GET /v1/check HTTP/1.1\r\nX-Tally-Endpoint: login\r\n"
                        + "".join("X-Tally-Caller: ip:10.0.0.%d\r\n" % i for i in range(4))
                        + "\r\n")
http["caller_with_token"] = ("GET /v1/check HTTP/1.1\r\n" + auth + "X-Tally-Endpoint: login\r\n"
                             "X-Tally-Caller: account:alice@example.com\r\n\r\n")
for k, v in http.items():
    put("http", k, v)

# --- callers (first byte: 0 a caller, 1 caller channel frames, 2 a stored record) -----------
def limits(*ls):
    return u8(len(ls)) + b"".join(i64(n) + i64(p) for n, p in ls)


KEY = bytes(range(16))
decide = frame(48, s("login") + u8(0) + limits((5, 300000), (20, 3600000)) + i64(250000)
               + i64(1) + u8(1) + KEY, 11, flags=1)
verdict = frame(49, u8(1) + u8(0) + i64(0) + i64(5) + i64(300000) + i64(4) + i64(1700000300000)
                + u64(1) + u64(480), 11)
refused_v = frame(49, u8(0) + u8(1) + i64(173000) + i64(5) + i64(300000) + i64(0)
                  + i64(1700000300000) + u64(2) + u64(480), 12)
window_rec = u8(1) + u8(0) + b"".join(i64(p) + i64(w) + i64(u) for p, w, u in
                                      [(300000, 5666668, 3), (3600000, 472222, 3), (0, 0, 0),
                                       (0, 0, 0)]) + i64(1700000200000)
gcra_rec = u8(1) + u8(1) + b"".join(i64(p) + i64(n) + i64(t) + i64(f) for p, n, t, f in
                                    [(300000, 5, 1700000260000, 0), (0, 0, 0, 0), (0, 0, 0, 0),
                                     (0, 0, 0, 0)]) + i64(1700000200000)
caller_seeds = {
    "ip": b"\x00ip:203.0.113.7",
    "account": b"\x00account:alice@example.com",
    "ipv6": b"\x00ip:2001:db8::1",
    "bad_kind": b"\x00IP:1.2.3.4",
    "channel": b"\x01" + decide + verdict + refused_v + frame(50, u32(11), 13),
    "rec_window": b"\x02" + window_rec,
    "rec_gcra": b"\x02" + gcra_rec,
}
for k, v in caller_seeds.items():
    put("caller", k, v)

# The host channel (fuzz_chan.c): the first byte picks the mode.
chan_seeds = {
    "stranger_hello": b"\x00TLH1" + bytes(80),          # a listener gets a stranger's hello
    "stranger_short": b"\x00TLH1" + bytes(10),
    "injected": b"\x01" + u32(17) + bytes(17) + u32(0x100000),  # bytes in an open channel
    "too_long": b"\x01" + u32(0xffffffff),
    "messages": b"\x02\x05hello\xff\xffworld of hosts\xff",  # messages split at 0xff
    "empty": b"\x02\x01",
}
for k, v in chan_seeds.items():
    put("chan", k, v)

# Membership (fuzz_member.c): even first byte, a join code; odd, a MEMBER record.
member_seeds = {
    "code": b"\x00tlyj1-DzEyNy4wLjAuMToxNzUwMQ6zUAcpuE8AE91W85M9c7ATqsZ__vGLRtZhhLdeXZk6FA7G-IrdYwbxQ3h6eYJEdBO90iBgj3DYsoFVrLqMDdk",
    "code_bad": b"\x00tlyj1-AAAA",
    "member": b"\x01" + u64(3) + u8(0) + u8(13) + b"10.0.0.3:7400" + bytes(range(32)),
    "member_v6": b"\x01" + u64(9) + u8(1) + u8(9) + b"[::1]:740" + bytes(32),
}
for k, v in member_seeds.items():
    put("member", k, v)
