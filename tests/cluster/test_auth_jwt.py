#!/usr/bin/python3
"""--auth-token jwt (issue #13), as etcd 3.5 (server/auth/jwt.go): a token
issued by one member is valid on every member, including a verify-only one
(pub-key only, whose own Authenticate fails); a tampered token, one signed
"none" and an expired one get "etcdserver: invalid auth token"; RS256 and
ES256; bad options and key files refuse the start with etcd's message.
Tokens are interchangeable with etcd 3.4's (same keys, same claims).
Checked against etcd 3.4 too where 3.4 behaves as 3.5:

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_auth_jwt.py
    ETCDQ_BIN=/usr/bin/etcd /usr/bin/python3 tests/cluster/test_auth_jwt.py
"""
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import grpc  # noqa: E402
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc  # noqa: E402

import harness  # noqa: E402
from test_auth import code_and_message  # noqa: E402

INVALID_TOKEN = (grpc.StatusCode.UNAUTHENTICATED, "etcdserver: invalid auth token")
ROOT_PW = "rootpw"


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


class Keys:
    """RSA and EC (P-256) key pairs in PEM, in a temp dir."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="etcdq-jwt-")
        p = self.path
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", p("rsa.key"))
        openssl("pkey", "-in", p("rsa.key"), "-pubout", "-out", p("rsa.pub"))
        openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", p("ec.key"))
        openssl("pkey", "-in", p("ec.key"), "-pubout", "-out", p("ec.pub"))
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", p("other.key"))
        openssl("pkey", "-in", p("other.key"), "-pubout", "-out", p("other.pub"))
        with open(p("garbage.pem"), "w") as f:
            f.write("not a key\n")

    def path(self, name):
        return os.path.join(self.dir, name)

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class JwtMember(harness.Member):
    def __init__(self, name, extra_args, initial_cluster=None):
        self.initial_cluster = initial_cluster
        super().__init__(extra_args, name=name, start=False)

    def args(self):
        a = super().args()
        if self.initial_cluster:
            a[a.index("--initial-cluster") + 1] = self.initial_cluster
        return a


def auth(m):
    return rpc_pb2_grpc.AuthStub(m.channel())


def token_of(m, user="root", password=ROOT_PW):
    return auth(m).Authenticate(rpc_pb2.AuthenticateRequest(name=user, password=password), timeout=10).token


def enable_auth(m):
    a = auth(m)
    a.UserAdd(rpc_pb2.AuthUserAddRequest(name="root", password=ROOT_PW), timeout=10)
    a.RoleAdd(rpc_pb2.AuthRoleAddRequest(name="root"), timeout=10)
    a.UserGrantRole(rpc_pb2.AuthUserGrantRoleRequest(user="root", role="root"), timeout=10)
    a.AuthEnable(rpc_pb2.AuthEnableRequest(), timeout=10)


def bcrypt_args():
    return [] if harness.is_reference_etcd() else ["--bcrypt-cost", "4"]


class JwtTest(harness.MemberTestCase):

    def setUp(self):
        self.keys = Keys()
        self.addCleanup(self.keys.cleanup)

    def jwt_flag(self, method, pub=None, priv=None, ttl=None):
        parts = ["jwt"]
        if pub:
            parts.append("pub-key=" + self.keys.path(pub))
        if priv:
            parts.append("priv-key=" + self.keys.path(priv))
        parts.append("sign-method=" + method)
        if ttl:
            parts.append("ttl=" + ttl)
        return ",".join(parts)

    def range_with(self, m, token):
        return m.kv().Range(rpc_pb2.RangeRequest(key=b"k"), timeout=10, metadata=(("token", token),))

    def test_rs256_token_from_one_member_is_valid_on_every_member(self):
        signing = self.jwt_flag("RS256", pub="rsa.pub", priv="rsa.key")
        verify_only = self.jwt_flag("RS256", pub="rsa.pub")
        members = [self.track(JwtMember("m%d" % i, bcrypt_args() + ["--auth-token", f]))
                   for i, f in enumerate([signing, signing, verify_only])]
        cluster = ",".join("%s=%s" % (m.name, m.peer_url) for m in members)
        for m in members:
            m.initial_cluster = cluster
            m.start(wait=False)
        for m in members:
            m.wait_serving(timeout=30)
        enable_auth(members[0])
        token = token_of(members[0])
        claims = json.loads(unb64(token.split(".")[1]))
        self.assertEqual(claims["username"], "root")
        self.assertIn("revision", claims)
        self.assertGreater(claims["exp"], time.time() + 200)   # etcd's default ttl: 5 minutes
        self.assertEqual(json.loads(unb64(token.split(".")[0]))["alg"], "RS256")
        for m in members:
            # A linearizable read first: it waits until m applied the
            # AuthEnable. A follower that had not would forward the put
            # without its user, and the leader refuses it ("user name is
            # empty"), as etcd's would (seen once in CI under load).
            self.range_with(m, token)
            m.kv().Put(rpc_pb2.PutRequest(key=b"k", value=m.name.encode()), timeout=10,
                       metadata=(("token", token),))
            self.assertEqual(self.range_with(m, token).kvs[0].value, m.name.encode())
        # Tokens from the second signing member work on the verify-only one.
        self.assertEqual(self.range_with(members[2], token_of(members[1])).count, 1)
        # A verify-only member cannot sign (etcd's ErrVerifyOnly).
        err = code_and_message(lambda: token_of(members[2]))
        self.assertIsNotNone(err)
        self.assertIn("verify-only key", err[1])

    def check_tokens_refused(self, m, token, method):
        """`token` is valid on `m`; tampered, unsigned or re-signed variants are not."""
        self.assertEqual(self.range_with(m, token).count, 0)
        header, payload, sig = token.split(".")
        claims = json.loads(unb64(payload))
        forged = dict(claims, username="someone-else")
        # The payload changed under the old signature.
        self.assertEqual(code_and_message(lambda: self.range_with(
            m, header + "." + b64(json.dumps(forged).encode()) + "." + sig)), INVALID_TOKEN)
        # One signature byte flipped.
        raw = bytearray(unb64(sig))
        raw[len(raw) // 2] ^= 1
        self.assertEqual(code_and_message(lambda: self.range_with(m, header + "." + payload + "." + b64(bytes(raw)))),
                         INVALID_TOKEN)
        # alg "none", no signature.
        none = b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
        self.assertEqual(code_and_message(lambda: self.range_with(m, none + "." + payload + ".")), INVALID_TOKEN)
        # HS256 with the public key as the HMAC secret (the classic alg confusion).
        import hashlib
        import hmac
        hs = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
        with open(self.keys.path("rsa.pub" if method.startswith("RS") else "ec.pub"), "rb") as f:
            secret = f.read()
        mac = hmac.new(secret, (hs + "." + payload).encode(), hashlib.sha256).digest()
        self.assertEqual(code_and_message(lambda: self.range_with(m, hs + "." + payload + "." + b64(mac))),
                         INVALID_TOKEN)
        self.assertEqual(code_and_message(lambda: self.range_with(m, "garbage")), INVALID_TOKEN)

    def test_es256_tokens_tampered_and_expired(self):
        m = self.track(JwtMember("default", bcrypt_args() + [
            "--auth-token", self.jwt_flag("ES256", pub="ec.pub", priv="ec.key", ttl="3s")]))
        m.start()
        enable_auth(m)
        token = token_of(m)
        self.assertEqual(json.loads(unb64(token.split(".")[0]))["alg"], "ES256")
        self.check_tokens_refused(m, token, "ES256")
        time.sleep(4.5)
        self.assertEqual(code_and_message(lambda: self.range_with(m, token)), INVALID_TOKEN)
        self.assertEqual(self.range_with(m, token_of(m)).count, 0)

    def test_rs256_priv_key_only_signs_and_verifies(self):
        m = self.track(JwtMember("default", bcrypt_args() + [
            "--auth-token", self.jwt_flag("RS256", priv="rsa.key")]))
        m.start()
        enable_auth(m)
        self.check_tokens_refused(m, token_of(m), "RS256")

    def test_tokens_interchange_with_etcd_3_4(self):
        # The same keys on etcd 3.4 and on the binary under test, the same
        # auth history (so the same auth revision): each accepts the
        # other's RS256 and ES256 tokens, whose claims are the same.
        if harness.is_reference_etcd() or not os.path.exists(harness.DEFAULT_BINARY):
            self.skipTest("needs etcdq and Debian's etcd")
        for method, pub, priv in (("RS256", "rsa.pub", "rsa.key"), ("ES256", "ec.pub", "ec.key")):
            with self.subTest(method=method):
                flag = ["--auth-token", self.jwt_flag(method, pub=pub, priv=priv)]
                ours = self.track(JwtMember("default", flag))
                etcd = self.track(harness.Member(flag, binary=harness.DEFAULT_BINARY, start=False))
                ours.start()
                etcd.start()
                tokens = {}
                for name, m in (("ours", ours), ("etcd", etcd)):
                    enable_auth(m)
                    tokens[name] = token_of(m)
                claims = {n: json.loads(unb64(t.split(".")[1])) for n, t in tokens.items()}
                self.assertEqual({n: sorted(c) for n, c in claims.items()},
                                 {n: ["exp", "revision", "username"] for n in claims})
                self.assertEqual(claims["ours"]["revision"], claims["etcd"]["revision"])
                for m in (ours, etcd):
                    for t in tokens.values():
                        self.assertEqual(self.range_with(m, t).count, 0)
                ours.cleanup()
                etcd.cleanup()

    def start_refused(self, flag):
        m = self.track(JwtMember("default", ["--auth-token", flag]))
        m.start(wait=False)
        try:
            m.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.fail("started with --auth-token %s" % flag)
        self.assertNotEqual(m.proc.returncode, 0)
        with open(m.log_path, errors="replace") as f:
            return f.read()

    def test_bad_options_and_key_files_refuse_the_start(self):
        pem = "invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key"
        cases = [
            (self.jwt_flag("RS256", pub="missing.pub", priv="rsa.key"), "auth: invalid auth options"),
            (self.jwt_flag("RS256", pub="garbage.pem", priv="rsa.key"), pem),
            (self.jwt_flag("RS256", pub="rsa.pub", priv="garbage.pem"), pem),
            (self.jwt_flag("ES256", pub="rsa.pub", priv="rsa.key"), "key is not a valid ECDSA private key"),
            (self.jwt_flag("ES256", pub="rsa.pub"), "key is not a valid ECDSA public key"),
            (self.jwt_flag("RS256", pub="ec.pub", priv="ec.key"), "key is not a valid RSA private key"),
            (self.jwt_flag("XX999", pub="rsa.pub", priv="rsa.key"), "auth: invalid auth options"),
            (self.jwt_flag("RS256"), "auth: missing key data"),
            (self.jwt_flag("RS256", pub="rsa.pub", priv="rsa.key") + ",ttl=soon", "auth: invalid auth options"),
            ("jwt,sign-method=RS256,sign-method=RS256", "auth: invalid auth options"),
            ("tokens-of-my-own", "auth: invalid auth options"),
        ]
        if not harness.is_reference_etcd():
            cases += [
                # etcd 3.5's check (options.go rsaKey); etcd 3.4 starts.
                (self.jwt_flag("RS256", pub="other.pub", priv="rsa.key"), "auth: public and private keys don't match"),
                # etcd 3.4 names the file only in an earlier log line.
                (self.jwt_flag("RS256", pub="missing.pub", priv="rsa.key"), "missing.pub"),
            ]
        for flag, message in cases:
            with self.subTest(flag=flag):
                self.assertIn(message, self.start_refused(flag))


if __name__ == "__main__":
    unittest.main(verbosity=2)
