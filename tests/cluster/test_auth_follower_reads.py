#!/usr/bin/python3
"""A linearizable read on a follower is checked against the auth state the
leader had when the read began (issue #13): right after a permission is
revoked, or auth enabled, on the leader, the follower refuses a read it
would have served before. etcd checks after its read index
(v3_server.go's Range); etcdq checked before its read barrier, and a
follower served alice a key she had just lost (an attack helper found it,
20 of 20 rounds). Checked against etcd 3.4 too:

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_auth_follower_reads.py
"""
import os
import sys
import time

import grpc
from etcd3.etcdrpc import auth_pb2, rpc_pb2, rpc_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
from test_auth_forwarded import PlainMember, set_cluster  # noqa: E402

ROUNDS = 10


class FollowerReadsTest(harness.MemberTestCase):
    def test_reads_on_a_follower_follow_the_leaders_auth_changes(self):
        members = [self.track(PlainMember("m%d" % i, ["--bcrypt-cost", "4"])) for i in range(3)]
        set_cluster(members)
        for m in members:
            m.start(wait=False)
        for m in members:
            m.wait_serving(timeout=30)
        leader = follower = None
        for m in members:
            st = m.maintenance().Status(rpc_pb2.StatusRequest(), timeout=10)
            if st.leader == st.header.member_id:
                leader = m
        self.assertIsNotNone(leader)
        follower = next(m for m in members if m is not leader)
        la, lkv = rpc_pb2_grpc.AuthStub(leader.channel()), leader.kv()
        fa, fkv = rpc_pb2_grpc.AuthStub(follower.channel()), follower.kv()
        lkv.Put(rpc_pb2.PutRequest(key=b"secret/a", value=b"s"), timeout=10)
        read = rpc_pb2.RangeRequest(key=b"secret/a")
        txn = rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_range=read)])

        # Auth enabled on the leader: the follower's next read has no user.
        for step in (la.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password="rootpw"), timeout=10),
                     la.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="root"), timeout=10),
                     la.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10),
                     la.UserAdd(rpc_pb2.AuthUserAddRequest(name="alice", password="alicepw"), timeout=10),
                     la.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="rd"), timeout=10),
                     la.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="alice", role="rd"), timeout=10)):
            self.assertIsNotNone(step)
        fkv.Range(read, timeout=10)  # auth off: anyone reads
        la.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)
        with self.assertRaises(grpc.RpcError) as cm:
            fkv.Range(read, timeout=10)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)  # "user name is empty"

        root = [("token", la.Authenticate(rpc_pb2.AuthenticateRequest(name="root", password="rootpw"),
                                          timeout=10).token)]
        perm = auth_pb2.Permission(permType=auth_pb2.Permission.READ, key=b"secret/", range_end=b"secret0")
        leaks = []
        for i in range(ROUNDS):
            la.RoleGrantPermission(rpc_pb2.AuthRoleGrantPermissionRequest(name="rd", perm=perm), timeout=10,
                                   metadata=root)
            deadline = time.monotonic() + 10
            while True:  # the follower's token is valid once it applied the grant
                try:
                    alice = [("token", fa.Authenticate(rpc_pb2.AuthenticateRequest(name="alice", password="alicepw"),
                                                       timeout=10).token)]
                    fkv.Range(read, timeout=10, metadata=alice)
                    break
                except grpc.RpcError:
                    self.assertLess(time.monotonic(), deadline, "alice never read after the grant")
                    time.sleep(0.02)
            la.RoleRevokePermission(rpc_pb2.AuthRoleRevokePermissionRequest(role="rd", key=b"secret/",
                                                                             range_end=b"secret0"),
                                    timeout=10, metadata=root)
            for what, call in (("range", lambda: fkv.Range(read, timeout=10, metadata=alice)),
                               ("read-only txn", lambda: fkv.Txn(txn, timeout=10, metadata=alice))):
                try:
                    call()
                    leaks.append((i, what))
                except grpc.RpcError as e:
                    # Denied, or the token is stale (the revoke moved the auth revision).
                    self.assertIn(e.code(), (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.INVALID_ARGUMENT,
                                             grpc.StatusCode.UNAUTHENTICATED), e.details())
        self.assertEqual(leaks, [], "reads served on the follower after the revoke returned on the leader")


if __name__ == "__main__":
    harness.main()
