#!/usr/bin/python3
"""Auth state is replicated: after a follower is SIGKILLed, auth changes and
enough writes that it must catch up by a snapshot install, and a restart,
every member reports the same auth revision (AuthStatus), users, roles and
permissions, and enforces them (issue #13).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_auth_cluster.py
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cluster import ClusterTestCase, main, read_varint  # noqa: E402
import grpc  # noqa: E402

import harness  # noqa: E402

HEARTBEAT_MS, ELECTION_MS = 50, 500
SNAPSHOT_COUNT = 50
ROOT = "root:rootpw"


def varints(buf):
    """The varint fields of a protobuf message (field number -> value)."""
    out, i = {}, 0
    while i < len(buf):
        key, i = read_varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            out[field], i = read_varint(buf, i)
        elif wire == 2:
            n, i = read_varint(buf, i)
            i += n
        else:
            raise ValueError("unexpected wire type %d" % wire)
    return out


def auth_status(member):
    """(enabled, authRevision) from Auth.AuthStatus (etcd 3.5's call; etcdctl 3.4 has no auth status)."""
    call = member.channel().unary_unary("/etcdserverpb.Auth/AuthStatus",
                                        request_serializer=lambda b: b, response_deserializer=lambda b: b)
    fields = varints(call(b"", timeout=10))
    return bool(fields.get(2, 0)), fields.get(3, 0)


class AuthClusterTest(ClusterTestCase):

    def test_auth_state_is_the_same_on_every_member_after_a_follower_kill9_and_catch_up(self):
        if harness.is_reference_etcd():
            self.skipTest("etcd 3.4 has no AuthStatus call")
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS, snapshot_count=SNAPSHOT_COUNT,
                             extra_args=["--bcrypt-cost", "4", "--snapshot-catchup-entries", str(SNAPSHOT_COUNT)])
        leader = c.leader_index()
        follower = next(i for i in range(3) if i != leader)
        ep = c.members[leader].endpoint
        c.etcdctl("user", "add", ROOT, endpoints=ep)
        c.etcdctl("role", "add", "root", endpoints=ep)
        c.etcdctl("user", "grant-role", "root", "root", endpoints=ep)
        c.etcdctl("auth", "enable", endpoints=ep)

        c.kill9(follower)
        for i in range(5):
            c.etcdctl("--user", ROOT, "user", "add", "u%d:pw%d" % (i, i), endpoints=ep)
            c.etcdctl("--user", ROOT, "role", "add", "r%d" % i, endpoints=ep)
            c.etcdctl("--user", ROOT, "role", "grant-permission", "--prefix", "r%d" % i, "readwrite",
                      "k%d/" % i, endpoints=ep)
            c.etcdctl("--user", ROOT, "user", "grant-role", "u%d" % i, "r%d" % i, endpoints=ep)
        c.etcdctl("--user", ROOT, "user", "delete", "u4", endpoints=ep)
        # Enough entries past the snapshot threshold that the restarted
        # follower gets a snapshot, not just the log.
        kv = c.kv(leader)
        from cluster import rpc_pb2  # noqa: E402
        token = harness_token(c.members[leader], "root", "rootpw")
        for i in range(4 * SNAPSHOT_COUNT):
            kv.Put(rpc_pb2.PutRequest(key=b"k0/%d" % i, value=b"v"), timeout=10, metadata=(("token", token),))

        # The harness's readiness probe is an anonymous Range, which auth
        # refuses: wait for AuthStatus to agree instead.
        c.restart(follower, wait=False)
        deadline = time.monotonic() + 30
        statuses = []
        while time.monotonic() < deadline:
            try:
                statuses = [auth_status(m) for m in c.members]
            except grpc.RpcError:
                time.sleep(0.2)
                continue
            if len(set(statuses)) == 1:
                break
            time.sleep(0.2)
        self.assertEqual(len(set(statuses)), 1, statuses)
        with open(c.members[follower].log_path) as f:
            self.assertIn("state restored from a snapshot", f.read(), "the follower caught up by the log only")
        self.assertTrue(statuses[0][0])
        self.assertGreater(statuses[0][1], 10)

        views = []
        for m in c.members:
            e = m.endpoint
            views.append((c.etcdctl("--user", ROOT, "user", "list", endpoints=e),
                          c.etcdctl("--user", ROOT, "role", "list", endpoints=e),
                          c.etcdctl("--user", ROOT, "role", "get", "r2", endpoints=e),
                          c.etcdctl("--user", ROOT, "user", "get", "u3", endpoints=e)))
        self.assertEqual(views[0], views[1])
        self.assertEqual(views[0], views[2])
        self.assertIn("u3", views[0][0])
        self.assertNotIn("u4", views[0][0])

        # The caught-up follower enforces what it received.
        fe = c.members[follower].endpoint
        c.etcdctl("--user", "u1:pw1", "put", "k1/a", "v", endpoints=fe)
        p = c.etcdctl("--user", "u1:pw1", "put", "k2/a", "v", endpoints=fe, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("etcdserver: permission denied", p.stderr)
        p = c.etcdctl("--user", "u4:pw4", "get", "k4/a", endpoints=fe, check=False)
        self.assertIn("etcdserver: authentication failed, invalid user ID or password", p.stderr)


def harness_token(member, user, password):
    from cluster import rpc_pb2, rpc_pb2_grpc  # noqa: E402
    stub = rpc_pb2_grpc.AuthStub(member.channel())
    return stub.Authenticate(rpc_pb2.AuthenticateRequest(name=user, password=password), timeout=10).token


if __name__ == "__main__":
    main()
