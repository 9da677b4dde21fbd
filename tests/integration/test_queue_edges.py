#!/usr/bin/python3
"""Work queues (QUEUES.md) at their edges, one member: keys that are bytes and
not UTF-8 (etcd keys are bytes), messages near the request size limit reaching
a consumer with gRPC's default 4 MiB receive limit, a consumer that stops
reading its stream, idx never reused across restart and compaction, leases,
transactions, redeliveries before new messages, duplicate consumer names.
"""
import json
import threading
import time
import unittest

import grpc
from etcd3.etcdrpc import rpc_pb2, rpc_pb2_grpc

import harness
from queue_util import MALFORMED, Consumer, msg_key, parse_msg_key, wait_until

harness.quiet_closed_etcd3_watchers()


class RawConsumer:
    """A consumer Watch on a raw gRPC stream with a receive limit of our choosing;
    read=False never reads the stream after the watch is created (a stalled client)."""

    def __init__(self, channel, key, read=True):
        self.events = []
        self.responses = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error = None
        self._stop = threading.Event()

        def requests():
            yield rpc_pb2.WatchRequest(create_request=rpc_pb2.WatchCreateRequest(key=key))
            self._stop.wait()

        self.call = rpc_pb2_grpc.WatchStub(channel).Watch(requests())
        created = next(self.call)
        assert created.created, created
        if read:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for r in self.call:
                with self.lock:
                    self.responses.append(r)
                    self.events.extend((time.monotonic(), e.kv.key, e.kv.value) for e in r.events)
        except grpc.RpcError as e:
            self.error = e
        self.done.set()

    def close(self):
        self._stop.set()
        self.call.cancel()


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueEdges(harness.MemberTestCase):
    def setUp(self):
        self.m = self.new_member()
        self.admin = self.m.client()

    def queued(self, queue):
        return [meta.key for _v, meta in self.admin.get_prefix(b"/q/" + queue + b"/") if parse_msg_key(meta.key)]

    def raft_index(self):
        return self.m.maintenance().Status(rpc_pb2.StatusRequest(), timeout=5).raftIndex

    def assert_refused_or_delivered(self, produce_key, consume_key, expect_key):
        """A produce to a key that is bytes but not UTF-8 is either refused (InvalidArgument,
        "etcdq: malformed queue key") or delivered like any other; never taken and then stuck."""
        kv = self.m.kv()
        try:
            kv.Put(rpc_pb2.PutRequest(key=produce_key, value=b"v"), timeout=5)
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.INVALID_ARGUMENT)
            self.assertTrue(e.details().startswith(MALFORMED), e.details())
            return "refused"
        index_before = self.raft_index()
        c = RawConsumer(self.m.channel(), consume_key)
        try:
            ok = wait_until(lambda: (expect_key, b"v") in [e[1:] for e in c.events], 10)
            self.assertTrue(ok, "produce of %r was acknowledged (stored at %r) but never delivered to %r; "
                            "it got %s; the Raft index grew by %d while it waited" % (
                                produce_key, expect_key, consume_key, [e[1:] for e in c.events],
                                self.raft_index() - index_before))
        finally:
            c.close()
        return "delivered"

    def test_message_whose_tail_is_not_utf8_is_delivered_or_refused(self):
        self.admin.put(b"/q/u8/p/before", b"1")
        how = self.assert_refused_or_delivered(b"/q/u8/p/t\xff", b"/q/u8/c/reader",
                                               msg_key("u8", 2, "").encode() + b"t\xff")
        # Either way the messages around it flow.
        c = Consumer(self.m.client(), "u8")
        self.admin.put(b"/q/u8/p/after", b"3")
        self.assertTrue(wait_until(lambda: len([a for a in c.acked() if a[2] is True]) >= 2, 10), c.delivered())
        c.cancel()
        self.assertEqual(self.queued(b"u8"), [], how)

    def test_queue_whose_name_is_not_utf8_is_delivered_or_refused(self):
        self.assert_refused_or_delivered(b"/q/n\xff/p/a", b"/q/n\xff/c/reader",
                                         b"/q/n\xff/" + b"%020d" % 1 + b"/a")

    def test_consumer_whose_name_is_not_utf8_gets_messages(self):
        self.admin.put(b"/q/cn/p/a", b"v")
        c = RawConsumer(self.m.channel(), b"/q/cn/c/u\xff")
        try:
            self.assertTrue(wait_until(lambda: len(c.events) >= 1, 10))
            self.assertEqual(c.events[0][1:], (msg_key("cn", 1, "a").encode(), b"v"))
        finally:
            c.close()

    def test_large_messages_reach_a_consumer_with_grpcs_default_receive_limit(self):
        # Each message is under the 1.5 MiB request limit; a client with gRPC's default
        # 4 MiB receive limit (python-etcd3's, grpc-java's, ...) must be able to take them.
        n, size = 8, 1000 * 1000
        for i in range(n):
            self.admin.put("/q/big/p/m%d" % i, b"%d" % i + b"y" * size)
        ch = grpc.insecure_channel(self.m.endpoint)   # default options: 4 MiB receive limit
        c = RawConsumer(ch, b"/q/big/c/default-limits")
        try:
            ok = wait_until(lambda: len(c.events) >= n or c.done.is_set(), 20)
            sizes = [r.ByteSize() for r in c.responses]
            self.assertIsNone(c.error, "the consumer's stream broke: %s" % (c.error and c.error.details()))
            self.assertTrue(ok)
            self.assertEqual(sorted(parse_msg_key(e[1])[1] for e in c.events), list(range(1, n + 1)), sizes)
        finally:
            c.close()
            ch.close()

    def test_consumer_that_stops_reading_is_dropped_and_its_messages_go_to_another(self):
        self.admin.put("/q/stall/config", json.dumps({"max_in_flight": 1000}))
        stalled_ch = grpc.insecure_channel(self.m.endpoint, options=[
            ("grpc.max_receive_message_length", 256 << 20), ("grpc.http2.bdp_probe", 0)])
        stalled = RawConsumer(stalled_ch, b"/q/stall/c/stalled", read=False)
        try:
            # Produced after the stalled consumer registered: it is the only consumer, so it
            # is handed them, and its stream backs up (12 MB, the server buffers 4 MiB).
            n = 12
            for i in range(n):
                self.admin.put("/q/stall/p/m%02d" % i, b"%d" % i + b"s" * 1000000)
            # The stalled one takes no delivery: dropped after 5 s, its messages go to the other
            # (well before the default 30 s visibility timeout).
            self.healthy_consumer_gets_all("stall", n, 20)
        finally:
            stalled.close()
            stalled_ch.close()

    def healthy_consumer_gets_all(self, queue, n, within_s):
        """A reading consumer of `queue` gets all `n` messages within `within_s` seconds: the
        stalled consumer beside it was dropped and what it held went to this one."""
        healthy = RawConsumer(self.m.channel(), b"/q/%s/c/healthy" % queue.encode())
        t0 = time.monotonic()
        ok = wait_until(lambda: len({e[1] for e in healthy.events}) >= n, within_s)
        took = time.monotonic() - t0
        healthy.close()
        self.assertTrue(ok, "healthy consumer got %d of %d in %.0f s (stalled consumer not dropped)" % (
            len({e[1] for e in healthy.events}), n, took))

    def test_consumer_that_stops_reading_with_a_backlog_is_dropped_and_its_messages_go_to_another(self):
        # As above, but the messages wait in the queue before the stalled consumer comes.
        self.admin.put("/q/stall2/config", json.dumps({"max_in_flight": 1000}))
        n = 12
        for i in range(n):
            self.admin.put("/q/stall2/p/m%02d" % i, b"%d" % i + b"s" * 1000000)
        stalled_ch = grpc.insecure_channel(self.m.endpoint, options=[
            ("grpc.max_receive_message_length", 256 << 20), ("grpc.http2.bdp_probe", 0)])
        stalled = RawConsumer(stalled_ch, b"/q/stall2/c/stalled", read=False)
        try:
            time.sleep(1.0)
            self.healthy_consumer_gets_all("stall2", n, 20)
        finally:
            stalled.close()
            stalled_ch.close()

    def test_consumer_that_stops_reading_with_little_is_dropped_and_its_messages_go_to_another(self):
        # As above, but what it was handed fits in the stream's buffer (300 kB, under 4 MiB):
        # the stream takes every delivery, its write never ends, and the consumer must still
        # be dropped after 5 s, not hold its messages until the 30 s visibility timeout.
        stalled_ch = grpc.insecure_channel(self.m.endpoint, options=[("grpc.http2.bdp_probe", 0)])
        stalled = RawConsumer(stalled_ch, b"/q/stall3/c/stalled", read=False)
        try:
            time.sleep(0.5)
            n = 3
            for i in range(n):
                self.admin.put("/q/stall3/p/m%d" % i, b"%d" % i + b"s" * 100000)
            self.healthy_consumer_gets_all("stall3", n, 15)
        finally:
            stalled.close()
            stalled_ch.close()

    def test_idx_is_never_reused_after_acks_compaction_and_restart(self):
        self.admin.put("/q/idx/p/a", "1")
        self.admin.put("/q/idx/p/b", "2")
        self.assertTrue(self.admin.delete(msg_key("idx", 1, "a")))
        self.assertTrue(self.admin.delete(msg_key("idx", 2, "b")))
        rev = self.m.kv().Range(rpc_pb2.RangeRequest(key=b"x"), timeout=5).header.revision
        self.m.kv().Compact(rpc_pb2.CompactionRequest(revision=rev, physical=True), timeout=5)
        self.m.restart()
        self.admin = self.m.client()
        self.admin.put("/q/idx/p/c", "3")
        self.assertEqual(self.queued(b"idx"), [msg_key("idx", 3, "c").encode()])
        self.m.kill9()
        self.m.start()
        self.admin = self.m.client()
        self.admin.put("/q/idx/p/d", "4")
        self.assertEqual(self.queued(b"idx"), [msg_key("idx", 3, "c").encode(), msg_key("idx", 4, "d").encode()])

    def test_leased_message_goes_with_its_lease_and_is_never_delivered(self):
        lease = self.admin.lease(2)
        self.admin.put("/q/ls/p/a", "leased", lease=lease)
        self.admin.put("/q/ls/p/b", "plain")
        self.assertTrue(wait_until(lambda: len(self.queued(b"ls")) == 1, 10))
        c = Consumer(self.m.client(), "ls")
        time.sleep(2.0)
        c.cancel()
        self.assertEqual([(d[2], d[3]) for d in c.delivered()], [(msg_key("ls", 2, "b").encode(), b"plain")])

    def test_produce_and_ack_inside_transactions(self):
        ok, _ = self.admin.transaction(compare=[], success=[self.admin.transactions.put("/q/tx/p/a", "x"),
                                                            self.admin.transactions.put("/plain/k", "y")],
                                       failure=[])
        self.assertTrue(ok)
        self.assertEqual(self.queued(b"tx"), [msg_key("tx", 1, "a").encode()])
        self.assertEqual(self.admin.get("/plain/k")[0], b"y")
        ok, resp = self.admin.transaction(compare=[], success=[
            self.admin.transactions.delete(msg_key("tx", 1, "a"))], failure=[])
        self.assertTrue(ok)
        self.assertEqual(self.queued(b"tx"), [])
        kv = self.m.kv()
        with self.assertRaises(grpc.RpcError) as cm:
            kv.Txn(rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(
                key=b"/q//p/x", value=b"v"))]), timeout=5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn(MALFORMED, cm.exception.details())

    def test_redeliveries_come_before_new_messages(self):
        self.admin.put("/q/rb/config", json.dumps({"visibility_timeout": 1, "max_in_flight": 1,
                                                   "max_deliveries": 3}))
        for t in "abc":
            self.admin.put("/q/rb/p/" + t, t)
        c = Consumer(self.m.client(), "rb", ack=False)
        # a three times (1 s apart), then to the dead-letter queue; then b.
        self.assertTrue(wait_until(lambda: len(c.delivered()) >= 4, 15), c.delivered())
        c.cancel()
        self.assertEqual([d[1] for d in c.delivered()][:4], [1, 1, 1, 2])

    def test_default_max_in_flight_is_64_and_acks_make_room(self):
        kv = self.m.kv()
        for i in range(100):
            kv.Put(rpc_pb2.PutRequest(key=b"/q/mif/p/m%03d" % i, value=b"%d" % i), timeout=5)
        c = Consumer(self.m.client(), "mif", ack=False)
        self.assertTrue(wait_until(lambda: len(c.delivered()) >= 64, 10), len(c.delivered()))
        time.sleep(1.0)
        self.assertEqual([d[1] for d in c.delivered()], list(range(1, 65)))
        for i in range(1, 11):
            self.assertTrue(self.admin.delete(msg_key("mif", i, "m%03d" % (i - 1))))
        self.assertTrue(wait_until(lambda: len(c.delivered()) >= 74, 10), len(c.delivered()))
        time.sleep(1.0)
        c.cancel()
        self.assertEqual([d[1] for d in c.delivered()], list(range(1, 75)))

    def test_two_watches_with_one_consumer_name(self):
        for i in range(4):
            self.admin.put("/q/dup/p/m%d" % i, str(i))
        a = Consumer(self.m.client(), "dup", ack=False, name="same")
        b = Consumer(self.m.client(), "dup", ack=False, name="same")
        self.assertTrue(wait_until(lambda: len(a.delivered()) + len(b.delivered()) >= 4, 10))
        time.sleep(0.5)
        first_a, first_b = [d[1] for d in a.delivered()], [d[1] for d in b.delivered()]
        self.assertEqual(sorted(first_a + first_b), [1, 2, 3, 4], "one delivery each while both hold")
        holder, other = (a, b) if first_a else (b, a)
        holder.cancel()
        holder.client.close()
        self.assertTrue(wait_until(lambda: len(other.delivered()) >= 4, 10), other.delivered())
        other.cancel()

    def test_deliveries_ready_together_reach_the_consumer_in_one_response(self):
        # Issue #38: deliveries handed out together (a consumer that comes to
        # a backlog; a transaction of produces) go out as one WatchResponse,
        # in idx order, as a synced watcher gets an applied entry's events.
        kv = self.m.kv()
        for i in range(30):
            kv.Put(rpc_pb2.PutRequest(key=b"/q/co/p/m%02d" % i, value=b"%d" % i), timeout=5)
        c = RawConsumer(self.m.channel(), b"/q/co/c/w1")
        try:
            self.assertTrue(wait_until(lambda: len(c.events) >= 30, 10), c.events)
            with c.lock:
                backlog = [len(r.events) for r in c.responses]
            ops = [rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"/q/co/p/t%02d" % i, value=b"t"))
                   for i in range(20)]
            kv.Txn(rpc_pb2.TxnRequest(success=ops), timeout=5)
            self.assertTrue(wait_until(lambda: len(c.events) >= 50, 10), c.events)
            time.sleep(0.2)
            with c.lock:
                txn = [len(r.events) for r in c.responses][len(backlog):]
                idx = [parse_msg_key(e[1])[1] for e in c.events]
        finally:
            c.close()
        self.assertEqual(idx, list(range(1, 51)))  # each once, in idx order
        self.assertEqual(txn, [20], "the transaction's 20 deliveries came as %s events a response" % txn)
        self.assertLessEqual(len(backlog), 2, "a backlog of 30 came as %s events a response" % backlog)

    def test_a_synchronous_worker_costs_two_log_entries_a_message(self):
        # Issue #37: once its consumer is ready, a message is handed out by
        # the apply of its own produce; no assignment entry of its own. So
        # produce, delivery, ack, one at a time, grows the log by two
        # entries a message (produce and ack), not three.
        kv = self.m.kv()
        c = RawConsumer(self.m.channel(), b"/q/sync/c/w1")
        try:
            kv.Put(rpc_pb2.PutRequest(key=b"/q/sync/p/warm", value=b"w"), timeout=5)
            self.assertTrue(wait_until(lambda: len(c.events) >= 1, 10), c.events)
            kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=c.events[0][1]), timeout=5)
            n = 30
            before = self.raft_index()
            for i in range(n):
                kv.Put(rpc_pb2.PutRequest(key=b"/q/sync/p/m%02d" % i, value=b"%d" % i), timeout=5)
                self.assertTrue(wait_until(lambda: len(c.events) >= i + 2, 10, step=0.002),
                                "message %d never delivered" % i)
                key = c.events[i + 1][1]
                self.assertEqual(parse_msg_key(key)[2], "m%02d" % i)
                kv.DeleteRange(rpc_pb2.DeleteRangeRequest(key=key), timeout=5)
            grown = self.raft_index() - before
        finally:
            c.close()
        self.assertLessEqual(grown, 2 * n + 2, "the log grew by %d entries for %d messages" % (grown, n))
        self.assertEqual(self.queued(b"sync"), [])


if __name__ == "__main__":
    harness.main()
