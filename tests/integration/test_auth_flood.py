#!/usr/bin/python3
"""An Authenticate flood does not starve other RPCs (issue #13): bcrypt runs
on a bounded executor of its own (src/server/auth_service.h), never on
gRPC's threads. With 150 logins kept in flight at the default
--bcrypt-cost 10, Ranges are still answered within a second (before the
executor one Range waited 14 s behind the logins: bench/auth_flood.py), and
the logins past the queue's bound fail at once with etcd's
"etcdserver: too many requests" while others succeed. etcd (3.4, 3.6) has
no such bound, so this runs against etcdq only:

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_auth_flood.py
"""
import threading
import time
import unittest

import grpc
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc

import harness
from test_auth import ROOT_PW, enable_auth, md

INFLIGHT = 150
FLOOD_S = 4.0


class AuthFloodTest(harness.MemberTestCase):

    def test_ranges_are_served_during_an_authenticate_flood(self):
        if harness.is_reference_etcd():
            self.skipTest("etcd (3.4, 3.6) has no bound on concurrent logins")
        m = self.new_member()  # etcd's default --bcrypt-cost 10
        token = enable_auth(m)
        kv = m.kv()
        kv.Put(rpc_pb2.PutRequest(key=b"k", value=b"v"), timeout=10, metadata=md(token))
        auth = rpc_pb2_grpc.AuthStub(m.channel())
        req = rpc_pb2.AuthenticateRequest(name="root", password=ROOT_PW)
        answers = {}
        stop = time.monotonic() + FLOOD_S

        def flood():
            pending = []
            while time.monotonic() < stop:
                while len(pending) < INFLIGHT:
                    pending.append(auth.Authenticate.future(req, timeout=60))
                still = []
                for f in pending:
                    if not f.done():
                        still.append(f)
                        continue
                    try:
                        f.result()
                        k = "OK"
                    except grpc.RpcError as e:
                        k = "%s: %s" % (e.code().name, e.details())
                    answers[k] = answers.get(k, 0) + 1
                pending = still
                time.sleep(0.005)
            for f in pending:
                f.cancel()

        t = threading.Thread(target=flood)
        t.start()
        try:
            time.sleep(0.5)
            worst = 0.0
            n = 0
            while time.monotonic() < stop - 0.2:
                t0 = time.monotonic()
                got = kv.Range(rpc_pb2.RangeRequest(key=b"k"), timeout=30, metadata=md(token))
                worst = max(worst, time.monotonic() - t0)
                self.assertEqual(got.kvs[0].value, b"v")
                n += 1
        finally:
            t.join()
        self.assertGreater(n, 10)
        self.assertLess(worst, 1.0, "a Range took %.2f s during the flood (answers %s)" % (worst, answers))
        self.assertGreater(answers.get("OK", 0), 0, answers)
        self.assertGreater(answers.get("RESOURCE_EXHAUSTED: etcdserver: too many requests", 0), 0, answers)


if __name__ == "__main__":
    unittest.main(verbosity=2)
