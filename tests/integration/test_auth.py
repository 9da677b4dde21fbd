"""etcd's authentication and authorization (issue #13) against the real binary,
checked the same way against etcd 3.6 when ETCDQ_BIN is unset (no exceptions
left: 3.6 checks nested txns, Compact (root only) and LeaseTimeToLive's keys,
and refuses Maintenance calls with PermissionDenied "etcdserver: permission
denied", as etcdq does; 3.4 did none of these):

- python-etcd3's user/password login (etcd3.client(user=, password=));
- a table over RPC x permission: every call refused without the permission
  etcd requires (with etcd's code and message) and allowed with exactly it;
- tokens: missing, invalid, expired after --auth-token-ttl;
- the JSON gateway's Authorization header.

Members run with --bcrypt-cost 4 (both binaries take it) to keep logins fast.
"""
import http.client
import json
import time
import unittest

import etcd3
import grpc
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc, auth_pb2

import harness

ROOT_PW = "rootpw"
PREFIX = b"t/"
PREFIX_END = b"t0"


def auth_stub(m):
    return rpc_pb2_grpc.AuthStub(m.channel())


def token_of(m, user, password):
    return auth_stub(m).Authenticate(rpc_pb2.AuthenticateRequest(name=user, password=password), timeout=10).token


def md(token):
    return (("token", token),) if token else ()


def enable_auth(m):
    a = auth_stub(m)
    a.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password=ROOT_PW), timeout=10)
    a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="root"), timeout=10)
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10)
    a.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)
    return token_of(m, "root", ROOT_PW)


def code_and_message(fn):
    try:
        fn()
        return None
    except grpc.RpcError as e:
        return (e.code(), e.details())


DENIED = (grpc.StatusCode.PERMISSION_DENIED, "etcdserver: permission denied")


class AuthTest(harness.MemberTestCase):

    def new_auth_member(self, *extra):
        return self.new_member(extra_args=["--bcrypt-cost", "4"] + list(extra))

    def test_auth_enable_needs_root_with_root_role(self):
        m = self.new_auth_member()
        a = auth_stub(m)
        self.assertEqual(code_and_message(lambda: a.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)),
                         (grpc.StatusCode.FAILED_PRECONDITION, "etcdserver: root user does not exist"))
        a.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password="x"), timeout=10)
        self.assertEqual(code_and_message(lambda: a.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)),
                         (grpc.StatusCode.FAILED_PRECONDITION, "etcdserver: root user does not have root role"))
        self.assertEqual(code_and_message(
            lambda: a.Authenticate(rpc_pb2.AuthenticateRequest(name="root", password="x"), timeout=10)),
            (grpc.StatusCode.FAILED_PRECONDITION, "etcdserver: authentication is not enabled"))

    def test_python_etcd3_user_password_login(self):
        m = self.new_auth_member()
        enable_auth(m)
        # python-etcd3 logs in at construction (Authenticate) and sends the
        # token as call credentials, which grpcio sends over TLS channels
        # only (against etcd too); the token it got works as etcd's.
        c = etcd3.client(host="127.0.0.1", port=m.client_port, user="root", password=ROOT_PW, timeout=10)
        token = dict(c.metadata)["token"]
        m.kv().Put(rpc_pb2.PutRequest(key=b"py", value=b"1"), timeout=10, metadata=md(token))
        got = m.kv().Range(rpc_pb2.RangeRequest(key=b"py"), timeout=10, metadata=md(token))
        self.assertEqual(got.kvs[0].value, b"1")
        c.close()
        with self.assertRaises(Exception) as ctx:
            etcd3.client(host="127.0.0.1", port=m.client_port, user="root", password="bad", timeout=10)
        self.assertIn("authentication failed, invalid user ID or password", str(ctx.exception))
        anon = etcd3.client(host="127.0.0.1", port=m.client_port, timeout=10)
        with self.assertRaises(Exception) as ctx:
            anon.get("py")
        self.assertIn("user name is empty", str(ctx.exception))
        anon.close()

    def test_tokens_missing_invalid_and_expired(self):
        m = self.new_auth_member("--auth-token-ttl", "2")
        root = enable_auth(m)
        kv = m.kv()
        req = rpc_pb2.RangeRequest(key=b"a")
        self.assertEqual(code_and_message(lambda: kv.Range(req, timeout=10)),
                         (grpc.StatusCode.INVALID_ARGUMENT, "etcdserver: user name is empty"))
        self.assertEqual(code_and_message(lambda: kv.Range(req, timeout=10, metadata=md("bogus.1"))),
                         (grpc.StatusCode.UNAUTHENTICATED, "etcdserver: invalid auth token"))
        kv.Range(req, timeout=10, metadata=md(root))
        # Each use restarts the TTL; 2 s unused (etcd's keeper ticks each second) ends it.
        time.sleep(4.5)
        self.assertEqual(code_and_message(lambda: kv.Range(req, timeout=10, metadata=md(root))),
                         (grpc.StatusCode.UNAUTHENTICATED, "etcdserver: invalid auth token"))
        kv.Range(req, timeout=10, metadata=md(token_of(m, "root", ROOT_PW)))

    def test_deleted_user_and_changed_password_end_tokens(self):
        m = self.new_auth_member()
        root = enable_auth(m)
        a = auth_stub(m)
        a.UserAdd(rpc_pb2.AuthUserAddRequest(name="u", password="p"), timeout=10, metadata=md(root))
        a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="r"), timeout=10, metadata=md(root))
        a.RoleGrantPermission(rpc_pb2.AuthRoleGrantPermissionRequest(
            name="r", perm=auth_pb2.Permission(permType=auth_pb2.Permission.READ, key=b"a")),
            timeout=10, metadata=md(root))
        a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="u", role="r"), timeout=10, metadata=md(root))
        tok = token_of(m, "u", "p")
        kv = m.kv()
        kv.Range(rpc_pb2.RangeRequest(key=b"a"), timeout=10, metadata=md(tok))
        a.UserChangePassword(rpc_pb2.AuthUserChangePasswordRequest(name="u", password="p2"),
                             timeout=10, metadata=md(root))
        self.assertEqual(code_and_message(
            lambda: kv.Range(rpc_pb2.RangeRequest(key=b"a"), timeout=10, metadata=md(tok))),
            (grpc.StatusCode.UNAUTHENTICATED, "etcdserver: invalid auth token"))
        self.assertEqual(code_and_message(lambda: token_of(m, "u", "p")),
                         (grpc.StatusCode.INVALID_ARGUMENT,
                          "etcdserver: authentication failed, invalid user ID or password"))
        tok = token_of(m, "u", "p2")
        a.UserDelete(rpc_pb2.AuthUserDeleteRequest(name="u"), timeout=10, metadata=md(root))
        self.assertEqual(code_and_message(
            lambda: kv.Range(rpc_pb2.RangeRequest(key=b"a"), timeout=10, metadata=md(tok))),
            (grpc.StatusCode.UNAUTHENTICATED, "etcdserver: invalid auth token"))

    def test_rpc_by_permission_table(self):
        m = self.new_auth_member()
        root = enable_auth(m)
        a = auth_stub(m)
        kinds = {"none": None, "read": auth_pb2.Permission.READ, "write": auth_pb2.Permission.WRITE,
                 "rw": auth_pb2.Permission.READWRITE}
        tokens = {"root": root}
        for name, perm in kinds.items():
            a.UserAdd(rpc_pb2.AuthUserAddRequest(name=name, password="pw"), timeout=10, metadata=md(root))
            if perm is not None:
                a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="role-" + name), timeout=10, metadata=md(root))
                a.RoleGrantPermission(rpc_pb2.AuthRoleGrantPermissionRequest(
                    name="role-" + name, perm=auth_pb2.Permission(permType=perm, key=PREFIX, range_end=PREFIX_END)),
                    timeout=10, metadata=md(root))
                a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user=name, role="role-" + name),
                                timeout=10, metadata=md(root))
        for name in kinds:
            tokens[name] = token_of(m, name, "pw")

        kv = m.kv()
        mt = m.maintenance()
        ls = m.lease_stub()
        kv.Put(rpc_pb2.PutRequest(key=b"t/a", value=b"1"), timeout=10, metadata=md(root))

        def leased_key():
            lease = ls.LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=60), timeout=10, metadata=md(root)).ID
            kv.Put(rpc_pb2.PutRequest(key=b"t/l", value=b"x", lease=lease), timeout=10, metadata=md(root))
            return lease

        def txn(compare_key=None, success=()):
            t = rpc_pb2.TxnRequest(success=list(success))
            if compare_key:
                t.compare.append(rpc_pb2.Compare(key=compare_key, target=rpc_pb2.Compare.VERSION,
                                                 result=rpc_pb2.Compare.GREATER, version=0))
            return t

        put_op = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"t/a", value=b"2"))
        range_op = rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"t/a"))
        nested_put = rpc_pb2.RequestOp(request_txn=rpc_pb2.TxnRequest(success=[put_op]))
        role_counter = [0]

        def role_add(tok):
            role_counter[0] += 1
            a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="x%d" % role_counter[0]), timeout=10, metadata=md(tok))

        # (what, call with a token, who needs: read, write, rw or root)
        table = [
            ("Range key", lambda t: kv.Range(rpc_pb2.RangeRequest(key=b"t/a"), timeout=10, metadata=md(t)), "read"),
            ("Range prefix", lambda t: kv.Range(rpc_pb2.RangeRequest(key=PREFIX, range_end=PREFIX_END),
                                                timeout=10, metadata=md(t)), "read"),
            ("Range outside", lambda t: kv.Range(rpc_pb2.RangeRequest(key=b"u"), timeout=10, metadata=md(t)),
             "root"),
            ("Put", lambda t: kv.Put(rpc_pb2.PutRequest(key=b"t/a", value=b"1"), timeout=10, metadata=md(t)),
             "write"),
            ("Put prev_kv", lambda t: kv.Put(rpc_pb2.PutRequest(key=b"t/a", value=b"1", prev_kv=True),
                                             timeout=10, metadata=md(t)), "rw"),
            ("DeleteRange", lambda t: kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"t/zz"), timeout=10,
                                                     metadata=md(t)), "write"),
            ("DeleteRange prev_kv", lambda t: kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"t/zz", prev_kv=True),
                                                             timeout=10, metadata=md(t)), "rw"),
            ("Txn compare+put", lambda t: kv.Txn(txn(b"t/a", [put_op]), timeout=10, metadata=md(t)), "rw"),
            ("Txn read-only", lambda t: kv.Txn(txn(None, [range_op]), timeout=10, metadata=md(t)), "read"),
            ("Txn nested put", lambda t: kv.Txn(txn(None, [nested_put]), timeout=10, metadata=md(t)), "write"),
            ("Compact", lambda t: kv.Compact(rpc_pb2.CompactionRequest(revision=1), timeout=10, metadata=md(t)),
             "root"),
            ("LeaseRevoke", lambda t: ls.LeaseRevoke(rpc_pb2.LeaseRevokeRequest(ID=leased_key()), timeout=10,
                                                     metadata=md(t)), "write"),
            ("LeaseTimeToLive keys", lambda t: ls.LeaseTimeToLive(
                rpc_pb2.LeaseTimeToLiveRequest(ID=leased_key(), keys=True), timeout=10, metadata=md(t)), "read"),
            ("Defragment", lambda t: mt.Defragment(rpc_pb2.DefragmentRequest(), timeout=30, metadata=md(t)), "root"),
            ("HashKV", lambda t: mt.HashKV(rpc_pb2.HashKVRequest(), timeout=10, metadata=md(t)), "root"),
            ("UserList", lambda t: a.UserList(rpc_pb2.AuthUserListRequest(), timeout=10, metadata=md(t)), "root"),
            ("RoleList", lambda t: a.RoleList(rpc_pb2.AuthRoleListRequest(), timeout=10, metadata=md(t)), "root"),
            ("RoleAdd", role_add, "root"),
        ]
        allowed = {"read": {"read", "rw", "root"}, "write": {"write", "rw", "root"}, "rw": {"rw", "root"},
                   "root": {"root"}}
        failures = []
        for what, call, need in table:
            for who in ["none", "read", "write", "rw", "root"]:
                got = code_and_message(lambda: call(tokens[who]))
                want_ok = who in allowed[need]
                if want_ok and got is not None:
                    failures.append("%s as %s: refused %r" % (what, who, got))
                if not want_ok and got != DENIED:
                    failures.append("%s as %s: want permission denied, got %r" % (what, who, got))
        self.maxDiff = None
        self.assertEqual(failures, [])

    def test_watch_needs_read(self):
        m = self.new_auth_member()
        root = enable_auth(m)
        a = auth_stub(m)
        a.UserAdd(rpc_pb2.AuthUserAddRequest(name="w", password="pw"), timeout=10, metadata=md(root))
        tok = token_of(m, "w", "pw")
        stub = rpc_pb2_grpc.WatchStub(m.channel())

        def first_response(token):
            req = rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=b"t/a"))
            it = stub.Watch(iter([req]), timeout=5, metadata=md(token))
            try:
                return next(it)
            finally:
                it.cancel()
        r = first_response(tok)
        self.assertTrue(r.created)
        self.assertTrue(r.canceled)
        self.assertEqual(r.cancel_reason, "rpc error: code = PermissionDenied desc = etcdserver: permission denied")
        r = first_response(root)
        self.assertTrue(r.created)
        self.assertFalse(r.canceled)

    def test_json_gateway_authorization_header(self):
        m = self.new_auth_member()
        enable_auth(m)

        def post(path, body, token=None):
            c = http.client.HTTPConnection("127.0.0.1", m.client_port, timeout=10)
            headers = {"Content-Type": "application/json"}
            if token:
                headers["Authorization"] = token
            c.request("POST", path, json.dumps(body), headers)
            r = c.getresponse()
            out = json.loads(r.read() or b"{}")
            c.close()
            return r.status, out
        status, out = post("/v3/auth/authenticate", {"name": "root", "password": ROOT_PW})
        self.assertEqual(status, 200, out)
        token = out["token"]
        status, out = post("/v3/kv/put", {"key": "Zw==", "value": "MQ=="})
        self.assertNotEqual(status, 200)
        self.assertIn("user name is empty", json.dumps(out))
        status, out = post("/v3/kv/put", {"key": "Zw==", "value": "MQ=="}, token)
        self.assertEqual(status, 200, out)


if __name__ == "__main__":
    harness.main()
