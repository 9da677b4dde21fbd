#!/usr/bin/python3
"""SIGKILL under a mixed write load on three members: one member, then all three at once
(what RocksDB's own log covered before applied writes skipped it: storage/engine.h,
Durability::kReplayed), at random moments, with snapshots every 20 entries. After each
restart every member holds every acknowledged write (tests/integration/crash_workload.py:
puts, deletes, txns, leases, queue produces and acks) at the revision it was acknowledged
with, the history from the last acknowledged compaction on has no gap, and
`etcdctl endpoint hashkv --cluster` agrees.

    /usr/bin/python3 tests/cluster/test_cluster_sigkill.py
    SIGKILL_ROUNDS=20 SIGKILL_SEED=7 SIGKILL_OTHER_BIN=/path/to/main/etcdq ETCDQ_BIN=build/etcdq \\
        /usr/bin/python3 tests/cluster/test_cluster_sigkill.py

SIGKILL_OTHER_BIN: another build's binary that every other restart runs on the same data
dirs (main's, to check that each reads what the other wrote). SIGKILL_SNAPSHOT_COUNT
(default 20) and CRASH_VALUE_BYTES (crash_workload.py) for longer runs by hand.
"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd3.etcdrpc import rpc_pb2_grpc  # noqa: E402

from cluster import ClusterTestCase, main  # noqa: E402  (puts tests/integration on the path)
import crash_workload  # noqa: E402,I100

ROUNDS = int(os.environ.get("SIGKILL_ROUNDS", "4"))
SEED = int(os.environ.get("SIGKILL_SEED", str(int(time.time() * 1000) % 1000000)))
OTHER_BIN = os.environ.get("SIGKILL_OTHER_BIN")
# A snapshot every 20 entries, and libraft keeps 20 behind it (member.cc): kills land in
# snapshots, and a log entry whose state only a memtable held would be gone from the log.
SNAPSHOT_COUNT = int(os.environ.get("SIGKILL_SNAPSHOT_COUNT", "20"))


class ClusterSigkillTest(ClusterTestCase):

    def check_all(self, c, ledger, context):
        acked = [r for w in ledger.done for r, _ch in w.muts]
        if acked:
            c.wait_applied_revision(max(acked))
        current = {}
        for i in c.live():
            current[i] = ledger.check(c.kv(i), rpc_pb2_grpc.LeaseStub(c.members[i].channel()),
                                      "%s, member %d" % (context, i))
        ledger.check_history(c.kv(0), c.members[0].channel(), current[0], context)
        c.assert_same_hashkv(self)

    def test_acknowledged_writes_survive_sigkill_of_one_and_of_all_members(self):
        rng = random.Random(SEED)
        sys.stderr.write("\n  [seed %d] " % SEED)
        c = self.new_cluster(snapshot_count=SNAPSHOT_COUNT)
        binaries = [c.binary] + ([OTHER_BIN] if OTHER_BIN else [])
        ledger = crash_workload.Ledger(rng)
        endpoints = [m.endpoint for m in c.members]
        total = 0
        for round_no in range(1, ROUNDS + 1):
            binary = binaries[round_no % len(binaries)]
            if round_no % 2:
                victims = [rng.randrange(len(c.members))]
            else:
                victims = list(range(len(c.members)))
            writes, streamed = ledger.run_round(endpoints, lambda: c.kill9(*victims), min_s=1.0, max_s=2.5)
            total += writes
            for i in victims:
                c.members[i].binary = binary
                c.members[i].spawn()
            c.wait_serving()
            context = "round %d (SIGKILL of %s after %.2f s, %d writes acked; restarted with %s; seed %d)" % (
                round_no, victims, streamed, writes, binary, SEED)
            self.check_all(c, ledger, context)
        self.note("%d rounds, %d acknowledged writes, compacted to %d" % (ROUNDS, total, ledger.compacted()))


if __name__ == "__main__":
    main()
