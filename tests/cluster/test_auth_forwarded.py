#!/usr/bin/python3
"""Calls a follower passes to the leader, with auth on (issue #13): a lease's
TimeToLive (with keys), its KeepAlive, and member add/promote/remove through a FOLLOWER work
for root and are refused for other users with etcd's messages; the same with
https:// client URLs (the follower reaches the leader over the peer URL,
whatever the client URLs' scheme). Checked against etcd 3.4 too:

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_auth_forwarded.py
    ETCDQ_BIN=/usr/bin/etcd /usr/bin/python3 tests/cluster/test_auth_forwarded.py
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
import tlslib  # noqa: E402

PERMISSION_DENIED = "etcdserver: permission denied"
USER_EMPTY = "etcdserver: user name is empty"
NOT_IN_SYNC = "etcdserver: can only promote a learner member which is in sync with leader"


def set_cluster(members):
    cluster = ",".join("%s=%s" % (m.name, m.peer_url) for m in members)
    for m in members:
        m.initial_cluster = cluster


def with_initial_cluster(args, cluster):
    a = list(args)
    a[a.index("--initial-cluster") + 1] = cluster
    return a


class PlainMember(harness.Member):
    def __init__(self, name, extra_args):
        self.initial_cluster = None
        super().__init__(extra_args, name=name, start=False)

    def args(self):
        return with_initial_cluster(super().args(), self.initial_cluster)


class HttpsMember(tlslib.TlsMember):
    def __init__(self, pki, name, extra_args):
        self.initial_cluster = None
        # No client-certificate check: the users here log in with passwords.
        super().__init__(pki, extra_args, tls_args=["--cert-file", pki.server, "--key-file", pki.server_key],
                         name=name, start=False)

    def args(self):
        return with_initial_cluster(super().args(), self.initial_cluster)


class ForwardedAuthTest(harness.MemberTestCase):

    def start_all(self, members):
        set_cluster(members)
        for m in members:
            m.start(wait=False)
        for m in members:
            m.wait_serving(timeout=30)

    def leader_and_follower(self, ctl, members):
        for m in members:
            r = ctl(m, "endpoint", "status", "-w", "json")
            self.assertEqual(r.returncode, 0, r.stderr)
            st = json.loads(r.stdout)[0]["Status"]
            if st["leader"] == st["header"]["member_id"]:
                return m, next(x for x in members if x is not m)
        self.fail("no leader")

    def check_forwarded_calls(self, members, ctl):
        """`ctl(member, *args)` runs etcdctl against one member."""
        leader, follower = self.leader_and_follower(ctl, members)

        def ok(*args, member=follower):
            r = ctl(member, *args)
            self.assertEqual(r.returncode, 0, "%s: %s" % (args, r.stderr))
            return r.stdout

        def refused(message, *args, member=follower):
            r = ctl(member, *args)
            self.assertNotEqual(r.returncode, 0, r.stdout)
            self.assertIn(message, r.stderr, args)
            return r.stderr

        ok("user", "add", "root:rootpw")
        ok("role", "add", "root")
        ok("user", "grant-role", "root", "root")
        ok("user", "add", "alice:alicepw")
        ok("role", "add", "reader")
        ok("role", "grant-permission", "--prefix", "reader", "read", "k/")
        ok("user", "grant-role", "alice", "reader")
        ok("user", "add", "bob:bobpw")
        ok("auth", "enable")
        root, alice, bob = "--user=root:rootpw", "--user=alice:alicepw", "--user=bob:bobpw"

        lease = re.search(r"lease ([0-9a-f]+) granted", ok(root, "lease", "grant", "600", member=leader)).group(1)
        ok(root, "put", "k/a", "v", "--lease=" + lease, member=leader)

        # The follower checks against the keys it has applied (as etcd's
        # follower checks its own lessor): wait until it has k/a.
        deadline = time.monotonic() + 10
        while "k/a" not in ok(root, "get", "k/a", "--consistency=s") and time.monotonic() < deadline:
            time.sleep(0.1)

        # LeaseTimeToLive on the follower: the remaining TTL is the leader's.
        out = ok(root, "lease", "timetolive", lease, "--keys")
        self.assertIn("remaining", out)
        self.assertIn("attached keys([k/a])", out)
        self.assertIn("attached keys([k/a])", ok(alice, "lease", "timetolive", lease, "--keys"))
        if not harness.is_reference_etcd():
            # etcd 3.5's checkLeaseTimeToLive (READ on every attached key);
            # etcd 3.4 has no such check and answers.
            refused(PERMISSION_DENIED, bob, "lease", "timetolive", lease, "--keys")
        self.assertIn("remaining", ok(bob, "lease", "timetolive", lease))
        if not harness.is_reference_etcd():
            refused(USER_EMPTY, "lease", "timetolive", lease)  # 3.5's requireAuthInfo; 3.4 answers

        if not harness.is_reference_etcd():
            # etcd 3.5's checkLeaseRenew on the member the client called,
            # before it forwards the renewal (root, or WRITE on every
            # attached key); etcd 3.4 renews for anyone.
            self.assertIn("keepalived with TTL", ok(root, "lease", "keep-alive", "--once", lease))
            refused(PERMISSION_DENIED, alice, "lease", "keep-alive", "--once", lease)

        # Member changes on the follower need root.
        spare = "http://127.0.0.1:%d" % harness.free_port()
        refused(PERMISSION_DENIED, alice, "member", "add", "spare", "--learner", "--peer-urls=" + spare)
        refused(USER_EMPTY, "member", "add", "spare", "--learner", "--peer-urls=" + spare)
        # etcd refuses a change until every member was connected for 5 s
        # ("etcdserver: unhealthy cluster", its --strict-reconfig-check).
        deadline = time.monotonic() + 30
        while True:
            r = ctl(follower, root, "member", "add", "spare", "--learner", "--peer-urls=" + spare)
            if r.returncode == 0 or "unhealthy cluster" not in r.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        mid = re.search(r"Member\s+([0-9a-f]+) added", out).group(1)  # etcdctl pads with %16x
        self.assertIn(spare, ok(root, "member", "list", member=leader))
        refused(PERMISSION_DENIED, alice, "member", "promote", mid)
        if not harness.is_reference_etcd():
            # Forwarded with root: the leader's own refusal comes back (etcd
            # 3.4's follower times out forwarding a promote to its leader).
            refused(NOT_IN_SYNC, root, "member", "promote", mid)
        refused(PERMISSION_DENIED, bob, "member", "remove", mid)
        ok(root, "member", "remove", mid)
        self.assertNotIn(spare, ok(root, "member", "list", member=leader))
        # The keys and the cluster are still served.
        self.assertIn("v", ok(alice, "get", "k/a"))

    def test_follower_forwards_with_auth_over_http_client_urls(self):
        members = [self.track(PlainMember("m%d" % i, ["--bcrypt-cost", "4"]
                                          if not harness.is_reference_etcd() else [])) for i in range(3)]
        self.start_all(members)

        def ctl(m, *args):
            return subprocess.run([harness.ETCDCTL, "--endpoints", m.endpoint, "--dial-timeout=3s",
                                   "--command-timeout=10s"] + list(args),
                                  env=dict(os.environ, ETCDCTL_API="3"), capture_output=True, text=True,
                                  timeout=30)
        self.check_forwarded_calls(members, ctl)

    def test_follower_forwards_with_auth_over_https_client_urls(self):
        pki = tlslib.Pki()
        self.addCleanup(pki.cleanup)
        extra = ["--bcrypt-cost", "4"] if not harness.is_reference_etcd() else []
        members = [self.track(HttpsMember(pki, "m%d" % i, extra)) for i in range(3)]
        self.start_all(members)

        def ctl(m, *args):
            return tlslib.etcdctl_tls("https://" + m.endpoint, pki.ca, None, None, *args)
        self.check_forwarded_calls(members, ctl)


if __name__ == "__main__":
    unittest.main(verbosity=2)
