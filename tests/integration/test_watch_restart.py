#!/usr/bin/python3
"""Watches across a crash and a shutdown.

Resumable: a client keeps the revision of the last event it saw; the member is
SIGKILLed under write load and restarted on the same data dir; the client watches
again from last-seen + 1 and must get every revision it missed, exactly once, with the
same content a watch from revision 1 shows afterwards (so nothing a watcher saw before
the crash was lost or rewritten). Each put writes one key under "r/", so the revisions
2..final are each exactly one event on that prefix.

Shutdown: SIGTERM must end an open watch promptly, never leave it silent. How it
ends (UNAVAILABLE and no canceled response, as etcd 3.4, so clients resume) is
test_watch_sigterm.py's business.

    /usr/bin/python3 tests/integration/test_watch_restart.py
    WATCH_RESTART_SEED=7 ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_watch_restart.py
"""
import os
import random
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import harness  # noqa: E402
import watchlib as wl  # noqa: E402

SEED = int(os.environ.get("WATCH_RESTART_SEED", str(int(time.time() * 1000) % 1000000)))
KILLS = int(os.environ.get("WATCH_RESTART_KILLS", "3"))
KEYS = 16
PUT_TIMEOUT_S = 2.0
# etcd 3.6 ends open watch streams when its graceful stop times out: after its
# request timeout, 5 s + 2 x the election timeout (embed/serve.go stopServers),
# 7 s with the defaults; etcd 3.4 cut them at once. etcdq ends them within 6 s.
STREAM_END_S = 10.0
EXIT_S = 10.0


class Writer(threading.Thread):
    """Puts r/<i % KEYS> = p<i> until stopped; a failed put is in doubt, then the next i."""

    def __init__(self, member):
        super().__init__(daemon=True, name="writer")
        self.kv = member.kv(wl.ready_channel(member))
        self.stop = threading.Event()
        self.acked = {}         # value -> revision
        self.in_doubt = set()
        self.lock = threading.Lock()
        self.i = 0

    def run(self):
        while not self.stop.is_set():
            key = b"r/%02d" % (self.i % KEYS)
            value = b"p%06d" % self.i
            self.i += 1
            try:
                rev = self.kv.Put(pb.PutRequest(key=key, value=value), timeout=PUT_TIMEOUT_S).header.revision
                with self.lock:
                    self.acked[value] = rev
                time.sleep(0.002)
            except grpc.RpcError:
                with self.lock:
                    self.in_doubt.add(value)
                time.sleep(0.05)


class Follower:
    """A client that remembers the last revision it saw and resumes after it."""

    def __init__(self):
        self.events = []        # (session, key, value, mod_revision, create_revision, version)
        self.last_seen = 1      # a fresh store is at revision 1
        self.session = 0
        self.stream = None
        self.session_starts = []   # (session, start_revision)
        self.lock = threading.Lock()

    def _on_response(self, _stream, _t, r):
        if not r.events:
            return
        with self.lock:
            for e in r.events:
                kv = e.kv
                self.events.append((self.session, kv.key, kv.value, kv.mod_revision, kv.create_revision,
                                    kv.version))
            self.last_seen = max(self.last_seen, r.events[-1].kv.mod_revision)

    def resume(self, member):
        self.session += 1
        start = self.last_seen + 1
        self.session_starts.append((self.session, start))
        self.stream = wl.WatchStream(wl.ready_channel(member), on_response=self._on_response,
                                     name="follower-%d" % self.session)
        self.stream.create(b"r/", range_end=wl.prefix_end(b"r/"), start_revision=start)
        created = self.stream.wait_created(1, 10.0)[0]
        if created.canceled:
            raise AssertionError("resume at %d refused: %s" % (start, created))

    def stop(self):
        if self.stream is not None:
            self.stream.close()
            self.stream.wait_done(5.0)


class WatchResumeAfterCrashTest(harness.MemberTestCase):
    def test_resuming_at_last_seen_plus_one_after_sigkill_delivers_every_missed_revision_exactly_once(self):
        rng = random.Random(SEED)
        sys.stderr.write("\n  seed %d (WATCH_RESTART_SEED), %d SIGKILLs\n" % (SEED, KILLS))
        m = self.new_member()
        writer = Writer(m)
        follower = Follower()
        follower.resume(m)
        writer.start()
        notes = []
        for k in range(KILLS):
            time.sleep(rng.uniform(0.3, 0.8))
            lagging = k % 3 == 1
            if lagging:
                # This round the client stops reading before the crash and misses those too.
                follower.stop()
                time.sleep(rng.uniform(0.1, 0.3))
            seen = follower.last_seen
            m.kill9()
            if not lagging:
                ended = follower.stream.wait_done(STREAM_END_S)
                self.assertTrue(ended, "seed %d: the watch stream did not end within %.0f s of SIGKILL" % (
                    SEED, STREAM_END_S))
                self.assertNotEqual(follower.stream.status[0], grpc.StatusCode.OK)
            m.restart()
            time.sleep(rng.uniform(0.2, 0.6))       # writes the client has not seen yet
            notes.append("kill %d: last seen %d%s" % (k + 1, seen, " (client had stopped reading)" if lagging
                                                      else ""))
            follower.resume(m)
        time.sleep(0.3)
        writer.stop.set()
        writer.join(10)
        kv = m.kv(wl.ready_channel(m))
        final = kv.Range(pb.RangeRequest(key=b"r/"), timeout=10).header.revision
        deadline = time.monotonic() + 15
        while follower.last_seen < final and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        follower.stop()
        ctx = "seed %d; %s; final revision %d" % (SEED, "; ".join(notes), final)

        revs = [e[3] for e in follower.events]
        dups = sorted({r for r in revs if revs.count(r) > 1})
        self.assertEqual(dups, [], "%s: revisions delivered more than once: %s" % (ctx, dups[:20]))
        self.assertEqual(revs, sorted(revs), "%s: revisions out of order" % ctx)
        missing = sorted(set(range(2, final + 1)) - set(revs))
        self.assertEqual(missing, [], "%s: revisions never delivered: %s" % (ctx, missing[:20]))

        # Each resumed session starts exactly where the last one stopped.
        for session, start in follower.session_starts[1:]:
            first = next((e for e in follower.events if e[0] == session), None)
            if first is not None:
                self.assertEqual(first[3], start, "%s: session %d resumed at %d but its first event is %d" % (
                    ctx, session, start, first[3]))

        # Acknowledged puts are there with their revisions; anything else is a put in doubt.
        by_rev = {e[3]: e for e in follower.events}
        for value, rev in writer.acked.items():
            self.assertIn(rev, by_rev, "%s: acknowledged put %s at %d missing" % (ctx, value, rev))
            self.assertEqual(by_rev[rev][2], value, "%s: revision %d holds %r, acknowledged as %r" % (
                ctx, rev, by_rev[rev][2], value))
        unknown = [e for e in follower.events if e[2] not in writer.acked and e[2] not in writer.in_doubt]
        self.assertEqual(unknown, [], "%s: events no writer attempted" % ctx)

        # Versions and create revisions follow from the puts (no deletes here).
        count, created = {}, {}
        for e in follower.events:
            count[e[1]] = count.get(e[1], 0) + 1
            created.setdefault(e[1], e[3])
            self.assertEqual((e[5], e[4]), (count[e[1]], created[e[1]]),
                             "%s: %r at %d has version/create %s" % (ctx, e[1], e[3], (e[5], e[4])))

        # What the client saw, crash after crash, is what the store replays now.
        replay = wl.WatchStream(wl.ready_channel(m), name="replay")
        replay.create(b"r/", range_end=wl.prefix_end(b"r/"), start_revision=1)
        replay.wait_until(lambda s: len([1 for _, r in s.log for _ in r.events]) >= final - 1, 15)
        replayed = [(e.kv.key, e.kv.value, e.kv.mod_revision, e.kv.create_revision, e.kv.version)
                    for r in replay.responses() for e in r.events]
        self.assertEqual(replayed, [e[1:] for e in follower.events],
                         "%s: a watch from revision 1 differs from what the client saw" % ctx)
        doubt_applied = len([e for e in follower.events if e[2] in writer.in_doubt])
        sys.stderr.write("  %s; %d puts acknowledged, %d in doubt (%d of them applied)\n" % (
            ctx, len(writer.acked), len(writer.in_doubt), doubt_applied))


class WatchShutdownTest(harness.MemberTestCase):
    def open_watches(self, m):
        ws = wl.WatchStream(wl.ready_channel(m), name="shutdown")
        ws.create(b"s/k")
        ws.create(b"s/", range_end=wl.prefix_end(b"s/"), prev_kv=True)
        created = ws.wait_created(2, 10)
        kv = m.kv(wl.ready_channel(m))
        kv.Put(pb.PutRequest(key=b"s/k", value=b"1"), timeout=10)
        ws.wait_until(lambda s: len([1 for _, r in s.log if r.events]) >= 2, 10)
        return ws, [c.watch_id for c in created]

    def sigterm_and_wait(self, m, ws):
        t0 = time.monotonic()
        m.proc.send_signal(signal.SIGTERM)
        ended = ws.wait_done(STREAM_END_S)
        took = (ws.done_at or time.monotonic()) - t0
        self.assertTrue(ended, "the watch stream was still open %.0f s after SIGTERM (silence)" % STREAM_END_S)
        try:
            m.proc.wait(EXIT_S)
        except Exception:
            self.fail("the member did not exit within %.0f s of SIGTERM" % EXIT_S)
        return took

    def test_sigterm_ends_an_open_watch_promptly_with_an_error(self):
        m = self.new_member()
        ws, _ = self.open_watches(m)
        n = len(ws.log)
        took = self.sigterm_and_wait(m, ws)
        after = ws.responses()[n:]
        code = ws.status[0]
        sys.stderr.write("\n  stream ended %.3f s after SIGTERM with %s %r; %d response(s) before: %s\n" % (
            took, code, ws.status[1], len(after),
            [(r.watch_id, r.canceled, r.cancel_reason) for r in after]))
        self.assertNotEqual(code, grpc.StatusCode.OK, "the stream ended as if the server had nothing more to say")

    def test_sigterm_under_write_load_ends_the_watch_promptly_and_the_watch_resumes_after_restart(self):
        m = self.new_member()
        writer = Writer(m)
        seen = []
        lock = threading.Lock()

        def on_response(_s, _t, r):
            with lock:
                seen.extend(e.kv.mod_revision for e in r.events)
        ws = wl.WatchStream(wl.ready_channel(m), on_response=on_response, name="under-load")
        ws.create(b"r/", range_end=wl.prefix_end(b"r/"))
        ws.wait_created(1, 10)
        writer.start()
        time.sleep(0.8)
        took = self.sigterm_and_wait(m, ws)
        writer.stop.set()
        writer.join(10)
        self.assertEqual(m.forced_kills, 0)
        sys.stderr.write("\n  stream ended %.3f s after SIGTERM under load (%s); %d events seen\n" % (
            took, ws.status[0], len(seen)))
        m.start()
        with lock:
            last = max(seen) if seen else 1
        resumed = wl.WatchStream(wl.ready_channel(m), name="resumed")
        resumed.create(b"r/", range_end=wl.prefix_end(b"r/"), start_revision=last + 1)
        final = m.kv(wl.ready_channel(m)).Range(pb.RangeRequest(key=b"r/"), timeout=10).header.revision
        resumed.wait_until(lambda s: sum(len(r.events) for _, r in s.log) >= final - last, 10)
        time.sleep(0.2)
        after = [e.kv.mod_revision for r in resumed.responses() for e in r.events]
        self.assertEqual(seen + after, list(range(2, final + 1)),
                         "before SIGTERM plus after restart must be every revision once")
        for value, rev in writer.acked.items():
            self.assertLessEqual(rev, final, "acknowledged put %s at %d lost by SIGTERM" % (value, rev))


if __name__ == "__main__":
    harness.main()
