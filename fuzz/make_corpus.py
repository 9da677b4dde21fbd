#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from
hand-made commands and requests, so the fuzzers start from bytes that
decode; the network parsers' seeds are the bytes the integration tests
send (tests/integration/: the JSON gateway calls of test_json_gateway.py,
the chunked and pipelined requests of test_http_chunked.py, the HTTP/2
frames of h2raw.py and test_http2_abuse.py), the ClientHellos Python's ssl
sends (random each run), and libraft's messages as
tests/unit/wire_check_test.cc lays them out. Run it again after changing proto/; the fuzzers grow their own
corpus from these seeds at run time (not kept in the repository).

    /usr/bin/python3 fuzz/make_corpus.py
"""
import hashlib
import os
import struct
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
gen = tempfile.mkdtemp(prefix="etcdq-corpus-")
protos = [os.path.relpath(os.path.join(d, f), os.path.join(root, "proto"))
          for d, _, fs in os.walk(os.path.join(root, "proto")) for f in fs if f.endswith(".proto")]
subprocess.check_call(["protoc", "-I", os.path.join(root, "proto"), "--python_out", gen] + protos)
sys.path.insert(0, gen)
for d, _, _ in os.walk(gen):
    open(os.path.join(d, "__init__.py"), "a").close()

from etcd.api.etcdserverpb import rpc_pb2  # noqa: E402
from etcdq import command_pb2  # noqa: E402


def frame(b):
    return struct.pack("<I", len(b)) + b


def entry(*cmds):
    e = b"".join(frame(c.SerializeToString()) for c in cmds)
    e += b"\0" * (8 - len(e) % 8 if len(e) % 8 else (8 if not e else 0))
    return e


def cmd(**kw):
    c = command_pb2.Command(origin=7, proposal_id=1, time_ms=1700000000000)
    for k, v in kw.items():
        getattr(c, k).CopyFrom(v)
    return c


P, D, T, R = rpc_pb2.PutRequest, rpc_pb2.DeleteRangeRequest, rpc_pb2.TxnRequest, rpc_pb2.RangeRequest
Op, Cmp = rpc_pb2.RequestOp, rpc_pb2.Compare

txn = T(compare=[Cmp(key=b"a", result=Cmp.EQUAL, target=Cmp.VERSION, version=1)],
        success=[Op(request_put=P(key=b"a", value=b"2")), Op(request_range=R(key=b"a", range_end=b"\0"))],
        failure=[Op(request_delete_range=D(key=b"b", range_end=b"c", prev_kv=True))])
nested = T(success=[Op(request_txn=T(compare=[Cmp(key=b"x", target=Cmp.CREATE, create_revision=0)],
                                     success=[Op(request_put=P(key=b"x", value=b"1"))],
                                     failure=[Op(request_put=P(key=b"x", value=b"2"))]))])
qconfig = P(key=b"/q/jobs/config", value=b'{"visibility_timeout": 30, "max_deliveries": 3, "max_in_flight": 10}')
qput = P(key=b"/q/jobs/p/task1", value=b"payload")
assign = command_pb2.QueueAssign(queue=b"jobs", deadline_ms=1700000001000, assignments=[
    command_pb2.QueueAssign.Assignment(idx=1, deliveries=0, member=1, instance=2),
    command_pb2.QueueAssign.Assignment(idx=1, deliveries=1, member=0, reason="too many")])

commands = {
    "put": cmd(put=P(key=b"a", value=b"1", prev_kv=True)),
    "put_lease": cmd(put=P(key=b"l", value=b"1", lease=42)),
    "delete": cmd(delete_range=D(key=b"a", range_end=b"\0", prev_kv=True)),
    "txn": cmd(txn=txn),
    "txn_nested": cmd(txn=nested),
    "compact": cmd(compaction=rpc_pb2.CompactionRequest(revision=2, physical=False)),
    "lease_grant": cmd(lease_grant=rpc_pb2.LeaseGrantRequest(TTL=10, ID=42)),
    "lease_revoke": cmd(lease_revoke=rpc_pb2.LeaseRevokeRequest(ID=42)),
    "alarm": cmd(alarm=rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.ACTIVATE, memberID=1,
                                            alarm=rpc_pb2.NOSPACE)),
    "member": cmd(member_attributes=command_pb2.MemberAttributes(id=1, name="m1",
                                                                  client_urls=["http://127.0.0.1:2379"],
                                                                  cluster_id=9)),
    "queue_config": cmd(put=qconfig),
    "queue_put": cmd(put=qput),
    "queue_assign": cmd(queue_assign=assign),
    "queue_ack": cmd(delete_range=D(key=b"/q/jobs/p/task1")),
}

# Edges of the numbers apply reads: a log entry need not have passed the
# client API's checks (the first fuzz finding was a TTL that overflowed).
I64_MAX, I64_MIN = 2**63 - 1, -2**63
extremes = {
    "lease_grant_max_ttl": cmd(lease_grant=rpc_pb2.LeaseGrantRequest(TTL=I64_MAX, ID=I64_MAX)),
    "lease_grant_negative": cmd(lease_grant=rpc_pb2.LeaseGrantRequest(TTL=I64_MIN, ID=-1)),
    "compact_max": cmd(compaction=rpc_pb2.CompactionRequest(revision=I64_MAX, physical=True)),
    "compact_negative": cmd(compaction=rpc_pb2.CompactionRequest(revision=I64_MIN)),
    "put_empty_key": cmd(put=P(key=b"", value=b"", lease=I64_MIN)),
    "delete_everything": cmd(delete_range=D(key=b"\0", range_end=b"\0")),
    "txn_extremes": cmd(txn=T(
        compare=[Cmp(key=b"a", range_end=b"\0", target=Cmp.MOD, result=Cmp.LESS, mod_revision=I64_MIN),
                 Cmp(key=b"a", target=Cmp.LEASE, result=Cmp.NOT_EQUAL, lease=I64_MAX)],
        success=[Op(request_range=R(key=b"\0", range_end=b"\0", revision=I64_MAX, limit=I64_MIN))])),
    "queue_assign_extremes": cmd(queue_assign=command_pb2.QueueAssign(
        queue=b"jobs", deadline_ms=I64_MAX, assignments=[
            command_pb2.QueueAssign.Assignment(idx=2**64 - 1, deliveries=2**32 - 1, member=1, instance=1)])),
}
commands.update(extremes)

seeds = {"fuzz_entry": [], "fuzz_apply": [], "fuzz_validate": []}
for name, c in commands.items():
    seeds["fuzz_entry"].append(frame(c.SerializeToString()))
    seeds["fuzz_apply"].append(entry(c))
seeds["fuzz_entry"].append(entry(commands["put"], commands["txn"], commands["delete"]))
seeds["fuzz_apply"].append(entry(commands["queue_config"], commands["queue_put"],
                                 commands["queue_assign_extremes"]))
seeds["fuzz_apply"] += [
    entry(commands["lease_grant"], commands["put_lease"], commands["put"], commands["txn"],
          commands["compact"], commands["lease_revoke"]),
    entry(commands["queue_config"], commands["queue_put"], commands["queue_assign"], commands["queue_ack"]),
    entry(commands["put"], commands["delete"], commands["txn_nested"], commands["alarm"], commands["put"]),
]
# fuzz_validate: first byte picks the type (0 range, 1 put, 2 delete, 3 txn; +4 max-txn-ops 128).
seeds["fuzz_validate"] = [
    b"\0" + R(key=b"a", range_end=b"b", limit=10).SerializeToString(),
    b"\1" + P(key=b"a", value=b"1", ignore_lease=True).SerializeToString(),
    b"\1" + qconfig.SerializeToString(),
    b"\1" + qput.SerializeToString(),
    b"\1" + P(key=b"/queue/jobs/x", value=b"1").SerializeToString(),
    b"\2" + D(key=b"a", range_end=b"\0").SerializeToString(),
    b"\3" + txn.SerializeToString(),
    b"\7" + nested.SerializeToString(),
    b"\7" + T(success=[Op(request_put=P(key=b"k", value=b"1")),
                       Op(request_delete_range=D(key=b"j", range_end=b"l"))]).SerializeToString(),
]

# ---- the network parsers: the bytes the integration tests send ----------
integration = os.path.join(root, "tests", "integration")
sys.path.insert(0, integration)
import h2raw  # noqa: E402


def http_request(method, path, body=b"", headers=()):
    """A request as the tests' http.client sends it (test_json_gateway.py, post)."""
    h = b"%s %s HTTP/1.1\r\nHost: 127.0.0.1:2379\r\nAccept-Encoding: identity\r\n" % (method, path)
    if body or method == b"POST":
        h += b"Content-Length: %d\r\n" % len(body)
    for k, v in headers:
        h += k + b": " + v + b"\r\n"
    return h + b"\r\n" + body


def chunks(data, size):
    """test_http_chunked.py's chunked encoding."""
    parts = [data[i:i + size] for i in range(0, len(data), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def gateway_calls():
    """(path, body) of every literal gateway call in test_json_gateway.py."""
    import ast
    import base64
    import json as jsonlib
    tree = ast.parse(open(os.path.join(integration, "test_json_gateway.py")).read())
    env = {"b64": lambda x: base64.b64encode(x.encode() if isinstance(x, str) else x).decode(), "True": True,
           "False": False, "None": None}
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for i, a in enumerate(node.args[:-1]):
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("/v3"):
                try:
                    body = eval(compile(ast.Expression(node.args[i + 1]), "<test>", "eval"), env)  # noqa: S307
                except Exception:  # a variable of the test: left out
                    continue
                if body is None:
                    body = ""
                if not isinstance(body, (str, dict, list)):
                    continue
                if not isinstance(body, str):
                    body = jsonlib.dumps(body)
                calls.append((a.value.encode(), body.encode()))
    return sorted(set(calls))


put_body = b'{"key": "Y2h1bmtlZC9i", "value": "cGllY2V3aXNl"}'
get_health = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
requests = [
    get_health,
    b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET /version HTTP/1.0\r\n\r\n",
    http_request(b"POST", b"/v3/kv/put", put_body, [(b"Content-Type", b"application/json")]),
    # test_http_chunked.py: a body in chunks of 1, 7 and all, a pipelined request behind it
    b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
    chunks(put_body, 7) + get_health,
    b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks(put_body, 1),
    b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n" +
    b"2;ext=1\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n",
    # other transfer codings (501), HTTP/1.0's ignored one, a bad size line (400)
    b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v3/kv/range HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /v3/kv/range HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n500000\r\n",
    # test_client_port_http.py: a chunked body holding what looks like a request
    b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
    b"Content-Type: application/json\r\n\r\n" +
    chunks(b'{"key":"YQ==","value":"Yg=="}GET /version HTTP/1.1\r\nHost: x\r\n\r\n', 1 << 20),
    # issue #36 item 8's edges (not asserted by the fuzzer: that issue changes them)
    b"POST /v3/kv/put HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}",
    b"POST /v3/kv/put HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    b"GET /health HTTP/1.1\nHost: x\n\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaa",
]
# First byte: the bounds (bit 0: small ones) and the cut into reads.
seeds["fuzz_http_framing"] = [bytes([flags]) + r for r in requests for flags in (0x10, 0x05)]
seeds["fuzz_chunked"] = [bytes([flags]) + body for flags in (0x05, 0x1a) for body in (
    chunks(put_body, 7), chunks(put_body, 1), chunks(b"v" * 300, 100) + get_health,
    b"2;ext=1\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n", b"2 \t\n{}\r\n0\n\n", b"A\r\n0123456789\r\n0\r\n\r\n",
    b"zz\r\n{}\r\n0\r\n\r\n", b"500000\r\n", b"ffffffffffffffff\r\n", b"2\r\n{}XX0\r\n\r\n")]
seeds["fuzz_gateway"] = [http_request(b"POST", path, body, [(b"Content-Type", b"application/json")])
                         for path, body in gateway_calls()]
seeds["fuzz_gateway"] += [
    http_request(b"GET", b"/v3/kv/range"),
    http_request(b"POST", b"/v3beta/kv/range?x=1", b'{"key":"Zm9v"}', [(b"Authorization", b"token.1"),
                                                                    (b"Connection", b"close")]),
    http_request(b"POST", b"/v3/watch", b'{"create_request":{"key":"YQ=="}}{"progress_request":{}}'),
    b"POST /v3alpha/lease/keepalive HTTP/1.0\r\nContent-Length: 22\r\n\r\n" + b'{"ID":"100"}{"ID":"1"}',
    b"POST /v3/kv/range HTTP/1.1\r\nContent-Length: 7\r\n\r\n{\"key\":",
    # a stream's empty body: a call that half-closes at once (no request message)
    http_request(b"POST", b"/v3/watch", b""),
    # found by fuzz_gateway: the JSON parser's error quoted a byte that is not UTF-8 (the body was not JSON)
    http_request(b"POST", b"/v3/lease/keepalive", b'{"ID"\xc9\x00\x00\x00:"100"}{"ID":"100"}'),
]

# fuzz_h2_guard: a script (fuzz_h2_guard.cc): 0 n bytes (client), 1 n bytes
# (server), 2 t (t * 7 ms pass), 3 (a new connection). First byte: bit 0,
# the small shared bucket.
def client(b):
    out = b""
    for i in range(0, len(b), 255):
        part = b[i:i + 255]
        out += bytes([0, len(part)]) + part
    return out


def server(b):
    return b"".join(bytes([1, len(b[i:i + 255])]) + b[i:i + 255] for i in range(0, len(b), 255))


F = h2raw.frame
hdrs = h2raw.request_headers(b"/etcdserverpb.KV/Range")
hello = h2raw.PREFACE + F(4, 0, 0) + F(4, 1, 0)
reset = lambda sid: F(1, 4, sid, hdrs) + F(3, 0, sid, struct.pack(">I", 8))  # noqa: E731 (test_http2_abuse.py)
answer = lambda sid: F(1, 4, sid, b"\x88") + F(0, 1, sid, b"\0\0\0\0\0")  # noqa: E731
scripts = [
    client(hello + b"".join(reset(s) for s in range(1, 41, 2))) + bytes([2, 200]) + client(reset(41)),
    client(h2raw.PREFACE + F(4, 0, 0) + b"".join(F(1, 4, s, hdrs) for s in range(1, 61, 2))) + bytes([3]),
    client(hello + b"".join(F(1, 5, s, hdrs) for s in range(1, 41, 2))) + server(answer(1) + answer(3)),
    client(hello + F(1, 4, 1, hdrs) + F(0, 1, 1, b"x") + F(0, 0, 1, b"y")) + server(F(3, 0, 1, b"\0\0\0\5")) +
    bytes([2, 3]) + client(F(1, 4, 3, hdrs)),
    client(hello + F(1, 4, 1, hdrs)) + server(F(1, 4, 1, b"\x88")) + client(F(3, 0, 1, b"\0\0\0\x08")),
]
seeds["fuzz_h2_guard"] = [bytes([flags]) + sc for sc in scripts for flags in (0, 1)]

# fuzz_tls_pump: pump mode (first byte even): the plaintext after the
# handshake; hello mode (odd): a ClientHello as Python's ssl sends it.
import ssl  # noqa: E402


def client_hello(alpn):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if alpn:
        ctx.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


raft_hello = b"etcdqRFT" + struct.pack("<QQQ", 1, 2, 16) + b"127.0.0.1:2380\0\0"
seeds["fuzz_tls_pump"] = [
    bytes([0x00]) + hello + b"".join(reset(s) for s in range(1, 31, 2)),
    bytes([0x5a]) + hello + b"".join(F(1, 5, s, hdrs) for s in range(1, 41, 2)),
    bytes([0x22]) + requests[1],
    bytes([0x80]) + raft_hello + b"\1\0\0\0\0\0\0\0" + struct.pack("<Q", 48) + b"\0" * 48,
    bytes([0x80]) + b"etcdqRF",
] + [bytes([0x01]) + client_hello(alpn) for alpn in (["h2"], ["h2", "http/1.1"], ["http/1.1"], None)]

# fuzz_wire_check: the first byte cuts; libraft 0.15's messages as
# tests/unit/wire_check_test.cc lays them out.
def w(*ws):
    return b"".join(struct.pack("<Q", x) for x in ws)


def message(mtype, header, payload=b""):
    return w(mtype, len(header)) + header + payload


def append_entries(entries):
    h = w(7, 100, 6, 99, len(entries))
    for etype, data in entries:
        h += w(7) + bytes([etype, 0, 0, 0]) + struct.pack("<I", len(data))
    return message(1, h + w(0), b"".join(d for _, d in entries))


def configuration(servers, role=1):
    c = b"\1" + w(len(servers))
    for sid, addr in servers:
        c += w(sid) + addr + b"\0" + bytes([role])
    return c + b"\0" * (-len(c) % 8)


conf = configuration([(1, b"127.0.0.1:2380"), (2, b"127.0.0.1:2381")])
snapshot = message(5, w(7, 500, 6, 400, len(conf)) + conf + w(16, 0), b"s" * 16)
legitimate = (append_entries([]) + append_entries([(1, b"c" * 24), (2, b"\0" * 8), (3, conf)]) +
              message(2, w(7, 0, 120)) + message(3, w(8, 2, 120, 7)) + message(3, w(8, 2, 120, 7, 3)) +
              message(4, w(8, 1)) + message(4, w(8, 1, 1)) + snapshot + message(6, w(8, 120, 7)))
seeds["fuzz_wire_check"] = [bytes([k]) + m for k in (0, 6) for m in (
    legitimate,
    message(1, w(7, 100, 6, 99, 1)),                       # the 56-byte AppendEntries that crashed a member
    message(2, w(1 << 48, 0, 120)),                          # a term at the cap
    append_entries([(1, b"c" * 9), (1, b"c" * 8)]),          # an entry libraft would walk past
    message(5, w(7, 500, 6, 400, len(conf)) + conf[:-8] + b"x" * 8 + w(0, 0)),
)]


def pair(cf, key, value):
    """One record of a packed snapshot chunk (common/state_pairs.h)."""
    return bytes([cf]) + struct.pack("<II", len(key), len(value)) + key + value


# First byte: after how many records the callback refuses (0: never).
seeds["fuzz_state_pairs"] = [
    b"\0" + pair(0, b"foo", b"bar") + pair(1, b"\0" * 8 + b"k", b"v" * 100) + pair(2, b"", b""),
    b"\2" + pair(0, b"a", b"1") + pair(0, b"b", b"2") + pair(0, b"c", b"3"),
    b"\0" + pair(3, b"key", b"value")[:-2],                              # a value cut short
    b"\0" + b"\0" + struct.pack("<II", 0xffffffff, 0xffffffff) + b"xy",  # lengths past the end
    b"\0" + pair(0, b"k", b"v") + b"\1\2\3",                           # a partial header
]

for target, items in seeds.items():
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        os.remove(os.path.join(d, old))
    for b in items:
        with open(os.path.join(d, hashlib.sha1(b).hexdigest()), "wb") as f:
            f.write(b)
    print("%s: %d seeds" % (d, len(items)))
