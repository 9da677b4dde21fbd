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
import sys
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


if __name__ == "__main__":
    main()
