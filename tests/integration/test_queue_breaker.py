#!/usr/bin/python3
"""Work queues (QUEUES.md) under abuse: reproducers of the problems found by
trying to break them (/work/notes/queue-breaker.md). Each test fails on the
binary they were found with and should pass once the problem is fixed.

- a dead-lettered message's envelope compounds: each hop escapes the previous
  envelope again, so a 1 MB message becomes 64 MB after six hops (and one hop
  of a payload of control characters is 6x);
- /metrics prints a queue name that is not UTF-8 as raw bytes, which makes the
  whole exposition unparsable for Prometheus;
- a follower's consumer report is one Peer message bounded by the client
  request limit: consumers whose names add up to ~2 MiB (3 queue names of
  1 MB, or ~36,000 ordinary consumers) cut off every consumer of that member;
- the leader's scheduler does work for every queue it ever saw, times every
  consumer, every 20 ms (idle CPU grows with emptied queues and quadratically
  with queues x consumers);
- --clickhouse-url with a path (even a trailing '/') is accepted and then
  never connects; the sink re-encodes messages through doubles, so integers
  beyond 64 bits reach ClickHouse rounded;
- a Txn Compare on a /queue/ key does not see the message that Range on the
  same key returns.

etcdq-only (etcd has no queues).

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_queue_breaker.py
"""
import http.server
import json
import os
import sys
import threading
import time
import unittest
import urllib.request

import etcd3
import grpc
from etcd3.etcdrpc import rpc_pb2

import harness
import watchlib
from queue_util import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cluster"))

harness.quiet_closed_etcd3_watchers()

BIG = [("grpc.max_receive_message_length", 512 << 20), ("grpc.max_send_message_length", 64 << 20)]


def prefix_range(prefix):
    return rpc_pb2.RangeRequest(key=prefix, range_end=watchlib.prefix_end(prefix))


def cpu_share(pid, seconds):
    """CPU time of process `pid` over `seconds` of wall time, in cores."""
    def ticks():
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    a = ticks()
    time.sleep(seconds)
    return (ticks() - a) / os.sysconf("SC_CLK_TCK") / seconds


class Recorder:
    """A ClickHouse stand-in: answers 200 to every POST and keeps the inserts' bodies.

    The sink's own questions (a SELECT in the body of a POST to `/`: the
    version at start, the highest idx a table holds for a queue before a
    leader's first insert, which idx of a batch it holds) are answered as
    an empty table would, and not kept."""

    def __init__(self):
        self.bodies = []
        self.port = harness.free_port()
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                answer = b""
                if self.path.rstrip("/") == "" and body.startswith(b"SELECT"):
                    if body.startswith(b"SELECT version()"):
                        answer = b"18.16.1\n"
                    elif body.startswith(b"SELECT max("):
                        answer = b"0\n"
                else:
                    rec.bodies.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def rows(self):
        return b"".join(b for _p, b in self.bodies)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueBreaker(harness.MemberTestCase):
    def hold(self, member, queue, name="holder"):
        """A consumer that takes deliveries and never acks; closed at the end of the test."""
        ws = watchlib.WatchStream(watchlib.ready_channel(member, options=BIG))
        ws.create(("/q/%s/c/%s" % (queue, name)).encode())
        self.addCleanup(ws.close)
        return ws

    def values(self, member, queue):
        ch = watchlib.ready_channel(member, options=BIG)
        kv = member.kv(ch)
        return {kv_.key: kv_.value for kv_ in kv.Range(prefix_range(("/q/%s/0" % queue).encode()), timeout=30).kvs}

    def test_dead_letter_envelopes_do_not_compound(self):
        # Each hop wraps the previous envelope as a JSON string: quotes and
        # backslashes double every time. A dead-lettered message should stay
        # within a constant factor of what was produced (2x: payload_hex).
        m = self.new_member()
        kv = m.kv()
        payload = b'"' * 200_000
        chain = ["dl", "dl.dlq", "dl.dlq.dlq", "dl.dlq.dlq.dlq"]
        for q in chain[:3]:
            kv.Put(rpc_pb2.PutRequest(key=("/q/%s/config" % q).encode(),
                                      value=b'{"visibility_timeout": 0.2, "max_deliveries": 1}'), timeout=5)
        kv.Put(rpc_pb2.PutRequest(key=b"/q/dl/p/quotes", value=payload), timeout=5)
        for q in chain[:3]:
            self.hold(m, q)
        self.assertTrue(wait_until(lambda: self.values(m, chain[3]), 20), "the message did not reach %s" % chain[3])
        sizes = {q: [len(v) for v in self.values(m, q).values()] for q in chain}
        final = max(sizes[chain[3]])
        self.assertLessEqual(final, 2 * len(payload) + 4096,
                             "a %d-byte message is %d bytes after 3 dead-letter hops (sizes per queue: %s)" % (
                                 len(payload), final, sizes))

    def test_dead_letter_envelope_of_control_characters_stays_readable(self):
        # One hop: every \x01 becomes \u0001 (6 bytes). 1 MB (under the request
        # limit) becomes 6 MB, more than gRPC's default 4 MiB receive limit.
        m = self.new_member()
        kv = m.kv()
        payload = b"\x01" * 1_000_000
        kv.Put(rpc_pb2.PutRequest(key=b"/q/cc/config", value=b'{"visibility_timeout": 0.2, "max_deliveries": 1}'),
               timeout=5)
        kv.Put(rpc_pb2.PutRequest(key=b"/q/cc/p/ctl", value=payload), timeout=5)
        self.hold(m, "cc")
        self.assertTrue(wait_until(lambda: self.values(m, "cc.dlq"), 20), "not dead-lettered")
        size = max(len(v) for v in self.values(m, "cc.dlq").values())
        self.assertLessEqual(size, 2 * len(payload) + 4096,
                             "a %d-byte message is a %d-byte dead letter" % (len(payload), size))
        # python-etcd3 with gRPC's default receive limit, as a user would read the DLQ
        c = etcd3.client(host="127.0.0.1", port=m.client_port)
        self.addCleanup(c.close)
        self.assertEqual(len(list(c.get_prefix("/q/cc.dlq/"))), 1)

    def test_metrics_stay_utf8_with_a_queue_name_that_is_not(self):
        hp = harness.free_port()
        m = self.new_member(extra_args=["--listen-client-http-urls", "http://127.0.0.1:%d" % hp])
        m.kv().Put(rpc_pb2.PutRequest(key=b"/q/ok/p/a", value=b"v"), timeout=5)
        m.kv().Put(rpc_pb2.PutRequest(key=b"/q/n\xff/p/a", value=b"v"), timeout=5)
        raw = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % hp, timeout=10).read()
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            lines = [l for l in raw.split(b"\n") if b"\xff" in l][:2]
            self.fail("/metrics is not UTF-8 (Prometheus rejects the whole scrape): %s; %r" % (e, lines))

    def test_compare_on_a_queue_prefix_key_sees_what_range_sees(self):
        m = self.new_member()
        kv = m.kv()
        kv.Put(rpc_pb2.PutRequest(key=b"/q/cmp/p/a", value=b"v"), timeout=5)
        key = b"/queue/cmp/00000000000000000001/a"
        self.assertEqual(len(kv.Range(rpc_pb2.RangeRequest(key=key), timeout=5).kvs), 1)
        t = kv.Txn(rpc_pb2.TxnRequest(compare=[rpc_pb2.Compare(
            key=key, target=rpc_pb2.Compare.VERSION, result=rpc_pb2.Compare.GREATER, version=0)]), timeout=5)
        self.assertTrue(t.succeeded, "Range of %r returns the message, a Compare on it says it does not exist" % key)

    def test_config_put_with_ignore_value_keeps_the_config(self):
        # etcd: ignore_value keeps the stored value (e.g. to attach a lease to it).
        m = self.new_member()
        kv = m.kv()
        kv.Put(rpc_pb2.PutRequest(key=b"/q/iv/config", value=b'{"max_deliveries": 3}'), timeout=5)
        lease = m.lease_stub().LeaseGrant(rpc_pb2.LeaseGrantRequest(TTL=100), timeout=5).ID
        try:
            kv.Put(rpc_pb2.PutRequest(key=b"/q/iv/config", ignore_value=True, lease=lease), timeout=5)
        except grpc.RpcError as e:
            self.fail("Put /q/iv/config ignore_value=true lease=L refused: %s %s" % (e.code(), e.details()))
        got = kv.Range(rpc_pb2.RangeRequest(key=b"/q/iv/config"), timeout=5).kvs[0]
        self.assertEqual((got.value, got.lease), (b'{"max_deliveries": 3}', lease))

    def test_clickhouse_url_with_a_trailing_slash_works_or_is_refused(self):
        rec = Recorder()
        self.addCleanup(rec.close)
        url = "http://127.0.0.1:%d/" % rec.port
        try:
            m = self.new_member(extra_args=["--clickhouse-url", url])
        except harness.MemberStartError:
            return   # refused at start: fine
        m.kv().Put(rpc_pb2.PutRequest(key=b"/q/ch:t/p/a", value=b'{"a": 1}'), timeout=5)
        ok = wait_until(lambda: b'"a"' in rec.rows(), 10)
        self.assertTrue(ok, "--clickhouse-url %s was accepted but nothing was ever posted to it; log: %s" % (
            url, [l for l in open(m.log_path).read().splitlines() if "ClickHouse" in l][:2]))

    def test_clickhouse_gets_big_integers_exactly(self):
        rec = Recorder()
        self.addCleanup(rec.close)
        m = self.new_member(extra_args=["--clickhouse-url", "http://127.0.0.1:%d" % rec.port])
        m.kv().Put(rpc_pb2.PutRequest(key=b"/q/ch:big/p/a", value=b'{"n": 123456789012345678901234567890}'),
                   timeout=5)
        self.assertTrue(wait_until(lambda: rec.rows(), 10), "nothing inserted")
        self.assertIn(b"123456789012345678901234567890", rec.rows(), "ClickHouse got %r" % rec.rows())

    def test_idle_leader_does_not_spin_over_emptied_queues(self):
        # Per-request reply queues: each used once, emptied, never again.
        m = self.new_member()
        kv = m.kv()
        n = 50_000
        for b in range(0, n, 128):
            ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"/q/r%06d/p/m" % i, value=b"v"))
                   for i in range(b, min(n, b + 128))]
            kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=60)
        kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=b"/q/", range_end=b"/q0"), timeout=60)
        time.sleep(1)
        share = cpu_share(m.proc.pid, 4)
        self.assertLess(share, 0.15, "idle with %d emptied queues, etcdq uses %.2f cores" % (n, share))

    def test_scheduler_cost_is_not_queues_times_consumers(self):
        # 4,000 queues, one consumer each holding one message: the leader walks
        # every consumer for every queue every 20 ms.
        m = self.new_member()
        kv = m.kv()
        n = 4000
        ws = watchlib.WatchStream(watchlib.ready_channel(m, options=BIG))
        self.addCleanup(ws.close)
        for i in range(n):
            ws.create(b"/q/h%05d/c/worker" % i)
        self.assertTrue(wait_until(lambda: sum(r.created for r in ws.responses()) >= n, 60))
        for b in range(0, n, 128):
            ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"/q/h%05d/p/m" % i, value=b"v"))
                   for i in range(b, min(n, b + 128))]
            kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=60)
        self.assertTrue(wait_until(lambda: sum(len(r.events) for r in ws.responses()) >= n, 60))
        time.sleep(1)
        share = cpu_share(m.proc.pid, 4)
        # A sanitizer build's walk costs several times the real one's (TSan: 0.45 cores).
        bound = 0.3 * (3 if harness.sanitized() else 1)
        self.assertLess(share, bound, "idle with %d queues x 1 consumer, etcdq uses %.2f cores" % (n, share))


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueBreakerCluster(harness.CleanupTestCase):
    def test_long_consumer_names_on_a_follower_do_not_cut_off_its_other_consumers(self):
        from cluster import Cluster
        c = self.track(Cluster(3, heartbeat_ms=100, election_ms=1000))
        leader = c.leader_index()
        f = [i for i in range(3) if i != leader][0]
        good = watchlib.WatchStream(watchlib.ready_channel(c[f]))
        self.addCleanup(good.close)
        good.create(b"/q/cq/c/good")
        time.sleep(2.5)
        kv = c.kv(leader)
        kv.Put(rpc_pb2.PutRequest(key=b"/q/cq/p/a", value=b"v"), timeout=5)
        self.assertTrue(wait_until(lambda: any(r.events for r in good.responses()), 10), "a not delivered")
        # Another client of the same member: three consumers of queues whose names
        # are 1 MB each (every request is within the 1.5 MiB limit).
        other = watchlib.WatchStream(watchlib.ready_channel(c[f], options=BIG))
        self.addCleanup(other.close)
        for i in range(3):
            other.create(b"/q/Q%d" % i + b"x" * 1_000_000 + b"/c/x")
        self.assertTrue(wait_until(lambda: sum(r.created for r in other.responses()) >= 3, 10))
        time.sleep(3.5)   # the leader's report of that member goes stale after 3 s
        kv.Put(rpc_pb2.PutRequest(key=b"/q/cq/p/b", value=b"v"), timeout=5)
        ok = wait_until(lambda: b"/q/cq/00000000000000000002/b" in
                        [e.kv.key for r in good.responses() for e in r.events], 10)
        self.assertTrue(ok, "b never reached the follower's other consumer; still queued: %s" % (
            [x.key for x in kv.Range(prefix_range(b"/q/cq/0"), timeout=5).kvs]))

    def test_a_paused_follower_s_consumer_keeps_its_message_or_is_told_it_lost_it(self):
        # A follower that stalls 3.5 s (disk, CPU, a partition from the leader while its
        # clients still reach it) stops reporting; the leader hands its consumer's message
        # to another consumer while the first one's watch is still open, inside its
        # visibility timeout, and nothing tells the first one.
        import signal
        from cluster import Cluster
        c = self.track(Cluster(3, heartbeat_ms=100, election_ms=1000))
        leader = c.leader_index()
        f = [i for i in range(3) if i != leader][0]
        kv = c.kv(leader)
        kv.Put(rpc_pb2.PutRequest(key=b"/q/sp/config", value=b'{"visibility_timeout": 60}'), timeout=5)
        a = watchlib.WatchStream(watchlib.ready_channel(c[f]))
        self.addCleanup(a.close)
        a.create(b"/q/sp/c/A")
        time.sleep(2.5)
        kv.Put(rpc_pb2.PutRequest(key=b"/q/sp/p/m", value=b"v"), timeout=5)
        self.assertTrue(wait_until(lambda: any(r.events for r in a.responses()), 10), "A got nothing")
        b = watchlib.WatchStream(watchlib.ready_channel(c[leader]))
        self.addCleanup(b.close)
        b.create(b"/q/sp/c/B")
        time.sleep(1)
        os.kill(c[f].proc.pid, signal.SIGSTOP)
        try:
            time.sleep(3.5)
        finally:
            os.kill(c[f].proc.pid, signal.SIGCONT)
        time.sleep(2)
        self.assertEqual(c.leader_index(), leader, "the leader changed: not this case")
        b_got = [t for t, r in b.log if r.events]
        if b_got:
            a_told = [t for t, r in a.log if r.canceled] + ([a.done_at] if a.done else [])
            self.assertTrue(a_told and min(a_told) <= b_got[0] + 1.0,
                            "B got the message %.1f s into A's 60 s visibility timeout while A's watch "
                            "stayed open and A was never told" % (b_got[0] - [t for t, r in a.log if r.events][0]))


if __name__ == "__main__":
    harness.main()
