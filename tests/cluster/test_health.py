#!/usr/bin/python3
"""etcd's health endpoints on the client port (src/http/health.h): /health under an
alarm and a lost quorum, ?exclude= and ?serializable=true, and etcd 3.6's /livez and
/readyz. Expectations etcd 3.4 (the oracle, the default binary) shares are checked
against it too: it has /health's status and "health" field, not the reason, /livez
or /readyz.

    /usr/bin/python3 tests/cluster/test_health.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_health.py
"""
import http.client
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, harness, main, rpc_pb2  # noqa: E402

REFERENCE = harness.is_reference_etcd()


def get(port, path, timeout=15):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def health(port, query=""):
    status, body = get(port, "/health" + query)
    return status, json.loads(body)


class HealthTest(ClusterTestCase):
    def test_alarm_makes_health_false_unless_excluded(self):
        c = self.new_cluster(size=1)
        m = c[0]
        status, h = health(m.client_port)
        self.assertEqual((status, h["health"]), (200, "true"))
        c.maintenance(0).Alarm(rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.ACTIVATE, memberID=c.member_id(0),
                                                    alarm=rpc_pb2.NOSPACE), timeout=5)
        status, h = health(m.client_port)
        self.assertEqual((status, h["health"]), (503, "false"), h)
        if not REFERENCE:
            self.assertEqual(h["reason"], "ALARM NOSPACE")
            status, h = health(m.client_port, "?exclude=NOSPACE")
            self.assertEqual((status, h), (200, {"health": "true", "reason": ""}))
            status, body = get(m.client_port, "/readyz")
            self.assertEqual(status, 200, body)   # only CORRUPT makes a member unready
        c.maintenance(0).Alarm(rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.DEACTIVATE, memberID=c.member_id(0),
                                                    alarm=rpc_pb2.NOSPACE), timeout=5)
        status, h = health(m.client_port)
        self.assertEqual((status, h["health"]), (200, "true"))

    def test_lost_quorum(self):
        c = self.new_cluster(size=3)
        for m in c.members:
            self.assertEqual(health(m.client_port)[0], 200)
            if not REFERENCE:
                self.assertEqual(get(m.client_port, "/livez"), (200, "ok\n"))
                self.assertEqual(get(m.client_port, "/readyz"), (200, "ok\n"))
        c.kill9(1, 2)
        survivor = c[0].client_port
        # The first answers may come while the survivor still believes in a
        # leader: then its read waits out etcd's request timeout (etcd 3.5:
        # "RANGE ERROR:..."; 3.4 waits 1 s). Once an election timeout passed
        # without one, it knows there is none.
        deadline = time.monotonic() + 30
        answers = []
        while True:
            t0 = time.monotonic()
            status, h = health(survivor)
            answers.append("%d %s %.2fs" % (status, h, time.monotonic() - t0))
            if status == 503 and (REFERENCE or h["reason"] == "RAFT NO LEADER"):
                break
            self.assertLess(time.monotonic(), deadline, answers)
            if status == 503:
                self.assertTrue(h["reason"].startswith("RANGE ERROR:"), answers)
            time.sleep(0.2)
        self.note("/health without quorum: %s" % "; ".join(answers))
        self.assertEqual((status, h["health"]), (503, "false"), h)
        if REFERENCE:
            return
        status, h = health(survivor, "?serializable=true")
        self.assertEqual((status, h), (200, {"health": "true", "reason": ""}))
        # Alive, but not ready: its reads cannot be linearized.
        self.assertEqual(get(survivor, "/livez"), (200, "ok\n"))
        status, body = get(survivor, "/readyz")
        self.assertEqual(status, 503, body)
        self.assertIn("[-]linearizable_read failed: ", body)
        self.assertIn("[+]serializable_read ok", body)
        self.assertEqual(get(survivor, "/readyz?exclude=linearizable_read")[0], 200)
        c.restart(1)
        deadline = time.monotonic() + 10 * c.election_ms / 1000
        while health(survivor)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        self.assertEqual(health(survivor), (200, {"health": "true", "reason": ""}))
        self.assertEqual(get(survivor, "/readyz")[0], 200)

    def test_readyz_without_quorum_holds_no_worker_among_slow_connections(self):
        # /readyz waits for a linearizable read, which without quorum only
        # ends at the request timeout. It used to wait on one of 4 HTTP
        # workers: 40 at once took 10 timeouts in a row. Now it waits on
        # nothing (src/http/health.h): with 300 idle and 50 slowloris
        # connections open, 40 /readyz all answer within one request
        # timeout, and /livez, /health?serializable=true, /metrics and
        # /version answer at once meanwhile.
        if REFERENCE:
            self.skipTest("etcd 3.4 has no /readyz")
        c = self.new_cluster(size=3)
        survivor = c[0].client_port
        self.assertEqual(get(survivor, "/readyz")[0], 200)
        c.kill9(1, 2)
        request_timeout_s = (5000 + 2 * c.election_ms) / 1000.0   # consensus/node.h
        idle = [socket.create_connection(("127.0.0.1", survivor), timeout=5) for _ in range(300)]
        slow = [socket.create_connection(("127.0.0.1", survivor), timeout=5) for _ in range(50)]
        for s in slow:
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        stop = threading.Event()

        def trickle():
            while not stop.is_set():
                for s in slow:
                    try:
                        s.send(b"a")
                    except OSError:
                        pass
                stop.wait(0.2)

        trickler = threading.Thread(target=trickle, daemon=True)
        trickler.start()
        readyz = []

        def ask_readyz():
            t0 = time.monotonic()
            try:
                status, body = get(survivor, "/readyz", timeout=4 * request_timeout_s)
            except OSError as e:
                status, body = 0, str(e)
            readyz.append((status, body, time.monotonic() - t0))

        askers = [threading.Thread(target=ask_readyz) for _ in range(40)]
        try:
            t0 = time.monotonic()
            for t in askers:
                t.start()
            others = []
            while any(t.is_alive() for t in askers) and time.monotonic() - t0 < 4 * request_timeout_s:
                for path in ("/livez", "/health?serializable=true", "/metrics", "/version"):
                    t1 = time.monotonic()
                    status, _ = get(survivor, path, timeout=5)
                    others.append((path, status, time.monotonic() - t1))
                time.sleep(0.2)
            for t in askers:
                t.join(4 * request_timeout_s)
        finally:
            stop.set()
            trickler.join(5)
            for s in idle + slow:
                s.close()
        slowest = max(r[2] for r in readyz)
        slowest_other = max(o[2] for o in others)
        self.note("40 /readyz without quorum beside 300 idle + 50 slowloris connections: slowest %.2f s "
                  "(request timeout %.1f s); %d other requests meanwhile, slowest %.3f s" % (
                      slowest, request_timeout_s, len(others), slowest_other))
        self.assertEqual(len(readyz), 40)
        for status, body, _ in readyz:
            self.assertEqual(status, 503, body)
            self.assertIn("[-]linearizable_read failed: ", body)
        self.assertLess(slowest, request_timeout_s + 3, readyz)
        self.assertEqual([o for o in others if o[1] != 200], [])
        self.assertLess(slowest_other, 1.0, others)


if __name__ == "__main__":
    main()
