#!/usr/bin/python3
"""LeaseKeepAlive with auth on, as etcd 3.5 checks it (v3_server.go
checkLeaseRenew, since 3.5.28): every request of the stream needs a user,
and root or WRITE on every key attached to the lease; a refusal ends the
stream with etcd's code and message. etcd 3.6 checks the same (the oracle
runs it too); etcd 3.4 checked nothing here (it renewed for anyone):

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_auth_lease_keepalive.py
"""
import unittest

import grpc
from etcd3.etcdrpc import auth_pb2, rpc_pb2, rpc_pb2_grpc

import harness
from test_auth import DENIED, code_and_message, enable_auth, md, token_of

USER_EMPTY = (grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: user name is empty")


def keep_alive(m, lease_id, token):
    """One request on a new LeaseKeepAlive stream; the TTL answered."""
    stub = rpc_pb2_grpc.LeaseStub(m.channel())
    responses = stub.LeaseKeepAlive(iter([rpc_pb2.LeaseKeepAliveRequest(ID=lease_id)]), timeout=10,
                                    metadata=md(token))
    return next(responses).TTL


class LeaseKeepAliveAuthTest(harness.MemberTestCase):

    def test_keep_alive_needs_write_on_every_attached_key(self):
        m = self.new_member(extra_args=["--bcrypt-cost", "4"])
        root = enable_auth(m)
        a = rpc_pb2_grpc.AuthStub(m.channel())
        for user, perm in (("writer", auth_pb2.Permission.WRITE), ("reader", auth_pb2.Permission.READ)):
            a.UserAdd(rpc_pb2.AuthUserAddRequest(name=user, password="pw"), timeout=10, metadata=md(root))
            a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name=user), timeout=10, metadata=md(root))
            a.RoleGrantPermission(rpc_pb2.AuthRoleGrantPermissionRequest(
                name=user, perm=auth_pb2.Permission(permType=perm, key=b"k/", range_end=b"k0")), timeout=10,
                metadata=md(root))
            a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user=user, role=user), timeout=10, metadata=md(root))
        lease = rpc_pb2_grpc.LeaseStub(m.channel())
        with_key = lease.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=600), timeout=10, metadata=md(root)).ID
        bare = lease.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=600), timeout=10, metadata=md(root)).ID
        m.kv().Put(rpc_pb2.PutRequest(key=b"k/a", value=b"v", lease=with_key), timeout=10, metadata=md(root))

        writer, reader = token_of(m, "writer", "pw"), token_of(m, "reader", "pw")
        self.assertGreater(keep_alive(m, with_key, root), 590)
        self.assertGreater(keep_alive(m, with_key, writer), 590)
        self.assertEqual(code_and_message(lambda: keep_alive(m, with_key, reader)), DENIED)
        self.assertEqual(code_and_message(lambda: keep_alive(m, with_key, None)), USER_EMPTY)
        # No key attached: any user may renew; an unknown lease answers TTL 0.
        self.assertGreater(keep_alive(m, bare, reader), 590)
        self.assertEqual(keep_alive(m, 0x7777, reader), 0)
        self.assertEqual(code_and_message(lambda: keep_alive(m, bare, "not-a-token")),
                         (grpc.StatusCode.UNAUTHENTICATED, "etcdserver: invalid auth token"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
