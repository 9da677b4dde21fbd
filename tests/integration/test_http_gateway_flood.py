#!/usr/bin/python3
"""A JSON gateway flood on the client port leaves /health answering and gRPC
clients served (src/http/connections.h: health checks run on the control lane,
the gateway on the bulk lane at nice 19; src/http/gateway.h: the gateway yields
to gRPC clients).

wrk (100 keep-alive connections, as fast as answers come) floods
POST /v3/kv/range while a gRPC client puts in a loop; /health is asked every
0.2 s on a fresh connection and must answer 200 within ANSWER_S each time, the
gRPC puts must go on, and the gateway must still be served. Checked against
etcd 3.4 too (the oracle, run beside).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_http_gateway_flood.py
"""
import base64
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness
import test_http_starvation  # noqa: E402
from etcd3.etcdrpc import rpc_pb2  # noqa: E402

ORACLE = harness.ORACLE
ANSWER_S = 2.0
FLOOD_S = 8

RANGE_LUA = """
request = function()
  return wrk.format("POST", "/v3/kv/range", {["Content-Type"] = "application/json"}, '{"key":"%s"}')
end
""" % base64.b64encode(b"flood/k").decode()


def get(port, path, timeout=ANSWER_S):
    return test_http_starvation.get(port, path, timeout)


class GatewayFloodTest(harness.MemberTestCase):
    def flood(self, m):
        kv = m.kv()
        kv.Put(rpc_pb2.PutRequest(key=b"flood/k", value=b"v"), timeout=10)
        stop = threading.Event()
        puts = [0]
        put_errors = []

        def put_loop():
            while not stop.is_set():
                try:
                    kv.Put(rpc_pb2.PutRequest(key=b"flood/p", value=b"x" * 100), timeout=10)
                    puts[0] += 1
                except Exception as e:  # noqa: BLE001 - reported below
                    put_errors.append(str(e))

        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write(RANGE_LUA)
        wrk = subprocess.Popen(["wrk", "-t1", "-c100", "-d%ds" % (FLOOD_S + 5), "-s", f.name, m.client_url],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        putter = threading.Thread(target=put_loop, daemon=True)
        putter.start()
        took, failures = [], []
        try:
            time.sleep(1)   # the flood is on
            t_end = time.monotonic() + FLOOD_S
            while time.monotonic() < t_end:
                try:
                    status, body, s = get(m.client_port, "/health")
                    took.append(s)
                    if status != 200:
                        failures.append("status %d %r" % (status, body[:80]))
                except OSError as e:
                    failures.append("no answer within %.0f s (%s)" % (ANSWER_S, e))
                time.sleep(0.2)
        finally:
            stop.set()
            putter.join(15)
            wrk.send_signal(2)
            out, _ = wrk.communicate(timeout=30)
            os.unlink(f.name)
        http_rps = 0.0
        for line in out.splitlines():
            if line.startswith("Requests/sec:"):
                http_rps = float(line.split()[1])
        return took, failures, puts[0], put_errors, http_rps

    def test_health_answers_and_grpc_goes_on_under_a_gateway_flood(self):
        for binary in (ORACLE, harness.binary_under_test()):
            m = self.new_member(binary=binary)
            took, failures, puts, put_errors, http_rps = self.flood(m)
            report = "%s: %d /health answers, slowest %.3f s, median %.3f s; %d gRPC puts; gateway %.0f req/s" % (
                binary, len(took), max(took) if took else 0, sorted(took)[len(took) // 2] if took else 0, puts,
                http_rps)
            sys.stderr.write("\n  %s\n" % report)
            self.assertEqual(failures[:5], [], report)
            self.assertGreater(len(took), 10, report)
            self.assertLess(max(took), ANSWER_S, report)
            self.assertEqual(put_errors[:3], [], report)
            self.assertGreater(puts, 50, report)
            self.assertGreater(http_rps, 10, report)   # the gateway is slowed, never shut out
            m.cleanup()


if __name__ == "__main__":
    harness.main()
