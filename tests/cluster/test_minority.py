#!/usr/bin/python3
"""A member cut off from its quorum (two of three SIGKILLed) refuses writes and
linearizable reads with etcd's errors, within etcd's request timeout, instead of
hanging; serializable reads, Status and MemberList still answer from its own
state; once the two restart, the cluster heals and all members agree.

    /usr/bin/python3 tests/cluster/test_minority.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_minority.py

What etcd 3.4 does (election timeout 500 ms, so its request timeout, 5 s + 2 x
election timeout, is 6 s), seen from a gRPC client with a 10 s deadline:
- Put or linearizable Range sent while the survivor still believes it has a
  leader (or leads itself): UNAVAILABLE "etcdserver: request timed out" after
  the request timeout (a read may also get "etcdserver: leader changed").
- Put sent once the survivor knows it has no leader: UNKNOWN "context deadline
  exceeded" after the request timeout (raft blocks the proposal; the server's
  own context expires); etcd 3.6 gives it code DEADLINE_EXCEEDED. etcdq
  answers UNAVAILABLE "etcdserver: request timed out" or "no leader" there.
- with the "hasleader" metadata (clientv3.WithRequireLeader): UNAVAILABLE
  "etcdserver: no leader" at once.
- a Watch stream opened with "hasleader" before the quorum went away ends
  with UNAVAILABLE "etcdserver: no leader" once the member has known no
  leader for 3 election timeouts (etcd's monitorLeader, v3rpc/interceptor.go;
  kube-apiserver's watches ask for a leader); one opened without it stays.
"""
import concurrent.futures
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from cluster import ClusterTestCase, Writer, main, rpc_pb2, rpc_pb2_grpc  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500
REQUEST_TIMEOUT_S = 5.0 + 2 * ELECTION_MS / 1000     # etcd's ServerConfig.ReqTimeout()
CLIENT_DEADLINE_S = 10.0
MARGIN_S = 2.0                                       # a busy 2-core machine
PREFIX = b"minority/"

# (gRPC code, message) pairs etcd answers when it cannot reach a quorum.
ETCD_NO_QUORUM_ERRORS = {
    ("UNAVAILABLE", "etcdserver: request timed out"),
    ("UNAVAILABLE", "etcdserver: request timed out, possibly due to previous leader failure"),
    ("UNAVAILABLE", "etcdserver: request timed out, possibly due to connection lost"),
    ("UNAVAILABLE", "etcdserver: leader changed"),
    ("UNAVAILABLE", "etcdserver: no leader"),
    ("UNKNOWN", "context deadline exceeded"),   # etcd 3.4: proposal blocked while there is no leader
    ("DEADLINE_EXCEEDED", "context deadline exceeded"),   # etcd 3.6, the same case
}


class WatchEnd:
    """A Watch stream of `key` on `channel`, read on a thread of its own; `ended` is
    set when the stream ends, with (time.monotonic(), code name, details) in `end`."""

    def __init__(self, channel, key, metadata=()):
        self.ended = threading.Event()
        self.created = threading.Event()
        self.end = None
        self._stop = threading.Event()
        self._call = rpc_pb2_grpc.WatchStub(channel).Watch(self._requests(key), metadata=list(metadata))
        threading.Thread(target=self._read, daemon=True).start()

    def _requests(self, key):
        yield rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=key))
        self._stop.wait()   # no half-close: the stream stays open until the server ends it

    def _read(self):
        try:
            for r in self._call:
                if r.created:
                    self.created.set()
            self.end = (time.monotonic(), "OK", "")
        except grpc.RpcError as e:
            self.end = (time.monotonic(), e.code().name, e.details())
        self.ended.set()

    def close(self):
        self._stop.set()
        self._call.cancel()


def timed_call(fn, *args, **kwargs):
    """(elapsed s, response or None, (code name, details) or None)."""
    t = time.monotonic()
    try:
        r = fn(*args, **kwargs)
        return time.monotonic() - t, r, None
    except grpc.RpcError as e:
        return time.monotonic() - t, None, (e.code().name, e.details())


class MinorityTest(ClusterTestCase):

    def assert_refused_in_time(self, what, elapsed, resp, err):
        self.note("%s: %s after %.2f s" % (what, err, elapsed))
        self.assertIsNone(resp, "%s succeeded without a quorum" % what)
        self.assertIn(err, ETCD_NO_QUORUM_ERRORS, "%s: not one of etcd's no-quorum errors" % what)
        self.assertLess(elapsed, min(REQUEST_TIMEOUT_S + MARGIN_S, CLIENT_DEADLINE_S - 0.5),
                        "%s took %.2f s: the server must answer within its request timeout (%.1f s)" % (
                            what, elapsed, REQUEST_TIMEOUT_S))

    def test_survivor_refuses_quorum_requests_in_time_and_cluster_heals(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        kv0 = c.kv(0)
        for n in range(20):
            kv0.Put(rpc_pb2.PutRequest(key=PREFIX + b"before/%02d" % n, value=b"%d" % n), timeout=5)
        # The leader survives: the member most likely to answer from stale belief in its
        # own leadership. (A surviving follower is covered by round 2: no leader at all.)
        survivor = c.leader_index()
        dead = [i for i in range(3) if i != survivor]
        c.wait_applied_revision(kv0.Range(rpc_pb2.RangeRequest(key=b"x"), timeout=5).header.revision)
        kv = c.kv(survivor)
        # Watches on the survivor, one that asks for a leader and one that does not.
        ch = c[survivor].channel()
        self.addCleanup(ch.close)
        needs_leader = WatchEnd(ch, PREFIX + b"w", metadata=[("hasleader", "true")])
        plain = WatchEnd(ch, PREFIX + b"w")
        self.addCleanup(needs_leader.close)
        self.addCleanup(plain.close)
        self.assertTrue(needs_leader.created.wait(5) and plain.created.wait(5), "watches not created")

        killed_at = time.monotonic()
        c.kill9(*dead)
        # Round 1, at once: the survivor does not know yet that it lost its quorum.
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            put = ex.submit(timed_call, kv.Put, rpc_pb2.PutRequest(key=PREFIX + b"lost-1", value=b"x"),
                            timeout=CLIENT_DEADLINE_S)
            get = ex.submit(timed_call, kv.Range, rpc_pb2.RangeRequest(key=PREFIX + b"before/00"),
                            timeout=CLIENT_DEADLINE_S)
            self.assert_refused_in_time("Put right after losing quorum", *put.result())
            self.assert_refused_in_time("linearizable Range right after losing quorum", *get.result())

        # By now the survivor has stepped down (etcd's leader checks its quorum every
        # election timeout): Status answers from local state with no leader.
        st = c.status(survivor, timeout=5)
        self.assertEqual(st.leader, 0, "a member without quorum still names a leader")

        # Round 2, known to have no leader.
        with concurrent.futures.ThreadPoolExecutor(2) as ex:
            put = ex.submit(timed_call, kv.Put, rpc_pb2.PutRequest(key=PREFIX + b"lost-2", value=b"x"),
                            timeout=CLIENT_DEADLINE_S)
            get = ex.submit(timed_call, kv.Range, rpc_pb2.RangeRequest(key=PREFIX + b"before/00"),
                            timeout=CLIENT_DEADLINE_S)
            self.assert_refused_in_time("Put with no leader", *put.result())
            self.assert_refused_in_time("linearizable Range with no leader", *get.result())

        # clientv3.WithRequireLeader: refused at once.
        elapsed, resp, err = timed_call(kv.Put, rpc_pb2.PutRequest(key=PREFIX + b"lost-3", value=b"x"),
                                        timeout=CLIENT_DEADLINE_S, metadata=[("hasleader", "true")])
        self.note("Put with hasleader metadata: %s after %.2f s" % (err, elapsed))
        self.assertEqual(err, ("UNAVAILABLE", "etcdserver: no leader"))
        self.assertLess(elapsed, 1.0)

        # The watch that asked for a leader ended with etcd's error after 3 election
        # timeouts without one (the leader steps down after one: at most ~5 in all);
        # the other one is still open.
        self.assertTrue(needs_leader.ended.wait(max(0.0, killed_at + 5 * ELECTION_MS / 1000 + MARGIN_S
                                                    - time.monotonic())) or needs_leader.ended.is_set(),
                        "a watch that asked for a leader stayed open on a member without one")
        at, code, details = needs_leader.end
        self.note("watch with hasleader ended %.2f s after the kill: %s %s" % (at - killed_at, code, details))
        self.assertEqual((code, details), ("UNAVAILABLE", "etcdserver: no leader"))
        self.assertLess(at - killed_at, 5 * ELECTION_MS / 1000 + MARGIN_S)
        self.assertFalse(plain.ended.is_set(), "a watch without hasleader ended: %s" % (plain.end,))

        # What does not need a quorum still answers, from the survivor's own state.
        elapsed, r, err = timed_call(kv.Range, rpc_pb2.RangeRequest(
            key=PREFIX + b"before/", range_end=PREFIX + b"before0", serializable=True), timeout=5)
        self.assertIsNone(err)
        self.assertEqual([x.value for x in r.kvs], [b"%d" % n for n in range(20)])
        self.assertLess(elapsed, 1.0)
        members = c.cluster_stub(survivor).MemberList(rpc_pb2.MemberListRequest(), timeout=5).members
        self.assertEqual(len(members), 3)

        # Heal: restart both; a leader is elected and writes succeed on every member.
        for i in dead:
            c.restart(i, wait=False)
        c.wait_serving()
        c.wait_leader(timeout=15)
        w = Writer(c, targets=[0, 1, 2], prefix=PREFIX + b"healed/", interval=0.02, deadline=5.0).start()
        time.sleep(1.5)
        w.stop()
        self.assertEqual(w.failures(), [], "writes failed after healing: %s" % w.error_counts())
        acked = w.acked()
        self.assertEqual({a.target for a in w.successes()}, {0, 1, 2})
        self.assertGreater(len(acked), 30)
        c.assert_acked_everywhere(acked, PREFIX + b"healed/")
        views = [c.serializable_range(i, PREFIX)[0] for i in range(3)]
        self.assertEqual(views[0], views[1])
        self.assertEqual(views[0], views[2])
        # lost-1 is in doubt: the survivor led when it came and may have appended it; if it
        # wins the next election, it commits it. lost-2 and lost-3 came when there was no
        # leader to append them, so no member may ever apply them.
        self.note("in-doubt Put lost-1 %s after healing" % ("applied" if PREFIX + b"lost-1" in views[0] else "absent"))
        for k in (b"lost-2", b"lost-3"):
            self.assertNotIn(PREFIX + k, views[0])
        c.assert_same_hashkv(self)


if __name__ == "__main__":
    main()
