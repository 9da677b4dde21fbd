#!/usr/bin/python3
"""One client that stops reading must not hold back any other watcher, nor make the
server's memory grow with its backlog.

Setup: a Watch stream whose client never reads (its own connection, a small HTTP/2
window, BDP probing off, and nobody consuming its responses once the watches are
created) holds STUCK_WATCHERS watches of every "load/" key with prev_kv, so its
undelivered backlog grows by STUCK_WATCHERS x ~2 KiB per put. Next to it READERS
watchers that do read, each on one key, spread over READER_STREAMS streams, plus
WIDE_READERS streams watching the whole prefix. Writers then put PUTS values of 1 KiB.

Checked:
  - every reading watcher receives exactly its puts, in order, once; the delay from a
    put's acknowledgement to its receipt is reported (p50/p99/max) and bounded only
    generously (no event later than MAX_DELAY_S);
  - the server's VmRSS stays within RSS_BOUND_MIB of what it was before the load,
    while the stuck stream's backlog would be far larger (reported);
  - once the stuck client reads again it still gets every event of its first watch,
    in order, exactly once (a slow watcher catches up, it is not dropped).

    /usr/bin/python3 tests/integration/test_watch_isolation.py
    WATCH_ISO_READERS=200 ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_watch_isolation.py
"""
import os
import queue
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import harness  # noqa: E402
import watchlib as wl  # noqa: E402

READERS = int(os.environ.get("WATCH_ISO_READERS", "1000"))
READER_STREAMS = 20
WIDE_READERS = 4
STUCK_WATCHERS = int(os.environ.get("WATCH_ISO_STUCK_WATCHERS", "64"))
PUTS = int(os.environ.get("WATCH_ISO_PUTS", "4000"))
WRITERS = 4
VALUE_BYTES = 1024
RSS_BOUND_MIB = 300
MAX_DELAY_S = 10.0
DRAIN_TIMEOUT_S = 30.0

# The stuck client's connection: its own (not shared with the readers), a small stream
# window and no BDP probing, so the server soon has nowhere to send its responses.
STUCK_CHANNEL_OPTIONS = harness.CHANNEL_OPTIONS + [
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.http2.lookahead_bytes", 16 * 1024),
    ("grpc.http2.bdp_probe", 0),
]


def value_of(seq):
    return (b"%08d" % seq) + b"v" * (VALUE_BYTES - 8)


def seq_of(value):
    return int(value[:8])


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


class StuckClient:
    """A Watch call whose responses are read only when told to."""

    def __init__(self, member):
        self.channel = wl.ready_channel(member, options=STUCK_CHANNEL_OPTIONS)
        self.requests = queue.Queue()

        def it():
            while True:
                r = self.requests.get()
                if r is None:
                    return
                yield r
        self.call = wl.open_call(self.channel, it())
        self.responses = []

    def read(self, n, timeout):
        """Reads n responses (blocking, on a helper thread so a hang fails the test)."""
        out = []

        def pump():
            try:
                for _ in range(n):
                    out.append(next(self.call))
            except Exception as e:  # noqa: BLE001
                out.append(e)
        t = threading.Thread(target=pump, daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive() or any(isinstance(x, Exception) for x in out):
            raise AssertionError("stuck client: read %d of %d responses (%s)" % (
                len([x for x in out if not isinstance(x, Exception)]), n, [x for x in out if isinstance(x, Exception)]))
        self.responses.extend(out)
        return out


class WatchIsolationTest(harness.MemberTestCase):
    def test_a_client_that_never_reads_delays_no_other_watcher_and_does_not_grow_server_memory(self):
        t_start = time.monotonic()
        m = self.new_member()
        pid = m.proc.pid

        # --- the stuck stream ---
        stuck = StuckClient(m)
        for i in range(STUCK_WATCHERS):
            stuck.requests.put(wl.create_request(b"load/", range_end=wl.prefix_end(b"load/"), prev_kv=True,
                                                 watch_id=i + 1))
        created = stuck.read(STUCK_WATCHERS, 20)
        self.assertTrue(all(r.created and not r.canceled for r in created))

        # --- the readers ---
        arrivals = {}     # (stream no, watch id) -> [(seq, time)]
        lock = threading.Lock()

        def on_response(stream, t, r):
            if r.events:
                with lock:
                    lst = arrivals.setdefault((stream.no, r.watch_id), [])
                    lst.extend((seq_of(e.kv.value), t) for e in r.events)
        channels = [wl.ready_channel(m) for _ in range(4)]
        streams = []
        for s in range(READER_STREAMS + WIDE_READERS):
            ws = wl.WatchStream(channels[s % len(channels)], on_response=on_response, name="reader-%d" % s)
            ws.no = s
            streams.append(ws)
        expected = {}
        for i in range(READERS):
            s = i % READER_STREAMS
            streams[s].create(b"load/%04d" % i, watch_id=i + 1)
            expected[(s, i + 1)] = [q for q in range(PUTS) if q % READERS == i]
        for w in range(WIDE_READERS):
            s = READER_STREAMS + w
            streams[s].create(b"load/", range_end=wl.prefix_end(b"load/"), watch_id=1)
            expected[(s, 1)] = list(range(PUTS))
        for s, ws in enumerate(streams):
            n = len([k for k in expected if k[0] == s])
            got = ws.wait_created(n, 30)
            self.assertFalse([r for r in got if r.canceled], "reader stream %d: canceled creates" % s)
        setup_s = time.monotonic() - t_start

        # --- memory sampler ---
        rss = {"base": harness.vm_rss_mib(pid), "max": 0}
        sampling = threading.Event()

        def sample():
            while not sampling.is_set():
                try:
                    rss["max"] = max(rss["max"], harness.vm_rss_mib(pid))
                except OSError:
                    return
                time.sleep(0.05)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()

        # --- the load ---
        acked = [None] * PUTS          # seq -> monotonic time of the acknowledgement
        revision = [None] * PUTS       # seq -> revision
        errors = []

        def write(w):
            kv = m.kv(wl.ready_channel(m))
            try:
                for q in range(w, PUTS, WRITERS):
                    r = kv.Put(pb.PutRequest(key=b"load/%04d" % (q % READERS), value=value_of(q)), timeout=20)
                    acked[q] = time.monotonic()
                    revision[q] = r.header.revision
            except grpc.RpcError as e:
                errors.append("writer %d: %s %s" % (w, e.code(), e.details()))
        t_load = time.monotonic()
        writers = [threading.Thread(target=write, args=(w,), daemon=True) for w in range(WRITERS)]
        for t in writers:
            t.start()
        for t in writers:
            t.join(120)
        load_s = time.monotonic() - t_load
        self.assertEqual(errors, [])
        # Writers run concurrently: a watcher sees its puts in revision order.
        for k in expected:
            expected[k].sort(key=lambda q: revision[q])
        in_revision_order = sorted(range(PUTS), key=lambda q: revision[q])

        # --- every reader gets everything ---
        total = sum(len(v) for v in expected.values())
        deadline = time.monotonic() + MAX_DELAY_S
        while time.monotonic() < deadline:
            with lock:
                got_n = sum(len(v) for v in arrivals.values())
            if got_n >= total:
                break
            time.sleep(0.05)
        time.sleep(0.3)
        sampling.set()
        sampler.join(2)
        rss_after_load = harness.vm_rss_mib(pid)
        with lock:
            snapshot = {k: list(v) for k, v in arrivals.items()}
        wrong = []
        delays = []
        for k, want in expected.items():
            got = snapshot.get(k, [])
            if [q for q, _ in got] != want:
                wrong.append("stream %d watch %d: got %d of %d events%s" % (
                    k[0], k[1], len(got), len(want),
                    "" if len(got) >= len(want) else ", first missing seq %d" % want[len(got)]))
            delays.extend(max(0.0, t - acked[q]) for q, t in got if acked[q] is not None)
        backlog_mib = STUCK_WATCHERS * PUTS * (2 * VALUE_BYTES + 60) / 2 ** 20
        report = ("%d reading watchers (%d streams) + %d wide + 1 stuck stream with %d watchers; %d puts of "
                  "%d B in %.1f s (%.0f/s); delay ack->receipt p50 %.3f s, p99 %.3f s, max %.3f s over %d "
                  "events; VmRSS %.0f MiB before load, max %.0f MiB during, %.0f MiB after; stuck backlog "
                  "would be ~%.0f MiB; setup %.1f s" % (
                      READERS, READER_STREAMS, WIDE_READERS, STUCK_WATCHERS, PUTS, VALUE_BYTES, load_s,
                      PUTS / load_s, percentile(delays, 50), percentile(delays, 99), max(delays or [0]),
                      len(delays), rss["base"], rss["max"], rss_after_load, backlog_mib,
                      setup_s))
        sys.stderr.write("\n  %s\n" % report)
        self.assertEqual(wrong[:10], [], "readers missed or reordered events (%d watchers): %s" % (
            len(wrong), report))
        self.assertLessEqual(max(delays or [0]), MAX_DELAY_S, report)
        # A sanitizer's own memory (ASan's quarantine of freed blocks, TSan's
        # shadow) is no backlog: the bound holds for the real binary only.
        if not harness.sanitized():
            self.assertLess(rss["max"] - rss["base"], RSS_BOUND_MIB,
                            "server memory grew with the stuck client's backlog: %s" % report)

        # --- the stuck client reads again: its first watch still gets everything ---
        for i in range(1, STUCK_WATCHERS):
            stuck.requests.put(wl.WatchRequest(cancel_request=wl.WatchCancelRequest(watch_id=i + 1)))
        seqs, stuck_bytes, n_resp = [], 0, 0
        t_drain = time.monotonic()
        drained = {"done": False}

        def drain():
            nonlocal stuck_bytes, n_resp
            try:
                for r in stuck.call:
                    n_resp += 1
                    stuck_bytes += r.ByteSize()
                    if r.watch_id == 1:
                        seqs.extend(seq_of(e.kv.value) for e in r.events)
                        if r.canceled or len(seqs) >= PUTS:
                            break
            except grpc.RpcError:
                pass
            drained["done"] = True
        t = threading.Thread(target=drain, daemon=True)
        t.start()
        t.join(DRAIN_TIMEOUT_S)
        time.sleep(0.3)
        drain_s = time.monotonic() - t_drain
        sys.stderr.write("  stuck client drained %d responses, %.1f MiB, in %.1f s; its first watch got %d of %d "
                         "events; total %.1f s\n" % (n_resp, stuck_bytes / 2 ** 20, drain_s, len(seqs), PUTS,
                                                     time.monotonic() - t_start))
        stuck.requests.put(None)
        stuck.call.cancel()
        self.assertEqual(seqs, in_revision_order[:len(seqs)], "the stuck watch's events are out of order, "
                         "duplicated or have a gap once it read again")
        self.assertEqual(len(seqs), PUTS, "the stuck watch got %d of %d events after it read again" % (
            len(seqs), PUTS))


if __name__ == "__main__":
    harness.main()
