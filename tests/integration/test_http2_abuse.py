#!/usr/bin/python3
"""HTTP/2 connections that abuse the protocol: the member keeps its memory
bound and goes on serving (net/h2_guard.h, server/server.h).

1. Rapid reset (CVE-2023-44487) on the client URL: a raw connection sends
   HEADERS and RST_STREAM for stream after stream. gRPC 1.51 creates and
   cancels a call for each, about ten times slower than they arrive: 100k of
   them grew the member by 1.4 GB before the guard (etcd 3.4: 9 MB). Now
   each connection's resets, and all connections' together, are paced: the
   member reads the client only as fast as the resets are due. Run on one
   connection and on several at once.
2. The same on the peer URL (plaintext): its gRPC server is guarded alike.
3. Streams opened and left waiting by a client that never acknowledges the
   server's SETTINGS (gRPC enforces its stream limit only once they are
   acknowledged): 100k grew the member by 2 GB; now the connection is closed
   after 1,000.

Each checks the member's VmRSS against its start, a Put and a Range from a
well-behaved client during and after the flood, and the warning the member
logs.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_http2_abuse.py
"""
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402

import harness  # noqa: E402

STREAMS = 100000
SEND_S = 15.0        # how long each flooding connection tries to send
GROWTH_MIB = 150.0   # measured: 20-60 MiB with the guard; 1,400+ without it
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def request_headers(path):
    return (literal(b":method", b"POST") + literal(b":scheme", b"http") + literal(b":path", path) +
            literal(b":authority", b"x") + literal(b"content-type", b"application/grpc") + literal(b"te", b"trailers"))


class Flood(threading.Thread):
    """One raw HTTP/2 connection sending `per_stream(id)` for stream after stream until
    STREAMS are sent, SEND_S passed, or the server closed it; reads (and drops) what
    the server sends."""

    def __init__(self, port, per_stream, ack_settings=True):
        super().__init__(daemon=True)
        self.port, self.per_stream, self.ack_settings = port, per_stream, ack_settings
        self.sent = 0
        self.closed_by_server = False

    def run(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.settimeout(1.0)
        threading.Thread(target=self._drain, args=(s,), daemon=True).start()
        hello = PREFACE + frame(4, 0, 0)
        if self.ack_settings:
            hello += frame(4, 1, 0)
        deadline = time.monotonic() + SEND_S
        try:
            s.sendall(hello)
            buf = b""
            sid = 1
            while self.sent < STREAMS and time.monotonic() < deadline:
                buf += self.per_stream(sid)
                sid += 2
                self.sent += 1
                if len(buf) > 16384:
                    self._send(s, buf, deadline)
                    buf = b""
            self._send(s, buf, deadline)
        except (BrokenPipeError, ConnectionResetError):
            self.closed_by_server = True
        except OSError:
            pass
        finally:
            s.close()

    @staticmethod
    def _send(s, data, deadline):
        view = memoryview(data)
        while view and time.monotonic() < deadline:
            try:
                n = s.send(view)
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


class Http2AbuseTest(harness.MemberTestCase):
    def check_flood(self, m, port, floods, expect_log):
        pid = m.proc.pid
        kv = m.kv()
        kv.Put(pb.PutRequest(key=b"a", value=b"0"), timeout=10)
        base = harness.vm_rss_mib(pid)
        for f in floods:
            f.start()
        peak = base
        served = 0
        while any(f.is_alive() for f in floods):
            peak = max(peak, harness.vm_rss_mib(pid))
            # A well-behaved client on its own connection is served throughout.
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
        sent = sum(f.sent for f in floods)
        sys.stderr.write("%d connections sent %d streams; VmRSS %.0f -> peak %.0f MiB; %d puts served meanwhile\n" % (
            len(floods), sent, base, peak, served))
        self.assertLess(peak - base, GROWTH_MIB, "VmRSS grew from %.0f to %.0f MiB" % (base, peak))
        with open(m.log_path, errors="replace") as log:
            self.assertIn(expect_log, log.read())
        return sent

    def test_rapid_reset_on_one_connection_is_paced(self):
        m = self.new_member()
        path = b"/etcdserverpb.KV/Range"
        sent = self.check_flood(m, m.client_port, [Flood(m.client_port, reset_stream(path))], "HTTP/2 rapid reset")
        # The burst passes, then about 100 a second: the rest waits in TCP.
        self.assertGreater(sent, 1000)

    def test_rapid_reset_on_many_connections_is_paced_together(self):
        m = self.new_member()
        floods = [Flood(m.client_port, reset_stream(b"/no.such/Method")) for _ in range(8)]
        self.check_flood(m, m.client_port, floods, "HTTP/2 rapid reset")

    def test_rapid_reset_on_the_peer_url_is_paced(self):
        m = self.new_member()
        path = b"/etcdq.peer.Peer/Propose"
        self.check_flood(m, m.peer_port, [Flood(m.peer_port, reset_stream(path))], "HTTP/2 rapid reset")

    def test_streams_opened_without_acknowledging_settings_close_the_connection(self):
        m = self.new_member()
        f = Flood(m.client_port, open_stream(b"/etcdserverpb.KV/Range"), ack_settings=False)
        self.check_flood(m, m.client_port, [f], "without acknowledging the server's HTTP/2 settings")
        self.assertTrue(f.closed_by_server or f.sent < STREAMS, "the connection was not closed")


if __name__ == "__main__":
    harness.main()
