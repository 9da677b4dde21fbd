#!/usr/bin/python3
"""gRPC and HTTP/1.1 on one client port, as etcd serves them (src/net/mux.h).

etcd answers `curl http://127.0.0.1:2379/health` (and /version, /metrics) on the
same port etcdctl talks gRPC to; health probes, shell scripts and HTTP clients
depend on it. With etcd 3.5's --listen-client-http-urls the HTTP side moves to
that URL and the client URL serves gRPC only. Idle, slow or half-spoken
connections on the client port must not stop either side. Every expectation
is checked against etcd 3.6 (the default binary) too, --listen-client-http-urls
included (etcd 3.4 had no such flag).

    /usr/bin/python3 tests/integration/test_client_port_http.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_client_port_http.py
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2  # noqa: E402

ANSWER_S = 2.0
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def get(port, path, timeout=ANSWER_S):
    """(status, body) of one GET on a fresh connection."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait_http(port, path, within_s=10):
    """(status, body) of the first GET that connects within `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return get(port, path)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def etcdctl(member, *args):
    return subprocess.run([harness.ETCDCTL, "--endpoints", member.endpoint, "--command-timeout=5s"] + list(args),
                          env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True, timeout=30)


class ClientPortHttpTest(harness.MemberTestCase):
    def test_curl_and_etcdctl_share_the_client_port(self):
        m = self.new_member()
        status, body = get(m.client_port, "/health")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["health"], "true")
        status, body = get(m.client_port, "/version")
        self.assertEqual(status, 200, body)
        v = json.loads(body)
        self.assertIn("etcdserver", v)
        self.assertIn("etcdcluster", v)
        status, body = get(m.client_port, "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(b"etcd_server_has_leader 1", body)

        # Both at once: an etcdctl writer and an HTTP prober, on one port.
        errors = []
        stop = threading.Event()

        def probe():
            while not stop.is_set():
                try:
                    s, b = get(m.client_port, "/health")
                    if s != 200:
                        errors.append("health %d %r" % (s, b))
                except OSError as e:
                    errors.append("health: %s" % e)
        t = threading.Thread(target=probe, daemon=True)
        t.start()
        try:
            for i in range(20):
                r = etcdctl(m, "put", "k%d" % i, "v%d" % i)
                self.assertEqual(r.returncode, 0, r.stderr)
            r = etcdctl(m, "get", "k", "--prefix", "--keys-only")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(len([x for x in r.stdout.split("\n") if x]), 20, r.stdout)
        finally:
            stop.set()
            t.join(10)
        self.assertEqual(errors[:3], [])

    def test_keep_alive_http_requests_on_the_client_port(self):
        m = self.new_member()
        c = http.client.HTTPConnection("127.0.0.1", m.client_port, timeout=ANSWER_S)
        try:
            for _ in range(5):
                c.request("GET", "/health")
                r = c.getresponse()
                self.assertEqual(r.status, 200)
                r.read()
        finally:
            c.close()

    def test_idle_slow_and_half_spoken_connections_stop_neither_side(self):
        m = self.new_member()
        socks = []
        try:
            for _ in range(300):    # connected, silent
                socks.append(socket.create_connection(("127.0.0.1", m.client_port), timeout=5))
            for _ in range(50):     # an HTTP header never finished
                s = socket.create_connection(("127.0.0.1", m.client_port), timeout=5)
                s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                socks.append(s)
            for _ in range(50):     # half of HTTP/2's preface
                s = socket.create_connection(("127.0.0.1", m.client_port), timeout=5)
                s.sendall(PREFACE[:10])
                socks.append(s)
            time.sleep(0.5)
            for i in range(5):
                t0 = time.monotonic()
                status, _ = get(m.client_port, "/health")
                self.assertEqual(status, 200)
                m.kv().Put(rpc_pb2.PutRequest(key=b"k", value=b"%d" % i), timeout=ANSWER_S)
                r = m.kv().Range(rpc_pb2.RangeRequest(key=b"k"), timeout=ANSWER_S)
                self.assertEqual(r.kvs[0].value, b"%d" % i)
                self.assertLess(time.monotonic() - t0, 2 * ANSWER_S)
        finally:
            for s in socks:
                s.close()

    def test_listen_client_http_urls_moves_http_off_the_client_urls(self):
        hp = harness.free_port()
        m = self.new_member(["--listen-client-http-urls", "http://127.0.0.1:%d" % hp])
        status, body = wait_http(hp, "/health")
        self.assertEqual(status, 200, body)
        # The client URL serves gRPC only: an HTTP/1.1 request is closed unanswered.
        with self.assertRaises((http.client.HTTPException, OSError)):
            get(m.client_port, "/health")
        r = etcdctl(m, "put", "a", "1")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_listen_metrics_urls_serve_metrics_and_health_but_no_gateway(self):
        # etcd's metrics listener (embed/etcd.go serveMetrics) has /metrics
        # and /health only; the JSON gateway lives on the client URLs.
        mp = harness.free_port()
        m = self.new_member(["--listen-metrics-urls", "http://127.0.0.1:%d" % mp])
        status, body = wait_http(mp, "/health")
        self.assertEqual(status, 200, body)
        status, body = get(mp, "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(b"etcd_server_has_leader", body)

        def post(port):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=ANSWER_S)
            try:
                c.request("POST", "/v3/kv/range", body=b'{"key":"YQ=="}')
                r = c.getresponse()
                return r.status
            finally:
                c.close()
        self.assertEqual(post(mp), 404)
        self.assertEqual(post(m.client_port), 200)

    def test_a_chunked_body_is_never_read_as_more_requests(self):
        # A chunked body was once read as empty and its bytes answered as
        # requests of their own (a GET inside the body was served: request
        # smuggling). Chunks are decoded now (src/http/chunked.h): a request
        # inside the chunk data stays body, as in etcd's Go server.
        m = self.new_member()
        body = b'{"key":"YQ==","value":"Yg=="}' + b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n"
        chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        req = (b"POST /v3/kv/put HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
               b"Content-Type: application/json\r\n\r\n" + chunk)
        with socket.create_connection(("127.0.0.1", m.client_port), timeout=5) as s:
            s.sendall(req)
            got = b""
            while True:
                part = s.recv(65536)
                if not part:
                    break
                got += part
        self.assertTrue(got.startswith(b"HTTP/1.1 200"), got[:200])
        self.assertEqual(got.count(b"HTTP/1.1 "), 1, got)  # one answer, then closed
        self.assertNotIn(b"etcdserver\"", got)
        r = etcdctl(m, "get", "a", "--print-value-only")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "b\n")

    def test_one_address_for_two_listeners_is_refused_at_start(self):
        m = harness.Member(start=False)
        self.track(m)
        r = subprocess.run(m.args() + ["--listen-client-http-urls", m.client_url], capture_output=True, text=True,
                           timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--listen-client-http-urls", r.stderr)
        self.assertIn("--listen-client-urls", r.stderr)


if __name__ == "__main__":
    harness.main()
