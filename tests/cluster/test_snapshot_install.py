#!/usr/bin/python3
"""Snapshot installs that go wrong: the member sending the state is killed as
a follower starts installing it, a follower is killed in the middle of an
install, and every member that could send the state is killed during one. In both, the follower must end with exactly the state of the others
(same keys, same revision, same HashKV), never serve an empty or partial
state, and the cluster must keep serving while a quorum is up.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_snapshot_install.py

etcdq-only: an etcd 3.4 follower gets the state inside the snapshot message,
so these failure points do not exist there (the test skips against etcd);
except the time a follower restarted as its install starts takes to serve a
linearizable read, which etcd sets the bar for.
"""
import os
import re
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

from cluster import CHANNEL_OPTIONS, ClusterTestCase, is_reference_etcd, main, rpc_pb2, rpc_pb2_grpc, sanitized  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500
# Under AddressSanitizer a follower applying these 400 KB Txns (100 Puts of
# 4 KB each) can go more than 500 ms without answering the leader, which
# then steps down ("leader changed" for the load's Puts; seen on a quiet
# 2-core machine, with the code of a666e20 as well). The tests are about
# installs, not elections: sanitizer builds get a longer election timeout.
if sanitized():
    HEARTBEAT_MS, ELECTION_MS = 100, 2000
SNAPSHOT_COUNT = 50
# Entries kept behind a snapshot: as few, so that a follower that lags needs a
# snapshot (etcd's and etcdq's default keeps 5000).
CATCHUP_ARGS = ["--snapshot-catchup-entries", str(SNAPSHOT_COUNT)]
VALUE = os.urandom(4000)


def load(kv, txns, prefix=b"big/"):
    """`txns` Txns of 100 Puts of 4 KB each (enough that a transfer takes a
    moment), then 100 small Puts: more log entries than the leader keeps
    behind a snapshot (--snapshot-count), so the follower needs one."""
    for t in range(txns):
        ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=prefix + b"%07d" % (t * 100 + k), value=VALUE))
               for k in range(100)]
        kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=30)
    for k in range(100):
        kv.Put(rpc_pb2.PutRequest(key=prefix + b"small/%d" % k, value=b"x"), timeout=10)


def log_count(member, text):
    with open(member.log_path, errors="replace") as f:
        return f.read().count(text)


# What a follower logs as it starts installing a snapshot: etcdq's, and etcd
# 3.4's rafthttp as the snapshot message arrives.
INSTALL_STARTS = "receiving database snapshot" if is_reference_etcd() else "installing the snapshot"
# etcdq: the state transfer starts (as the InstallSnapshot arrives, or at the
# install), and the state is in (apply/restore.cc).
FETCH_STARTS = "fetching the state"
RESTORED = "state restored from a snapshot"


def lag_until_install(c, leader, follower, txns, load_fn=None, starts=INSTALL_STARTS):
    """Kills `follower`, loads the leader, restarts the follower and returns as
    soon as it logs `starts` (it starts installing a snapshot). How far the
    leader's log reaches back depends on when it took its snapshots, so this
    tries a few times."""
    for attempt in range(3):
        before = log_count(c.members[follower], starts)
        c.kill9(follower)
        # A leader keeps the log for a follower it sent a snapshot to while
        # that follower was heard from within 5 election timeouts
        # (consensus/node_impl.h kInstalledSilenceElections; etcd keeps it
        # 30 s after a send): the load comes once that has passed, or a
        # follower killed right after an install catches up from it. Only
        # for a follower that was sent one (consensus/snapshots.cc,
        # trailing_for): one that never installed (a fresh cluster's, on the
        # first try) is not waited for (10 s a try under the sanitizers).
        if before or attempt:
            time.sleep(5 * ELECTION_MS / 1000 + 0.2)
        (load_fn or load)(c.kv(leader), txns)
        # libraft drops the leader's log behind a snapshot only once the
        # snapshot is stored: a follower restarted before that was sent the
        # entries, caught up from them and dropped the snapshot sent after
        # them (busy taking its own), so it never needed one (this test's
        # "never needed a snapshot", seen in the leader's log).
        time.sleep(1.5 if sanitized() else 0.5)
        c.restart(follower, wait=False)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if log_count(c.members[follower], starts) > before:
                return
            time.sleep(0.005)
        c.wait_serving()
    raise AssertionError("m%d never needed a snapshot" % follower)


@unittest.skipIf(is_reference_etcd(), "etcdq's snapshot transfer only")
class SnapshotInstallTest(ClusterTestCase):
    def new(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS, snapshot_count=SNAPSHOT_COUNT,
                             extra_args=CATCHUP_ARGS)
        leader = c.leader_index()
        follower = next(i for i in range(3) if i != leader)
        other = 3 - leader - follower
        return c, leader, follower, other

    def assert_converged(self, c):
        """Every member answers with the same keys and revision, and the same HashKV."""
        deadline = time.monotonic() + 30
        while True:
            states = {}
            for i in range(3):
                try:
                    states[i] = c.serializable_range(i)
                except Exception as e:  # noqa: BLE001 - a member still starting
                    states[i] = repr(e)
            if all(states[i] == states[0] for i in range(3)):
                break
            if time.monotonic() > deadline:
                self.fail("members disagree: %s" % {i: (s if isinstance(s, str) else (len(s[0]), s[1]))
                                                    for i, s in states.items()})
            time.sleep(0.5)
        out = c.etcdctl("endpoint", "hashkv", "--cluster")
        hashes = {line.split(", ")[1] for line in out.strip().splitlines()}
        self.assertEqual(len(hashes), 1, out)

    def test_source_killed_as_the_install_starts(self):
        c, leader, follower, other = self.new()
        lag_until_install(c, leader, follower, 40)
        c.kill9(leader)
        # The follower takes the state from the other member (or stops and
        # fetches it at its next start); the two keep a quorum either way.
        time.sleep(3)
        if not c.members[follower].running():
            c.restart(follower, wait=False)
        r = c.kv(other).Put(rpc_pb2.PutRequest(key=b"after", value=b"x"), timeout=15)
        self.assertGreater(r.header.revision, 140)  # at least 40 Txns and 100 Puts before it
        c.restart(leader)
        # A follower that restarted with its own attributes not applied yet
        # publishes them again before it serves; a publish the killed leader
        # took with it is retried after the request timeout (5 s + 2
        # elections), as etcd retries its publish.
        c.wait_serving()
        for i in range(3):
            c.kv(i).Put(rpc_pb2.PutRequest(key=b"late/%d" % i, value=b"x"), timeout=15)
        self.assert_converged(c)

    def test_an_install_is_counted_in_etcds_snapshot_receive_series(self):
        """/metrics of the follower that installed: etcd's receive series
        (From the member that sent the state), the install's duration, and
        no install in progress once it serves."""
        c, leader, follower, other = self.new()
        lag_until_install(c, leader, follower, 40)
        c.wait_serving()
        ids = {"%x" % c.member_id(i) for i in (leader, other)}
        text = urllib.request.urlopen(c.members[follower].client_url + "/metrics", timeout=15).read().decode()
        received = {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^etcd_network_snapshot_receive_success\{From="([0-9a-f]+)"\} (\S+)$', text, re.M)}
        self.assertGreaterEqual(sum(received.values()), 1, text)
        self.assertLessEqual(set(received), ids)
        self.assertRegex(text, r'(?m)^etcd_network_snapshot_receive_total_duration_seconds_count\{From="[0-9a-f]+"\} [1-9]')
        self.assertRegex(text, r'(?m)^etcd_snap_db_save_total_duration_seconds_count [1-9]')
        self.assertRegex(text, r'(?m)^etcd_server_snapshot_apply_in_progress_total 0$')

    def test_follower_killed_in_the_middle_of_an_install(self):
        c, leader, follower, other = self.new()
        lag_until_install(c, leader, follower, 80)
        time.sleep(0.2)
        c.kill9(follower)
        # The state moves on: the checkpoint the install started from is gone.
        for k in range(200):
            c.kv(leader).Put(rpc_pb2.PutRequest(key=b"t/%d" % k, value=b"x"), timeout=10)
        c.restart(follower)
        self.assertTrue(c.members[follower].running())
        self.assert_converged(c)

    def test_every_source_killed_during_an_install_member_waits_and_recovers(self):
        # Once gave up after 3 tries and exited with code 70 (a supervisor that
        # restarts on failure had to bring it back); now it keeps trying with
        # backoff, stays up, and finishes once a source is back.
        c, leader, follower, other = self.new()
        # The sources die as the transfer starts ("fetching the state", logged as
        # the InstallSnapshot arrives), not once libraft stored the snapshot
        # ("installing the snapshot"): the 16 MB state often came whole before
        # that (0.05 s), and the install then needed no source. If it still
        # came whole before the kill, the scenario runs again.
        for attempt in range(3):
            restored_before = log_count(c.members[follower], RESTORED)
            lag_until_install(c, leader, follower, 40, starts=FETCH_STARTS)
            c.kill9(leader, other)
            time.sleep(0.5)
            if log_count(c.members[follower], RESTORED) == restored_before:
                break  # the install waits for a source
            c.restart(leader, wait=False)
            c.restart(other, wait=False)
            c.wait_serving()
            leader = c.leader_index()
            if leader == follower:
                follower = other
            other = 3 - leader - follower
        else:
            self.fail("each install of 3 finished before its sources were killed")
        time.sleep(5.5)
        self.assertTrue(c.members[follower].running(), "the installing member exited with no source")
        self.assertEqual(log_count(c.members[follower], "trying again") > 0, True)
        c.restart(leader, wait=False)
        c.restart(other, wait=False)
        c.wait_serving()
        self.assertTrue(c.members[follower].running())
        for i in range(3):
            c.kv(i).Put(rpc_pb2.PutRequest(key=b"late/%d" % i, value=b"x"), timeout=15)
        self.assert_converged(c)


def many_entries(kv, n):
    """`n` small Puts, 64 in flight: etcd keeps 5000 entries behind a snapshot
    for followers that lag, so it sends one only past that."""
    pending = []
    for k in range(n):
        pending.append(kv.Put.future(rpc_pb2.PutRequest(key=b"e/%d" % k, value=b"x"), timeout=30))
        if len(pending) >= 64:
            pending.pop(0).result()
    for f in pending:
        f.result()
    time.sleep(1)  # etcd compacts its log behind a snapshot asynchronously


def first_reads_s(member, since, timeout=60):
    """Seconds from `since` until `member` first answers a serializable Range
    (it is up and serving from its own state) and then a linearizable one,
    asked on a fresh channel every 20 ms."""
    deadline = since + timeout
    serving = None
    while time.monotonic() < deadline:
        try:
            with grpc.insecure_channel(member.endpoint, options=CHANNEL_OPTIONS) as ch:
                kv = rpc_pb2_grpc.KVStub(ch)
                if serving is None:
                    kv.Range(rpc_pb2.RangeRequest(key=b"foo", serializable=True), timeout=1)
                    serving = time.monotonic() - since
                kv.Range(rpc_pb2.RangeRequest(key=b"foo"), timeout=1)
            return serving, time.monotonic() - since
        except grpc.RpcError:
            time.sleep(0.02)
    raise AssertionError("%r answered no linearizable read within %d s of its restart" % (member, timeout))


class RestartAsTheInstallStartsTest(ClusterTestCase):
    """A follower killed as a snapshot install starts, and restarted at once,
    serves linearizable reads again soon: etcd 3.4 here in 0.05-0.10 s.

    With libraft 0.15 as Debian builds it, etcdq took about --snapshot-count
    heartbeats (2-3.4 s here; up to 2048 heartbeats with a large
    --snapshot-count): the leader's heartbeat to the killed follower fails,
    and sendAppendEntriesCb moves it from the snapshot state to probing with
    next index = the snapshot's index (progressToProbe assumes the snapshot
    arrived). The restarted follower's log is that snapshot alone (libraft
    stored it before the restore the kill interrupted), so it has no entry at
    the probe's previous index and rejects; its last index is above the
    rejected one, so the leader stepped back one index a heartbeat until it
    ran off its own log (the snapshot's trailing entries) and sent the
    snapshot again. etcdq wraps progressToProbe at link time to probe from
    one past the snapshot (src/consensus/libraft_patches.cc, patch 1), and the follower
    accepts the first probe."""
    # Under the sanitizers the timing is not checked (below), and each trial
    # takes 13 s there (a 16 MB lag). Two: the slow case above needs a leader
    # that has sent a snapshot before, so it first comes in the second trial.
    TRIALS = 2 if sanitized() else 3

    def test_follower_restarted_as_its_install_starts_reads_linearizably_soon(self):
        times, gaps = [], []
        c = None
        for _ in range(self.TRIALS):
            # The same cluster throughout (the slow case needs a leader that
            # has sent snapshots before); etcd gets a fresh one each time:
            # once a follower caught up, it keeps enough log behind its
            # snapshots that the next lag needs none.
            if c is None or is_reference_etcd():
                if c is not None:
                    c.cleanup()
                c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS,
                                     snapshot_count=SNAPSHOT_COUNT, extra_args=CATCHUP_ARGS)
            leader = c.leader_index()
            follower = next(i for i in range(3) if i != leader)
            if is_reference_etcd():
                lag_until_install(c, leader, follower, 8000, load_fn=many_entries)
            else:
                lag_until_install(c, leader, follower, 40)
            c.kill9(follower)
            restarted = time.monotonic()
            c.restart(follower, wait=False)
            serving, linearizable = first_reads_s(c.members[follower], restarted)
            times.append(linearizable)
            gaps.append(linearizable - serving)
            c.wait_serving()
        print("\nfirst linearizable read after the restart: %s s; after it first served: %s s" % (
            ", ".join("%.2f" % t for t in times), ", ".join("%.2f" % g for g in gaps)))
        # etcd answers in 0.05-0.10 s here (0.4-0.65 s on the machine the
        # issue was measured on); etcdq in 0.6 s on a quiet machine (it
        # fetches the state its killed install left unfinished before it
        # starts), 1.8 s with builds beside it. What the bound must catch
        # happens once the member serves again: the libraft bug cost
        # --snapshot-count heartbeats (2-3.4 s here) before its log matched
        # the leader's, and libraft's 1 s between dials to a peer up to 1 s
        # more (UvIo now dials every 100 ms, as etcd). So the bound is on
        # the time from the first serializable answer (the member is up, on
        # its restored state) to the first linearizable one, not on start-up.
        # Under the sanitizers the follower must answer (first_reads_s fails
        # after 60 s), and the timing is the plain build's to check.
        if not sanitized():
            self.assertLess(max(gaps), 1.0, (times, gaps))


if __name__ == "__main__":
    main()
