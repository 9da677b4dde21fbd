#!/usr/bin/python3
"""Streams past the cap on one HTTP/2 connection are refused, not left to hang
(issue #36 item 8; net/h2_guard.h, server/server.h).

etcdq keeps at most 4,096 streams open on one connection. Before, the client
server advertised that as SETTINGS_MAX_CONCURRENT_STREAMS, so a client that
honours it (gRPC's, Go's) queued every call past it: with 4,096 watches open
on a channel a plain Put waited out its deadline. A client that did not
honour it had its whole connection closed by gRPC at stream 4,097. Now the
client server advertises no limit, as etcd 3.6 (--max-concurrent-streams
defaults to math.MaxUint32; measured: it answers a Put on stream 4,101 of a
raw connection), and a stream past the cap gets RST_STREAM(REFUSED_STREAM),
as Go's http2 server answers one past its MaxConcurrentStreams: the call
fails at once with Unavailable, the connection lives on, and calls made
once streams ended are served.

Against etcd (ETCDQ_BIN=<etcd 3.6>) every call is served (it has no cap);
what both must do: answer at once, and keep the connection.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_http2_stream_cap.py
"""
import os
import socket
import ssl
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402
from etcd3.etcdrpc import rpc_pb2_grpc as rpc  # noqa: E402

import harness  # noqa: E402
from h2raw import PREFACE, frame, request_headers  # noqa: E402
import tlslib  # noqa: E402

CAP = 4096
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, END_HEADERS = 1, 4
REFUSED_STREAM = 7
ANSWER_S = 2.0   # an answer or a refusal comes at once (measured: a few ms); before, the Put waited 5 s


def grpc_message(msg):
    body = msg.SerializeToString()
    return b"\0" + struct.pack(">I", len(body)) + body


class RawConnection:
    """One HTTP/2 connection spoken frame by frame (plaintext or TLS), on one thread."""

    def __init__(self, port, tls=None):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = tls.wrap_socket(s, server_hostname="127.0.0.1") if tls else s
        self.buf = b""
        self.eof = False
        # What the server lets the client send on the connection (RFC 9113
        # section 6.9: 65,535, then its WINDOW_UPDATE frames on stream 0).
        self.window = 65535
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))

    def close(self):
        self.sock.close()

    def send(self, data):
        timeout = self.sock.gettimeout()
        self.sock.settimeout(10)
        self.sock.sendall(data)
        self.sock.settimeout(timeout)

    def frames(self, until, stop=None):
        """Reads frames until `until` (monotonic) or stop(frames read) is true; acknowledges
        SETTINGS and PING. Returns (type, flags, stream, payload) tuples."""
        got = []
        self.sock.settimeout(0.05)
        while time.monotonic() < until and not self.eof and not (stop and stop(got)):
            try:
                data = self.sock.recv(65536)
                if not data:
                    self.eof = True
                self.buf += data
            except (socket.timeout, ssl.SSLWantReadError):
                pass
            while len(self.buf) >= 9:
                n = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) < 9 + n:
                    break
                ftype, flags = self.buf[3], self.buf[4]
                sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7fffffff
                payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
                if ftype == SETTINGS and not flags & 1:
                    self.send(frame(SETTINGS, 1, 0))
                elif ftype == PING and not flags & 1:
                    self.send(frame(PING, 1, 0, payload))
                elif ftype == WINDOW_UPDATE and sid == 0:
                    self.window += struct.unpack(">I", payload)[0] & 0x7fffffff
                got.append((ftype, flags, sid, payload))
        return got


def put_stream(sid, key, value):
    """A KV.Put on stream `sid`."""
    return (frame(HEADERS, END_HEADERS, sid, request_headers(b"/etcdserverpb.KV/Put")) +
            frame(DATA, END_STREAM, sid, grpc_message(pb.PutRequest(key=key, value=value))))


def outcome(frames, sid):
    """'refused', 'answered' (a PutResponse came), or None (nothing yet) for stream `sid`."""
    data = b""
    for ftype, _, s, payload in frames:
        if s != sid:
            continue
        if ftype == RST_STREAM and struct.unpack(">I", payload)[0] == REFUSED_STREAM:
            return "refused"
        if ftype == DATA:
            data += payload
    if len(data) >= 5:
        resp = pb.PutResponse()
        resp.ParseFromString(data[5:5 + struct.unpack(">I", data[1:5])[0]])
        if resp.header.revision > 0:
            return "answered"
    return None


def wait_outcome(conn, sid, limit_s):
    seen = []
    t0 = time.monotonic()
    conn.frames(t0 + limit_s, stop=lambda got: seen.extend(got[len(seen):]) or outcome(seen, sid) is not None)
    return outcome(seen, sid), time.monotonic() - t0, seen


class Http2StreamCapTest(harness.MemberTestCase):

    def test_a_call_past_the_cap_fails_at_once_and_calls_after_streams_end_are_served(self):
        m = self.new_member()
        ch = grpc.insecure_channel(m.endpoint)
        self.addCleanup(ch.close)
        kv, watch = rpc.KVStub(ch), rpc.WatchStub(ch)
        kv.Put(pb.PutRequest(key=b"k", value=b"0"), timeout=10)
        watches = [watch.Watch(iter([pb.WatchRequest(create_request=pb.WatchCreateRequest(key=b"w%d" % i))]))
                   for i in range(CAP)]
        self.addCleanup(lambda: [w.cancel() for w in watches])
        next(watches[-1])  # the last one's created: all are open
        t0 = time.monotonic()
        try:
            kv.Put(pb.PutRequest(key=b"k", value=b"1"), timeout=10)
            result = "served"
        except grpc.RpcError as e:
            result = e.code()
        took = time.monotonic() - t0
        sys.stderr.write("Put with %d watches open on its channel: %s in %.3f s\n" % (CAP, result, took))
        if harness.is_reference_etcd():
            self.assertEqual(result, "served")
        else:
            # gRPC's client says "Received RST_STREAM with error code 7".
            self.assertEqual(result, grpc.StatusCode.UNAVAILABLE)
        self.assertLess(took, ANSWER_S)
        for w in watches[:10]:
            w.cancel()
        deadline = time.monotonic() + 10
        while True:
            try:
                kv.Put(pb.PutRequest(key=b"k", value=b"2"), timeout=5)
                break
            except grpc.RpcError as e:  # a cancel crosses the Put on the wire
                self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE)
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.1)
        self.assertEqual(kv.Range(pb.RangeRequest(key=b"k"), timeout=10).kvs[0].value, b"2")

    def check_raw_connection(self, port, tls=None, flood_bytes=0):
        """A raw client opens CAP Watch streams (never answered: no request), then Puts on
        new streams: refused with REFUSED_STREAM (etcdq) or answered (etcd), never silence,
        and the connection lives; `flood_bytes` of DATA then follow on refused streams
        (they count for the connection's flow control); once two streams are reset, a Put
        on a new stream is answered."""
        conn = RawConnection(port, tls)
        self.addCleanup(conn.close)
        conn.frames(time.monotonic() + 0.3)
        opened = b"".join(frame(HEADERS, END_HEADERS, 1 + 2 * i, request_headers(b"/etcdserverpb.Watch/Watch"))
                          for i in range(CAP))
        conn.send(opened)
        sid = 1 + 2 * CAP
        conn.send(put_stream(sid, b"raw", b"1"))
        got, took, _ = wait_outcome(conn, sid, 10)
        sys.stderr.write("raw Put on stream %d (%d open before it): %s in %.3f s\n" % (sid, CAP, got, took))
        self.assertFalse(conn.eof, "the server closed the connection")
        self.assertIsNotNone(got, "no answer and no refusal for stream %d" % sid)
        self.assertLess(took, ANSWER_S)
        self.assertEqual(got, "answered" if harness.is_reference_etcd() else "refused")
        sid += 2
        # The connection's header compression stays in step: the next
        # stream's header block decodes.
        conn.send(put_stream(sid, b"raw", b"2"))
        got, took, _ = wait_outcome(conn, sid, 10)
        self.assertEqual((got, conn.eof), ("answered" if harness.is_reference_etcd() else "refused", False))
        refused = got == "refused"
        if refused and flood_bytes:
            # DATA on refused streams, within the connection's window: the
            # server must count it and give it back (WINDOW_UPDATE), or a
            # client that keeps to the window stalls.
            chunk = b"x" * 16000
            sent = 0
            while sent < flood_bytes:
                sid += 2
                conn.send(frame(HEADERS, END_HEADERS, sid, request_headers(b"/etcdserverpb.KV/Put")))
                for _ in range(16):
                    deadline = time.monotonic() + 5
                    while conn.window < len(chunk):
                        self.assertLess(time.monotonic(), deadline, "no window after %d bytes" % sent)
                        self.assertFalse(conn.eof, "the server closed the connection after %d bytes" % sent)
                        conn.frames(time.monotonic() + 0.05)
                    conn.send(frame(DATA, 0, sid, chunk))
                    conn.window -= len(chunk)
                    sent += len(chunk)
            conn.frames(time.monotonic() + 0.2)
        # Two of the open streams end: new ones fit again.
        conn.send(frame(RST_STREAM, 0, 1, struct.pack(">I", 8)) + frame(RST_STREAM, 0, 3, struct.pack(">I", 8)))
        sid += 2
        conn.send(put_stream(sid, b"raw", b"3"))
        got, took, seen = wait_outcome(conn, sid, 10)
        self.assertFalse(conn.eof, "the server closed the connection: %r" % [f[:3] for f in seen[-5:]])
        self.assertEqual(got, "answered", [f[:3] for f in seen[-5:]])
        self.assertLess(took, ANSWER_S)
        self.assertFalse(any(f[0] == GOAWAY for f in seen), "GOAWAY")
        m_kv = self.member.kv()
        self.assertEqual(m_kv.Range(pb.RangeRequest(key=b"raw"), timeout=10).kvs[0].value, b"3")
        return refused

    def test_raw_stream_past_the_cap_gets_refused_stream_and_the_connection_lives(self):
        self.member = self.new_member()
        # 5 MiB on refused streams: more than the connection window gRPC
        # grants (4 MiB), so the server must count and return it.
        refused = self.check_raw_connection(self.member.client_port, flood_bytes=5 << 20)
        if refused:
            self.assertIn("refusing new streams past 4096 open at once", self.log_text(self.member))

    def test_raw_stream_past_the_cap_over_tls(self):
        pki = tlslib.Pki()
        self.addCleanup(pki.cleanup)
        self.member = self.track(tlslib.TlsMember(pki))
        ctx = ssl.create_default_context(cafile=pki.ca)
        ctx.load_cert_chain(pki.client, pki.client_key)
        ctx.set_alpn_protocols(["h2"])  # as gRPC's clients (etcd's TLS listener closes a connection without)
        self.check_raw_connection(self.member.client_port, tls=ctx, flood_bytes=1 << 20)


if __name__ == "__main__":
    harness.main()
