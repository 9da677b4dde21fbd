#!/usr/bin/python3
"""Leases against the member under test: python-etcd3, raw Lease stubs and etcdctl.

Every expectation was first checked against Debian's etcd 3.4 (the oracle), with
its default flags: minimum TTL ceil(1.5 x 1 s election timeout) = 2 s.

    /usr/bin/python3 tests/integration/test_leases.py [-k pattern]
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_leases.py

Timing tests measure with time.monotonic() (CLOCK_MONOTONIC, the clock the
servers' lessors run on): a key's lease starts when the server applies the
grant, which is after the client sent it, so "deleted at or after
send + TTL" is a safe lower bound and "deleted - (send + TTL)" an upper bound on
how late an expiry was. They print what they measured to stderr
("LEASE-TIMING ..."). The whole file takes about 100 s (the keep-alive test
alone 60 s).
"""
import os
import queue
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb, rpc_pb2_grpc  # noqa: E402
from etcd3.etcdrpc import kv_pb2  # noqa: E402

import harness  # noqa: E402

MIN_TTL = 2                                   # ceil(1.5 x 1000 ms election timeout)
MAX_TTL = 9000000000
LEASE_NOT_FOUND = "etcdserver: requested lease not found"
LEASE_EXISTS = "etcdserver: lease already exists"
TTL_TOO_LARGE = "etcdserver: too large lease TTL"
PUT, DELETE = kv_pb2.Event.PUT, kv_pb2.Event.DELETE
ETCDCTL = harness.ETCDCTL

EXPIRY_LEASES = int(os.environ.get("LEASE_EXPIRY_COUNT", "1000"))
EXPIRY_SLACK_S = 1.0          # every key gone within TTL + 1 s of its grant
# A sanitizer build (scripts/checks.sh) runs the same code paths for its
# memory and race checks: 20 s there is ten TTLs of refreshes, and keeps
# the stage inside CI's hour. The normal suite keeps the full minute.
KEEPALIVE_SECONDS = float(os.environ.get("LEASE_KEEPALIVE_SECONDS", "20" if harness.sanitized() else "60"))
RESTART_SLACK_S = 2.0         # after a restart: expired within TTL + 2 s of serving again


def timing(text):
    sys.stderr.write("LEASE-TIMING %s: %s\n" % (harness.binary_under_test(), text))
    sys.stderr.flush()


def prefix_end(prefix):
    return prefix[:-1] + bytes([prefix[-1] + 1])


class EventRecorder:
    """A raw Watch stream on a prefix that records every event with its arrival time.

    events: [(monotonic arrival, type, key, mod_revision, lease)] in arrival order.
    """

    def __init__(self, member, prefix, start_revision=0):
        self.channel = member.channel()
        self.requests = queue.Queue()
        self.events = []
        self.responses = 0
        self.created = threading.Event()
        self.error = None
        self.lock = threading.Condition()
        self.requests.put(pb.WatchRequest(create_request=pb.WatchCreateRequest(
            key=prefix, range_end=prefix_end(prefix), start_revision=start_revision)))
        self.call = rpc_pb2_grpc.WatchStub(self.channel).Watch(self._request_iter())
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        if not self.created.wait(10):
            raise AssertionError("watch on %r was not created within 10 s (%s)" % (prefix, self.error))

    def _request_iter(self):
        while True:
            r = self.requests.get()
            if r is None:
                return
            yield r

    def _read(self):
        try:
            for resp in self.call:
                now = time.monotonic()
                with self.lock:
                    self.responses += 1
                    if resp.created:
                        self.created.set()
                    if resp.canceled:
                        self.error = "watch canceled: %r" % resp.cancel_reason
                    for ev in resp.events:
                        self.events.append((now, ev.type, ev.kv.key, ev.kv.mod_revision, ev.kv.lease))
                    self.lock.notify_all()
        except grpc.RpcError as e:
            with self.lock:
                if e.code() != grpc.StatusCode.CANCELLED:
                    self.error = "%s: %s" % (e.code(), e.details())
                self.lock.notify_all()

    def wait_until(self, predicate, timeout):
        """Waits until predicate(events) holds; returns whether it did."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(min(left, 0.1))
            return True

    def snapshot(self):
        with self.lock:
            return list(self.events)

    def deletes(self):
        return [e for e in self.snapshot() if e[1] == DELETE]

    def close(self):
        self.requests.put(None)
        self.call.cancel()
        self.thread.join(5)


def ids_of_leases(lease_stub):
    return {l.ID for l in lease_stub.LeaseLeases(pb.LeaseLeasesRequest(), timeout=10).leases}


class LeaseApiTest(harness.MemberTestCase):
    """Grant, refresh, revoke, time-to-live, keys and errors: one member shared by the class,
    every test on its own key prefix."""

    @classmethod
    def setUpClass(cls):
        cls.member = cls.new_class_member()
        cls.etcd = cls.member.client()
        cls.leases = cls.member.lease_stub()
        cls.kv = cls.member.kv()

    def setUp(self):
        self.p = ("/%s/" % self._testMethodName).encode()

    def k(self, name):
        return self.p + name.encode()

    def revision(self):
        return self.kv.Range(pb.RangeRequest(key=b"any"), timeout=10).header.revision

    def assertRpcError(self, code, details, fn, *args, **kw):
        with self.assertRaises(grpc.RpcError) as cm:
            fn(*args, timeout=10, **kw)
        self.assertEqual((cm.exception.code(), cm.exception.details()), (code, details))

    def keepalive_once(self, lease_id):
        resps = list(self.leases.LeaseKeepAlive(iter([pb.LeaseKeepAliveRequest(ID=lease_id)]), timeout=10))
        self.assertEqual(len(resps), 1, resps)
        return resps[0]

    # ---- grant, time-to-live, refresh ------------------------------------------------

    def test_grant_reports_the_requested_ttl_and_time_to_live_counts_down(self):
        lease = self.etcd.lease(10)
        self.assertNotEqual(lease.id, 0)
        self.assertEqual(lease.ttl, 10)
        info = self.etcd.get_lease_info(lease.id)
        self.assertEqual((info.ID, info.grantedTTL), (lease.id, 10))
        self.assertIn(info.TTL, (9, 10))          # etcd truncates the remaining seconds
        self.assertEqual(list(info.keys), [])
        time.sleep(2.1)
        info = self.etcd.get_lease_info(lease.id)
        self.assertEqual(info.grantedTTL, 10)
        self.assertIn(info.TTL, (6, 7))
        self.assertEqual(lease.granted_ttl, 10)
        self.assertIn(lease.remaining_ttl, (6, 7))
        lease.revoke()

    def test_ttl_below_the_minimum_is_raised_to_2_seconds(self):
        for asked in (1, 0, -5):
            resp = self.leases.LeaseGrant(pb.LeaseGrantRequest(TTL=asked), timeout=10)
            self.assertEqual(resp.TTL, MIN_TTL, "asked for TTL %d" % asked)
            info = self.leases.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=resp.ID), timeout=10)
            self.assertEqual(info.grantedTTL, MIN_TTL)
            self.leases.LeaseRevoke(pb.LeaseRevokeRequest(ID=resp.ID), timeout=10)

    def test_largest_allowed_ttl_is_granted(self):
        resp = self.leases.LeaseGrant(pb.LeaseGrantRequest(TTL=MAX_TTL), timeout=10)
        self.assertEqual(resp.TTL, MAX_TTL)
        info = self.leases.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=resp.ID), timeout=10)
        self.assertEqual(info.grantedTTL, MAX_TTL)
        self.assertGreaterEqual(info.TTL, MAX_TTL - 2)
        self.leases.LeaseRevoke(pb.LeaseRevokeRequest(ID=resp.ID), timeout=10)

    def test_grant_does_not_advance_the_revision(self):
        rev0 = self.revision()
        resp = self.leases.LeaseGrant(pb.LeaseGrantRequest(TTL=30), timeout=10)
        self.assertEqual(resp.header.revision, rev0)
        self.assertEqual(self.revision(), rev0)
        self.leases.LeaseRevoke(pb.LeaseRevokeRequest(ID=resp.ID), timeout=10)

    def test_client_chosen_lease_id_is_kept(self):
        lease = self.etcd.lease(30, lease_id=0x7e57_0001)
        self.assertEqual((lease.id, lease.ttl), (0x7e57_0001, 30))
        self.assertEqual(self.etcd.get_lease_info(0x7e57_0001).grantedTTL, 30)
        self.assertIn(0x7e57_0001, ids_of_leases(self.leases))
        lease.revoke()

    def test_refresh_restarts_the_lease_at_its_full_ttl(self):
        lease = self.etcd.lease(10)
        time.sleep(2.1)
        self.assertIn(lease.remaining_ttl, (6, 7))
        resps = lease.refresh()
        self.assertEqual(len(resps), 1)
        self.assertEqual((resps[0].ID, resps[0].TTL), (lease.id, 10))
        self.assertIn(lease.remaining_ttl, (9, 10))
        lease.revoke()

    def test_keep_alive_stream_answers_every_request_in_order(self):
        a = self.leases.LeaseGrant(pb.LeaseGrantRequest(TTL=20), timeout=10).ID
        b = self.leases.LeaseGrant(pb.LeaseGrantRequest(TTL=30), timeout=10).ID
        reqs = [pb.LeaseKeepAliveRequest(ID=i) for i in (a, b, a, 0x7e57_dead, b)]
        resps = list(self.leases.LeaseKeepAlive(iter(reqs), timeout=10))
        self.assertEqual([(r.ID, r.TTL) for r in resps],
                         [(a, 20), (b, 30), (a, 20), (0x7e57_dead, 0), (b, 30)])
        for i in (a, b):
            self.leases.LeaseRevoke(pb.LeaseRevokeRequest(ID=i), timeout=10)

    # ---- keys --------------------------------------------------------------------------

    def test_put_with_a_lease_sets_lease_id_and_time_to_live_lists_the_keys(self):
        lease = self.etcd.lease(30)
        self.etcd.put(self.k("a"), "1", lease=lease)
        self.etcd.put(self.k("b"), "2", lease=lease.id)
        self.etcd.put(self.k("c"), "3")
        self.assertEqual(self.etcd.get(self.k("a"))[1].lease_id, lease.id)
        self.assertEqual(self.etcd.get(self.k("b"))[1].lease_id, lease.id)
        self.assertEqual(self.etcd.get(self.k("c"))[1].lease_id, 0)
        self.assertEqual(sorted(lease.keys), [self.k("a"), self.k("b")])
        without = self.leases.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=lease.id, keys=False), timeout=10)
        self.assertEqual(list(without.keys), [])
        # A put of the same key again keeps it listed once.
        self.etcd.put(self.k("a"), "again", lease=lease)
        self.assertEqual(sorted(lease.keys), [self.k("a"), self.k("b")])
        lease.revoke()

    def test_revoke_deletes_every_attached_key_in_one_revision(self):
        lease = self.etcd.lease(60)
        names = ["k%d" % i for i in range(5)]
        for n in names:
            self.etcd.put(self.k(n), n, lease=lease)
        self.etcd.put(self.k("plain"), "stays")
        rev0 = self.revision()
        resp = self.leases.LeaseRevoke(pb.LeaseRevokeRequest(ID=lease.id), timeout=10)
        self.assertEqual(resp.header.revision, rev0 + 1)
        self.assertEqual(self.revision(), rev0 + 1)
        remaining = [m.key for _, m in self.etcd.get_prefix(self.p)]
        self.assertEqual(remaining, [self.k("plain")])
        # History: five DELETEs, all at the one revision rev0 + 1.
        rec = EventRecorder(self.member, self.p, start_revision=rev0 + 1)
        try:
            self.assertTrue(rec.wait_until(lambda evs: len(evs) >= 5, 10), rec.snapshot())
            time.sleep(0.2)
            self.assertEqual(sorted((t, k, r) for _, t, k, r, _ in rec.snapshot()),
                             [(DELETE, self.k(n), rev0 + 1) for n in names])
        finally:
            rec.close()
        self.assertEqual(self.leases.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=lease.id), timeout=10).TTL, -1)
        self.assertNotIn(lease.id, ids_of_leases(self.leases))

    def test_revoke_of_a_lease_without_keys_does_not_advance_the_revision(self):
        lease = self.etcd.lease(30)
        rev0 = self.revision()
        resp = self.leases.LeaseRevoke(pb.LeaseRevokeRequest(ID=lease.id), timeout=10)
        self.assertEqual(resp.header.revision, rev0)
        self.assertEqual(self.revision(), rev0)

    def test_revoke_of_a_lease_whose_keys_were_deleted_does_not_advance_the_revision(self):
        lease = self.etcd.lease(30)
        self.etcd.put(self.k("a"), "1", lease=lease)
        self.etcd.delete(self.k("a"))
        self.assertEqual(list(lease.keys), [])
        rev0 = self.revision()
        resp = self.leases.LeaseRevoke(pb.LeaseRevokeRequest(ID=lease.id), timeout=10)
        self.assertEqual(resp.header.revision, rev0)
        self.assertEqual(self.revision(), rev0)

    def test_put_without_a_lease_detaches_the_key_so_it_survives_revoke(self):
        lease = self.etcd.lease(30)
        self.etcd.put(self.k("a"), "leased", lease=lease)
        self.etcd.put(self.k("b"), "leased", lease=lease)
        self.etcd.put(self.k("a"), "plain")
        self.assertEqual(self.etcd.get(self.k("a"))[1].lease_id, 0)
        self.assertEqual(list(lease.keys), [self.k("b")])
        lease.revoke()
        value, meta = self.etcd.get(self.k("a"))
        self.assertEqual((value, meta.lease_id), (b"plain", 0))
        self.assertEqual(self.etcd.get(self.k("b")), (None, None))

    def test_put_with_another_lease_moves_the_key_to_that_lease(self):
        l1, l2 = self.etcd.lease(30), self.etcd.lease(30)
        self.etcd.put(self.k("a"), "1", lease=l1)
        self.etcd.put(self.k("a"), "2", lease=l2)
        self.assertEqual(self.etcd.get(self.k("a"))[1].lease_id, l2.id)
        self.assertEqual(list(l1.keys), [])
        self.assertEqual(list(l2.keys), [self.k("a")])
        rev0 = self.revision()
        l1.revoke()
        self.assertEqual(self.revision(), rev0)
        self.assertEqual(self.etcd.get(self.k("a"))[0], b"2")
        l2.revoke()
        self.assertEqual(self.etcd.get(self.k("a")), (None, None))
        self.assertEqual(self.revision(), rev0 + 1)

    def test_put_with_ignore_lease_keeps_the_key_on_its_lease(self):
        lease = self.etcd.lease(30)
        self.etcd.put(self.k("a"), "1", lease=lease)
        self.kv.Put(pb.PutRequest(key=self.k("a"), value=b"2", ignore_lease=True), timeout=10)
        value, meta = self.etcd.get(self.k("a"))
        self.assertEqual((value, meta.lease_id, meta.version), (b"2", lease.id, 2))
        self.assertEqual(list(lease.keys), [self.k("a")])
        # ignore_value together with ignore_lease: only the revision and version change.
        self.kv.Put(pb.PutRequest(key=self.k("a"), ignore_value=True, ignore_lease=True), timeout=10)
        value, meta = self.etcd.get(self.k("a"))
        self.assertEqual((value, meta.lease_id, meta.version), (b"2", lease.id, 3))
        lease.revoke()
        self.assertEqual(self.etcd.get(self.k("a")), (None, None))

    def test_txn_put_with_a_lease_attaches_the_key(self):
        lease = self.etcd.lease(30)
        ok, _ = self.etcd.transaction(compare=[], failure=[], success=[
            self.etcd.transactions.put(self.k("a"), "1", lease=lease),
            self.etcd.transactions.put(self.k("b"), "2", lease=lease)])
        self.assertTrue(ok)
        self.assertEqual(sorted(lease.keys), [self.k("a"), self.k("b")])
        lease.revoke()
        self.assertEqual(list(self.etcd.get_prefix(self.p)), [])

    def test_leases_listing_holds_exactly_the_live_leases(self):
        before = ids_of_leases(self.leases)
        granted = [self.etcd.lease(30).id for _ in range(3)]
        chosen = self.etcd.lease(30, lease_id=0x7e57_0002).id
        self.assertEqual(ids_of_leases(self.leases) - before, set(granted) | {chosen})
        self.etcd.revoke_lease(granted[1])
        self.assertEqual(ids_of_leases(self.leases) - before, {granted[0], granted[2], chosen})
        for i in (granted[0], granted[2], chosen):
            self.etcd.revoke_lease(i)
        self.assertEqual(ids_of_leases(self.leases), before)

    # ---- errors ------------------------------------------------------------------------

    def test_ttl_above_9000000000_is_out_of_range(self):
        before = ids_of_leases(self.leases)
        self.assertRpcError(grpc.StatusCode.OUT_OF_RANGE, TTL_TOO_LARGE,
                            self.leases.LeaseGrant, pb.LeaseGrantRequest(TTL=MAX_TTL + 1))
        self.assertRpcError(grpc.StatusCode.OUT_OF_RANGE, TTL_TOO_LARGE,
                            self.leases.LeaseGrant, pb.LeaseGrantRequest(TTL=2 ** 62))
        self.assertEqual(ids_of_leases(self.leases), before)

    def test_duplicate_lease_id_is_failed_precondition_and_keeps_the_first_ttl(self):
        self.leases.LeaseGrant(pb.LeaseGrantRequest(ID=0x7e57_0003, TTL=30), timeout=10)
        self.assertRpcError(grpc.StatusCode.FAILED_PRECONDITION, LEASE_EXISTS,
                            self.leases.LeaseGrant, pb.LeaseGrantRequest(ID=0x7e57_0003, TTL=50))
        info = self.leases.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=0x7e57_0003), timeout=10)
        self.assertEqual(info.grantedTTL, 30)
        self.leases.LeaseRevoke(pb.LeaseRevokeRequest(ID=0x7e57_0003), timeout=10)

    def test_put_with_an_unknown_lease_is_not_found_and_changes_nothing(self):
        rev0 = self.revision()
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, LEASE_NOT_FOUND,
                            self.kv.Put, pb.PutRequest(key=self.k("a"), value=b"x", lease=0x7e57_beef))
        self.assertEqual(self.revision(), rev0)
        self.assertEqual(self.etcd.get(self.k("a")), (None, None))

    def test_put_with_a_revoked_lease_is_not_found(self):
        lease = self.etcd.lease(30)
        lease.revoke()
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, LEASE_NOT_FOUND,
                            self.kv.Put, pb.PutRequest(key=self.k("a"), value=b"x", lease=lease.id))
        self.assertEqual(self.etcd.get(self.k("a")), (None, None))

    def test_revoke_of_an_unknown_or_already_revoked_lease_is_not_found(self):
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, LEASE_NOT_FOUND,
                            self.leases.LeaseRevoke, pb.LeaseRevokeRequest(ID=0x7e57_beef))
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, LEASE_NOT_FOUND,
                            self.leases.LeaseRevoke, pb.LeaseRevokeRequest(ID=0))
        lease = self.etcd.lease(30)
        lease.revoke()
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, LEASE_NOT_FOUND,
                            self.leases.LeaseRevoke, pb.LeaseRevokeRequest(ID=lease.id))

    def test_keep_alive_of_an_unknown_or_revoked_lease_answers_ttl_0(self):
        resp = self.keepalive_once(0x7e57_beef)
        self.assertEqual((resp.ID, resp.TTL), (0x7e57_beef, 0))
        lease = self.etcd.lease(30)
        lease.revoke()
        resp = self.keepalive_once(lease.id)
        self.assertEqual((resp.ID, resp.TTL), (lease.id, 0))

    def test_time_to_live_of_an_unknown_or_revoked_lease_answers_ttl_minus_1(self):
        resp = self.leases.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=0x7e57_beef, keys=True), timeout=10)
        self.assertEqual((resp.ID, resp.TTL, resp.grantedTTL, list(resp.keys)), (0x7e57_beef, -1, 0, []))
        lease = self.etcd.lease(30)
        self.etcd.put(self.k("a"), "1", lease=lease)
        lease.revoke()
        resp = self.leases.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=lease.id, keys=True), timeout=10)
        self.assertEqual((resp.ID, resp.TTL, resp.grantedTTL, list(resp.keys)), (lease.id, -1, 0, []))


class EtcdctlLeaseTest(harness.MemberTestCase):
    """etcdctl (Debian's 3.4) lease subcommands; output formats as etcdctl prints them."""

    @classmethod
    def setUpClass(cls):
        cls.member = cls.new_class_member()

    def ctl(self, *args, check=True):
        p = subprocess.run([ETCDCTL, "--endpoints", self.member.endpoint, "--command-timeout", "10s"]
                           + list(args), capture_output=True, text=True, timeout=30,
                           env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"})
        if check:
            self.assertEqual(p.returncode, 0, "etcdctl %s: %s%s" % (" ".join(args), p.stdout, p.stderr))
        return p

    def grant(self, ttl, expected_ttl=None):
        out = self.ctl("lease", "grant", str(ttl)).stdout
        m = re.fullmatch(r"lease ([0-9a-f]{16}) granted with TTL\((\d+)s\)\n", out)
        self.assertIsNotNone(m, out)
        self.assertEqual(int(m.group(2)), expected_ttl or ttl)
        return m.group(1)

    def test_etcdctl_lease_grant_timetolive_list_and_revoke(self):
        lid = self.grant(30)
        self.assertNotEqual(self.grant(1, expected_ttl=MIN_TTL), lid)
        self.ctl("put", "--lease", lid, "ctl/k1", "v1")
        self.ctl("put", "--lease", lid, "ctl/k2", "v2")
        out = self.ctl("lease", "timetolive", "--keys", lid).stdout
        m = re.fullmatch(r"lease %s granted with TTL\(30s\), remaining\((\d+)s\), attached keys\(\[(.*)\]\)\n" % lid, out)
        self.assertIsNotNone(m, out)
        self.assertIn(int(m.group(1)), (28, 29, 30))
        self.assertEqual(sorted(m.group(2).split()), ["ctl/k1", "ctl/k2"])
        out = self.ctl("lease", "timetolive", lid).stdout
        self.assertRegex(out, r"^lease %s granted with TTL\(30s\), remaining\(\d+s\)\n$" % lid)
        out = self.ctl("lease", "list").stdout.splitlines()
        self.assertRegex(out[0], r"^found \d+ leases$")
        self.assertEqual(int(out[0].split()[1]), len(out) - 1)
        self.assertIn(lid, out[1:])
        self.assertEqual(self.ctl("lease", "revoke", lid).stdout, "lease %s revoked\n" % lid)
        self.assertEqual(self.ctl("get", "--prefix", "ctl/").stdout, "")
        self.assertNotIn(lid, self.ctl("lease", "list").stdout.splitlines()[1:])
        self.assertEqual(self.ctl("lease", "timetolive", lid).stdout, "lease %s already expired\n" % lid)
        p = self.ctl("lease", "revoke", lid, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("Error: failed to revoke lease (%s)" % LEASE_NOT_FOUND, p.stderr)

    def test_etcdctl_lease_keep_alive_once_restarts_the_ttl(self):
        lid = self.grant(10)
        time.sleep(2.1)
        self.assertEqual(self.ctl("lease", "keep-alive", "--once", lid).stdout,
                         "lease %s keepalived with TTL(10)\n" % lid)
        out = self.ctl("lease", "timetolive", lid).stdout
        m = re.fullmatch(r"lease %s granted with TTL\(10s\), remaining\((\d+)s\)\n" % lid, out)
        self.assertIsNotNone(m, out)
        self.assertIn(int(m.group(1)), (9, 10))
        self.ctl("lease", "revoke", lid)

    def test_etcdctl_lease_keep_alive_in_background_keeps_the_key_past_its_ttl(self):
        lid = self.grant(MIN_TTL)
        self.ctl("put", "--lease", lid, "ctl/kept", "v")
        proc = subprocess.Popen([ETCDCTL, "--endpoints", self.member.endpoint, "lease", "keep-alive", lid],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={"ETCDCTL_API": "3", "PATH": "/usr/bin:/bin"})
        try:
            deadline = time.monotonic() + 3 * MIN_TTL
            while time.monotonic() < deadline:
                self.assertIsNone(proc.poll(), "etcdctl lease keep-alive exited early")
                self.assertIn("ctl/kept", self.ctl("get", "--keys-only", "ctl/kept").stdout)
                time.sleep(0.5)
        finally:
            proc.kill()
            out, _ = proc.communicate(timeout=10)
        stopped = time.monotonic()
        lines = out.splitlines()
        self.assertGreaterEqual(len(lines), 3, out)
        for line in lines:
            self.assertEqual(line, "lease %s keepalived with TTL(%d)" % (lid, MIN_TTL))
        # Without keep-alives it now expires within its TTL (+1 s).
        while self.ctl("get", "--keys-only", "ctl/kept").stdout and time.monotonic() < stopped + 10:
            time.sleep(0.1)
        gone_after = time.monotonic() - stopped
        self.assertEqual(self.ctl("get", "--keys-only", "ctl/kept").stdout, "")
        self.assertLessEqual(gone_after, MIN_TTL + 1.0)
        self.assertEqual(self.ctl("lease", "timetolive", lid).stdout, "lease %s already expired\n" % lid)


class LeaseExpiryTest(harness.MemberTestCase):
    """Leases nobody keeps alive expire on time, each deletion reaching a watcher."""

    def test_1000_leases_expire_within_ttl_plus_1s_and_every_deletion_is_watched(self):
        m = self.new_member()
        prefix = b"/exp/"
        rec = EventRecorder(m, prefix)
        n = EXPIRY_LEASES
        sent = [None] * n            # monotonic time just before the grant was sent
        ttls = [MIN_TTL + i % 4 for i in range(n)]       # 2..5 s
        ids = [None] * n
        keys = [prefix + b"%04d" % i for i in range(n)]
        errors = []
        local = threading.local()

        def stubs():
            if not hasattr(local, "ch"):
                local.ch = m.channel()
                local.lease, local.kv = m.lease_stub(local.ch), m.kv(local.ch)
            return local

        def grant_and_put(i):
            try:
                s = stubs()
                sent[i] = time.monotonic()
                resp = s.lease.LeaseGrant(pb.LeaseGrantRequest(TTL=ttls[i]), timeout=10)
                if resp.TTL != ttls[i]:
                    errors.append("lease %d granted TTL %d, asked %d" % (i, resp.TTL, ttls[i]))
                ids[i] = resp.ID
                s.kv.Put(pb.PutRequest(key=keys[i], value=b"v", lease=resp.ID), timeout=10)
            except Exception as e:   # noqa: BLE001 - reported below
                errors.append("lease %d: %r" % (i, e))

        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(grant_and_put, range(n)))
        setup = time.monotonic() - t0
        self.assertEqual(errors, [])
        self.assertEqual(len(set(ids)), n, "lease ids are not distinct")
        # A put onto an expired lease would have failed with NOT_FOUND: every lease outlived its put.
        last_deadline = max(s + t for s, t in zip(sent, ttls))
        rec.wait_until(lambda evs: sum(1 for e in evs if e[1] == DELETE) >= n,
                       last_deadline + EXPIRY_SLACK_S + 3 - time.monotonic())
        time.sleep(0.3)     # anything extra (a second DELETE of a key) would show now
        events = rec.snapshot()
        rec.close()
        self.assertIsNone(rec.error)
        puts = [e for e in events if e[1] == PUT]
        deletes = [e for e in events if e[1] == DELETE]
        self.assertEqual(sorted(e[2] for e in puts), keys, "every put seen once by the watcher")
        delete_at = {}
        for at, _, key, rev, _ in deletes:
            self.assertNotIn(key, delete_at, "key %r deleted twice" % key)
            delete_at[key] = at
        missing = [k for k in keys if k not in delete_at]
        index = {k: i for i, k in enumerate(keys)}
        lateness = {k: at - (sent[index[k]] + ttls[index[k]]) for k, at in delete_at.items()}
        worst = max(lateness.values()) if lateness else float("nan")
        earliest = min(lateness.values()) if lateness else float("nan")
        ordered = sorted(lateness.values())
        p50 = ordered[len(ordered) // 2] if ordered else float("nan")
        p99 = ordered[int(len(ordered) * 0.99)] if ordered else float("nan")
        timing("expiry of %d leases (TTL 2-5 s, setup %.2f s): lateness after send+TTL "
               "min %.3f s, median %.3f s, p99 %.3f s, max %.3f s; %d deletions watched, %d missing"
               % (n, setup, earliest, p50, p99, worst, len(delete_at), len(missing)))
        self.assertEqual(missing[:10], [], "%d keys never seen deleted" % len(missing))
        early = sorted((v, k) for k, v in lateness.items() if v < 0)
        self.assertEqual(early[:5], [], "%d keys deleted before their TTL ran out" % len(early))
        late = sorted(((v, k) for k, v in lateness.items() if v > EXPIRY_SLACK_S), reverse=True)
        self.assertEqual(late[:5], [], "%d keys deleted more than %.1f s after TTL" % (len(late), EXPIRY_SLACK_S))
        self.assertEqual(list(m.client().get_prefix(prefix)), [])
        leases = m.lease_stub()
        self.assertEqual(ids_of_leases(leases) & set(ids), set())
        for i in range(0, n, max(1, n // 20)):
            self.assertEqual(leases.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=ids[i]), timeout=10).TTL, -1)


class KeepAliveStream:
    """One long-lived raw LeaseKeepAlive stream (what Go's clientv3 keeps open) that
    refreshes `leases` every `interval` s; answers are checked as they arrive."""

    def __init__(self, member, leases, interval, problems, last_ok, gaps):
        self.leases, self.interval = leases, interval
        self.problems, self.last_ok, self.gaps = problems, last_ok, gaps
        self.stop = threading.Event()
        self.requests = queue.Queue()
        self.call = member.lease_stub().LeaseKeepAlive(self._iter())
        self.sender = threading.Thread(target=self._send, daemon=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.answers = 0

    def start(self):
        self.reader.start()
        self.sender.start()

    def _iter(self):
        while True:
            r = self.requests.get()
            if r is None:
                return
            yield r

    def _send(self):
        while not self.stop.is_set():
            for lease in self.leases:
                self.requests.put(pb.LeaseKeepAliveRequest(ID=lease.id))
            self.stop.wait(self.interval)
        self.requests.put(None)

    def _read(self):
        ttl = {lease.id: lease.ttl for lease in self.leases}
        try:
            for resp in self.call:
                now = time.monotonic()
                if ttl.get(resp.ID) != resp.TTL:
                    self.problems.append("keep-alive stream answered %x TTL %d" % (resp.ID, resp.TTL))
                    continue
                self.gaps.append(now - self.last_ok[resp.ID])
                self.last_ok[resp.ID] = now
                self.answers += 1
        except grpc.RpcError as e:
            if not self.stop.is_set():
                self.problems.append("keep-alive stream ended: %s %s" % (e.code(), e.details()))
            return
        if not self.stop.is_set():
            self.problems.append("keep-alive stream ended by the server")

    def close(self):
        self.stop.set()
        self.sender.join(5)
        self.reader.join(5)


class LeaseKeepAliveTest(harness.MemberTestCase):

    def test_leases_refreshed_by_a_client_for_60s_never_expire_and_keep_their_keys(self):
        """Two leases kept alive with python-etcd3's lease.refresh() (a stream per refresh),
        two over one long-lived raw LeaseKeepAlive stream; a fifth, not refreshed, expires."""
        m = self.new_member()
        etcd = m.client()
        prefix = b"/kept/"
        rec = EventRecorder(m, prefix)
        kept = [etcd.lease(ttl) for ttl in (2, 3, 2, 3)]
        by_refresh, by_stream = kept[:2], kept[2:]
        for i, lease in enumerate(kept):
            etcd.put(prefix + b"k%d" % i, "v", lease=lease)
        control = etcd.lease(MIN_TTL)      # nobody refreshes this one: expiry is working meanwhile
        etcd.put(prefix + b"control", "v", lease=control)
        stop = threading.Event()
        problems = []
        last_ok = {lease.id: time.monotonic() for lease in kept}
        gaps = []

        def refresher():
            refresh_client = m.client()
            while not stop.is_set():
                for lease in by_refresh:
                    try:
                        resps = [(r.ID, r.TTL) for r in lease.etcd_client.refresh_lease(lease.id)]
                        resps2 = [(r.ID, r.TTL) for r in refresh_client.refresh_lease(lease.id)]
                        now = time.monotonic()
                        if resps != [(lease.id, lease.ttl)] or resps2 != resps:
                            problems.append("refresh of %x answered %r, %r" % (lease.id, resps, resps2))
                        gaps.append(now - last_ok[lease.id])
                        last_ok[lease.id] = now
                    except Exception as e:   # noqa: BLE001 - reported below
                        problems.append("refresh of %x failed: %r" % (lease.id, e))
                stop.wait(0.5)

        t = threading.Thread(target=refresher, daemon=True)
        stream = KeepAliveStream(m, by_stream, 0.5, problems, last_ok, gaps)
        t.start()
        stream.start()
        started = time.monotonic()
        try:
            while time.monotonic() - started < KEEPALIVE_SECONDS and not problems:
                time.sleep(1.0)
                for i, lease in enumerate(kept):
                    info = etcd.get_lease_info(lease.id)
                    if info.TTL < 0:
                        problems.append("lease %d expired after %.1f s" % (i, time.monotonic() - started))
                if rec.error:
                    problems.append(rec.error)
                bad = [e for e in rec.snapshot() if e[1] == DELETE and e[2] != prefix + b"control"]
                if bad:
                    problems.append("kept key deleted after %.1f s: %r" % (bad[0][0] - started, bad[0][2]))
        finally:
            stop.set()
            t.join(10)
            stream.close()
        stopped = time.monotonic()
        timing("keep-alive for %.0f s: %d refreshes (%d over the long-lived stream), "
               "max gap between refreshes of one lease %.3f s"
               % (stopped - started, len(gaps), stream.answers, max(gaps) if gaps else -1))
        self.assertEqual(problems[:5], [])
        self.assertGreater(stream.answers, KEEPALIVE_SECONDS)
        self.assertEqual(sorted(md.key for _, md in etcd.get_prefix(prefix)),
                         [prefix + b"k%d" % i for i in range(len(kept))])
        for lease in kept:
            info = etcd.get_lease_info(lease.id)
            self.assertEqual(info.grantedTTL, lease.ttl)
            self.assertGreaterEqual(info.TTL, 0)
        control_deletes = [e for e in rec.snapshot() if e[1] == DELETE and e[2] == prefix + b"control"]
        self.assertEqual(len(control_deletes), 1, "the lease nobody refreshed did not expire once")
        # Refreshing stopped: now they expire, within TTL + 1 s of the last refresh.
        self.assertTrue(rec.wait_until(lambda evs: sum(1 for e in evs if e[1] == DELETE) >= 1 + len(kept), 3 + 1.5),
                        rec.snapshot()[-6:])
        for i, lease in enumerate(kept):
            at = [e[0] for e in rec.deletes() if e[2] == prefix + b"k%d" % i]
            self.assertEqual(len(at), 1)
            self.assertLessEqual(at[0] - last_ok[lease.id], lease.ttl + 1.0)
            self.assertGreaterEqual(at[0] - last_ok[lease.id], lease.ttl - 0.5)
        rec.close()


class LeaseRestartTest(harness.MemberTestCase):

    def test_leases_and_keys_survive_kill9_and_expire_a_full_ttl_after_restart(self):
        m = self.new_member()
        etcd = m.client()
        prefix = b"/rs/"
        ttls = {"a": 5, "b": 6, "c": 8}
        leases = {n: etcd.lease(t) for n, t in ttls.items()}
        for n, lease in leases.items():
            etcd.put(prefix + n.encode(), n, lease=lease)
        etcd.put(prefix + b"c2", "c2", lease=leases["c"])
        etcd.put(prefix + b"plain", "plain")
        gone = etcd.lease(30)
        etcd.put(prefix + b"gone", "x", lease=gone)
        gone.revoke()
        rev_before = etcd.get_response(b"any").header.revision
        time.sleep(3.5)                # 'a' has 1.5 s left: had its clock not restarted, it would expire soon
        m.kill9()
        restart_begin = time.monotonic()
        m.start()
        serving = time.monotonic()
        etcd = m.client()
        rec = EventRecorder(m, prefix, start_revision=rev_before + 1)
        ls = m.lease_stub()
        self.assertEqual(etcd.get_response(b"any").header.revision, rev_before)
        self.assertEqual(ids_of_leases(ls), {lease.id for lease in leases.values()})
        for n, lease in leases.items():
            info = ls.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=lease.id, keys=True), timeout=10)
            self.assertEqual(info.grantedTTL, ttls[n])
            # A full TTL again (etcd 3.4 even adds its election timeout); never what was left at the kill.
            self.assertGreaterEqual(info.TTL, ttls[n] - 2, "lease %s: remaining %d after restart" % (n, info.TTL))
            self.assertLessEqual(info.TTL, ttls[n] + 2)
            expect_keys = [prefix + b"c", prefix + b"c2"] if n == "c" else [prefix + n.encode()]
            self.assertEqual(sorted(info.keys), expect_keys)
        got = {md.key: (v, md.lease_id) for v, md in etcd.get_prefix(prefix)}
        self.assertEqual(got, {prefix + b"a": (b"a", leases["a"].id), prefix + b"b": (b"b", leases["b"].id),
                               prefix + b"c": (b"c", leases["c"].id), prefix + b"c2": (b"c2", leases["c"].id),
                               prefix + b"plain": (b"plain", 0)})
        self.assertEqual(ls.LeaseTimeToLive(pb.LeaseTimeToLiveRequest(ID=gone.id), timeout=10).TTL, -1)
        self.assertTrue(rec.wait_until(lambda evs: len(evs) >= 4, serving + 8 + RESTART_SLACK_S + 2 - time.monotonic()),
                        rec.snapshot())
        time.sleep(0.3)
        events = rec.snapshot()
        rec.close()
        self.assertEqual(sorted((t, k) for _, t, k, _, _ in events),
                         sorted((DELETE, prefix + k) for k in (b"a", b"b", b"c", b"c2")))
        # c and c2 go in one revision; revisions follow on from before the crash.
        revs = {k: r for _, _, k, r, _ in events}
        self.assertEqual(revs[prefix + b"c"], revs[prefix + b"c2"])
        self.assertEqual(sorted(set(revs.values())), [rev_before + 1, rev_before + 2, rev_before + 3])
        report = []
        for n in ("a", "b", "c"):
            at = [e[0] for e in events if e[2] == prefix + n.encode()][0]
            after_start = at - restart_begin
            after_serving = at - serving
            report.append("%s TTL %d: deleted %.2f s after restart began, %.2f s after serving" % (
                n, ttls[n], after_start, after_serving))
            self.assertGreaterEqual(after_start, ttls[n], "lease %s expired before a full TTL after restart" % n)
            self.assertLessEqual(after_serving, ttls[n] + RESTART_SLACK_S,
                                 "lease %s expired late after restart" % n)
        timing("restart (start took %.2f s): %s" % (serving - restart_begin, "; ".join(report)))
        self.assertEqual([md.key for _, md in etcd.get_prefix(prefix)], [prefix + b"plain"])


if __name__ == "__main__":
    harness.main()
