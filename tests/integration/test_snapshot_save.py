"""Maintenance.Snapshot, HashKV and Hash against etcd 3.6 (issue #15).

- The same history (puts, overwrites, deletes, a txn, a lease with keys, a
  compaction, more writes) on etcd 3.6 and on etcdq: `etcdctl endpoint
  hashkv` gives the same hash and compact revision, at the head and at an
  older revision.
- `etcdctl snapshot save` from etcdq succeeds; `etcdutl snapshot status`
  (etcdctl 3.6 has no status or restore) shows the revision and key count
  etcd's own snapshot of the same history shows; `etcdutl snapshot restore`
  + etcd 3.6 started on it serves the same keys with the
  same revisions and versions, `get --rev N` for retained revisions, refuses
  the compacted ones, and its hashkv equals etcdq's (migration etcdq -> etcd).
- A snapshot taken under a steady write load is one revision: the restored
  etcd holds exactly what etcdq held at that revision.
- On a 3-member etcdq cluster hashkv and Maintenance.Hash agree on every member.
- etcdq-only (skipped on the oracle): its bound on concurrent Hash/HashKV and
  Snapshot calls, and its removal of a snapshot temp file left by a crash.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cluster"))
import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2  # noqa: E402

ETCD = harness.ORACLE
ETCDCTL = harness.ETCDCTL
ETCDUTL = harness.ETCDUTL
LEASE_ID = 0x1234abcd  # the same on both servers: values carry the lease id


def etcdctl(*args, endpoint=None, check=True):
    env = dict(os.environ, ETCDCTL_API="3")
    cmd = [ETCDCTL] + (["--endpoints", endpoint] if endpoint else []) + list(args)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    return p


def etcdutl(*args):
    """etcdutl 3.6 (snapshot status and restore, which etcdctl 3.6 no longer has)."""
    p = subprocess.run([ETCDUTL] + list(args), capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join([ETCDUTL] + list(args)), p.returncode, p.stderr[-2000:]))
    return p


def hashkv(endpoint, rev=None):
    args = ["endpoint", "hashkv", "-w", "json"] + (["--rev", str(rev)] if rev else [])
    h = json.loads(etcdctl(*args, endpoint=endpoint).stdout)[0]["HashKV"]
    return h["hash"], h.get("compact_revision", 0), h["header"]["revision"]


def kvs(endpoint, rev=None):
    args = ["get", "", "--prefix", "-w", "json"] + (["--rev", str(rev)] if rev else [])
    out = json.loads(etcdctl(*args, endpoint=endpoint).stdout)
    return [(kv["key"], kv["create_revision"], kv["mod_revision"], kv["version"], kv.get("value"),
             kv.get("lease", 0)) for kv in out.get("kvs", [])]


def history(m):
    """Revisions 2..16; compacts at 10. Returns the head revision."""
    kv = m.kv()
    put = lambda k, v, lease=0: kv.Put(rpc_pb2.PutRequest(key=k, value=v, lease=lease))  # noqa: E731
    put(b"a", b"1")                                   # 2
    put(b"b", b"1")                                   # 3
    put(b"a", b"2")                                   # 4
    put(b"c", b"1")                                   # 5
    kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"b"))  # 6
    kv.Txn(rpc_pb2.TxnRequest(success=[               # 7: subs 0, 1, 2
        rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"d", value=b"1")),
        rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"e", value=b"1")),
        rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=b"c")),
    ]))
    m.lease_stub().LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=600, ID=LEASE_ID))
    put(b"l1", b"x", LEASE_ID)                        # 8
    put(b"l2", b"y", LEASE_ID)                        # 9
    put(b"a", b"3")                                   # 10
    put(b"f", b"1")                                   # 11
    kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"f"))  # 12
    kv.Compact(rpc_pb2.CompactionRequest(revision=10, physical=True))
    put(b"a", b"4")                                   # 13
    put(b"g", b"1" * 3000)                            # 14
    kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"d"))  # 15
    kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"z", range_end=b"\0"))  # none: no revision
    put(b"h/1", b"")                                  # 16
    return 16


class SnapshotSave(harness.CleanupTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="etcdq-snap-it-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def restore_and_start_etcd(self, snap):
        r = self.track(harness.Member(binary=ETCD, start=False, name="restored"))
        etcdutl("snapshot", "restore", snap, "--name", r.name, "--data-dir", r.data_dir,
                "--initial-cluster", "%s=%s" % (r.name, r.peer_url),
                "--initial-advertise-peer-urls", r.peer_url)
        r.start()
        return r

    def test_same_history_same_hashkv_and_snapshot_restores_on_etcd(self):
        etcd = self.track(harness.Member(binary=ETCD, name="etcd"))
        ours = self.track(harness.Member(name="etcdq"))
        self.assertEqual(history(etcd), history(ours))
        # HashKV at the head and at older retained revisions.
        for rev in (None, 11, 12, 13, 15):
            self.assertEqual(hashkv(etcd.endpoint, rev), hashkv(ours.endpoint, rev), "hashkv at %s" % rev)
        self.assertEqual(hashkv(ours.endpoint)[1], 10)
        # Both refuse hashkv below the compact revision.
        for ep in (etcd.endpoint, ours.endpoint):
            p = etcdctl("endpoint", "hashkv", "--rev", "9", endpoint=ep, check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("compacted", p.stderr)
        # At the compact revision itself etcd 3.6 answers with the hash it kept
        # when it compacted (mvcc/hash.go's hashStorage: the keys from the
        # previous compaction, -1 for none, up to 10); etcd 3.4 refused it.
        # etcdq keeps no such hashes yet and still refuses, as 3.4 did: a
        # known difference (README, "etcd 3.4 -> 3.6").
        p = etcdctl("endpoint", "hashkv", "--rev", "10", "-w", "json", endpoint=ours.endpoint, check=False)
        if harness.is_reference_etcd():
            h = json.loads(p.stdout)[0]["HashKV"]
            self.assertEqual((h["hash_revision"], h["compact_revision"]), (10, -1))
        else:
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("compacted", p.stderr)

        # snapshot save / status: etcdq's file next to etcd's own.
        ours_snap = os.path.join(self.tmp, "etcdq.db")
        etcd_snap = os.path.join(self.tmp, "etcd.db")
        etcdctl("snapshot", "save", ours_snap, endpoint=ours.endpoint)
        etcdctl("snapshot", "save", etcd_snap, endpoint=etcd.endpoint)
        st_ours = json.loads(etcdutl("snapshot", "status", ours_snap, "-w", "json").stdout)
        st_etcd = json.loads(etcdutl("snapshot", "status", etcd_snap, "-w", "json").stdout)
        self.assertEqual(st_ours["revision"], 16)
        self.assertEqual(st_ours["revision"], st_etcd["revision"])
        self.assertEqual(st_ours["totalKey"], st_etcd["totalKey"])
        self.assertEqual(st_ours["totalSize"], os.path.getsize(ours_snap) - 32)
        # No temp file is left beside etcdq's database.
        left = [f for f in os.listdir(os.path.join(ours.data_dir, "member")) if f.startswith("etcd-snapshot-")]
        self.assertEqual(left, [])

        # Migration etcdq -> etcd: etcd 3.6 on the restored file.
        r = self.restore_and_start_etcd(ours_snap)
        self.assertEqual(kvs(r.endpoint), kvs(ours.endpoint))
        self.assertEqual(kvs(r.endpoint), kvs(etcd.endpoint))
        for rev in (10, 11, 12, 14, 16):
            self.assertEqual(kvs(r.endpoint, rev), kvs(ours.endpoint, rev), "get --rev %d" % rev)
        p = etcdctl("get", "a", "--rev", "9", endpoint=r.endpoint, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("compacted", p.stderr)
        for rev in (None, 11, 13, 16):
            self.assertEqual(hashkv(r.endpoint, rev)[:2], hashkv(ours.endpoint, rev)[:2], "restored at %s" % rev)
        leases = json.loads(etcdctl("lease", "timetolive", "%x" % LEASE_ID, "--keys", "-w", "json",
                                    endpoint=r.endpoint).stdout)
        self.assertEqual(leases["granted-ttl"], 600)
        self.assertEqual(sorted(leases["keys"]), sorted(["bDE=", "bDI="]))  # l1, l2 (base64)

    def test_hashkv_edges_tombstone_at_compaction_and_no_live_key(self):
        """A tombstone at the compact revision (etcd drops it), then every key deleted
        (etcd's Keep is empty and it skips the filter): the same numbers as etcd."""
        etcd = self.track(harness.Member(binary=ETCD, name="etcd"))
        ours = self.track(harness.Member(name="etcdq"))
        for m in (etcd, ours):
            kv = m.kv()
            kv.Put(rpc_pb2.PutRequest(key=b"a", value=b"1"))          # 2
            kv.Put(rpc_pb2.PutRequest(key=b"b", value=b"1"))          # 3
            kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"b"))      # 4
            kv.Compact(rpc_pb2.CompactionRequest(revision=4, physical=True))
            kv.Put(rpc_pb2.PutRequest(key=b"c", value=b"1"))          # 5
            kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"a"))      # 6
            kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"c"))      # 7
        for rev in (None, 5, 6, 7):
            self.assertEqual(hashkv(etcd.endpoint, rev), hashkv(ours.endpoint, rev), "hashkv at %s" % rev)
        for ep in (etcd.endpoint, ours.endpoint):
            p = etcdctl("endpoint", "hashkv", "--rev", "8", endpoint=ep, check=False)
            self.assertIn("future revision", p.stderr)

    def test_snapshot_under_write_load_is_one_revision(self):
        ours = self.track(harness.Member(name="etcdq"))
        kv = ours.kv()
        for start in range(0, 20000, 100):  # enough that the file takes a while to build
            kv.Txn(rpc_pb2.TxnRequest(success=[
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"k%05d" % i, value=b"v" * 200))
                for i in range(start, start + 100)]))
        stop = threading.Event()
        writes = [0]

        def load():
            w = ours.kv()
            i = 0
            while not stop.is_set():
                w.Put(rpc_pb2.PutRequest(key=b"k%05d" % (i % 30000), value=b"w%d" % i))
                i += 1
                writes[0] += 1

        t = threading.Thread(target=load)
        t.start()
        try:
            time.sleep(0.3)
            snap = os.path.join(self.tmp, "load.db")
            etcdctl("snapshot", "save", snap, endpoint=ours.endpoint)
            time.sleep(0.3)
        finally:
            stop.set()
            t.join()
        st = json.loads(etcdutl("snapshot", "status", snap, "-w", "json").stdout)
        rev = st["revision"]
        head = hashkv(ours.endpoint)[2]
        self.assertLess(rev, head, "writes went on during and after the snapshot")
        self.assertGreater(writes[0], 0)
        r = self.restore_and_start_etcd(snap)
        self.assertEqual(json.loads(etcdctl("get", "k", "-w", "json", endpoint=r.endpoint).stdout)["header"]["revision"],
                         rev)
        self.assertEqual(kvs(r.endpoint), kvs(ours.endpoint, rev))
        self.assertEqual(hashkv(r.endpoint)[:2], hashkv(ours.endpoint, rev)[:2])

    @unittest.skipIf(harness.is_reference_etcd(), "etcdq's bound; etcd has none")
    def test_concurrent_hashes_and_snapshots_are_bounded(self):
        """More than two Hash/HashKV or Snapshot calls at once: the extra ones get
        RESOURCE_EXHAUSTED, the others their answer; the slots come back."""
        import grpc
        ours = self.track(harness.Member(name="etcdq"))
        kv = ours.kv()
        for start in range(0, 30000, 100):
            kv.Txn(rpc_pb2.TxnRequest(success=[
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"k%05d" % i, value=b"v" * 100))
                for i in range(start, start + 100)]))
        kv.Compact(rpc_pb2.CompactionRequest(revision=200))
        ms = ours.maintenance()
        futures = [ms.HashKV.future(rpc_pb2.HashKVRequest(), timeout=60) for _ in range(8)]
        ok, refused = set(), 0
        for f in futures:
            try:
                ok.add(f.result().hash)
            except grpc.RpcError as e:
                self.assertEqual(e.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.details())
                refused += 1
        self.assertEqual(len(ok), 1)
        self.assertGreater(refused, 0)
        procs = [subprocess.Popen([ETCDCTL, "--endpoints", ours.endpoint, "snapshot", "save",
                                   os.path.join(self.tmp, "c%d.db" % i)], env=dict(os.environ, ETCDCTL_API="3"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(5)]
        results = []
        for p in procs:
            _, err = p.communicate(timeout=120)
            results.append((p.returncode, err))
        self.assertTrue(any(rc == 0 for rc, _ in results), results)
        for rc, err in results:
            if rc != 0:
                self.assertIn("too many snapshots", err)
        # Every slot came back (nothing was written meanwhile: the same hash).
        for _ in range(3):
            self.assertEqual({ms.HashKV(rpc_pb2.HashKVRequest(), timeout=60).hash}, ok)
        etcdctl("snapshot", "save", os.path.join(self.tmp, "after.db"), endpoint=ours.endpoint)

    @unittest.skipIf(harness.is_reference_etcd(), "etcdq's temp file name and clean-up")
    def test_leftover_temp_file_is_removed_at_start(self):
        m = self.track(harness.Member(name="etcdq"))
        m.stop()
        left = os.path.join(m.data_dir, "member", "etcd-snapshot-1-0.tmp")
        with open(left, "wb") as f:
            f.write(b"x" * 4096)
        m.start()
        self.assertFalse(os.path.exists(left))

    def test_three_members_agree_on_hashkv_and_hash(self):
        import cluster as clusterlib
        c = self.track(clusterlib.Cluster(3))
        kv = c.kv(c.leader_index())
        for i in range(300):
            kv.Put(rpc_pb2.PutRequest(key=b"x%03d" % (i % 100), value=b"%d" % i))
        kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"x05", range_end=b"x06"))
        kv.Compact(rpc_pb2.CompactionRequest(revision=150))
        head = kv.Put(rpc_pb2.PutRequest(key=b"last", value=b"1")).header.revision
        eps = [c[i].endpoint for i in range(3)]
        deadline = time.monotonic() + 20
        while True:  # every member applied the last write
            revs = [json.loads(etcdctl("get", "last", "-w", "json", "--consistency", "s", endpoint=ep).stdout)
                    ["header"]["revision"] for ep in eps]
            if all(r == head for r in revs) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for rev in (None, 200, 300):
            got = {hashkv(ep, rev)[:2] for ep in eps}
            self.assertEqual(len(got), 1, "hashkv at %s differs: %s" % (rev, got))
        hashes = {c.maintenance(i).Hash(rpc_pb2.HashRequest()).hash for i in range(3)}
        self.assertEqual(len(hashes), 1, hashes)


if __name__ == "__main__":
    harness.main()
