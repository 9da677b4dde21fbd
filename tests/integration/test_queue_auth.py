"""Queue verbs under etcd's auth (QUEUES.md, issue #13): each verb needs the
permission of the plain keys it reads and writes. A consumer Watch is
delivered the queue's messages, so it needs READ over them, not only over
its own consumer key; a consumer-scoped ack deletes the message, so it needs
WRITE on the message key; a produce writes a message, so it needs WRITE over
the queue's messages. etcdq-only (etcd has no queues).
"""
import os
import queue as pyqueue
import subprocess
import threading
import unittest

from etcd3.etcdrpc import auth_pb2, rpc_pb2, rpc_pb2_grpc

import harness
from test_auth import DENIED, ROOT_PW, auth_stub, code_and_message, enable_auth, md, token_of

CANCELED_DENIED = "rpc error: code = PermissionDenied desc = etcdserver: permission denied"


def give(m, root, user, role, key, end, perm=auth_pb2.Permission.READWRITE):
    """A new role with `perm` over [key, end), granted to `user`; returns the user's new token
    (password "pw"), since the grant moved the auth revision."""
    a = auth_stub(m)
    a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name=role), timeout=10, metadata=md(root))
    a.RoleGrantPermission(rpc_pb2.AuthRoleGrantPermissionRequest(
        name=role, perm=auth_pb2.Permission(permType=perm, key=key, range_end=end)), timeout=10,
        metadata=md(root))
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user=user, role=role), timeout=10, metadata=md(root))
    return token_of(m, user, "pw")


def new_user(m, name):
    """Auth enabled on `m` with root, and user `name` (password "pw"); returns root's token."""
    root = enable_auth(m)
    auth_stub(m).UserAdd(rpc_pb2.AuthUserAddRequest(name=name, password="pw"), timeout=10, metadata=md(root))
    return root


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueAuthTest(harness.MemberTestCase):
    def test_consumer_needs_the_messages_it_reads_and_acks(self):
        m = self.new_member(["--bcrypt-cost", "4"])
        root = new_user(m, "worker")
        worker = give(m, root, "worker", "consumer-key", b"/q/jobs/c/", b"/q/jobs/c0")
        kv = m.kv()
        kv.Put(rpc_pb2.PutRequest(key=b"/q/jobs/p/one", value=b"payload"), timeout=10, metadata=md(root))
        stub = rpc_pb2_grpc.WatchStub(m.channel())

        # With permission on its consumer key only: the watch is refused as
        # etcd refuses a watch without READ, and nothing is delivered.
        for key in (b"/q/jobs/c/w1", b"/queue/jobs/c/w1"):
            req = rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=key))
            it = stub.Watch(iter([req]), timeout=5, metadata=md(worker))
            try:
                r = next(it)
            finally:
                it.cancel()
            self.assertTrue(r.created and r.canceled, (key, r))
            self.assertEqual(r.cancel_reason, CANCELED_DENIED)

        # READ over the queue's messages too: the message arrives.
        worker = give(m, root, "worker", "messages-read", b"/q/jobs/0", b"/q/jobs/:", auth_pb2.Permission.READ)
        requests = pyqueue.Queue()
        requests.put(rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"/q/jobs/c/w1")))
        done = threading.Event()

        def reqs():
            while not done.is_set():
                try:
                    yield requests.get(timeout=0.2)
                except pyqueue.Empty:
                    pass
        it = stub.Watch(reqs(), timeout=20, metadata=md(worker))
        try:
            delivered = None
            for r in it:
                self.assertFalse(r.canceled, r)
                if r.events:
                    delivered = r.events[0].kv.key
                    break
        finally:
            done.set()
            it.cancel()
        self.assertIsNotNone(delivered)
        self.assertTrue(delivered.startswith(b"/q/jobs/0"), delivered)
        idx_tail = delivered[len(b"/q/jobs/"):]

        # A consumer-scoped ack deletes the message: WRITE on it is needed.
        ack = rpc_pb2.DeleteRangeRequest(key=b"/q/jobs/c/w1/" + idx_tail)
        self.assertEqual(code_and_message(lambda: kv.DeleteRange(ack, timeout=10, metadata=md(worker))), DENIED)
        self.assertEqual(kv.Range(rpc_pb2.RangeRequest(key=delivered), timeout=10, metadata=md(root)).count, 1)
        worker = give(m, root, "worker", "messages-write", b"/q/jobs/0", b"/q/jobs/:", auth_pb2.Permission.WRITE)
        r = kv.DeleteRange(ack, timeout=10, metadata=md(worker))
        self.assertEqual(r.deleted, 1)
        self.assertEqual(kv.Range(rpc_pb2.RangeRequest(key=delivered), timeout=10, metadata=md(root)).count, 0)

    def test_producer_needs_write_on_the_messages(self):
        m = self.new_member(["--bcrypt-cost", "4"])
        root = new_user(m, "producer")
        tok = give(m, root, "producer", "produce-key", b"/q/jobs/p/", b"/q/jobs/p0", auth_pb2.Permission.WRITE)
        kv = m.kv()
        put = rpc_pb2.PutRequest(key=b"/q/jobs/p/one", value=b"payload")
        self.assertEqual(code_and_message(lambda: kv.Put(put, timeout=10, metadata=md(tok))), DENIED)
        messages = rpc_pb2.RangeRequest(key=b"/q/jobs/0", range_end=b"/q/jobs/:", count_only=True)
        self.assertEqual(kv.Range(messages, timeout=10, metadata=md(root)).count, 0)
        tok = give(m, root, "producer", "messages-write", b"/q/jobs/0", b"/q/jobs/:", auth_pb2.Permission.WRITE)
        kv.Put(put, timeout=10, metadata=md(tok))
        self.assertEqual(kv.Range(messages, timeout=10, metadata=md(root)).count, 1)

    def test_producer_only_and_consumer_only_roles(self):
        """The two roles of README's "Work queues", set up with etcdctl as written there; the
        consumer is examples/python/worker.py."""
        m = self.new_member(["--bcrypt-cost", "4"])
        root = new_user(m, "producer")
        auth_stub(m).UserAdd(rpc_pb2.AuthUserAddRequest(name="consumer", password="pw"), timeout=10,
                             metadata=md(root))

        def ctl(*args, user="root:" + ROOT_PW):
            r = subprocess.run([harness.ETCDCTL, "--endpoints", m.endpoint, "--user", user] + list(args),
                               capture_output=True, text=True, timeout=30, env=dict(os.environ, ETCDCTL_API="3"))
            return r
        for args in (("role", "add", "jobs-producer"),
                     ("role", "grant-permission", "jobs-producer", "write", "/q/jobs/p/", "--prefix"),
                     ("role", "grant-permission", "jobs-producer", "write", "/q/jobs/0", "/q/jobs/:"),
                     ("role", "add", "jobs-consumer"),
                     ("role", "grant-permission", "jobs-consumer", "readwrite", "/q/jobs/c/", "--prefix"),
                     ("role", "grant-permission", "jobs-consumer", "readwrite", "/q/jobs/0", "/q/jobs/:"),
                     ("user", "grant-role", "producer", "jobs-producer"),
                     ("user", "grant-role", "consumer", "jobs-consumer")):
            r = ctl(*args)
            self.assertEqual(r.returncode, 0, (args, r.stderr))

        # The producer produces; it reads nothing (a consumer watch needs READ: the first test)
        # and cannot configure.
        for i in range(3):
            r = ctl("put", "/q/jobs/p/t%d" % i, "v%d" % i, user="producer:pw")
            self.assertEqual(r.returncode, 0, r.stderr)
        for args in (("get", "--prefix", "/q/jobs/"), ("put", "/q/jobs/config", '{"max_deliveries": 1}')):
            r = ctl(*args, user="producer:pw")
            self.assertIn("permission denied", r.stderr, args)
        # The consumer cannot produce.
        r = ctl("put", "/q/jobs/p/forged", "x", user="consumer:pw")
        self.assertIn("permission denied", r.stderr)

        # The consumer consumes and acks: the example worker, as user "consumer".
        worker = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "worker.py")
        r = subprocess.run(["/usr/bin/python3", worker, "--endpoint", m.endpoint, "--queue", "jobs", "--max", "3",
                            "--user", "consumer", "--password", "pw"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertEqual(sorted(l.split()[-1] for l in r.stdout.splitlines() if l.startswith("handled ")),
                         ["v0", "v1", "v2"])
        messages = rpc_pb2.RangeRequest(key=b"/q/jobs/0", range_end=b"/q/jobs/:", count_only=True)
        self.assertEqual(m.kv().Range(messages, timeout=10, metadata=md(root)).count, 0)


if __name__ == "__main__":
    harness.main()
