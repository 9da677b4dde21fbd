"""etcd 3.6's tools against one member, the binary under test beside etcd 3.6.17.

Each test does the same steps on an etcd 3.6 member and on a member of the
binary under test ($ETCDQ_BIN, else Debian's etcd 3.4, which fails the
3.6-only checks) and compares what etcdctl 3.6 / etcdutl 3.6 print:

- `etcdctl downgrade validate/enable/cancel` and the raw Downgrade RPC's
  codes and messages. The versions are taken relative to each server's own
  cluster version (Status.version's major.minor: "3.6" for etcd 3.6.17,
  "3.5" for etcdq while kEtcdApiVersion is "3.5.0"), so the comparison
  holds whichever version etcdq reports. An enable of the one valid target
  succeeds on etcd and is refused by etcdq (server/downgrade.h says why).
- `endpoint status` (the 3.6 fields: dbSizeQuota, downgradeInfo; the
  storageVersion etcdq reports is empty below 3.6), `endpoint hashkv
  --cluster` (same history, same hash, compact and hash revisions),
  `defrag --cluster`, `check datascale`.
- `etcdctl snapshot save` from the binary under test, read by `etcdutl
  snapshot status` (revision and key count as etcd's own snapshot of the same
  steps), restored by `etcdutl snapshot restore` and served by etcd 3.6 with
  every key and revision; and etcd 3.6's snapshot restored by `etcdq
  snapshot restore` and served by etcdq the same way.

Run: ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_etcd36_tools.py
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import etcd36  # noqa: E402
import grpc  # noqa: E402
import harness  # noqa: E402


def status(ep):
    r = etcd36.etcdctl(ep, "endpoint", "status", "-w", "json")
    assert r.rc == 0, r
    return json.loads(r.out)[0]["Status"]


def minor_version(version, delta=0):
    major, minor = version.split(".")[:2]
    return "%s.%d" % (major, int(minor) + delta)


def downgrade_request(action, version):
    """etcdserverpb.DowngradeRequest's bytes: action (1, enum), version (2, string)."""
    v = version.encode()
    out = b""
    if action:
        out += bytes([0x08, action])
    if v:
        out += bytes([0x12, len(v)]) + v
    return out


def raw_downgrade(ep, action, version):
    """(code name, details) of a Downgrade call; ("OK", "") when it succeeds."""
    ch = grpc.insecure_channel(ep)
    try:
        call = ch.unary_unary("/etcdserverpb.Maintenance/Downgrade", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
        call(downgrade_request(action, version), timeout=10)
        return ("OK", "")
    except grpc.RpcError as e:
        return (e.code().name, e.details())
    finally:
        ch.close()


def all_kvs(ep, rev=None):
    args = ["get", "", "--prefix", "-w", "json"] + (["--rev", str(rev)] if rev else [])
    r = etcd36.etcdctl(ep, *args)
    assert r.rc == 0, r
    out = json.loads(r.out)
    return out["header"]["revision"], [(kv["key"], kv.get("value"), kv["create_revision"], kv["mod_revision"],
                                        kv["version"]) for kv in out.get("kvs", [])]


def write_history(ep):
    """The same 12 revisions on any server; compacted at 5. Returns the last revision."""
    steps = [["put", "a", "1"], ["put", "b", "2"], ["put", "a", "3"], ["put", "c", "4"],   # 2..5
             ["del", "b"], ["put", "d", "5"], ["put", "a", "6"], ["put", "e/1", "7"],      # 6..9
             ["put", "e/2", "8"], ["del", "e/", "--prefix"], ["put", "f", "9"], ["put", "a", "10"]]  # 10..13
    for s in steps:
        r = etcd36.etcdctl(ep, *s)
        assert r.rc == 0, r
    r = etcd36.etcdctl(ep, "compaction", "5")
    assert r.rc == 0, r
    return 13


class Etcd36Tools(harness.CleanupTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="etcdq-it-etcd36-")
        cls.etcd = cls.track_class(harness.Member(binary=etcd36.etcd(), name="etcd36"))
        cls.target = cls.track_class(harness.Member(name="target"))

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def log_text(self, m):
        return "log of %r\n%s" % (m, m.log_tail()) if hasattr(m, "log_tail") else repr(m)

    def new_pair(self):
        return (self.track(harness.Member(binary=etcd36.etcd(), name="etcd36")),
                self.track(harness.Member(name="target")))

    # ---- downgrade ----------------------------------------------------------------------

    def downgrade_transcript(self, ep):
        cv = minor_version(status(ep)["version"])
        prev, nxt, prev2 = minor_version(cv, -1), minor_version(cv, 1), minor_version(cv, -2)
        out = []
        for args in (["validate", prev], ["validate", prev + ".0"], ["validate", prev + ".7"], ["validate", cv],
                     ["validate", nxt], ["validate", prev2], ["validate", "foo"], ["validate", "v" + prev],
                     ["validate", "3"], ["enable", cv], ["enable", "foo"], ["cancel"], ["cancel"]):
            r = etcd36.etcdctl(ep, "downgrade", *args)
            text = r.text().replace("cluster version %s" % cv, "cluster version <cv>")
            label = " ".join(args)
            for v, name in ((prev2, "<prev2>"), (prev, "<prev>"), (cv, "<cv>"), (nxt, "<next>")):
                label = label.replace(v, name)
            out.append((label, text))
        for action, version in ((0, prev), (0, cv), (0, "x.y"), (1, cv), (2, ""), (3, prev)):
            code, details = raw_downgrade(ep, action, version)
            out.append(("raw %d %s" % (action, version.replace(prev, "<prev>").replace(cv, "<cv>")),
                        "%s %s" % (code, details)))
        return cv, prev, out

    def test_downgrade_answers_as_etcd36(self):
        etcd, target = self.new_pair()
        ref_cv, ref_prev, ref = self.downgrade_transcript(etcd.endpoint)
        cv, prev, got = self.downgrade_transcript(target.endpoint)
        self.assertEqual(ref_cv, "3.6")
        self.assertEqual(got, ref)
        # Only the enabling of the one valid target differs: etcd 3.6 starts the
        # downgrade (and shows it in Status), etcdq refuses.
        r = etcd36.etcdctl(etcd.endpoint, "downgrade", "enable", ref_prev)
        self.assertEqual(r.text(), "Downgrade enable success, cluster version 3.6\n\nexit 0")
        self.assertEqual(status(etcd.endpoint)["downgradeInfo"], {"enabled": True, "targetVersion": "3.5.0"})
        r = etcd36.etcdctl(etcd.endpoint, "downgrade", "validate", ref_prev)
        self.assertEqual(r.error, "Error: etcdserver: cluster has a downgrade job in progress")
        r = etcd36.etcdctl(target.endpoint, "downgrade", "enable", prev)
        self.assertEqual(r.rc, 1, r)
        if not harness.is_reference_etcd():
            # etcd's client shortens only the errors it knows: this one shows its code.
            self.assertEqual(r.error, "Error: rpc error: code = FailedPrecondition desc = "
                             "etcdserver: downgrade is not supported by etcdq: its storage cannot be "
                             "converted to etcd %s's; to move to etcd %s, restore a snapshot (etcdctl snapshot save) "
                             "with that etcd's snapshot restore" % (prev, prev))
            self.assertEqual(raw_downgrade(target.endpoint, 1, prev)[0], "FAILED_PRECONDITION")
            self.assertEqual(status(target.endpoint)["downgradeInfo"], {})
        r = etcd36.etcdctl(etcd.endpoint, "downgrade", "cancel")
        self.assertEqual(r.rc, 0, r)

    # ---- endpoint status / hashkv / defrag, check datascale ---------------------------------

    def test_endpoint_status_fields_as_etcd36(self):
        ref, got = status(self.etcd.endpoint), status(self.target.endpoint)
        # storageVersion: etcd 3.6 says "3.6.0"; etcdq says "" (left out of the
        # JSON) while it speaks 3.5, its major.minor.0 from 3.6 on.
        self.assertEqual(ref["storageVersion"], "3.6.0")
        if harness.is_reference_etcd() or got["version"] < "3.6":
            self.assertNotIn("storageVersion", got)
        else:
            self.assertEqual(got["storageVersion"], minor_version(got["version"]) + ".0")
        ref.pop("storageVersion")
        got.pop("storageVersion", None)
        self.assertEqual(sorted(got), sorted(ref))
        self.assertEqual(got["dbSizeQuota"], ref["dbSizeQuota"])
        self.assertEqual(got["dbSizeQuota"], 2 * 1024 ** 3)
        self.assertEqual(got["downgradeInfo"], ref["downgradeInfo"])
        self.assertEqual(got["downgradeInfo"], {})
        # The table's columns.
        heads = []
        for ep in (self.etcd.endpoint, self.target.endpoint):
            r = etcd36.etcdctl(ep, "endpoint", "status", "--cluster", "-w", "table")
            self.assertEqual(r.rc, 0, r)
            # Column widths follow the values: a member id is printed as %x,
            # so an id with a leading zero nibble (one in 16, either side)
            # narrows the ID column. The columns and their order must match.
            heads.append(re.sub(r" +", " ", r.out.splitlines()[1]))
        self.assertEqual(heads[1], heads[0])

    def test_quota_reported_as_configured(self):
        m = self.track(harness.Member(extra_args=["--quota-backend-bytes", "123456789"], name="quota"))
        self.assertEqual(status(m.endpoint)["dbSizeQuota"], 123456789)

    def test_hashkv_and_defrag_cluster_as_etcd36(self):
        etcd, target = self.new_pair()
        last = [write_history(m.endpoint) for m in (etcd, target)]
        self.assertEqual(last[0], last[1])
        for rev in (0, 6, 9, 13):
            outs = []
            for m in (etcd, target):
                r = etcd36.etcdctl(m.endpoint, "endpoint", "hashkv", "--cluster", "-w", "json",
                                   *(["--rev", str(rev)] if rev else []))
                self.assertEqual(r.rc, 0, r)
                h = json.loads(r.out)[0]["HashKV"]
                outs.append((h["hash"], h["compact_revision"], h.get("hash_revision"), h["header"]["revision"]))
            self.assertEqual(outs[1], outs[0], "hashkv --rev %d" % rev)
        self.assertEqual(outs[0][2], 13)
        for m in (etcd, target):
            r = etcd36.etcdctl(m.endpoint, "defrag", "--cluster")
            self.assertEqual(etcd36.mask(r.text()),
                             "Finished defragmenting etcd member[http://127.0.0.1:<port>]. took <t>\n\nexit 0")

    def test_check_datascale_as_etcd36(self):
        outs = []
        for m in (self.etcd, self.target):
            r = etcd36.etcdctl(m.endpoint, "check", "datascale", "--auto-compact", "--auto-defrag", timeout=300)
            lines = re.findall(r"(?:PASS|FAIL|Start data scale)[^\r\n]*", r.out)
            lines = [re.sub(r"used : [0-9.-]+ MB", "used : <n> MB", line) for line in lines]
            outs.append((r.rc, lines, r.error))
            # It deletes what it wrote.
            self.assertEqual(etcd36.etcdctl(m.endpoint, "get", "/etcdctl-check-datascale/", "--prefix",
                                            "--keys-only").text(), "\nexit 0")
        self.assertEqual(outs[1], outs[0])
        self.assertEqual(outs[0][1][-1], "PASS: Approximate system memory used : <n> MB.")

    # ---- snapshots ----------------------------------------------------------------------------

    def snapshot_of(self, m, name):
        path = os.path.join(self.tmp, name)
        r = etcd36.etcdctl(m.endpoint, "snapshot", "save", path)
        self.assertEqual(r.rc, 0, r)
        return path, r

    def test_snapshot_from_target_read_and_restored_by_etcdutl(self):
        etcd, target = self.new_pair()
        for m in (etcd, target):
            write_history(m.endpoint)
        ref_snap, ref_save = self.snapshot_of(etcd, "etcd36.db")
        snap, save = self.snapshot_of(target, "target.db")
        self.assertEqual(save.out.splitlines()[0], "Snapshot saved at " + snap)
        # etcd 3.6 adds "Server version 3.6.0" (SnapshotResponse.version, the
        # storage version); etcdq leaves it empty, as etcd 3.5, below 3.6.
        self.assertEqual(ref_save.out.splitlines()[1:], ["Server version 3.6.0"])
        version = status(target.endpoint)["version"]
        if version < "3.6":
            self.assertEqual(save.out.splitlines()[1:], [])
        else:
            self.assertEqual(save.out.splitlines()[1:], ["Server version %s.0" % minor_version(version)])
        sts = []
        for path in (ref_snap, snap):
            r = etcd36.etcdutl("snapshot", "status", path, "-w", "json")
            self.assertEqual(r.rc, 0, r)
            sts.append(json.loads(r.out))
        self.assertEqual((sts[1]["revision"], sts[1]["totalKey"]), (sts[0]["revision"], sts[0]["totalKey"]))
        self.assertEqual(sts[1]["revision"], 13)
        # etcd's own file carries 3.6's storageVersion key; etcdq's is etcd
        # 3.4's layout without it (README, "etcd 3.6's tools").
        self.assertEqual(sts[0]["version"], "3.6.0")
        if not harness.is_reference_etcd():
            self.assertEqual(sts[1].get("version", ""), "")
        # Restored by etcdutl 3.6, served by etcd 3.6: the same keys and revisions.
        served = self.track(harness.Member(binary=etcd36.etcd(), name="restored", start=False))
        r = etcd36.etcdutl("snapshot", "restore", snap, "--name", served.name, "--data-dir", served.data_dir,
                           "--initial-cluster", "%s=%s" % (served.name, served.peer_url),
                           "--initial-advertise-peer-urls", served.peer_url)
        self.assertEqual(r.rc, 0, r)
        served.start()
        for rev in (None, 5, 9, 12):
            self.assertEqual(all_kvs(served.endpoint, rev), all_kvs(target.endpoint, rev), "rev %s" % rev)
        r = etcd36.etcdctl(served.endpoint, "get", "a", "--rev", "4")
        self.assertEqual(r.error, "Error: etcdserver: mvcc: required revision has been compacted")
        r = etcd36.etcdctl(served.endpoint, "put", "g", "11")
        self.assertEqual(all_kvs(served.endpoint)[0], 14)

    def test_etcd36_snapshot_restored_by_target(self):
        etcd = self.track(harness.Member(binary=etcd36.etcd(), name="etcd36"))
        write_history(etcd.endpoint)
        snap, _ = self.snapshot_of(etcd, "etcd36-src.db")
        m = self.track(harness.Member(name="restored", start=False))
        args = ["snapshot", "restore", snap, "--name", m.name, "--data-dir", m.data_dir,
                "--initial-cluster", "%s=%s" % (m.name, m.peer_url), "--initial-advertise-peer-urls", m.peer_url]
        if harness.is_reference_etcd():
            r = etcd36.etcdutl(*args)
            self.assertEqual(r.rc, 0, r)
        else:
            p = subprocess.run([harness.binary_under_test()] + args, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("revision 13, compacted at 5", p.stdout)
        m.start()
        for rev in (None, 5, 9, 12):
            self.assertEqual(all_kvs(m.endpoint, rev), all_kvs(etcd.endpoint, rev), "rev %s" % rev)
        r = etcd36.etcdctl(m.endpoint, "endpoint", "hashkv", "-w", "json")
        h1 = json.loads(r.out)[0]["HashKV"]
        h0 = json.loads(etcd36.etcdctl(etcd.endpoint, "endpoint", "hashkv", "-w", "json").out)[0]["HashKV"]
        self.assertEqual((h1["hash"], h1["compact_revision"]), (h0["hash"], h0["compact_revision"]))


if __name__ == "__main__":
    harness.main()
