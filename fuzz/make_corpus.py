#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets (fuzz/corpus/<target>/) from
hand-made commands and requests, so the fuzzers start from bytes that
decode. Run it again after changing proto/; the fuzzers grow their own
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

for target, items in seeds.items():
    d = os.path.join(here, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for old in os.listdir(d):
        os.remove(os.path.join(d, old))
    for b in items:
        with open(os.path.join(d, hashlib.sha1(b).hexdigest()), "wb") as f:
            f.write(b)
    print("%s: %d seeds" % (d, len(items)))
