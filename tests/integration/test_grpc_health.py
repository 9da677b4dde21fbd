#!/usr/bin/python3
"""gRPC's health service (grpc.health.v1.Health) on the client URL, as etcd
serves it (grpc-go's health server): load balancers, grpc-health-probe and
Kubernetes' gRPC probes ask it. The empty service name is SERVING, Watch sends
the status and stays open, any other name is NOT_FOUND; etcdq's peer URL has
no health service. Runs against etcd 3.4 (the default binary) too.

(etcd's NOT_FOUND says "unknown service", gRPC C++'s "service name unknown":
the code is what clients act on.)

    /usr/bin/python3 tests/integration/test_grpc_health.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_grpc_health.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

grpc = harness.grpc

SERVING = b"\x08\x01"  # HealthCheckResponse{status: SERVING}


def request(service):
    """A serialized HealthCheckRequest{service}."""
    name = service.encode()
    return (b"\x0a" + bytes([len(name)]) + name) if name else b""


def raw(channel, method, stream=False):
    call = channel.unary_stream if stream else channel.unary_unary
    return call("/grpc.health.v1.Health/" + method, request_serializer=lambda b: b,
                response_deserializer=lambda b: b)


class GrpcHealthTest(harness.MemberTestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = cls.new_class_member()

    def test_check_of_the_server_is_serving(self):
        self.assertEqual(raw(self.m.channel(), "Check")(request(""), timeout=5), SERVING)

    def test_check_of_an_unknown_service_is_not_found(self):
        for name in ["no.such.Service", "etcdserverpb.KV"]:
            with self.assertRaises(grpc.RpcError) as e:
                raw(self.m.channel(), "Check")(request(name), timeout=5)
            self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND, name)

    def test_watch_sends_the_status_and_stays_open(self):
        call = raw(self.m.channel(), "Watch", stream=True)(request(""), timeout=3)
        self.assertEqual(next(call), SERVING)
        with self.assertRaises(grpc.RpcError) as e:
            next(call)  # nothing more until the status changes: the deadline ends it
        self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)

    # etcd 3.4 serves its whole client gRPC API on peer URLs too (embed's
    # servePeers); etcdq's peer URL serves members' calls only.
    @unittest.skipIf(harness.is_reference_etcd(), "etcd serves its client API on peer URLs")
    def test_the_peer_url_has_no_health_service(self):
        ch = grpc.insecure_channel("127.0.0.1:%d" % self.m.peer_port)
        self.addCleanup(ch.close)
        with self.assertRaises(grpc.RpcError) as e:
            raw(ch, "Check")(request(""), timeout=5)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)


if __name__ == "__main__":
    harness.main()
