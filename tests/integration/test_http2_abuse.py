#!/usr/bin/python3
"""HTTP/2 connections that abuse the protocol: the member keeps its memory
bound and goes on serving (net/h2_guard.h, net/grpc_fd_guard.h,
server/server.h).

1. Rapid reset (CVE-2023-44487) on the client URL: raw connections send
   HEADERS and RST_STREAM for stream after stream. gRPC 1.51 creates and
   cancels a call for each, about ten times slower than they arrive: 100k of
   them on one connection grew the member by 1.4 GB before the guard (etcd
   3.4: 9 MB). Now a plaintext connection that resets more unanswered
   streams than its budget is closed, and 8 flooders that reconnect at
   once share one budget for the whole process.
2. Connections that open streams and close (no reset; gRPC cancels all of
   a closed connection's calls at once), over and over: the streams left
   unanswered are charged to the same budget.
3. Rapid reset on the peer URL (plaintext).
4. The same over TLS: there the pump paces the flooder instead (it reads
   the connection only as fast as its resets are due).
5. Streams opened and left waiting by a client that never acknowledges the
   server's SETTINGS (gRPC enforces its stream limit only once they are
   acknowledged): 100k grew the member by 2 GB; now the connection is
   closed after 1,000.

Each checks the member's VmRSS against its start, Puts from a well-behaved
client during and after the flood, and the warning the member logs.
etcdq-only: the bounds and the warnings are etcdq's guard's. (etcd 3.6 logs
no such warning, and streams sent whole and never answered, or opened
without acknowledging SETTINGS, grew it by 730-930 MiB in 8 s here.)

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_http2_abuse.py
"""
import os
import socket
import ssl
import struct
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import harness  # noqa: E402
from h2raw import PREFACE, frame, request_headers  # noqa: E402
import tlslib  # noqa: E402
from test_http2_stream_cap import RawConnection  # noqa: E402

STREAMS = 100000
# How long each flooding connection tries to send. 8 s: without the guard a
# member grew 1,400-4,900 MiB in 15 s of these floods, steadily, so about
# half of that in 8 s, still well past GROWTH_MIB; with it, the growth stops
# within the first seconds. (15 s before; this test runs alone in the suite.)
SEND_S = 8.0
GROWTH_MIB = 300.0   # measured: 20-110 MiB with the guard (200 for connections that open streams and close); 1,400-4,900 without it (15 s floods)
# AddressSanitizer keeps 256 MiB of freed memory in quarantine and pads
# every allocation: measured 600-820 MiB of growth there for the same
# floods (without the guard, a normal build reached 1,400-4,900 MiB).
if harness.sanitized():
    GROWTH_MIB = 1100.0
    # 6 s a flood still opens tens of thousands of streams, through every
    # path the guard has, and keeps the stage inside CI's hour.
    SEND_S = 6.0
# Connections that open streams and close are cut for the debt they leave
# or, where gRPC answers more slowly (AddressSanitizer), first for the
# streams waiting on all connections together.
CHURN_LOGS = ("HTTP/2 rapid reset", "too many streams wait for an answer")


class Flood(threading.Thread):
    """Raw HTTP/2 connections sending `per_stream(id)` for stream after stream until
    STREAMS are sent, SEND_S passed, or the server closed it (then, with `reconnect`,
    again on a new connection until SEND_S passed); reads (and drops) what the server
    sends. `tls`: an ssl.SSLContext to connect with."""

    def __init__(self, port, per_stream, ack_settings=True, reconnect=False, tls=None, per_connection=None):
        super().__init__(daemon=True)
        self.port, self.per_stream, self.ack_settings = port, per_stream, ack_settings
        self.reconnect, self.tls, self.per_connection = reconnect, tls, per_connection
        self.sent = 0
        self.connections = 0
        self.closed_by_server = False

    def run(self):
        deadline = time.monotonic() + SEND_S
        while True:
            self.one_connection(deadline)
            if not self.reconnect or time.monotonic() >= deadline:
                return

    def one_connection(self, deadline):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            if self.tls:
                s = self.tls.wrap_socket(s, server_hostname="127.0.0.1")
        except OSError:
            time.sleep(0.05)
            return
        self.connections += 1
        s.settimeout(1.0)
        if not self.tls:  # (an SSL socket is not to be read and written by two threads)
            threading.Thread(target=self._drain, args=(s,), daemon=True).start()
        hello = PREFACE + frame(4, 0, 0)
        if self.ack_settings:
            hello += frame(4, 1, 0)
        try:
            s.sendall(hello)
            buf = b""
            sid = 1
            here = 0
            while self.sent < STREAMS and time.monotonic() < deadline:
                if self.per_connection and here >= self.per_connection:
                    break
                buf += self.per_stream(sid)
                sid += 2
                self.sent += 1
                here += 1
                if len(buf) > 16384:
                    self._send(s, buf, deadline)
                    buf = b""
            self._send(s, buf, deadline)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.closed_by_server = True
        except OSError:
            pass
        finally:
            if self.per_connection:  # abandon the streams at once: a TCP reset
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()

    @staticmethod
    def _send(s, data, deadline):
        view = memoryview(data)
        while view and time.monotonic() < deadline:
            try:
                n = s.send(view)
                if n == 0:
                    raise BrokenPipeError()
                view = view[n:]
            except socket.timeout:
                continue

    @staticmethod
    def _drain(s):
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass


def reset_stream(path):
    return lambda sid: frame(1, 4, sid, request_headers(path)) + frame(3, 0, sid, struct.pack(">I", 8))


def open_stream(path):
    return lambda sid: frame(1, 4, sid, request_headers(path))


def open_whole_stream(path):
    """HEADERS with END_STREAM: the request is whole (and empty); a Watch so
    opened is never answered."""
    return lambda sid: frame(1, 5, sid, request_headers(path))


class LimitedMember(harness.Member):
    """A member whose RLIMIT_NOFILE is `nofile` (soft and hard)."""

    def __init__(self, nofile, *args, **kwargs):
        self.nofile = nofile
        super().__init__(*args, **kwargs)

    def args(self):
        return ["prlimit", "--nofile=%d:%d" % (self.nofile, self.nofile)] + super().args()


@unittest.skipIf(harness.is_reference_etcd(), "etcdq's guard: its bounds and warnings (see the module doc)")
class Http2AbuseTest(harness.MemberTestCase):
    def check_flood(self, m, floods, expect_log, kv=None, in_flight=1):
        """`in_flight`: how many Puts the well-behaved client keeps in flight at
        once on its one connection."""
        pid = m.proc.pid
        kv = kv or m.kv()
        kv.Put(pb.PutRequest(key=b"a", value=b"0"), timeout=10)
        base = harness.vm_rss_mib(pid)
        for f in floods:
            f.start()
        peak = base
        served = 0
        while any(f.is_alive() for f in floods):
            peak = max(peak, harness.vm_rss_mib(pid))
            # A well-behaved client on its own connection is served throughout.
            if in_flight > 1:
                calls = [kv.Put.future(pb.PutRequest(key=b"b%d" % i, value=b"x"), timeout=10)
                         for i in range(in_flight - 1)]
                for c in calls:
                    c.result()
            kv.Put(pb.PutRequest(key=b"a", value=str(served).encode()), timeout=10)
            served += 1
            time.sleep(0.2)
        for f in floods:
            f.join()
        time.sleep(1.0)
        peak = max(peak, harness.vm_rss_mib(pid))
        self.assertIsNone(m.proc.poll(), "the member exited")
        got = kv.Range(pb.RangeRequest(key=b"a"), timeout=10)
        self.assertEqual(got.kvs[0].value, str(served - 1).encode())
        sys.stderr.write("%d flooders, %d connections, %d streams sent; VmRSS %.0f -> peak %.0f MiB; "
                         "%d puts served meanwhile\n" % (len(floods), sum(f.connections for f in floods),
                                                         sum(f.sent for f in floods), base, peak, served))
        self.assertLess(peak - base, GROWTH_MIB, "VmRSS grew from %.0f to %.0f MiB" % (base, peak))
        with open(m.log_path, errors="replace") as log:
            text = log.read()
        expected = expect_log if isinstance(expect_log, tuple) else (expect_log,)
        self.assertTrue(any(e in text for e in expected), "none of %r in the member's log" % (expected,))

    def test_rapid_reset_closes_the_connection_and_reconnecting_flooders_share_one_budget(self):
        m = self.new_member()
        floods = [Flood(m.client_port, reset_stream(b"/etcdserverpb.KV/Range" if i % 2 else b"/no.such/Method"),
                        reconnect=True) for i in range(8)]
        self.check_flood(m, floods, "HTTP/2 rapid reset")
        self.assertGreater(sum(f.connections for f in floods), 8, "no flooder was disconnected")

    def test_connections_that_open_streams_and_close_share_one_budget(self):
        # No RST_STREAM at all: each connection opens 2,000 streams and closes
        # (gRPC cancels them all at once), over and over from 6 threads. Before,
        # 6M streams so grew the member to 4.9 GB and held clients off for
        # minutes; now the streams a closed connection left unanswered are
        # charged to the shared budget, and at most 10,000 may wait at once.
        m = self.new_member()
        floods = [Flood(m.client_port, open_stream(b"/etcdserverpb.Watch/Watch"), reconnect=True,
                        per_connection=2000) for _ in range(6)]
        self.check_flood(m, floods, CHURN_LOGS)

    def test_a_busy_client_is_served_while_others_keep_the_budget_spent(self):
        # The floods of the test above keep the shared budget in debt; a
        # plaintext client with 20 calls in flight on one connection goes on
        # (its calls are sent whole: they wait on the server, not on it).
        # Before, one with more than 4 in flight was disconnected.
        m = self.new_member()
        floods = [Flood(m.client_port, open_stream(b"/etcdserverpb.Watch/Watch"), reconnect=True,
                        per_connection=2000) for _ in range(6)]
        self.check_flood(m, floods, CHURN_LOGS, in_flight=20)

    def test_streams_sent_whole_and_never_answered_are_bounded(self):
        # 4 flooders open 4,000 Watch streams a connection with HEADERS and
        # END_STREAM, never answered (no request), and reconnect when cut:
        # a connection keeps at most 64 unanswered once 10,000 wait. Before,
        # such streams escaped the bound: 80k grew a member by 1.5 GB.
        m = self.new_member()
        floods = [Flood(m.client_port, open_whole_stream(b"/etcdserverpb.Watch/Watch"), reconnect=True,
                        per_connection=4000) for _ in range(4)]
        self.check_flood(m, floods, ("too many streams wait for an answer", "HTTP/2 rapid reset"))

    def test_rapid_reset_on_the_peer_url_closes_the_connection(self):
        m = self.new_member()
        floods = [Flood(m.peer_port, reset_stream(b"/etcdq.peer.Peer/Propose"), reconnect=True) for _ in range(2)]
        self.check_flood(m, floods, "HTTP/2 rapid reset")

    def test_rapid_reset_over_tls_is_paced(self):
        pki = tlslib.Pki()
        self.addCleanup(pki.cleanup)
        m = self.track(tlslib.TlsMember(pki, http_too=True))
        ctx = ssl.create_default_context(cafile=pki.ca)
        ctx.load_cert_chain(pki.client, pki.client_key)
        plain = harness.grpc.insecure_channel("127.0.0.1:%d" % m.http_port)
        self.addCleanup(plain.close)
        f = Flood(m.client_port, reset_stream(b"/etcdserverpb.KV/Range"), tls=ctx)
        self.check_flood(m, [f], "HTTP/2 rapid reset", kv=m.kv(plain))
        self.assertEqual(f.connections, 1)
        self.assertGreater(f.sent, 1000)  # the burst passes, then 100 a second; the rest waits in TCP

    def test_idle_connections_leave_the_members_own_descriptors(self):
        # A member limited to 512 descriptors and 700 idle HTTP/2 connections:
        # connections stop at the ceiling (net/mux.h), so the member's own
        # files (a snapshot file, RocksDB's) and its clients already
        # connected go on. Before, the connections took every descriptor.
        m = self.track(LimitedMember(512))
        kv = m.kv()
        kv.Put(pb.PutRequest(key=b"a", value=b"0"), timeout=10)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(700):
            try:
                s = socket.create_connection(("127.0.0.1", m.client_port), timeout=5)
                s.sendall(PREFACE + frame(4, 0, 0) + frame(4, 1, 0))
                socks.append(s)
            except OSError:
                break
        time.sleep(1.0)
        for i in range(200):
            kv.Put(pb.PutRequest(key=b"k%d" % i, value=b"x" * 1024), timeout=10)
        # A snapshot opens a file of its own.
        size = sum(len(r.blob) for r in m.maintenance().Snapshot(pb.SnapshotRequest(), timeout=30))
        self.assertGreater(size, 200 * 1024)
        self.assertIsNone(m.proc.poll(), "the member exited")
        with open(m.log_path, errors="replace") as log:
            self.assertIn("kept for the member's own files", log.read())
        with open("/proc/%d/limits" % m.proc.pid) as f:
            self.assertIn("512", next(line for line in f if line.startswith("Max open files")))

    def test_streams_opened_without_acknowledging_settings_close_the_connection(self):
        m = self.new_member()
        f = Flood(m.client_port, open_stream(b"/etcdserverpb.KV/Range"), ack_settings=False)
        self.check_flood(m, [f], "without acknowledging the server's HTTP/2 settings")
        self.assertTrue(f.closed_by_server or f.sent < STREAMS, "the connection was not closed")


class AbandonedStreamsTest(harness.MemberTestCase):
    """Runs against etcd 3.6 too: it serves every call."""

    def test_busy_client_is_not_cut_off_by_a_connection_that_abandons_thousands_of_streams(self):
        # One connection at a time opens 4,000 Range streams (HEADERS only),
        # waits 1.5 s and closes; its abandoned streams keep the shared budget
        # in debt. A client with 200 Ranges in flight on one plaintext
        # connection sends each whole and is answered in turn: it is served
        # throughout. Before, it was held, and on plaintext held is closed:
        # 40-60% of its calls failed with UNAVAILABLE (etcd 3.6: none).
        m = self.new_member()
        kv = m.kv()
        kv.Put(pb.PutRequest(key=b"k", value=b"v"), timeout=10)
        stop = threading.Event()
        opened = [0]

        def abandon():
            while not stop.is_set():
                try:
                    conn = RawConnection(m.client_port)
                    conn.frames(time.monotonic() + 0.05)  # acknowledges the server's SETTINGS
                    conn.send(b"".join(frame(1, 4, 1 + 2 * i, request_headers(b"/etcdserverpb.KV/Range"))
                                       for i in range(4000)))
                    opened[0] += 1
                    stop.wait(1.5)
                    conn.close()
                except OSError:
                    stop.wait(0.1)

        t = threading.Thread(target=abandon, daemon=True)
        t.start()
        try:
            time.sleep(1.0)
            calls = failed = 0
            last = None
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:
                futures = [kv.Range.future(pb.RangeRequest(key=b"k"), timeout=10) for _ in range(200)]
                for f in futures:
                    try:
                        f.result()
                    except harness.grpc.RpcError as e:
                        failed += 1
                        last = "%s %s" % (e.code(), e.details())
                calls += len(futures)
        finally:
            stop.set()
            t.join()
        sys.stderr.write("%d abandoning connections; %d of %d calls failed\n" % (opened[0], failed, calls))
        self.assertGreaterEqual(opened[0], 3)
        self.assertEqual(failed, 0, "last error: %s" % last)


if __name__ == "__main__":
    harness.main()
