#!/usr/bin/python3
"""/health and /metrics answer at once however many idle or slow HTTP connections
are open (src/http/server.h).

A health check that hangs because other connections hold every worker gets a
member restarted by its supervisor. etcd serves each connection on its own
goroutine, so idle and slow (slowloris: the header a byte at a time) connections
cost it nothing; these tests hold IDLE idle connections and SLOW slowloris ones
open on --listen-metrics-urls, then ask for /health and /metrics again and again,
each answer within ANSWER_S, and check that the server's threads and memory stay
bounded meanwhile. Every expectation is also checked against Debian's etcd 3.4.

    /usr/bin/python3 tests/integration/test_http_starvation.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_http_starvation.py
"""
import http.client
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

IDLE = 300
SLOW = 50
MANY_IDLE = 800
ROUNDS = 10
ANSWER_S = 2.0
SLOW_BYTE_EVERY_S = 0.2
THREADS_BOUND = 64          # threads the server may add while these connections are open
RSS_BOUND_MIB = 64          # memory it may add meanwhile


def proc_status(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def get(port, path, timeout=ANSWER_S):
    """(status, body, seconds) of one GET on a fresh connection."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read(), time.monotonic() - t0
    finally:
        c.close()


class Slowloris(threading.Thread):
    """Sends a request header one byte every SLOW_BYTE_EVERY_S, never finishing it."""

    def __init__(self, port, n):
        super().__init__(daemon=True, name="slowloris")
        self.port = port
        self.n = n
        self.stop = threading.Event()
        self.socks = []
        self.closed_by_server = 0

    def run(self):
        for _ in range(self.n):
            s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            self.socks.append(s)
        while not self.stop.is_set():
            for s in list(self.socks):
                try:
                    s.send(b"a")
                except OSError:
                    self.closed_by_server += 1
                    self.socks.remove(s)
                    s.close()
            self.stop.wait(SLOW_BYTE_EVERY_S)

    def close(self):
        self.stop.set()
        self.join(5)
        for s in self.socks:
            s.close()


class HttpStarvationTest(harness.MemberTestCase):
    def setUp(self):
        self.hp = harness.free_port()
        self.m = self.new_member(["--listen-metrics-urls", "http://127.0.0.1:%d" % self.hp])
        deadline = time.monotonic() + 10
        while True:   # the HTTP listener may come up just after the gRPC one
            try:
                get(self.hp, "/health", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def test_health_answers_within_2s_while_300_idle_and_50_slowloris_connections_are_open(self):
        pid = self.m.proc.pid
        threads0, rss0 = proc_status(pid, "Threads"), proc_status(pid, "VmRSS")
        idle = []
        slow = Slowloris(self.hp, SLOW)
        try:
            t0 = time.monotonic()
            for _ in range(IDLE):
                idle.append(socket.create_connection(("127.0.0.1", self.hp), timeout=5))
            # A short listen backlog drops SYNs of a burst: each waits for a retransmission.
            opened_s = time.monotonic() - t0
            slow.start()
            time.sleep(0.5)   # every connection accepted, the slow ones trickling
            took, failures = [], []
            threads_max, rss_max = 0, 0
            t_end = time.monotonic() + 12   # past cpp-httplib's default 5 s read and keep-alive timeouts
            while len(took) < ROUNDS or time.monotonic() < t_end:
                for path in ("/health", "/metrics"):
                    try:
                        status, body, s = get(self.hp, path)
                        took.append(s)
                        if status != 200:
                            failures.append("%s: status %d %r" % (path, status, body[:80]))
                    except OSError as e:
                        failures.append("%s: no answer within %.0f s (%s)" % (path, ANSWER_S, e))
                        took.append(ANSWER_S)
                threads_max = max(threads_max, proc_status(pid, "Threads"))
                rss_max = max(rss_max, proc_status(pid, "VmRSS"))
                time.sleep(0.3)
            report = ("%d idle + %d slowloris connections: %d answers, slowest %.3f s, median %.3f s; "
                      "%d idle connections opened in %.1f s; threads %d -> max %d; VmRSS %.0f -> max %.0f MiB; slowloris closed by the server: %d" % (
                          IDLE, SLOW, len(took), max(took), sorted(took)[len(took) // 2], IDLE, opened_s, threads0, threads_max,
                          rss0 / 1024, rss_max / 1024, slow.closed_by_server))
            sys.stderr.write("\n  %s\n" % report)
            self.assertEqual(failures[:5], [], report)
            self.assertLess(max(took), ANSWER_S, report)
            self.assertLess(opened_s, ANSWER_S, report)
            self.assertLess(threads_max - threads0, THREADS_BOUND, report)
            # A sanitizer's redzones and quarantine inflate every allocation.
            bound = RSS_BOUND_MIB * (4 if harness.sanitized() else 1)
            self.assertLess((rss_max - rss0) / 1024, bound, report)
        finally:
            slow.close()
            for s in idle:
                s.close()
        # And once they are gone, still at once.
        status, _, s = get(self.hp, "/health")
        self.assertEqual(status, 200)
        self.assertLess(s, ANSWER_S)

    def test_health_answers_while_more_idle_connections_are_open_than_the_server_keeps(self):
        # etcdq keeps at most 512 (src/http/connections.h); a new one closes the longest waiting.
        pid = self.m.proc.pid
        fds0 = len(os.listdir("/proc/%d/fd" % pid))
        idle = []
        try:
            for _ in range(MANY_IDLE):
                idle.append(socket.create_connection(("127.0.0.1", self.hp), timeout=5))
            time.sleep(0.3)
            fds = len(os.listdir("/proc/%d/fd" % pid))
            took = []
            for _ in range(ROUNDS):
                status, _, s = get(self.hp, "/health")
                self.assertEqual(status, 200)
                took.append(s)
            sys.stderr.write("\n  %d idle connections: server fds %d -> %d; /health slowest %.3f s\n" % (
                MANY_IDLE, fds0, fds, max(took)))
            self.assertLess(max(took), ANSWER_S)
        finally:
            for s in idle:
                s.close()

    def test_a_kept_alive_connection_serves_several_requests_and_pipelined_ones(self):
        c = http.client.HTTPConnection("127.0.0.1", self.hp, timeout=ANSWER_S)
        try:
            for path in ("/health", "/metrics", "/health", "/metrics"):
                c.request("GET", path)
                r = c.getresponse()
                self.assertEqual(r.status, 200, path)
                r.read()
        finally:
            c.close()
        # Two requests in one packet: two answers, in order.
        s = socket.create_connection(("127.0.0.1", self.hp), timeout=ANSWER_S)
        try:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n"
                      b"Connection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
        self.assertEqual(data.count(b"HTTP/1.1 200"), 2, data)
        self.assertIn(b'"health":"true"', data)
        self.assertIn(b"# TYPE", data)


if __name__ == "__main__":
    harness.main()
