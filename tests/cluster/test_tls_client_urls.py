#!/usr/bin/python3
"""A 3-member cluster whose client URLs are https:// (peer URLs http://
here; peer TLS: test_peer_tls.py) serves etcdctl over TLS on every member:
a write through a follower (forwarded to the leader over the peer URL)
is read back through the others, and MemberList reports each member's
https:// client URL as given (src/net/tls_pump.h).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_tls_client_urls.py
"""
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
import tlslib  # noqa: E402


class ClusterMember(tlslib.TlsMember):
    def __init__(self, pki, name, extra_args):
        self.initial_cluster = None
        super().__init__(pki, extra_args, name=name, start=False)

    def args(self):
        a = super().args()
        i = a.index("--initial-cluster")
        a[i + 1] = self.initial_cluster
        return a


class TlsClusterTest(harness.MemberTestCase):
    def test_three_members_serve_etcdctl_over_tls(self):
        pki = tlslib.Pki()
        self.addCleanup(pki.cleanup)
        members = [self.track(ClusterMember(pki, "m%d" % i, ["--client-cert-auth"])) for i in range(3)]
        cluster = ",".join("%s=%s" % (m.name, m.peer_url) for m in members)
        for m in members:
            m.initial_cluster = cluster
            m.wait_serving = lambda timeout=None: None  # the others are not up yet
            m.start()
        for m in members:
            del m.wait_serving
            m.wait_serving(timeout=30)
        endpoints = ",".join(m.endpoint for m in members)

        def ctl(endpoint, *args):
            return tlslib.etcdctl_tls(endpoint, pki.ca, pki.client, pki.client_key, *args)

        for i, m in enumerate(members):
            r = ctl(m.endpoint, "put", "k%d" % i, "v%d" % i)
            self.assertEqual(r.returncode, 0, r.stderr)
        for m in members:
            r = ctl(m.endpoint, "get", "k", "--prefix")
            self.assertEqual(r.stdout.split(), ["k0", "v0", "k1", "v1", "k2", "v2"], r.stderr)
        r = ctl(endpoints, "member", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        for m in members:
            self.assertIn(m.client_url, r.stdout)
        r = ctl(endpoints, "endpoint", "health", "--cluster")
        self.assertEqual(r.returncode, 0, r.stderr)
        # etcdctl 3.4 prints the health lines on stderr.
        self.assertEqual((r.stdout + r.stderr).count("is healthy"), 3, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
