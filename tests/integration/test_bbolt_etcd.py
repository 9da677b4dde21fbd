"""bbolt/ against etcd's own tools (etcd, etcdctl and etcdutl 3.6).

- A snapshot etcd takes (`etcdctl snapshot save`) is read by our reader
  (tests/tools/bbolt_tool.cc, `dump --trailer`): its `key` bucket holds the
  revisions and mvccpb.KeyValue values etcd serves.
- A file our writer makes (`write --trailer`), with etcd's buckets and
  encodings built here, passes `etcdutl snapshot status` (hash check, tx.Check,
  revision, key count), `etcdutl snapshot restore` turns it into a data dir,
  and etcd 3.6 starts on it and serves the keys with their revisions.
- A truncated or bit-flipped snapshot is refused by both.

The tool is $BBOLT_TOOL (CMake sets it), else build/etcdq_bbolt_tool. The
servers here are always etcd 3.6, whatever $ETCDQ_BIN says: this tests
the file format, not etcdq.
"""
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from etcd3.etcdrpc import kv_pb2  # noqa: E402

ETCD = harness.ORACLE
ETCDCTL = harness.ETCDCTL
ETCDUTL = harness.ETCDUTL
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.environ.get("BBOLT_TOOL") or os.path.join(REPO, "build", "etcdq_bbolt_tool")


def etcdctl(*args, endpoint=None, check=True, stdin=None):
    env = dict(os.environ, ETCDCTL_API="3")
    cmd = [ETCDCTL] + (["--endpoints", endpoint] if endpoint else []) + list(args)
    p = subprocess.run(cmd, env=env, input=stdin, capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    return p


def etcdutl(*args, check=True):
    """etcdutl 3.6: snapshot status and restore moved there from etcdctl."""
    p = subprocess.run([ETCDUTL] + list(args), capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError("%s failed (%d): %s" % (" ".join([ETCDUTL] + list(args)), p.returncode, p.stderr[-2000:]))
    return p


def rev_key(main, sub=0, tombstone=False):
    return struct.pack(">Q", main) + b"_" + struct.pack(">Q", sub) + (b"t" if tombstone else b"")


def dump(path):
    """The file's buckets as {name: [(key, value), ...]} (top level, plus nested as name/child)."""
    p = subprocess.run([TOOL, "dump", path, "--trailer"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip())
    buckets, stack = {}, []
    for line in p.stdout.splitlines():
        parts = line.split(" ")
        if parts[0] == "B":
            stack.append(bytes.fromhex(parts[1]).decode())
            buckets["/".join(stack)] = []
        elif parts[0] == "P":
            buckets["/".join(stack)].append((bytes.fromhex(parts[1]), bytes.fromhex(parts[2] if len(parts) > 2 else "")))
        elif parts[0] == "E":
            stack.pop()
    return buckets


def write(path, buckets):
    """Writes {bucket: [(key, value)]} (buckets and keys sorted here) with the sha256 trailer."""
    lines = []
    for name in sorted(buckets, key=lambda n: n.encode()):
        lines.append("B " + name.encode().hex())
        for k, v in sorted(buckets[name]):
            lines.append("P %s %s" % (k.hex(), v.hex()))
        lines.append("E")
    p = subprocess.run([TOOL, "write", path, "--trailer"], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip())


class BboltAgainstEtcd(harness.CleanupTestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="etcdq-bbolt-it-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def etcd(self, start=True):
        return self.track(harness.Member(binary=ETCD, start=start))

    def test_reader_reads_the_revisions_of_a_snapshot_etcd_took(self):
        m = self.etcd()
        ep = m.endpoint
        etcdctl("put", "a", "1", endpoint=ep)                       # rev 2
        etcdctl("put", "b", "2", endpoint=ep)                       # rev 3
        etcdctl("put", "a", "3", endpoint=ep)                       # rev 4
        etcdctl("del", "b", endpoint=ep)                            # rev 5, tombstone
        etcdctl("txn", endpoint=ep, stdin="\nput t1 x\nput t2 y\n\n\n")  # rev 6, subs 0 and 1
        lease = etcdctl("lease", "grant", "600", endpoint=ep).stdout.split()[1]
        etcdctl("put", "c", "x" * 5000, "--lease", lease, endpoint=ep)  # rev 7
        snap = os.path.join(self.tmp, "etcd.db")
        etcdctl("snapshot", "save", snap, endpoint=ep)

        b = dump(snap)
        keys = b["key"]
        self.assertEqual([k for k, _ in keys],
                         [rev_key(2), rev_key(3), rev_key(4), rev_key(5, tombstone=True), rev_key(6, 0), rev_key(6, 1),
                          rev_key(7)])
        kvs = []
        for _, v in keys:
            kv = kv_pb2.KeyValue()
            kv.ParseFromString(v)
            kvs.append(kv)
        self.assertEqual([(kv.key, kv.create_revision, kv.mod_revision, kv.version) for kv in kvs[:3]],
                         [(b"a", 2, 2, 1), (b"b", 3, 3, 1), (b"a", 2, 4, 2)])
        self.assertEqual(kvs[3].key, b"b")  # the tombstone names the key only
        self.assertEqual(kvs[3].mod_revision, 0)
        self.assertEqual([(kv.key, kv.mod_revision) for kv in kvs[4:6]], [(b"t1", 6), (b"t2", 6)])
        self.assertEqual(kvs[6].value, b"x" * 5000)
        self.assertEqual(kvs[6].lease, int(lease, 16))
        # What etcd serves agrees with the file.
        got = json.loads(etcdctl("get", "a", "-w", "json", endpoint=ep).stdout)["kvs"][0]
        self.assertEqual((got["create_revision"], got["mod_revision"], got["version"]), (2, 4, 2))
        self.assertEqual(len(b["lease"]), 1)
        self.assertIn(b"consistent_index", [k for k, _ in b["meta"]])
        for name in ("alarm", "auth", "authRoles", "authUsers", "cluster", "members", "members_removed"):
            self.assertIn(name, b)

    def test_reader_reads_a_many_page_etcd_snapshot_in_revision_order(self):
        # Enough history for branch pages and page splits made by etcd's own
        # bbolt (random key order, overwrites, deletes, large values).
        m = self.etcd()
        c = m.client()

        rnd = random.Random(15)
        n = 6000
        for i in range(n):
            k = "key-%05d" % rnd.randrange(4000)
            if i % 10 == 9:
                c.delete(k)
            else:
                c.put(k, "v" * (20000 if i % 997 == 0 else 1 + i % 300))
        snap = os.path.join(self.tmp, "etcd-big.db")
        etcdctl("snapshot", "save", snap, endpoint=m.endpoint)
        keys = dump(snap)["key"]
        mains = [struct.unpack(">Q", k[:8])[0] for k, _ in keys]
        self.assertEqual(mains, sorted(mains))
        self.assertEqual(mains[-1], json.loads(etcdctl("endpoint", "status", "-w", "json",
                                                       endpoint=m.endpoint).stdout)[0]["Status"]["header"]["revision"])
        self.assertGreater(len(keys), n // 2)  # deletes of absent keys make no revision
        # The latest value of each live key in the file is what etcd serves.
        latest = {}
        for k, v in keys:
            kv = kv_pb2.KeyValue()
            kv.ParseFromString(v)
            latest[kv.key] = None if len(k) == 18 else kv  # 18 bytes: a tombstone ("t")
        served = {kv.key: kv for kv in (m.kv().Range(harness.all_keys_request()).kvs)}
        self.assertEqual({k: (kv.mod_revision, kv.version, kv.value) for k, kv in latest.items() if kv},
                         {k: (kv.mod_revision, kv.version, kv.value) for k, kv in served.items()})

    def etcd_buckets(self, n):
        """etcd's buckets for a history of n+1 puts: k0000..k{n-1} at revisions 2..n+1, then k0000
        again at n+2 (version 2). One value is 300 KB (overflow pages)."""
        key = []
        for i in range(n):
            value = b"v%d" % i if i != 7 else b"L" * 300000
            kv = kv_pb2.KeyValue(key=b"k%04d" % i, create_revision=i + 2, mod_revision=i + 2, version=1, value=value)
            key.append((rev_key(i + 2), kv.SerializeToString()))
        kv = kv_pb2.KeyValue(key=b"k0000", create_revision=2, mod_revision=n + 2, version=2, value=b"again")
        key.append((rev_key(n + 2), kv.SerializeToString()))
        b = {name: [] for name in ("alarm", "auth", "authRoles", "authUsers", "cluster", "lease",
                                   "members", "members_removed")}
        b["key"] = key
        b["meta"] = [(b"consistent_index", struct.pack(">Q", n + 2))]
        return b

    def test_etcd_restores_and_serves_a_snapshot_our_writer_made(self):
        n = 3000
        snap = os.path.join(self.tmp, "ours.db")
        write(snap, self.etcd_buckets(n))

        st = json.loads(etcdutl("snapshot", "status", snap, "-w", "json").stdout)
        self.assertEqual(st["revision"], n + 2)
        # etcdutl 3.6 counts the live keys of the `key` bucket (3.4 counted
        # every entry of every bucket: n + 2 here).
        self.assertEqual(st["totalKey"], n)
        self.assertEqual(st["totalSize"], os.path.getsize(snap) - 32)

        m = self.etcd(start=False)
        etcdutl("snapshot", "restore", snap, "--name", m.name, "--data-dir", m.data_dir,
                "--initial-cluster", "%s=%s" % (m.name, m.peer_url),
                "--initial-advertise-peer-urls", m.peer_url)
        m.start()
        ep = m.endpoint
        got = json.loads(etcdctl("get", "k", "--prefix", "-w", "json", endpoint=ep).stdout)
        self.assertEqual(got["header"]["revision"], n + 2)
        self.assertEqual(got["count"], n)
        first = got["kvs"][0]
        self.assertEqual((first["create_revision"], first["mod_revision"], first["version"]), (2, n + 2, 2))
        big = json.loads(etcdctl("get", "k0007", "-w", "json", endpoint=ep).stdout)["kvs"][0]
        self.assertEqual(big["mod_revision"], 9)
        old = etcdctl("get", "k0000", "--rev", "2", "--print-value-only", endpoint=ep).stdout.strip()
        self.assertEqual(old, "v0")
        self.assertEqual(len(etcdctl("get", "k0007", "--print-value-only", endpoint=ep).stdout.strip()), 300000)
        # etcd writes on top of it (its bbolt reopens and grows the file).
        etcdctl("put", "new", "1", endpoint=ep)
        new = json.loads(etcdctl("get", "new", "-w", "json", endpoint=ep).stdout)["kvs"][0]
        self.assertEqual(new["mod_revision"], n + 3)

    def test_truncated_or_flipped_snapshot_is_refused_by_etcdutl_and_by_us(self):
        snap = os.path.join(self.tmp, "ours.db")
        write(snap, self.etcd_buckets(200))
        with open(snap, "rb") as f:
            data = f.read()
        cases = {"truncated": data[:len(data) // 2],
                 "trailer cut": data[:-32],
                 "flipped": data[:5000] + bytes([data[5000] ^ 0x10]) + data[5001:]}
        for what, bad in cases.items():
            path = os.path.join(self.tmp, what.replace(" ", "_") + ".db")
            with open(path, "wb") as f:
                f.write(bad)
            with self.assertRaises(RuntimeError, msg=what) as cm:
                dump(path)
            self.assertRegex(str(cm.exception), "missing hash|sha256 mismatch|truncated")
            out = os.path.join(self.tmp, what.replace(" ", "_") + ".restored")
            p = etcdutl("snapshot", "restore", path, "--data-dir", out, check=False)
            self.assertNotEqual(p.returncode, 0, "%s: etcdutl restored it" % what)


if __name__ == "__main__":
    harness.main()
