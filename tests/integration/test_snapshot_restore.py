"""`etcdq snapshot restore FILE`: migration etcd -> etcdq with every revision kept (issue #15).

Against etcd 3.6 and etcdctl (run without ETCDQ_BIN, the restores are
etcdutl's, etcd 3.6's tool for them, and what etcdq alone prints or keeps is
left out: its summary lines, its refusals' messages, queues):
- etcd with a history (puts, overwrites, deletes, a txn, a compaction, a lease
  with keys, a user and a role) -> `etcdctl snapshot save` -> `etcdq snapshot
  restore` -> etcdq started on it serves the same `get` at the head and at
  every retained revision, refuses the compacted ones as etcd does, gives the
  same `endpoint hashkv`, keeps the lease's TTL and keys, and a watch from an
  old retained revision replays the same events etcd replays.
- A snapshot taken from etcdq (`etcdctl snapshot save` against etcdq) restores
  the same way; a copied member db (no sha256 trailer) needs --skip-hash-check.
- Three members restored from one file form a cluster with the same data.
- A bit-flipped or truncated file and a non-empty data dir are refused with a
  message that says so, and nothing is left behind.
- Work queues survive: messages still stored in the snapshot are delivered
  again in idx order, the queue's settings are kept, and the next produce
  goes on past the highest idx (it never reuses a stored message's name).
"""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "cluster"))
import harness  # noqa: E402
import watchlib  # noqa: E402
import urllib.request  # noqa: E402
from queue_util import CtlWatch, msg_key, wait_until  # noqa: E402
from queue_util import etcdctl as qctl  # noqa: E402
from cluster import Cluster  # noqa: E402
from test_snapshot_save import ETCD, LEASE_ID, etcdctl, hashkv, history, kvs  # noqa: E402

RETAINED = (10, 11, 12, 13, 14, 15, 16)  # history() compacts at 10; head 16


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def key_bucket_repointed(snapshot, target):
    """An etcd snapshot whose "key" bucket root is page `target` (None: the
    root bucket's own page), with its sha256 trailer made to match."""
    db = bytearray(snapshot[:-32])

    def meta(off):  # bbolt's meta page: (txid, page size, root bucket page)
        page_size, = struct.unpack_from("<I", db, off + 24)
        root, = struct.unpack_from("<Q", db, off + 32)
        txid, = struct.unpack_from("<Q", db, off + 64)
        return txid, page_size, root
    m0 = meta(0)
    _, page_size, root = max(m0, meta(m0[1]))
    page = root * page_size
    flags, count = struct.unpack_from("<HH", db, page + 8)
    assert flags == 0x02, "the root bucket's page is not a leaf"
    for i in range(count):
        el = page + 16 + 16 * i
        eflags, pos, ksize, vsize = struct.unpack_from("<IIII", db, el)
        if eflags & 1 and bytes(db[el + pos:el + pos + ksize]) == b"key":
            struct.pack_into("<Q", db, el + pos + ksize, root if target is None else target)
            return bytes(db) + hashlib.sha256(db).digest()
    raise AssertionError("no key bucket in the root page")


def etcdq_restore(*args):
    """`etcdq snapshot restore`; on the oracle, etcd 3.6's `etcdutl snapshot restore`."""
    tool = harness.ETCDUTL if harness.is_reference_etcd() else harness.binary_under_test()
    cmd = [tool, "snapshot", "restore"] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def watch_from(member, rev, until_rev):
    """Every event of a watch on all keys from `rev`, up to the one at `until_rev`."""
    ws = watchlib.WatchStream(watchlib.ready_channel(member))
    try:
        ws.create(b"\0", range_end=b"\0", start_revision=rev, prev_kv=True)
        created = ws.wait_created()[0]
        ok = ws.wait_until(lambda s: any(e.kv.mod_revision >= until_rev
                                         for e in s.events_of(created.watch_id)), timeout=20)
        assert ok, "no event at revision %d" % until_rev
        return [watchlib.event_tuple(e) for e in ws.events_of(created.watch_id)]
    finally:
        ws.close()


class SnapshotRestore(harness.CleanupTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="etcdq-restore-it-")
        cls.etcd = cls.track_class(harness.Member(binary=ETCD, name="etcd"))
        assert history(cls.etcd) == 16
        # A user and a role (auth stays disabled here; test_auth_enabled_is_kept enables it).
        etcdctl("user", "add", "alice:pw", endpoint=cls.etcd.endpoint)
        etcdctl("role", "add", "reader", endpoint=cls.etcd.endpoint)
        etcdctl("role", "grant-permission", "reader", "read", "a", endpoint=cls.etcd.endpoint)
        etcdctl("user", "grant-role", "alice", "reader", endpoint=cls.etcd.endpoint)
        cls.snap = os.path.join(cls.tmp, "etcd.db")
        etcdctl("snapshot", "save", cls.snap, endpoint=cls.etcd.endpoint)

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def log_text(self, m):
        return "log of %r\n%s" % (m, m.log_tail()) if hasattr(m, "log_tail") else repr(m)

    def restored_member(self, snap, *extra, wait=True):
        m = self.track(harness.Member(start=False, name="restored"))
        p = etcdq_restore(snap, "--name", m.name, "--data-dir", m.data_dir,
                          "--initial-cluster", "%s=%s" % (m.name, m.peer_url),
                          "--initial-advertise-peer-urls", m.peer_url, *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        m.start(wait=wait)
        return m, p

    def assert_same_store(self, ref, ep):
        self.assertEqual(kvs(ep), kvs(ref))
        for rev in RETAINED:
            self.assertEqual(kvs(ep, rev), kvs(ref, rev), "get --rev %d" % rev)
        for rev in (None, 11, 12, 13, 15, 16):
            self.assertEqual(hashkv(ep, rev), hashkv(ref, rev), "hashkv at %s" % rev)
        for e in (ref, ep):
            p = etcdctl("get", "a", "--rev", "9", endpoint=e, check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("required revision has been compacted", p.stderr)

    def test_etcd_snapshot_keeps_every_revision(self):
        r, p = self.restored_member(self.snap)
        if not harness.is_reference_etcd():
            self.assertIn("revision 16, compacted at 10", p.stdout)
            self.assertIn("kept 1 users and 1 roles (auth disabled)", p.stdout)
        for args in (["user", "list"], ["role", "list"], ["user", "get", "alice"], ["role", "get", "reader"]):
            self.assertEqual(etcdctl(*args, endpoint=r.endpoint).stdout, etcdctl(*args, endpoint=self.etcd.endpoint).stdout,
                             args)
        self.assertEqual(hashkv(self.etcd.endpoint)[1], 10)
        self.assert_same_store(self.etcd.endpoint, r.endpoint)
        # The lease, its TTL and its keys.
        for ep in (self.etcd.endpoint, r.endpoint):
            ttl = json.loads(etcdctl("lease", "timetolive", "%x" % LEASE_ID, "--keys", "-w", "json",
                                     endpoint=ep).stdout)
            self.assertEqual(ttl["granted-ttl"], 600)
            self.assertGreater(ttl["ttl"], 500)
            self.assertEqual(sorted(ttl["keys"]), ["bDE=", "bDI="])  # l1, l2
        self.assertIn("%x" % LEASE_ID, etcdctl("lease", "list", endpoint=r.endpoint).stdout)
        # A watch from an old retained revision replays what etcd replays.
        for start in (10, 11, 13):
            self.assertEqual(watch_from(r, start, 16), watch_from(self.etcd, start, 16), "watch from %d" % start)
        # New writes continue the revision sequence.
        etcdctl("put", "new", "1", endpoint=r.endpoint)
        self.assertEqual(kvs(r.endpoint)[-1][:3], ("bmV3", 17, 17))  # "new"

    def test_auth_enabled_is_kept(self):
        # etcd with auth on: root, and alice who may only read "a". Restored,
        # etcdq enforces the same: the passwords (etcd's bcrypt hashes) work,
        # alice reads "a" and may not write it, no user may read at all.
        e = self.track(harness.Member(binary=ETCD, name="etcd-auth"))
        for args in (["user", "add", "root:rootpw"], ["user", "grant-role", "root", "root"],
                     ["user", "add", "alice:alicepw"], ["role", "add", "reader"],
                     ["role", "grant-permission", "reader", "read", "a"], ["user", "grant-role", "alice", "reader"],
                     ["put", "a", "1"], ["auth", "enable"]):
            etcdctl(*args, endpoint=e.endpoint)
        snap = os.path.join(self.tmp, "etcd-auth.db")
        etcdctl("--user", "root:rootpw", "snapshot", "save", snap, endpoint=e.endpoint)
        # The harness's readiness probe is an anonymous Range: with auth on, wait with root.
        r, p = self.restored_member(snap, wait=False)
        if not harness.is_reference_etcd():
            self.assertIn("kept 2 users and 1 roles (auth enabled)", p.stdout)  # etcd stores no root role
        deadline = time.time() + 30
        while etcdctl("--user", "root:rootpw", "get", "a", endpoint=r.endpoint, check=False).returncode != 0:
            self.assertLess(time.time(), deadline, "the restored member did not serve root")
            time.sleep(0.2)
        for ep in (e.endpoint, r.endpoint):
            self.assertEqual(etcdctl("--user", "alice:alicepw", "get", "a", "--print-value-only",
                                     endpoint=ep).stdout.strip(), "1")
            refused = etcdctl("--user", "alice:alicepw", "put", "a", "2", endpoint=ep, check=False)
            self.assertIn("permission denied", refused.stderr)
            anonymous = etcdctl("get", "a", endpoint=ep, check=False)
            self.assertIn("user name is empty", anonymous.stderr)
            wrong = etcdctl("--user", "alice:nope", "get", "a", endpoint=ep, check=False)
            self.assertIn("authentication failed", wrong.stderr)
            self.assertIn("alice", etcdctl("--user", "root:rootpw", "user", "list", endpoint=ep).stdout)

    def test_etcdq_snapshot_and_copied_db(self):
        ours = self.track(harness.Member(name="etcdq-src"))
        self.assertEqual(history(ours), 16)
        snap = os.path.join(self.tmp, "etcdq.db")
        etcdctl("snapshot", "save", snap, endpoint=ours.endpoint)
        r, _ = self.restored_member(snap)
        self.assert_same_store(ours.endpoint, r.endpoint)
        self.assert_same_store(self.etcd.endpoint, r.endpoint)

        # A member's db copied from etcd's data dir has no sha256 trailer.
        src = self.track(harness.Member(binary=ETCD, name="etcd-copy"))
        history(src)
        src.stop()
        db = os.path.join(self.tmp, "copied.db")
        shutil.copyfile(os.path.join(src.data_dir, "member", "snap", "db"), db)
        target = os.path.join(self.tmp, "copied-data")
        p = etcdq_restore(db, "--data-dir", target)
        self.assertNotEqual(p.returncode, 0)
        # etcdutl 3.6 logs the same error as a zap line ("snapshot missing hash but ...").
        self.assertIn("missing hash but --skip-hash-check=false", p.stderr)
        if not harness.is_reference_etcd():  # etcdutl 3.6 leaves the dir it made behind
            self.assertFalse(os.path.exists(target))
        r2, _ = self.restored_member(db, "--skip-hash-check")
        self.assert_same_store(self.etcd.endpoint, r2.endpoint)

    def test_three_members_from_one_snapshot(self):
        c = Cluster(3, start=False)
        self.track(c)
        # Restored with one token and started with another: as etcd, the
        # data dir's token wins (the members once never elected a leader).
        for m in c.members:
            p = etcdq_restore(self.snap, "--name", m.name, "--data-dir", m.data_dir,
                              "--initial-cluster", m.initial_cluster,
                              "--initial-cluster-token", c.token + "-at-restore",
                              "--initial-advertise-peer-urls", m.peer_url)
            self.assertEqual(p.returncode, 0, p.stderr)
        for m in c.members:
            m.spawn()
        c.wait_serving()
        deadline = time.monotonic() + 20  # each member publishes its name once it runs
        while True:
            names = sorted(m.get("name", "") for m in c.etcdctl_json("member", "list")["members"])
            if names == ["m0", "m1", "m2"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(names, ["m0", "m1", "m2"])
        self.assert_same_store(self.etcd.endpoint, c[0].endpoint)
        for m in c.members:
            # Each member's own copy (serializable: no forwarding).
            out = json.loads(etcdctl("get", "", "--prefix", "-w", "json", "--consistency=s",
                                     endpoint=m.endpoint).stdout)
            self.assertEqual(len(out["kvs"]), len(kvs(self.etcd.endpoint)))
            self.assertEqual(hashkv(m.endpoint), hashkv(self.etcd.endpoint), m.name)
        # The cluster takes writes on top of the restored revisions.
        etcdctl("put", "after", "1", endpoint=c[1].endpoint)
        # HashKV answers from the member's applied state (as etcd's): a
        # linearizable read on it first waits until it applied the put.
        self.assertIn(("YWZ0ZXI=", 17, 17), [kv[:3] for kv in kvs(c[0].endpoint)])  # "after"
        self.assertEqual(hashkv(c[0].endpoint)[2], 17)

    @unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
    def test_queued_messages_are_delivered_again_after_a_restore(self):
        src = self.track(harness.Member(name="queue-src"))
        ep = src.endpoint

        def ok(p):
            self.assertEqual(p.returncode, 0, p.stderr)
            return p.stdout

        ok(qctl(ep, "put", "/q/rq/config", '{"visibility_timeout": 1, "max_deliveries": 2}'))
        for tail in ("a", "b", "c"):
            ok(qctl(ep, "put", "/q/rq/p/" + tail, "v-" + tail))
        ok(qctl(ep, "del", msg_key("rq", 1, "a")))  # acked before the snapshot
        snap = os.path.join(self.tmp, "queues.db")
        ok(qctl(ep, "snapshot", "save", snap))
        r, p = self.restored_member(snap)
        self.assertIn("2 queued messages in 1 queues", p.stdout)
        ok(qctl(r.endpoint, "put", "/q/rq/p/d", "v-d"))
        self.assertEqual(ok(qctl(r.endpoint, "get", "--prefix", "--keys-only", "/q/rq/0")).split(),
                         [msg_key("rq", 2, "b"), msg_key("rq", 3, "c"), msg_key("rq", 4, "d")])
        w = self.track(CtlWatch(r.endpoint, "/q/rq/c/w1"))
        got = [(e[1], e[2], e[3]) for e in w.wait_events(3, timeout=20)]
        self.assertEqual(got, [("PUT", msg_key("rq", 2, "b"), "v-b"), ("PUT", msg_key("rq", 3, "c"), "v-c"),
                               ("PUT", msg_key("rq", 4, "d"), "v-d")])

        def metric(name):
            text = urllib.request.urlopen("http://%s/metrics" % r.endpoint, timeout=10).read().decode()
            m = re.search(r'^%s\{queue="rq"\} (\S+)$' % name, text, re.M)
            return float(m.group(1)) if m else None

        self.assertEqual(metric("etcdq_queue_depth"), 3)
        self.assertEqual(metric("etcdq_queue_in_flight"), 3)
        # An ack removes exactly that message. The settings came along: the
        # others come back after 1 s (not the default 30 s) and, delivered
        # twice, go to the dead-letter queue.
        ok(qctl(r.endpoint, "del", msg_key("rq", 2, "b")))
        dead = lambda: ok(qctl(r.endpoint, "get", "--prefix", "--keys-only", "/q/rq.dlq/")).split()
        self.assertTrue(wait_until(lambda: len(dead()) == 2, 20), dead())
        self.assertEqual([e[2] for e in w.snapshot()[3:5]], [msg_key("rq", 3, "c"), msg_key("rq", 4, "d")])
        self.assertEqual(ok(qctl(r.endpoint, "get", "--prefix", "--keys-only", "/q/rq/0")).split(), [])
        self.assertEqual(metric("etcdq_queue_depth"), 0)

    def assert_refused(self, snap, needle, *extra):
        parent = tempfile.mkdtemp(dir=self.tmp)
        target = os.path.join(parent, "data")
        p = etcdq_restore(snap, "--data-dir", target, *extra)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertIn(needle, p.stderr)
        self.assertEqual(os.listdir(parent), [], "nothing left behind")

    @unittest.skipIf(harness.is_reference_etcd(), "etcdq's checks and messages (etcdutl's differ)")
    def test_key_bucket_pointing_at_the_root_or_a_meta_page_is_refused(self):
        # A hostile file whose "key" bucket (the revisions) has for its root
        # the page of the file's root bucket, or a meta page, with a valid
        # sha256 trailer: refused as corrupt, nothing restored. etcdq once
        # read the root page's buckets as the key bucket's (nested buckets,
        # skipped) and restored 0 keys with exit 0.
        data = read_bytes(self.snap)
        for what, target in (("root", None), ("meta", 1)):
            with self.subTest(points_at=what):
                bad = os.path.join(self.tmp, "key-at-%s.db" % what)
                write_bytes(bad, key_bucket_repointed(data, target))
                self.assert_refused(bad, "is corrupt")
                p = etcdq_restore(bad, "--data-dir", os.path.join(self.tmp, "unused-" + what))
                self.assertIn("bbolt: ", p.stderr)

    @unittest.skipIf(harness.is_reference_etcd(), "etcdq's checks and messages (etcdutl's differ)")
    def test_corrupt_truncated_and_existing_dir_refused(self):
        data = read_bytes(self.snap)
        flipped = os.path.join(self.tmp, "flipped.db")
        b = bytearray(data)
        b[len(b) // 2] ^= 0x40
        write_bytes(flipped, bytes(b))
        self.assert_refused(flipped, "is corrupt: its sha256 does not match")
        # Without the hash check, damaged meta pages (both copies) are still caught.
        b = bytearray(data)
        b[16] ^= 0xff         # page 0's magic
        b[4096 + 16] ^= 0xff  # page 1's magic
        write_bytes(flipped, bytes(b))
        self.assert_refused(flipped, "is corrupt", "--skip-hash-check")
        truncated = os.path.join(self.tmp, "truncated.db")
        write_bytes(truncated, data[:len(data) - 5000])
        self.assert_refused(truncated, "truncated")
        write_bytes(truncated, data[:len(data) // 2 // 4096 * 4096])
        self.assert_refused(truncated, "is corrupt", "--skip-hash-check")
        self.assert_refused(os.path.join(self.tmp, "missing.db"), "no such file")

        # An existing, non-empty data dir is refused and left as it was.
        d = tempfile.mkdtemp(dir=self.tmp)
        write_bytes(os.path.join(d, "keep"), b"x")
        p = etcdq_restore(self.snap, "--data-dir", d)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("not empty", p.stderr)
        self.assertEqual(os.listdir(d), ["keep"])
        # An empty one is fine (as etcdctl); the temp dir of a restore that
        # was killed (its pid is gone) is removed.
        e = tempfile.mkdtemp(dir=self.tmp)
        stale = e + ".restore-tmp-999999999"
        os.makedirs(os.path.join(stale, "member"))
        p = etcdq_restore(self.snap, "--data-dir", e)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(os.listdir(e), ["member"])
        self.assertFalse(os.path.exists(stale))
        # A name missing from --initial-cluster.
        p = etcdq_restore(self.snap, "--name", "x", "--data-dir", os.path.join(self.tmp, "nox"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("couldn't find local name \"x\"", p.stderr)


if __name__ == "__main__":
    harness.main()
