#!/usr/bin/python3
"""A manual SIGKILL campaign on three members (not a ctest: minutes, random), on top of
tests/integration/crash_workload.py (its workers and checks) plus a writer of 100-600 KB
values, so that the 16 MiB flush bound of apply's unlogged writes (storage/engine.h,
Durability::kReplayed) is crossed every few dozen puts. After each round every member
holds every acknowledged write, the history has no gap and `endpoint hashkv` agrees.

ATTACK_MODE:
  flush      SIGKILL one member or all three at a random moment
  leader     SIGKILL the leader
  replay2    SIGKILL all, restart, SIGKILL all again 0.05-1.5 s into the restart (replay)
  addmember  MemberAdd under load, start it, SIGKILL it (and half the time the leader)
             while it installs the snapshot
  addremove  MemberRemove a member, MemberAdd one, SIGKILL every member
ATTACK_ROUNDS, ATTACK_SEED, ATTACK_SNAP (--snapshot-count), ATTACK_DEFRAG=1 (Defragment
each member in turn during the rounds), ATTACK_OTHER_BIN (restart half the members on
another build's binary, e.g. main's).

    ATTACK_MODE=addmember ATTACK_ROUNDS=4 ATTACK_SEED=13 ETCDQ_BIN=build/etcdq \
        /usr/bin/python3 tests/cluster/attack_replay.py
"""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402
from etcd3.etcdrpc import rpc_pb2_grpc  # noqa: E402

from cluster import ClusterTestCase, main  # noqa: E402
import crash_workload  # noqa: E402,I100
import harness  # noqa: E402

MODE = os.environ.get("ATTACK_MODE", "flush")
ROUNDS = int(os.environ.get("ATTACK_ROUNDS", "6"))
SEED = int(os.environ.get("ATTACK_SEED", str(int(time.time() * 1000) % 1000000)))
SNAP = os.environ.get("ATTACK_SNAP")
OTHER_BIN = os.environ.get("ATTACK_OTHER_BIN")
DEFRAG = os.environ.get("ATTACK_DEFRAG")


def defrag_loop(endpoints, stop):
    """Maintenance.Defragment on each member in turn until `stop` (errors ignored)."""
    n = 0
    while not stop.is_set():
        ep = endpoints[n % len(endpoints)]
        n += 1
        ch = grpc.insecure_channel(ep, options=harness.CHANNEL_OPTIONS)
        try:
            rpc_pb2_grpc.MaintenanceStub(ch).Defragment(pb.DefragmentRequest(), timeout=5)
        except grpc.RpcError:
            pass
        finally:
            ch.close()
        stop.wait(0.1)


class BigWriter(threading.Thread):
    """Puts 100-600 KB values on its own keys so that the 16 MiB flush bound is crossed
    every few dozen puts; records the last acknowledged (value, mod_revision, version)."""

    def __init__(self, endpoint, prefix, seed, stop):
        super().__init__(daemon=True)
        self.ch = grpc.insecure_channel(endpoint, options=harness.CHANNEL_OPTIONS)
        self.kv = rpc_pb2_grpc.KVStub(self.ch)
        self.prefix = prefix
        self.rng = random.Random(seed)
        self.stop = stop
        self.acked = {}
        self.doubt = None
        self.n = 0

    def run(self):
        try:
            while not self.stop.is_set():
                self.n += 1
                key = self.prefix + b"%02d" % self.rng.randrange(16)
                val = (b"%s#%d|" % (key, self.n)) * 1 + os.urandom(self.rng.randrange(100000, 600000))
                self.doubt = key
                r = self.kv.Put(pb.PutRequest(key=key, value=val), timeout=5)
                old = self.acked.get(key)
                self.acked[key] = (val, r.header.revision, old[2] + 1 if old else 1)
                self.doubt = None
        except grpc.RpcError:
            pass
        finally:
            self.ch.close()

    def check(self, kv, context):
        errs = []
        for key, (val, rev, ver) in self.acked.items():
            if key == self.doubt:
                continue
            r = kv.Range(pb.RangeRequest(key=key, serializable=True), timeout=10)
            if not r.kvs:
                errs.append("%r lost (rev %d)" % (key, rev))
            elif (r.kvs[0].value, r.kvs[0].mod_revision, r.kvs[0].version) != (val, rev, ver):
                errs.append("%r: (mod %d, ver %d, same value %s), acked (%d, %d)" % (
                    key, r.kvs[0].mod_revision, r.kvs[0].version, r.kvs[0].value == val, rev, ver))
        if errs:
            raise AssertionError("%s: big writer: %s" % (context, errs[:5]))


class Attack(ClusterTestCase):

    def check_all(self, c, ledger, bigs, context):
        acked = [r for w in ledger.done for r, _ch in w.muts] + [a[1] for b in bigs for a in b.acked.values()]
        if acked:
            c.wait_applied_revision(max(acked), timeout=60)
        current = {}
        for i in c.live():
            current[i] = ledger.check(c.kv(i), rpc_pb2_grpc.LeaseStub(c.members[i].channel()),
                                      "%s, member %d" % (context, i))
            for b in bigs:
                b.check(c.kv(i), "%s, member %d" % (context, i))
        first = c.live()[0]
        ledger.check_history(c.kv(first), c.members[first].channel(), current[first], context)
        c.assert_same_hashkv(self)

    def test_attack(self):
        rng = random.Random(SEED)
        sys.stderr.write("\n  [mode %s seed %d] " % (MODE, SEED))
        snap = int(SNAP) if SNAP else (20 if MODE == "addmember" else None)
        c = self.new_cluster(snapshot_count=snap)
        ledger = crash_workload.Ledger(rng)
        bigs = []
        total = 0
        for round_no in range(1, ROUNDS + 1):
            if MODE == "addremove" and len(c.live()) > 3:
                gone = rng.choice(c.live())
                c.remove_member(gone)
                sys.stderr.write("removed m%d\n" % gone)
            endpoints = [c.members[i].endpoint for i in c.live()]
            stop = threading.Event()
            big = BigWriter(endpoints[round_no % len(endpoints)], b"big/r%d/" % round_no, rng.random(), stop)
            big.start()
            if DEFRAG:
                threading.Thread(target=defrag_loop, args=(endpoints, stop), daemon=True).start()
            note = ""
            if MODE == "flush":
                victims = list(range(len(c.members))) if round_no % 2 == 0 else [rng.randrange(len(c.members))]
                fault = lambda: c.kill9(*victims)  # noqa: E731
            elif MODE == "leader":
                def fault():
                    li = c.leader_index()
                    victims[:] = [li]
                    c.kill9(li)
                victims = []
            elif MODE == "replay2":
                victims = [i for i in c.live()]
                fault = lambda: c.kill9(*victims)  # noqa: E731
            elif MODE == "addremove":
                victims = []

                def fault():
                    j = c.add_member(start=False)
                    c.members[j].spawn()
                    time.sleep(rng.uniform(0.05, 1.5))
                    victims[:] = c.live()
                    c.kill9(*victims)
            elif MODE == "addmember":
                victims = []

                def fault():
                    # add a member under load; kill it (and maybe the leader) while it installs
                    j = c.add_member(start=False)
                    c.members[j].spawn()
                    time.sleep(rng.uniform(0.05, 1.5))
                    victims[:] = [j] + ([c.leader_index()] if rng.random() < 0.5 else [])
                    c.kill9(*victims)
            writes, streamed = ledger.run_round(endpoints, fault, min_s=0.5, max_s=3.0)
            stop.set()
            big.join(15)
            bigs.append(big)
            total += writes
            if MODE == "replay2":
                for i in victims:
                    if OTHER_BIN and rng.random() < 0.5:
                        c.members[i].binary = OTHER_BIN
                    c.members[i].spawn()
                d = rng.uniform(0.05, 1.5)
                time.sleep(d)
                c.kill9(*victims)
                note = ", again %.2f s into the restart" % d
            for i in victims:
                if OTHER_BIN and rng.random() < 0.5:
                    c.members[i].binary = OTHER_BIN
                else:
                    c.members[i].binary = c.binary
                c.members[i].spawn()
            c.wait_serving(timeout=90)
            context = "round %d (SIGKILL of %s after %.2f s%s, %d writes + %d big acked; seed %d)" % (
                round_no, victims, streamed, note, writes, len(big.acked), SEED)
            sys.stderr.write(context + "\n")
            self.check_all(c, ledger, bigs, context)
        self.note("%d rounds, %d acknowledged writes" % (ROUNDS, total))


if __name__ == "__main__":
    main()
