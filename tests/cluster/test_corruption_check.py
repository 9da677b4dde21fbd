#!/usr/bin/python3
"""etcd's data corruption checks (member/corruption_check.h; etcd 3.6's
server/etcdserver/corrupt.go), as kubeadm turns them on:
--experimental-initial-corrupt-check and --experimental-corrupt-check-time
(or 3.6's --corrupt-check-time).

- A 3-member cluster with both flags starts, serves, and a healthy restarted
  member passes the initial check; the leader's periodic check compares the
  followers and raises nothing.
- A member whose stored state was changed offline (a key's value rewritten
  in its RocksDB by tests/tools/kv_corrupt_tool.cc, as a disk or a bug behind
  Raft's back would leave it; nothing in the server knows of the tool) is
  refused by the initial check: it exits non-zero, logging etcd's
  "found data inconsistency with peers", before it serves anyone.
- Without the initial check, the leader's periodic check finds it: the
  CORRUPT alarm for that member appears (`etcdctl alarm list`), writes are
  refused with etcd's "etcdserver: corrupt cluster", reads still answer (as
  etcd's Range, which bypasses the corrupt applier), and `etcdctl alarm
  disarm` clears it.
- The hash exchange is on the peer URL only: the client URL answers it as an
  unknown service (and has no /members/hashkv), while on the peer URL
  garbage, another cluster's id, negative or oversized requests are refused
  and leave every member up; a valid request answers the hash etcd's
  Maintenance.HashKV gives.

    ETCDQ_BIN=build/etcdq KV_CORRUPT_TOOL=build/etcdq_kv_corrupt_tool \\
        /usr/bin/python3 tests/cluster/test_corruption_check.py
"""
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import unittest  # noqa: E402

import grpc  # noqa: E402

from cluster import ClusterTestCase, binary_under_test, is_reference_etcd, main, read_varint, rpc_pb2, varint  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500
CHECK_TIME = "1s"
PEER_HASHKV = "/etcdq.peer.Peer/HashKV"
CORRUPT_CLUSTER = "etcdserver: corrupt cluster"
INCONSISTENT = "found data inconsistency with peers"


def corrupt_tool():
    tool = os.environ.get("KV_CORRUPT_TOOL")
    if not tool:
        tool = os.path.join(os.path.dirname(os.path.abspath(binary_under_test())), "etcdq_kv_corrupt_tool")
    return tool


def hashkv_request(revision, cluster_id):
    """proto/etcdq/peer.proto HashKVRequest: revision (1, int64), cluster_id (2, uint64)."""
    return varint(1 << 3) + varint(revision & (2 ** 64 - 1)) + varint(2 << 3) + varint(cluster_id)


def parse_varints(data):
    """{field number: value} of a message of varint fields only (HashKVResponse)."""
    out, i = {}, 0
    while i < len(data):
        key, i = read_varint(data, i)
        out[key >> 3], i = read_varint(data, i)
    return out


def raw_call(target, payload, timeout=10):
    """(code, details, response bytes) of a unary Peer.HashKV call with raw bytes."""
    with grpc.insecure_channel(target) as ch:
        try:
            resp = ch.unary_unary(PEER_HASHKV)(payload, timeout=timeout)
            return grpc.StatusCode.OK, "", resp
        except grpc.RpcError as e:
            return e.code(), e.details(), None


def revision(c, i=None):
    i = c.leader_index() if i is None else i
    return c.kv(i).Range(rpc_pb2.RangeRequest(key=b"\0", count_only=True), timeout=10).header.revision


def log_text(member):
    with open(member.log_path, "rb") as f:
        return f.read().decode(errors="replace")


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("not within %.0f s: %s" % (timeout, what))


def put_keys(c, n=20, prefix=b"k"):
    kv = c.kv(c.leader_index())
    for i in range(n):
        kv.Put(rpc_pb2.PutRequest(key=prefix + b"%d" % i, value=b"v%d" % i), timeout=10)


def follower_of(c):
    leader = c.leader_index()
    return next(i for i in range(len(c)) if i != leader)


def corrupt_offline(testcase, member, key, value):
    tool = corrupt_tool()
    if not os.path.exists(tool):
        testcase.fail("%s not built (cmake target etcdq_kv_corrupt_tool)" % tool)
    p = subprocess.run([tool, member.data_dir, key, value], capture_output=True, text=True, timeout=60)
    testcase.assertEqual(p.returncode, 0, p.stderr)


class HealthyClusterWithChecks(ClusterTestCase):

    def test_three_members_with_both_flags_start_serve_and_pass_the_checks(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS,
                             extra_args=["--experimental-initial-corrupt-check",
                                         "--experimental-corrupt-check-time", CHECK_TIME])
        put_keys(c)
        c.assert_same_hashkv(self)
        leader = c.leader_index()
        if not is_reference_etcd():  # etcd 3.4 logs no line per pass
            wait_for(lambda: "finished peer corruption check" in log_text(c[leader]), 15,
                     "a periodic check on the leader")
        # A restarted member with data compares itself before serving, and passes
        # (etcd 3.5+'s words; Debian's 3.4 logs with capnslog).
        f = follower_of(c)
        c.restart(f)
        self.assertRegex(log_text(c[f]), "initial corruption checking passed; no corruption|"
                                         "succeeded on initial corruption checking: no corruption")
        c.kv(f).Put(rpc_pb2.PutRequest(key=b"after-restart", value=b"ok"), timeout=10)
        time.sleep(3)
        self.assertEqual(c.etcdctl("alarm", "list").strip(), "")
        if not is_reference_etcd():
            self.assertNotIn("same compact revision then hashes must match", log_text(c[c.leader_index()]))
            self.assertRegex(log_text(c[c.leader_index()]), r"number-of-peers-checked=2")

    @unittest.skipIf(is_reference_etcd(), "--corrupt-check-time is etcd 3.6's; the oracle is 3.4")
    def test_both_spellings_of_the_check_time_at_once_are_refused_as_etcd_3_6_does(self):
        p = subprocess.run([binary_under_test(), "--corrupt-check-time", "1s", "--experimental-corrupt-check-time",
                            "1s", "--data-dir", "/nonexistent/x"], capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("cannot set --experimental-corrupt-check-time and --corrupt-check-time at the same time",
                      p.stderr)
        p = subprocess.run([binary_under_test(), "--corrupt-check-time", "soon", "--data-dir", "/nonexistent/x"],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--corrupt-check-time", p.stderr)


@unittest.skipIf(is_reference_etcd(), "the damage is written into etcdq's RocksDB state")
class CorruptedMemberIsCaught(ClusterTestCase):

    def test_initial_check_refuses_to_start_a_member_whose_state_was_changed_offline(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS,
                             extra_args=["--experimental-initial-corrupt-check"])
        put_keys(c)
        c.assert_same_hashkv(self)
        f = follower_of(c)
        self.assertEqual(c.stop(f), 0)
        corrupt_offline(self, c[f], "k7", "not-what-was-written")
        c[f].spawn()
        status = c[f].proc.wait(timeout=60)
        self.assertNotEqual(status, 0, "the corrupted member started")
        text = log_text(c[f])
        self.assertIn("found different hash values from remote peer", text)
        self.assertIn(INCONSISTENT, text)
        self.assertIn("checkInitialHashKV failed", text)
        self.assertNotIn("ready to serve client requests", text.split("harness: start #2")[-1])
        # The other two go on.
        put_keys(c, 3, prefix=b"after")

    def test_periodic_check_raises_corrupt_which_refuses_writes_until_disarmed(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS,
                             extra_args=["--corrupt-check-time", CHECK_TIME])
        put_keys(c)
        c.assert_same_hashkv(self)
        f = follower_of(c)
        fid = c.member_id(f)
        self.assertEqual(c.stop(f), 0)
        corrupt_offline(self, c[f], "k7", "not-what-was-written")
        c.restart(f)  # no initial check: it serves
        leader = c.leader_index()
        alarms = wait_for(lambda: c.etcdctl("alarm", "list").strip(), 20, "a CORRUPT alarm")
        self.note("alarm list: %s" % alarms)
        self.assertIn("alarm:CORRUPT", alarms)
        if leader != f:
            self.assertEqual(alarms, "memberID:%d alarm:CORRUPT" % fid)
            self.assertIn("same compact revision then hashes must match", log_text(c[leader]))
        # Writes refused on every member with etcd's error; reads still answered.
        for i in range(len(c)):
            with self.assertRaises(grpc.RpcError) as cm:
                c.kv(i).Put(rpc_pb2.PutRequest(key=b"refused", value=b"x"), timeout=10)
            self.assertEqual(cm.exception.details(), CORRUPT_CLUSTER)
        p = c.etcdctl("put", "refused", "x", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(CORRUPT_CLUSTER, p.stderr)
        got = c.kv(leader).Range(rpc_pb2.RangeRequest(key=b"k3"), timeout=10).kvs
        self.assertEqual([kv.value for kv in got], [b"v3"])
        # /health says why, as etcd's: {"health":"false","reason":"ALARM CORRUPT"}.
        try:
            body = urllib.request.urlopen(c[leader].client_url + "/health", timeout=10).read()
        except urllib.error.HTTPError as e:
            body = e.read()
        self.assertIn(b"ALARM CORRUPT", body)
        # The operator takes the bad member out, then disarms: writes go again.
        c.stop(f)
        c.etcdctl("alarm", "disarm", endpoints=c[leader].endpoint)
        self.assertEqual(c.etcdctl("alarm", "list", endpoints=c[leader].endpoint).strip(), "")
        c.kv(leader).Put(rpc_pb2.PutRequest(key=b"after-disarm", value=b"ok"), timeout=10)
        time.sleep(3)  # further checks skip the stopped member and raise nothing
        self.assertEqual(c.etcdctl("alarm", "list", endpoints=c[leader].endpoint).strip(), "")


class HashExchangeIsOnThePeerUrlOnly(ClusterTestCase):

    @classmethod
    def setUpClass(cls):
        cls.c = cls.new_class_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS,
                                      extra_args=["--experimental-corrupt-check-time", CHECK_TIME])
        put_keys(cls.c)

    def test_client_url_has_no_hash_exchange(self):
        c = self.c
        for i in range(len(c)):
            code, details, _ = raw_call(c[i].endpoint, hashkv_request(1, 0))
            if is_reference_etcd():
                self.assertEqual(code, grpc.StatusCode.UNIMPLEMENTED)
            else:
                self.assertEqual((code, details), (grpc.StatusCode.UNIMPLEMENTED, "unknown service etcdq.peer.Peer"))
            # etcd's own peer path is not served to clients either.
            try:
                urllib.request.urlopen(c[i].client_url + "/members/hashkv", timeout=5)
                self.fail("/members/hashkv answered on the client URL")
            except urllib.error.HTTPError as e:
                self.assertEqual(e.code, 404)

    @unittest.skipIf(is_reference_etcd(), "etcd's peer URL speaks rafthttp, not etcdq's Peer service")
    def test_peer_url_answers_members_and_refuses_what_does_not_parse_or_belong(self):
        c = self.c
        rev = revision(c)
        c.wait_applied_revision(rev)
        st = c.status(0, timeout=5)
        cluster_id = st.header.cluster_id
        target = c[0].peer_url.replace("http://", "")
        # A member's request: the hash Maintenance.HashKV gives at that revision.
        code, details, resp = raw_call(target, hashkv_request(rev, cluster_id))
        self.assertEqual(code, grpc.StatusCode.OK, details)
        fields = parse_varints(resp)
        want = c.maintenance(0).HashKV(rpc_pb2.HashKVRequest(revision=rev), timeout=10)
        self.assertEqual(fields.get(5, 0), want.hash)
        self.assertEqual(fields.get(4), rev)
        self.assertEqual(fields.get(1), c.member_id(0))
        # What is refused, and how.
        cases = [
            (b"\xff\xff\xff\xff", None, ""),                       # not a message
            (b"\x0a\x05abc", None, ""),                            # truncated field
            (hashkv_request(rev, cluster_id ^ 1), grpc.StatusCode.FAILED_PRECONDITION, "cluster ID mismatch"),
            (hashkv_request(rev, 0), grpc.StatusCode.FAILED_PRECONDITION, "cluster ID mismatch"),
            (hashkv_request(-5, cluster_id), grpc.StatusCode.INVALID_ARGUMENT, "negative revision"),
            (hashkv_request(rev + 1000, cluster_id), grpc.StatusCode.OUT_OF_RANGE, "future revision"),
            (hashkv_request(rev, cluster_id) + b"\x1a\x80\x08" + b"x" * 1024,
             grpc.StatusCode.INVALID_ARGUMENT, "too large"),
        ]
        for payload, want_code, want_text in cases:
            code, details, _ = raw_call(target, payload)
            self.assertNotEqual(code, grpc.StatusCode.OK, payload[:16])
            if want_code is not None:
                self.assertEqual(code, want_code, (payload[:16], details))
                self.assertIn(want_text, details)
        # Many at once: a bounded number computed, the rest refused, nobody hurt.
        results = []

        def ask():
            results.append(raw_call(target, hashkv_request(rev, cluster_id))[0])
        threads = [threading.Thread(target=ask) for _ in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertIn(grpc.StatusCode.OK, results)
        self.assertTrue(set(results) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, set(results))
        # Raw garbage on the peer port, etcd's own peer request among it.
        for junk in [b"GET /members/hashkv HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00" * 4096, b"\xff" * 100]:
            with socket.create_connection(("127.0.0.1", c[0].peer_port), timeout=5) as s:
                s.sendall(junk)
                s.settimeout(3)
                try:
                    while s.recv(65536):
                        pass
                except OSError:
                    pass
        time.sleep(1)
        for i in range(len(c)):
            self.assertTrue(c[i].running(), "%r stopped" % c[i])
        self.assertEqual(revision(c), rev, "something entered the log")
        self.assertEqual(c.etcdctl("alarm", "list").strip(), "")
        c.kv(0).Put(rpc_pb2.PutRequest(key=b"still", value=b"serving"), timeout=10)


if __name__ == "__main__":
    main()
