#!/usr/bin/python3
"""User and role names are bounded (src/auth/store.h kMaxNameBytes): a name
is a key of the authUsers/authRoles bucket in a snapshot's bbolt file, and
bbolt takes keys of at most 32768 bytes. A longer UserAdd or RoleAdd is
refused with InvalidArgument and changes nothing; names of exactly the limit
are kept and a snapshot with them is saved and reads back as etcd's
(etcdutl snapshot status). etcd (3.4, 3.6) itself has no bound and dies applying
such a name ("mvcc/backend: cannot put key into bucket (key too large)"), so
this runs against etcdq only:

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_auth_name_limits.py
"""
import os
import shutil
import subprocess
import tempfile
import unittest

import grpc
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc

import harness
from test_auth import code_and_message

LIMIT = 32768


class NameLimitTest(harness.MemberTestCase):

    def test_names_longer_than_a_bbolt_key_are_refused_and_the_limit_snapshots(self):
        if harness.is_reference_etcd():
            self.skipTest("etcd (3.4, 3.6) has no bound: it dies applying such a name")
        m = self.new_member(extra_args=["--bcrypt-cost", "4"])
        a = rpc_pb2_grpc.AuthStub(m.channel())
        long_user, long_role = "u" * (LIMIT + 1), "r" * (LIMIT + 1)
        self.assertEqual(code_and_message(lambda: a.UserAdd(
            rpc_pb2.AuthUserAddRequest(name=long_user, password="pw"), timeout=10)),
            (grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: user name is too long (at most 32768 bytes)"))
        self.assertEqual(code_and_message(lambda: a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name=long_role), timeout=10)),
                         (grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: role name is too long (at most 32768 bytes)"))
        # A 1 MiB name, under --max-request-bytes, is refused the same way.
        self.assertEqual(code_and_message(lambda: a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="x" * (1 << 20)),
                                                            timeout=10))[0], grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(list(a.UserList(rpc_pb2.AuthUserListRequest(), timeout=10).users), [])
        self.assertEqual(list(a.RoleList(rpc_pb2.AuthRoleListRequest(), timeout=10).roles), [])

        user, role = "u" * LIMIT, "r" * LIMIT
        a.UserAdd(rpc_pb2.AuthUserAddRequest(name=user, password="pw"), timeout=10)
        a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name=role), timeout=10)
        a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user=user, role=role), timeout=10)
        self.assertEqual(list(a.UserList(rpc_pb2.AuthUserListRequest(), timeout=10).users), [user])

        d = tempfile.mkdtemp(prefix="etcdq-names-")
        self.addCleanup(shutil.rmtree, d, True)
        snap = os.path.join(d, "snap.db")
        env = dict(os.environ, ETCDCTL_API="3")
        p = subprocess.run([harness.ETCDCTL, "--endpoints", m.endpoint, "snapshot", "save", snap],
                           capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        # etcdctl 3.6 has no `snapshot status`: etcdutl has it.
        p = subprocess.run([harness.ETCDUTL, "snapshot", "status", snap, "-w", "json"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn('"totalKey"', p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
