#!/usr/bin/python3
"""What a watch stream whose client never reads costs the server, and that the
server gives it back once the stream closes (README: "A client that stops reading
costs at most 4 MiB of send buffer"; src/server/watch_service.h kMaxQueuedBytes).

A child process opens STREAMS Watch streams (one connection each, like separate
clients), each watching the prefix "big/" with prev_kv, reads their `created`
responses and is then stopped (SIGSTOP): nothing reads those connections any
more. Writers put values on "big/" worth many times the bound per stream. The
server's VmRSS is sampled throughout.

Writing itself costs memory (RocksDB memtables, the Raft log until a snapshot),
so each test first runs the same writes on a member with no watcher (the
control) and counts only what the stuck streams add beyond it:

  - per stuck stream, the peak RSS growth beyond the control stays within the
    bound plus SLACK (1 MB values: a revision bigger than what is left of the
    budget must wait in storage, not be queued or copied per watcher);
  - once the child dies (its streams close), RSS comes back to within
    RETURN_PER_STREAM_MIB per stream of the control (32 KiB values: glibc keeps
    freed small chunks in its arenas unless asked to give them back).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_watch_memory.py
"""
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
import watchlib as wl  # noqa: E402

STREAMS = 50
BOUND_MIB = 4.0
SLACK = 1.2
RETURN_PER_STREAM_MIB = 1.0
TOTAL_BOUND_MIB = 512
WRITERS = 4
# --snapshot-count: libraft keeps every entry since the last snapshot in memory.
MEMBER_ARGS = ["--snapshot-count", "10"]


def stuck_client_main(endpoint, n, per_connection=1):
    """The child: n streams, created, then wait to be stopped."""
    import queue
    import grpc
    calls = []
    ch = None
    for i in range(n):
        if i % per_connection == 0:
            ch = grpc.insecure_channel(endpoint, options=[("grpc.use_local_subchannel_pool", 1)])
        q = queue.Queue()

        def it(q=q):
            while True:
                r = q.get()
                if r is None:
                    return
                yield r
        call = wl.open_call(ch, it())
        q.put(wl.create_request(b"big/", range_end=wl.prefix_end(b"big/"), prev_kv=True))
        if not next(call).created:
            sys.exit(2)
        calls.append((ch, q, call))
    print("ready", flush=True)
    time.sleep(3600)


class StuckClient:
    def __init__(self, member, n, per_connection=1):
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--stuck-client", member.endpoint,
                                      str(n), str(per_connection)], stdout=subprocess.PIPE, start_new_session=True)
        line = self.proc.stdout.readline().strip()
        if line != b"ready":
            raise AssertionError("stuck client did not start: %r" % line)
        os.kill(self.proc.pid, signal.SIGSTOP)

    def cleanup(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()


@unittest.skipIf(harness.is_reference_etcd(), "etcd promises no bound on a stuck watch stream")
# A sanitizer's own memory (ASan's quarantine of freed blocks and its red
# zones, TSan's shadow) is counted in RSS too: the bound is the real binary's.
@unittest.skipIf(harness.sanitized(), "RSS bounds hold for the real binary, not a sanitizer build")
class WatchMemoryTest(harness.MemberTestCase):
    def log_text(self, thing):
        if isinstance(thing, StuckClient):
            return "stuck client pid %d" % thing.proc.pid
        return super().log_text(thing)

    def run_load(self, streams, value_bytes, puts, per_connection=1, reader=False):
        """{'base', 'peak', 'after_close'} RSS in MiB of a fresh member under the load."""
        m = self.new_member(MEMBER_ARGS)
        pid = m.proc.pid
        kv = m.kv(wl.ready_channel(m))
        time.sleep(0.5)
        base = harness.vm_rss_mib(pid)
        client = self.track(StuckClient(m, streams, per_connection)) if streams else None
        time.sleep(0.5)
        with_streams = harness.vm_rss_mib(pid)
        value = b"v" * value_bytes
        errors = []

        def write(w):
            k = m.kv(wl.ready_channel(m))
            try:
                for i in range(w, puts, WRITERS):
                    k.Put(wl_put(b"big/%03d" % (i % 100), value), timeout=30)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))
        writers = [threading.Thread(target=write, args=(w,), daemon=True) for w in range(WRITERS)]
        for t in writers:
            t.start()
        peak = 0.0
        while any(t.is_alive() for t in writers):
            peak = max(peak, harness.vm_rss_mib(pid))
            time.sleep(0.05)
        self.assertEqual(errors, [])
        for _ in range(30):   # the hub and the streams settle
            peak = max(peak, harness.vm_rss_mib(pid))
            time.sleep(0.05)
        read_all = None
        if reader:
            # A client that reads still gets every event, from the first
            # revision on, while the stuck streams hold the total.
            w = wl.WatchStream(wl.ready_channel(m), name="reader")
            w.create(b"big/", range_end=wl.prefix_end(b"big/"), start_revision=1, prev_kv=True)
            w.wait_created()
            w.wait_until(lambda s: len(s.events_of(0)) >= puts, timeout=60)
            read_all = len(w.events_of(0))
            peak = max(peak, harness.vm_rss_mib(pid))
            w.close()
        if client is not None:
            client.cleanup()
        # Hundreds of streams close one by one, and the allocator is asked
        # to give memory back at most once a second: up to 10 s.
        time.sleep(2.0)
        after = harness.vm_rss_mib(pid)
        deadline = time.monotonic() + 8
        while after > with_streams + 40 and time.monotonic() < deadline:
            time.sleep(0.5)
            after = min(after, harness.vm_rss_mib(pid))
        kv.Range(wl_range(b"big/"), timeout=10)   # still serving
        m.cleanup()
        return {"base": base, "with_streams": with_streams, "peak": peak, "after_close": after, "read": read_all}

    def measure(self, value_bytes, puts, streams=STREAMS, per_connection=1, reader=False):
        control = self.run_load(0, value_bytes, puts)
        stuck = self.run_load(streams, value_bytes, puts, per_connection, reader)
        self.stuck_run = stuck
        write_cost = control["peak"] - control["base"]
        per_stream = (stuck["peak"] - stuck["base"] - write_cost) / streams
        kept = (stuck["after_close"] - stuck["base"] - (control["after_close"] - control["base"])) / streams
        report = ("%d puts of %d B, %d stuck streams each wanting %.0f MiB: control (no watcher) RSS %.0f -> peak "
                  "%.0f -> %.0f MiB; with the streams %.0f (%.0f once open) -> peak %.0f -> %.0f MiB after they "
                  "closed; per stuck stream %.2f MiB at the peak, %.2f MiB kept after close" % (
                      puts, value_bytes, streams, puts * 2 * value_bytes / 2 ** 20, control["base"],
                      control["peak"], control["after_close"], stuck["base"], stuck["with_streams"], stuck["peak"],
                      stuck["after_close"], per_stream, kept))
        sys.stderr.write("\n  %s\n" % report)
        return per_stream, kept, report

    def test_peak_memory_per_stuck_stream_stays_within_the_4mib_bound_with_1mb_values(self):
        per_stream, kept, report = self.measure(1000 * 1000, 40)
        self.assertLess(per_stream, BOUND_MIB * SLACK, report)
        self.assertLess(kept, RETURN_PER_STREAM_MIB, report)

    def test_memory_of_stuck_streams_is_given_back_after_they_close(self):
        per_stream, kept, report = self.measure(32 * 1024, 600)
        self.assertLess(per_stream, BOUND_MIB * SLACK, report)
        self.assertLess(kept, RETURN_PER_STREAM_MIB, report)

    def test_many_stuck_streams_together_hold_no_more_than_the_total_budget(self):
        # 300 streams (50 a connection) each wanting 12 MiB would hold
        # 1,200 MiB at 4 MiB a stream; all streams together stop taking
        # more than one batch each past 256 MiB (kMaxTotalQueuedBytes), and
        # nothing past 512 MiB but batches of at most 64 KiB
        # (kHardTotalQueuedBytes): under 512 MiB + 64 KiB a stream.
        streams = 300
        per_stream, kept, report = self.measure(16 * 1024, 400, streams=streams, per_connection=50, reader=True)
        self.assertLess(per_stream * streams, TOTAL_BOUND_MIB + streams / 16, report)
        self.assertEqual(self.stuck_run["read"], 400, "a reading client's watch from revision 1 got %s of 400 "
                         "events while the stuck streams held the total" % self.stuck_run["read"])
        self.assertLess(kept, RETURN_PER_STREAM_MIB, report)

    def big_event_while_stuck(self, stick):
        """Seconds until a reader's 100 KB event arrives while 300 streams
        that `stick(member)` opens hold 2 MB events (1 MB puts with prev_kv),
        and the member's log; fails if not within 40 s. Past 512 MiB
        (kHardTotalQueuedBytes) every revision over 64 KiB waits, the
        reader's too, until the stuck streams are canceled (kStuckWrite) or
        their connections closed (kStuckClose). Before, it waited for as
        long as the stuck clients stayed."""
        m = self.new_member(["--snapshot-count", "100"])
        kv = m.kv(wl.ready_channel(m))
        for i in range(20):  # every later event carries a 1 MB prev_kv too
            kv.Put(wl_put(b"big/%03d" % i, b"p" * 1000000), timeout=30)
        stick(m)
        reader = wl.WatchStream(wl.ready_channel(m), name="reader")
        self.addCleanup(reader.close)
        reader.create(b"other")
        reader.wait_created()
        for i in range(40):
            kv.Put(wl_put(b"big/%03d" % (i % 20), b"v" * 1000000), timeout=30)
        time.sleep(1.0)
        t = time.monotonic()
        kv.Put(wl_put(b"other", b"r" * 100000), timeout=30)
        got = reader.wait_until(lambda s: len(s.events_of(0)) >= 1, timeout=40)
        waited = time.monotonic() - t
        sys.stderr.write("\n  the reader's 100 KB event arrived after %.1f s\n" % waited)
        self.assertTrue(got, "the reader's 100 KB event did not arrive in 40 s")
        with open(m.log_path, errors="replace") as log:
            return waited, log.read()

    def test_streams_that_read_nothing_are_canceled_so_big_events_reach_readers(self):
        # Raw HTTP/2 that keeps HTTP/2's default 64 KiB windows: gRPC holds
        # the responses behind flow control, where a cancel frees them.
        def stick(m):
            socks = raw_stuck_watchers(m.client_port, 300, 50, b"big/")
            self.addCleanup(lambda: [s.close() for s in socks])
        _, log = self.big_event_while_stuck(stick)
        self.assertIn("whose client has read nothing for 10 s", log)

    def test_connections_that_read_nothing_at_all_are_closed_so_big_events_reach_readers(self):
        # gRPC's own client, stopped (SIGSTOP): it granted big windows first,
        # so gRPC framed the events for its sockets, where a cancel cannot
        # reach them; 5 s after the cancel their connections are closed.
        _, log = self.big_event_while_stuck(lambda m: self.track(StuckClient(m, 300, 50)))
        self.assertRegex(log, r"and the connections of [1-9]")


def raw_stuck_watchers(port, streams, per_connection, prefix):
    """Raw HTTP/2 connections (default 64 KiB windows, a 4 KiB receive
    buffer) each opening Watch streams on `prefix` with prev_kv, never read."""
    import socket
    import struct

    from h2raw import PREFACE, frame, request_headers
    headers = request_headers(b"/etcdserverpb.Watch/Watch")
    req = wl.create_request(prefix, range_end=wl.prefix_end(prefix), prev_kv=True).SerializeToString()
    msg = b"\x00" + struct.pack(">I", len(req)) + req
    socks = []
    for first in range(0, streams, per_connection):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        out = PREFACE + frame(4, 0, 0) + frame(4, 1, 0)
        for j in range(min(per_connection, streams - first)):
            out += frame(1, 4, 1 + 2 * j, headers) + frame(0, 0, 1 + 2 * j, msg)
        s.sendall(out)
        socks.append(s)
    time.sleep(2.0)
    return socks

def wl_put(key, value):
    from etcd3.etcdrpc import rpc_pb2 as pb
    return pb.PutRequest(key=key, value=value)


def wl_range(key):
    from etcd3.etcdrpc import rpc_pb2 as pb
    return pb.RangeRequest(key=key)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--stuck-client":
        stuck_client_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        harness.main()
