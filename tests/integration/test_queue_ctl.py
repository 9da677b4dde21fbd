"""`etcdq queue ls|stat|peek|redrive|purge` (src/queue/ctl.h), the real binary as a
client of a real member over gRPC: what it prints after real produces,
deliveries and dead letters, what it changes, and its errors (one line, exit
1); stat's in flight, consumers and rates, read from the same member's
/queues.json/NAME. Then over TLS with auth, with etcdctl's flags. etcdq-only
(etcd has no queues)."""
import json
import os
import re
import subprocess
import threading
import time
import unittest

from etcd3.etcdrpc import auth_pb2, rpc_pb2, rpc_pb2_grpc

import harness
import tlslib
import watchlib
from queue_util import msg_key, wait_until
from test_auth import ROOT_PW, enable_auth, md
from test_queue_auth import give, new_user


def ctl(endpoint, *args, extra=()):
    """Runs `etcdq queue ARGS` against `endpoint`; returns the CompletedProcess."""
    cmd = [harness.binary_under_test(), "queue", "--endpoints", endpoint, "--dial-timeout", "3"] + list(extra)
    return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=30)


def hold_one(test, channel, key, token=None):
    """A consumer watch on `key` that takes one delivery and never acks it (open until the
    test ends); returns the delivered message's key."""
    stop = threading.Event()

    def reqs():
        yield rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=key))
        stop.wait()
    it = rpc_pb2_grpc.WatchStub(channel).Watch(reqs(), timeout=30, metadata=md(token))
    test.addCleanup(it.cancel)
    test.addCleanup(stop.set)
    for r in it:
        test.assertFalse(r.canceled, r)
        if r.events:
            return r.events[0].kv.key.decode()


def member_id(m, token=None):
    return m.kv().Range(rpc_pb2.RangeRequest(key=b"x"), timeout=10, metadata=md(token)).header.member_id


def messages(m, queue, token=None):
    r = m.kv().Range(rpc_pb2.RangeRequest(key=("/q/%s/0" % queue).encode(),
                                          range_end=("/q/%s/:" % queue).encode()),
                     timeout=10, metadata=md(token))
    return [(kv.key.decode(), kv.value) for kv in r.kvs]


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueCtl(harness.MemberTestCase):
    def ok(self, r):
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_ls_stat_peek_redrive_purge(self):
        m = self.new_member()
        c = m.client()
        for i in range(3):
            c.put("/q/jobs/p/t%d" % i, "payload %d" % i)
        c.put("/q/other/p/x", "x")
        c.put("/q/slow/config", '{"visibility_timeout": 0.2, "max_deliveries": 1}')
        c.put("/q/slow/p/a", "alpha")
        c.put("/q/slow/p/b/with/slashes", "beta")

        # A consumer that never acks: both slow messages become dead letters.
        ws = watchlib.WatchStream(watchlib.ready_channel(m))
        self.addCleanup(ws.close)
        ws.create(b"/q/slow/c/lazy")
        self.assertTrue(wait_until(lambda: len(messages(m, "slow.dlq")) == 2, 10), messages(m, "slow"))
        ws.close()

        lines = self.ok(ctl(m.endpoint, "ls")).splitlines()
        self.assertEqual(lines[0].split(), ["QUEUE", "DEPTH"])
        rows = dict(l.split() for l in lines[1:])
        self.assertEqual(rows, {"jobs": "3", "other": "1", "slow": "0", "slow.dlq": "2"})

        out = self.ok(ctl(m.endpoint, "stat", "jobs", "--interval", "0"))
        self.assertIn("depth:         3\n", out)
        self.assertIn("oldest:        idx 1 (%s)" % msg_key("jobs", 1, "t0"), out)
        self.assertIn("newest:        idx 3 (%s)" % msg_key("jobs", 3, "t2"), out)
        self.assertIn("dead letters:  0 (queue jobs.dlq)", out)
        self.assertIn("visibility_timeout 30 s, max_deliveries 5, max_in_flight 64 (defaults)", out)
        self.assertIn("in flight:     0\nconsumers:     0 on member %x " % member_id(m), out)
        self.assertIn("totals:        produced 3, delivered 0, redelivered 0, acked 0, dead-lettered 0\n", out)
        self.assertNotIn("rates:", out)  # --interval 0: one read
        out = self.ok(ctl(m.endpoint, "stat", "slow", "--interval", "0"))
        self.assertIn("dead letters:  2 (queue slow.dlq)", out)
        self.assertIn("visibility_timeout 0.2 s, max_deliveries 1", out)
        self.assertIn("totals:        produced 2, delivered 2, redelivered 0, acked 0, dead-lettered 2\n", out)

        # A delivery not acked: in flight 1 to the one consumer here; rates over two reads.
        c.put("/q/live/p/held", "h")
        self.assertEqual(hold_one(self, m.channel(), b"/q/live/c/w1"), msg_key("live", 1, "held"))
        out = self.ok(ctl(m.endpoint, "stat", "live", "--interval", "0.2"))
        self.assertIn("depth:         1\n", out)
        self.assertIn("in flight:     1\nconsumers:     1 on member %x " % member_id(m), out)
        self.assertRegex(out, r"\noldest age:    \d+\.\d s\n")
        self.assertRegex(out, r"\nrates:         produced 0\.0/s, delivered 0\.0/s, acked 0\.0/s \(over 0\.\d s\)\n")
        self.assertIn("totals:        produced 1, delivered 1, redelivered 0, acked 0, dead-lettered 0\n", out)

        out = self.ok(ctl(m.endpoint, "peek", "jobs", "2"))
        self.assertEqual(out, "idx 1  tail t0  (%s)\npayload 0\nidx 2  tail t1  (%s)\npayload 1\n" % (
            msg_key("jobs", 1, "t0"), msg_key("jobs", 2, "t1")))
        self.assertEqual(len(messages(m, "jobs")), 3)  # peek changes nothing

        # Redrive: each dead letter back into `slow` as a new message, same tail and payload.
        out = self.ok(ctl(m.endpoint, "redrive", "slow.dlq"))
        self.assertEqual(out, "redrove 2 messages from slow.dlq to slow\n")
        self.assertEqual(messages(m, "slow.dlq"), [])
        self.assertEqual(messages(m, "slow"), [(msg_key("slow", 3, "a"), b"alpha"),
                                               (msg_key("slow", 4, "b/with/slashes"), b"beta")])

        out = self.ok(ctl(m.endpoint, "purge", "jobs"))
        self.assertEqual(out, "purged 3 messages from jobs\n")
        self.assertEqual(messages(m, "jobs"), [])
        self.assertEqual(len(messages(m, "other")), 1)
        self.assertEqual(self.ok(ctl(m.endpoint, "purge", "other")), "purged 1 message from other\n")

        # etcdctl's environment variables: ETCDCTL_ENDPOINTS names the member; the flag wins over it.
        env = dict(os.environ, ETCDCTL_ENDPOINTS=m.endpoint)
        r = subprocess.run([harness.binary_under_test(), "queue", "ls"], capture_output=True, text=True, timeout=30,
                           env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("slow", r.stdout)
        dead = "127.0.0.1:%d" % harness.free_port()
        r = subprocess.run([harness.binary_under_test(), "queue", "ls", "--endpoints", dead, "--dial-timeout", "0.5"],
                           capture_output=True, text=True, timeout=30, env=env)
        self.assertEqual(r.returncode, 1, r.stdout)

    def test_errors_are_one_line_and_exit_1(self):
        # HTTP on its own URL: the client URL serves gRPC only, as etcd's does then.
        http_url = "http://127.0.0.1:%d" % harness.free_port()
        m = self.new_member(["--listen-client-http-urls", http_url])
        dead = "127.0.0.1:%d" % harness.free_port()
        r = ctl(dead, "ls", extra=["--dial-timeout", "0.5"])
        self.assertEqual((r.returncode, r.stderr),
                         (1, "etcdq queue: cannot connect to %s within --dial-timeout\n" % dead))
        r = ctl(m.endpoint, "redrive", "jobs")
        self.assertEqual((r.returncode, r.stderr),
                         (1, 'etcdq queue: redrive: name a dead-letter queue (NAME.dlq), got "jobs"\n'))
        r = ctl(m.endpoint, "stat", "a/b")
        self.assertEqual(r.returncode, 1)
        self.assertIn("one non-empty path segment", r.stderr)
        r = ctl(m.endpoint, "frobnicate")
        self.assertNotEqual(r.returncode, 0)

        # No /queues.json on the gRPC endpoint: stat keeps its key figures and says so in one line.
        m.client().put("/q/jobs/p/a", "a")
        r = ctl(m.endpoint, "stat", "jobs")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("depth:         1\n", r.stdout)
        self.assertRegex(r.stdout, r"\nsettings: [^\n]*\nin flight, consumers, rates, oldest age: unknown "
                         r"\(GET http://%s/queues\.json/jobs: no HTTP answer [^\n]+\)\n$" % re.escape(m.endpoint))
        # --http-endpoint names where it is.
        out = self.ok(ctl(m.endpoint, "stat", "jobs", "--interval", "0", "--http-endpoint", http_url))
        self.assertIn("in flight:     0\n", out)
        self.assertIn("totals:        produced 1, delivered 0,", out)

        # A server that drips its headers, or a chunked body, a little at a time (each read
        # within --command-timeout): stat still ends by --dial-timeout plus --command-timeout,
        # with its key figures and one line (httplib's timeouts alone are for each read).
        for drip in (b"X-Drip: 1\r\n", b"1\r\n \r\n"):
            with DripServer(drip) as url:
                t0 = time.monotonic()
                r = ctl(m.endpoint, "stat", "jobs", "--interval", "0", "--http-endpoint", url,
                        extra=["--dial-timeout", "0.5", "--command-timeout", "1"])
                took = time.monotonic() - t0
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertLess(took, 8, drip)
            self.assertIn("depth:         1\n", r.stdout)
            self.assertRegex(r.stdout, r"\nin flight, consumers, rates, oldest age: unknown \(GET %s/queues\.json/"
                             r"jobs: no whole answer within --dial-timeout plus --command-timeout\)\n$"
                             % re.escape(url))


class DripServer:
    """An HTTP server on a free loopback port that answers every request with a 200 whose
    `drip` (a header line, or a chunk when it starts with a hex size) comes every 0.1 s
    until it stops; `with` gives its URL."""

    def __init__(self, drip):
        self.drip = drip
        self.stop = threading.Event()

    def __enter__(self):
        import socket
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        return "http://127.0.0.1:%d" % self.sock.getsockname()[1]

    def _serve(self):
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            with c:
                try:
                    c.recv(65536)
                    head = b"HTTP/1.1 200 OK\r\n"
                    if not self.drip.startswith(b"X-"):
                        head += b"Transfer-Encoding: chunked\r\n\r\n"
                    c.sendall(head)
                    while not self.stop.wait(0.1):
                        c.sendall(self.drip)
                except OSError:
                    pass

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)
        self.sock.close()


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueCtlTlsAuth(harness.CleanupTestCase):
    def test_tls_and_auth_flags(self):
        pki = tlslib.Pki()
        self.addCleanup(pki.cleanup)
        m = self.track(tlslib.TlsMember(pki, ["--bcrypt-cost", "4"], http_too=True))
        root = new_user(m, "viewer")
        m.kv().Put(rpc_pb2.PutRequest(key=b"/q/jobs/p/one", value=b"1"), timeout=10, metadata=md(root))
        # The server wants a client certificate (--trusted-ca-file); its CN names no user.
        cert, key = pki.issue("anon", "nobody", pki.ca, pki.ca_key, "extendedKeyUsage=clientAuth\n")
        tls = ["--cacert", pki.ca, "--cert", cert, "--key", key]
        url = "https://" + m.endpoint

        # No user: the server's auth error, as one line.
        r = ctl(url, "stat", "jobs", "--interval", "0", extra=tls)
        self.assertEqual(r.returncode, 1)
        self.assertRegex(r.stderr, r"^etcdq queue: range: etcdserver: [^\n]*\n$")
        r = ctl(url, "stat", "jobs", extra=tls + ["--user", "root", "--password", "wrong"])
        self.assertEqual((r.returncode, r.stderr),
                         (1, "etcdq queue: authenticate: etcdserver: authentication failed, invalid user ID or password\n"))
        # Delivered to a consumer (root's watch) and not acked: stat reads in flight and consumers
        # from the member's /queues.json/jobs over the same TLS, with the token --user got.
        self.assertEqual(hold_one(self, m.channel(), b"/q/jobs/c/w1", root), msg_key("jobs", 1, "one"))
        out = ctl(url, "stat", "jobs", "--interval", "0", extra=tls + ["--user", "root:" + ROOT_PW])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("depth:         1\n", out.stdout)
        self.assertIn("in flight:     1\nconsumers:     1 on member %x " % member_id(m, root), out.stdout)
        # --http-endpoint http://...: plain HTTP there, though the TLS flags stay for gRPC.
        out = ctl(url, "stat", "jobs", "--interval", "0", "--http-endpoint", "http://127.0.0.1:%d" % m.http_port,
                  extra=tls + ["--user", "root:" + ROOT_PW])
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("in flight:     1\n", out.stdout)

        # A user who may read only the queue `jobs`: stat and peek work, ls (all of /q/) does not,
        # purge (a write) does not.
        give(m, root, "viewer", "jobs-read", b"/q/jobs/", b"/q/jobs0", auth_pb2.Permission.READ)
        viewer = tls + ["--user", "viewer", "--password", "pw"]
        self.assertEqual(ctl(url, "peek", "jobs", extra=viewer).stdout,
                         "idx 1  tail one  (%s)\n1\n" % msg_key("jobs", 1, "one"))
        r = ctl(url, "ls", extra=viewer)
        self.assertEqual((r.returncode, r.stderr), (1, "etcdq queue: range: etcdserver: permission denied\n"))
        r = ctl(url, "purge", "jobs", extra=viewer)
        self.assertEqual((r.returncode, r.stderr), (1, "etcdq queue: delete: etcdserver: permission denied\n"))
        self.assertEqual(len(messages(m, "jobs", root)), 1)

        # Without the CA the server is not trusted; --insecure-skip-tls-verify accepts it.
        r = ctl(url, "stat", "jobs", extra=["--cert", cert, "--key", key, "--user", "viewer:pw",
                                            "--dial-timeout", "1"])
        self.assertEqual(r.returncode, 1)
        self.assertTrue(r.stderr.startswith("etcdq queue: cannot connect to %s within --dial-timeout" % url), r.stderr)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        r = ctl(url, "stat", "jobs", "--interval", "0",
                extra=["--cert", cert, "--key", key, "--user", "viewer:pw", "--insecure-skip-tls-verify"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("depth:         1\n", r.stdout)
        self.assertIn("in flight:     1\n", r.stdout)  # the viewer may read all of /q/jobs/
        self.assertIn("dead letters:  unknown (queue jobs.dlq: range: etcdserver: permission denied)", r.stdout)

if __name__ == "__main__":
    harness.main()
