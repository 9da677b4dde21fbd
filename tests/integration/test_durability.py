#!/usr/bin/python3
"""Crash durability: SIGKILL the member under write load, restart it on the same
data dir, and check that nothing acknowledged was lost and the revision history
has no gap and no reuse.

Rounds and the random seed can be set from the environment; a failure prints
the seed so the run can be repeated:

    /usr/bin/python3 tests/integration/test_durability.py
    DURABILITY_ROUNDS=50 DURABILITY_SEED=1234 ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_durability.py

Each put writes a key no other put writes, so on a store that only ever saw
these puts the set of key mod_revisions is exactly {2, ..., current revision}.
"""
import collections
import os
import random
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import crash_workload  # noqa: E402
import harness  # noqa: E402

ROUNDS = int(os.environ.get("DURABILITY_ROUNDS", "20"))
COMPACTION_ROUNDS = int(os.environ.get("DURABILITY_COMPACTION_ROUNDS", "5"))
SIGTERM_ROUNDS = int(os.environ.get("DURABILITY_SIGTERM_ROUNDS", "3"))
MIXED_ROUNDS = int(os.environ.get("DURABILITY_MIXED_ROUNDS", "5"))
# Another build's binary (e.g. main's) that every other restart of the mixed-writes test
# starts on the same data dir: each reads what the other wrote, after a SIGKILL.
OTHER_BIN = os.environ.get("DURABILITY_OTHER_BIN")
SEED = int(os.environ.get("DURABILITY_SEED", str(int(time.time() * 1000) % 1000000)))
WRITERS = 4
PUT_TIMEOUT_S = 5.0


class Writer(threading.Thread):
    """Streams puts of fresh keys until stopped or until a put fails.

    acked: [(key, value, revision)] for every put the server acknowledged.
    in_doubt: the (key, value) whose put failed (it may or may not have been applied).
    """

    def __init__(self, member, prefix, value_pad, start_barrier, stop_event):
        super().__init__(daemon=True)
        self.channel = member.channel()
        self.kv = member.kv(self.channel)
        self.prefix = prefix
        self.value_pad = value_pad
        self.start_barrier = start_barrier
        self.stop_event = stop_event
        self.acked = []
        self.in_doubt = None
        self.error = None
        # Connect before the stream starts, so the kill lands while puts are flowing.
        self.kv.Range(pb.RangeRequest(key=b"warm-up"), timeout=10)

    def run(self):
        self.start_barrier.wait()
        i = 0
        while not self.stop_event.is_set():
            key = b"%s%06d" % (self.prefix, i)
            value = key + b"=" + self.value_pad
            try:
                resp = self.kv.Put(pb.PutRequest(key=key, value=value), timeout=PUT_TIMEOUT_S)
            except grpc.RpcError as e:
                self.in_doubt = (key, value)
                self.error = "%s: %s" % (e.code(), e.details())
                return
            self.acked.append((key, value, resp.header.revision))
            i += 1


class DurabilityTest(harness.MemberTestCase):

    def setUp(self):
        self.rng = random.Random("%s/%s" % (SEED, self._testMethodName))
        sys.stderr.write("\n  [%s: seed %d] " % (self._testMethodName, SEED))

    def fail_with_seed(self, msg):
        self.fail("%s (DURABILITY_SEED=%d)" % (msg, SEED))

    # ---- helpers --------------------------------------------------------------------------

    def read_all(self, member, **kw):
        kv = member.kv()
        return kv.Range(harness.all_keys_request(**kw), timeout=30)

    def stream_and_stop(self, member, round_no, stop):
        """Runs WRITERS threads streaming puts and calls stop(member) 0.2-1.0 s in.
        Returns (acked [(key, value, rev)], in_doubt {key: value}, seconds streamed)."""
        start_barrier = threading.Barrier(WRITERS + 1)
        stop_event = threading.Event()
        pad = bytes(self.rng.randrange(97, 123) for _ in range(self.rng.randrange(0, 200)))
        writers = [Writer(member, b"r%02d/w%d/" % (round_no, w), pad, start_barrier, stop_event)
                   for w in range(WRITERS)]
        for w in writers:
            w.start()
        delay = self.rng.uniform(0.2, 1.0)
        start_barrier.wait()
        t0 = time.monotonic()
        time.sleep(delay)
        stop(member)
        stop_event.set()
        for w in writers:
            w.join(PUT_TIMEOUT_S + 5)
            self.assertFalse(w.is_alive(), "a writer hung after the member died")
            w.channel.close()
        streamed = time.monotonic() - t0
        acked = [a for w in writers for a in w.acked]
        in_doubt = {w.in_doubt[0]: w.in_doubt[1] for w in writers if w.in_doubt}
        for w in writers:
            revs = [r for _, _, r in w.acked]
            self.assertEqual(revs, sorted(set(revs)),
                             "one client's successive puts got non-increasing revisions")
        return acked, in_doubt, streamed

    def check_store(self, member, acked, attempted, context):
        """Every acked put is present with its value and revision; the keys' mod_revisions
        are exactly 2..current; every key present was attempted with that value."""
        resp = self.read_all(member)
        current = resp.header.revision
        present = {kv.key: kv for kv in resp.kvs}
        lost = [(k, r) for k, (v, r) in acked.items() if k not in present]
        if lost:
            self.fail_with_seed("%s: %d acknowledged puts lost after restart, e.g. %s"
                                % (context, len(lost), sorted(lost, key=lambda x: x[1])[:5]))
        for k, (v, r) in acked.items():
            kv = present[k]
            if (kv.value, kv.mod_revision, kv.create_revision, kv.version) != (v, r, r, 1):
                self.fail_with_seed("%s: acknowledged put of %r at revision %d reads back as "
                                    "value %r mod %d create %d version %d" % (
                                        context, k, r, kv.value[:40], kv.mod_revision,
                                        kv.create_revision, kv.version))
        for k, kv in present.items():
            if attempted.get(k) != kv.value:
                self.fail_with_seed("%s: key %r (value %r) was never written by this test"
                                    % (context, k, kv.value[:40]))
        mods = sorted(kv.mod_revision for kv in resp.kvs)
        if mods != list(range(2, current + 1)):
            dup = sorted(m for m, n in collections.Counter(mods).items() if n > 1)[:5]
            missing = sorted(set(range(2, current + 1)) - set(mods))[:5]
            self.fail_with_seed("%s: key mod_revisions are not exactly 2..%d: %d keys, reused %s, "
                                "missing %s, max %s" % (context, current, len(mods), dup, missing,
                                                        mods[-1] if mods else None))
        return current

    def check_next_put(self, member, current, round_no, acked, attempted):
        key = b"r%02d/after-restart" % round_no
        resp = member.kv().Put(pb.PutRequest(key=key, value=b"next"), timeout=10)
        if resp.header.revision != current + 1:
            self.fail_with_seed("round %d: first put after restart got revision %d, expected %d"
                                % (round_no, resp.header.revision, current + 1))
        acked[key] = (b"next", current + 1)
        attempted[key] = b"next"

    def crash_rounds(self, rounds, stop, label):
        member = self.new_member()
        acked, attempted = {}, {}                       # key -> (value, revision) / key -> value
        total_acked, total_time = 0, 0.0
        for round_no in range(1, rounds + 1):
            round_acked, in_doubt, streamed = self.stream_and_stop(member, round_no, stop)
            for k, v, r in round_acked:
                acked[k] = (v, r)
                attempted[k] = v
            attempted.update(in_doubt)
            total_acked += len(round_acked)
            total_time += streamed
            if not round_acked:
                self.fail_with_seed("round %d: no put was acknowledged in %.2f s" % (round_no, streamed))
            member.restart()
            context = "round %d (%s after %.2f s, %d puts acked)" % (round_no, label, streamed,
                                                                     len(round_acked))
            current = self.check_store(member, acked, attempted, context)
            self.check_next_put(member, current, round_no, acked, attempted)
        sys.stderr.write("%d rounds, %d acked puts, %.0f puts/s while streaming ... " % (
            rounds, total_acked, total_acked / max(total_time, 1e-9)))
        return member

    # ---- tests ----------------------------------------------------------------------------

    def test_acknowledged_puts_survive_sigkill_with_contiguous_revisions(self):
        self.crash_rounds(ROUNDS, lambda m: m.kill9(), "SIGKILL")

    def test_acknowledged_mixed_writes_survive_sigkill(self):
        """Puts, deletes, txns, leases, queue produces and acks and compactions from three
        clients (tests/integration/crash_workload.py), SIGKILL at a random moment (snapshots
        every 20 entries, libraft keeping 20 behind, so some land in one), restart: every acknowledged write is there at
        its revision, the history from the compaction on has no gap."""
        member = self.new_member(extra_args=["--snapshot-count", "20"])
        binaries = [member.binary] + ([OTHER_BIN] if OTHER_BIN else [])
        ledger = crash_workload.Ledger(self.rng)
        total = 0
        for round_no in range(1, MIXED_ROUNDS + 1):
            writes, streamed = ledger.run_round([member.endpoint], member.kill9)
            total += writes
            member.binary = binaries[round_no % len(binaries)]
            member.restart()
            context = "round %d (SIGKILL after %.2f s, %d writes acked; restarted with %s)" % (
                round_no, streamed, writes, member.binary)
            try:
                current = ledger.check(member.kv(), member.lease_stub(), context)
                ledger.check_history(member.kv(), member.channel(), current, context)
            except AssertionError as e:
                self.fail_with_seed(str(e))
        sys.stderr.write("%d rounds, %d acknowledged writes, compacted to %d ... " % (
            MIXED_ROUNDS, total, ledger.compacted()))

    def test_acknowledged_puts_survive_sigterm_under_write_load(self):
        def sigterm(member):
            member.stop()
            self.assertIsNotNone(member.proc.returncode)
            self.assertLess(member.forced_kills, 1, "member ignored SIGTERM for 10 s under load")
        self.crash_rounds(SIGTERM_ROUNDS, sigterm, "SIGTERM")

    @unittest.skipIf(harness.is_reference_etcd(), "libraft's log segments are etcdq's (etcd has its WAL)")
    def test_log_segments_are_written_synced_and_buffered(self):
        # consensus/libraft_patches.cc (patch 3): libraft appends to its open segment with
        # buffered O_DSYNC writes (each synced before it is reported), not
        # O_DIRECT kernel AIO, whose sync the kernel defers to a per-CPU
        # worker that a busy host leaves waiting. Read from the running
        # member's own descriptors (/proc/<pid>/fdinfo).
        m = self.new_member()
        kv = m.kv()
        for i in range(20):
            kv.Put(pb.PutRequest(key=b"seg/%d" % i, value=b"v" * 300), timeout=10)
        fd_dir = "/proc/%d/fd" % m.proc.pid
        segments = {}
        for fd in os.listdir(fd_dir):
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if os.path.basename(target).startswith("open-"):
                with open("/proc/%d/fdinfo/%s" % (m.proc.pid, fd)) as f:
                    flags = int(next(l for l in f if l.startswith("flags:")).split()[1], 8)
                segments[target] = flags
        written = {t: f for t, f in segments.items() if f & os.O_ACCMODE != os.O_RDONLY}
        self.assertTrue(written, "no open segment held for writing: %s" % segments)
        for target, flags in written.items():
            self.assertTrue(flags & os.O_DSYNC, "%s written without O_DSYNC (flags %o)" % (target, flags))
            self.assertFalse(flags & os.O_DIRECT, "%s written with O_DIRECT (flags %o)" % (target, flags))
        self.assertEqual(len(kv.Range(pb.RangeRequest(key=b"seg/", range_end=b"seg0"), timeout=10).kvs), 20)

    def test_compaction_interrupted_by_sigkill_loses_nothing(self):
        """Overwrite a pool of keys in txns, compact at a random revision, SIGKILL while the
        compaction runs, restart: latest state and state at the compaction revision are
        exact, an acknowledged compaction stays, and revisions continue at current+1."""
        member = self.new_member()
        kv = member.kv()
        pool = [b"c/%03d" % i for i in range(300)]
        history = []                                     # [(revision, {key: value})] in order
        compacted = 1                                    # the store's compaction watermark, at most
        outcomes = {"acknowledged": 0, "in doubt, kept": 0, "in doubt, lost": 0}
        for round_no in range(1, COMPACTION_ROUNDS + 1):
            # Write: txns of 64 puts, so compaction has many revision entries to drop.
            start = time.monotonic()
            while time.monotonic() - start < 0.6:
                keys = self.rng.sample(pool, 64)
                vals = {k: b"%s@%d.%d" % (k, round_no, len(history)) for k in keys}
                resp = kv.Txn(pb.TxnRequest(success=[pb.RequestOp(request_put=pb.PutRequest(key=k, value=v))
                                                     for k, v in vals.items()]), timeout=10)
                history.append((resp.header.revision, vals))
            revs = [r for r, _ in history]
            self.assertEqual(revs, sorted(set(revs)))
            last = revs[-1]
            target = self.rng.randint(max(compacted + 1, last - len(history) // 2), last)
            expected_at = {rev: self.state_at(history, rev) for rev in (target, last)}

            done = {}

            def compact():
                try:
                    kv.Compact(pb.CompactionRequest(revision=target, physical=True), timeout=30)
                    done["ok"] = time.monotonic()
                except grpc.RpcError as e:
                    done["error"] = "%s: %s" % (e.code(), e.details())

            t = threading.Thread(target=compact, daemon=True)
            t0 = time.monotonic()
            t.start()
            time.sleep(self.rng.uniform(0.0, 0.15))
            member.kill9()
            killed_at = time.monotonic() - t0
            t.join(10)
            acked_compaction = "ok" in done
            member.restart()
            context = "round %d (compaction at %d of %d, killed %.3f s in, compaction %s)" % (
                round_no, target, last, killed_at, "acknowledged" if acked_compaction else "not acknowledged")

            resp = self.read_all(member)
            self.assertEqual(resp.header.revision, last, context + ": revision changed across the crash")
            self.assertEqual(self.kv_state(resp), expected_at[last], context + ": latest state differs")
            at_target = member.kv().Range(harness.all_keys_request(revision=target), timeout=30)
            self.assertEqual(self.kv_state(at_target), expected_at[target],
                             context + ": state at the compaction revision differs")
            below = target - 1
            if below > compacted:
                try:
                    older = member.kv().Range(harness.all_keys_request(revision=below), timeout=30)
                    self.assertFalse(acked_compaction, context + ": an acknowledged compaction was undone")
                    outcomes["in doubt, lost"] += 1
                    self.assertEqual(self.kv_state(older), self.state_at(history, below),
                                     context + ": state below an unfinished compaction differs")
                except grpc.RpcError as e:
                    self.assertEqual((e.code(), e.details()), (grpc.StatusCode.OUT_OF_RANGE,
                                     "etcdserver: mvcc: required revision has been compacted"), context)
                    outcomes["acknowledged" if acked_compaction else "in doubt, kept"] += 1
            compacted = target
            # Finish (or repeat) the compaction; both outcomes are etcd's.
            try:
                member.kv().Compact(pb.CompactionRequest(revision=target, physical=True), timeout=30)
            except grpc.RpcError as e:
                self.assertEqual((e.code(), e.details()), (grpc.StatusCode.OUT_OF_RANGE,
                                 "etcdserver: mvcc: required revision has been compacted"), context)
            resp = member.kv().Put(pb.PutRequest(key=b"c/after-%d" % round_no, value=b"x"), timeout=10)
            self.assertEqual(resp.header.revision, last + 1, context + ": next put's revision")
            history.append((last + 1, {b"c/after-%d" % round_no: b"x"}))
        sys.stderr.write("%d rounds, %d txns, compactions: %s ... " % (
            COMPACTION_ROUNDS, len(history), ", ".join("%s %d" % kv for kv in outcomes.items())))

    @staticmethod
    def state_at(history, rev):
        """{key: (value, create_revision, mod_revision, version)} after every txn at or below rev."""
        state = {}
        for r, vals in history:
            if r > rev:
                break
            for k, v in vals.items():
                _, create, _, version = state.get(k, (None, r, None, 0))
                state[k] = (v, create, r, version + 1)
        return state

    @staticmethod
    def kv_state(resp):
        return {kv.key: (kv.value, kv.create_revision, kv.mod_revision, kv.version) for kv in resp.kvs}


if __name__ == "__main__":
    harness.main()
