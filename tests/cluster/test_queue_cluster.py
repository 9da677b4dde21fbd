#!/usr/bin/python3
"""Work queues on 3 members (QUEUES.md, "Any member"): a producer on one member,
consumers on the other two; each message reaches exactly one of them. Then the
leader is SIGKILLed mid-stream and restarted later: delivery resumes, nothing
acknowledged to the producer is lost, and only messages in flight at the kill
may be delivered twice.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/cluster/test_queue_cluster.py
"""
import json
import os
import random
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from etcd3.etcdrpc import rpc_pb2  # noqa: E402

from cluster import ClusterTestCase, main  # noqa: E402  (puts tests/integration on sys.path)
import harness  # noqa: E402
import watchlib  # noqa: E402
from queue_util import Consumer, Producer, parse_msg_key, wait_until  # noqa: E402

harness.quiet_closed_etcd3_watchers()

HEARTBEAT_MS, ELECTION_MS = 100, 1000


def queued(kv, queue):
    resp = kv.Range(rpc_pb2.RangeRequest(key=("/q/%s/" % queue).encode(),
                                         range_end=("/q/%s0" % queue).encode()), timeout=5)
    return [x.key for x in resp.kvs if parse_msg_key(x.key)]


class QueueCluster(ClusterTestCase):
    def first_deliveries(self, consumers):
        """{idx: (time, consumer id, key, value)} of each message's first delivery."""
        first = {}
        for c in consumers:
            for t, idx, key, value in c.delivered():
                if idx not in first or t < first[idx][0]:
                    first[idx] = (t, c.id, key, value)
        return first

    def test_producer_on_one_member_consumers_on_the_other_two_each_message_to_one(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        n = 600
        consumers = [Consumer(c.client(1), "jobs"), Consumer(c.client(2), "jobs")]
        # Give the followers' reports (every second) time to reach the leader.
        time.sleep(1.5)
        kv0 = c.kv(0)
        t0 = time.monotonic()
        for i in range(n):
            kv0.Put(rpc_pb2.PutRequest(key=b"/q/jobs/p/m%04d" % i, value=b"payload-%d" % i), timeout=5)
        self.assertTrue(wait_until(lambda: sum(len(x.acked()) for x in consumers) >= n, 60),
                        "acked %s of %d" % ([len(x.acked()) for x in consumers], n))
        took = time.monotonic() - t0
        time.sleep(1.0)
        for x in consumers:
            x.cancel()
        self.note("%d messages produced on m0, delivered to m1/m2 consumers %s in %.1f s" % (
            n, [len(x.delivered()) for x in consumers], took))
        deliveries = [d for x in consumers for d in x.delivered()]
        self.assertEqual(len(deliveries), n, "each message delivered once, to one consumer")
        first = self.first_deliveries(consumers)
        self.assertEqual(set(first), set(range(1, n + 1)))
        for idx, (_t, _cid, key, value) in first.items():
            self.assertEqual(parse_msg_key(key), ("jobs", idx, "m%04d" % (idx - 1)))
            self.assertEqual(value, b"payload-%d" % (idx - 1))
        for x in consumers:
            self.assertGreater(len(x.delivered()), 0, "consumer on a follower got nothing")
            idxs = [d[1] for d in x.delivered()]
            self.assertEqual(idxs, sorted(idxs), "FIFO per consumer")
            self.assertTrue(all(a[2] is True for a in x.acked()))
            self.assertEqual(x.errors, [])
        for i in range(3):
            self.assertEqual(queued(c.kv(i), "jobs"), [], "m%d still lists messages" % i)

    def test_leader_sigkill_mid_stream_delivery_resumes_and_nothing_is_lost(self):
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        c.kv(0).Put(rpc_pb2.PutRequest(key=b"/q/fo/config", value=json.dumps(
            {"visibility_timeout": 5, "max_deliveries": 1000}).encode()), timeout=5)
        leader = c.leader_index()
        followers = [i for i in range(3) if i != leader]
        prod_m, cons_m = followers
        on_leader = Consumer(c.client(leader), "fo", name="on-leader")
        on_follower = Consumer(c.client(cons_m), "fo", name="on-follower")
        consumers = [on_leader, on_follower]
        time.sleep(1.5)
        producer = Producer(c.kv(prod_m), "fo", 0, timeout=3.0, interval=0.005)

        self.assertTrue(wait_until(lambda: len(on_leader.acked()) >= 50 and len(on_follower.acked()) >= 50, 30),
                        "before the kill: %d / %d acked" % (len(on_leader.acked()), len(on_follower.acked())))
        c.kill9(leader)
        t_kill = time.monotonic()
        on_leader.stop_acking()
        new_leader = c.wait_leader(timeout=30)
        t_elected = time.monotonic()
        acked_at_kill = len(producer.acked)

        # Produces resume and the follower's consumer keeps getting new messages.
        self.assertTrue(wait_until(lambda: len(producer.acked) >= acked_at_kill + 100, 30),
                        "produces after the kill: %d" % (len(producer.acked) - acked_at_kill))
        self.assertTrue(wait_until(lambda: any(d[0] > t_elected + 1.0 for d in on_follower.delivered()), 20),
                        "no delivery after the new leader was elected")
        time.sleep(2.0)
        c.restart(leader)
        t_restarted = time.monotonic()
        # Its consumer re-attaches on the restarted member.
        back = Consumer(c.client(leader), "fo", name="on-restarted")
        consumers.append(back)
        time.sleep(3.0)
        producer.finish()
        acked_produce = {payload: tail for tail, payload in producer.acked}
        unknown = {payload: tail for tail, payload, _e in producer.unknown}

        def delivered_payloads():
            return {d[3] for x in consumers for d in x.delivered()}

        def drained():
            return not (set(acked_produce) - delivered_payloads()) and not queued(c.kv(new_leader), "fo")
        ok = wait_until(drained, 60, step=0.25)
        time.sleep(1.0)
        for x in (on_follower, back):
            x.cancel()
        deliveries = sorted(d for x in consumers for d in x.delivered())
        acks = [a for x in consumers for a in x.acked()]
        self.note("leader m%d killed; new leader m%d after %.2f s; %d produces acknowledged (%d failed), "
                  "%d deliveries of %d payloads; by consumer %s; restarted member's consumer got %d" % (
                      leader, new_leader, t_elected - t_kill, len(acked_produce), len(unknown), len(deliveries),
                      len(delivered_payloads()), [len(x.delivered()) for x in consumers], len(back.delivered())))
        missing = sorted(acked_produce[p] for p in set(acked_produce) - delivered_payloads())
        self.assertEqual(missing, [], "acknowledged produces never delivered")
        self.assertTrue(ok, "queue not drained: %d still listed" % len(queued(c.kv(new_leader), "fo")))
        self.assertEqual(delivered_payloads() - set(acked_produce) - set(unknown), set())

        # idx <-> message is one to one.
        by_idx, by_payload = {}, {}
        for _t, idx, key, value in deliveries:
            by_idx.setdefault(idx, set()).add(value)
            by_payload.setdefault(value, set()).add(idx)
        self.assertEqual({i: v for i, v in by_idx.items() if len(v) > 1}, {})
        self.assertEqual({p: v for p, v in by_payload.items() if len(v) > 1}, {})

        # Duplicates only for messages in flight at the kill: first delivered before the
        # new leader could have taken over, and not acked before the kill.
        ack_done = {}
        for _i, key, result, t in acks:
            if result is True:
                ack_done.setdefault(key, t)
        first, count = {}, {}
        for t, _idx, key, _v in deliveries:
            first.setdefault(key, t)
            count[key] = count.get(key, 0) + 1
        dups = {k: n for k, n in count.items() if n > 1}
        late_dups = [(k, round(first[k] - t_kill, 2)) for k in dups if first[k] > t_elected + 1.0]
        self.assertEqual(late_dups, [], "delivered twice though first delivered well after the failover")
        revived = [(k, round(t - ack_done[k], 2)) for t, _i, k, _v in deliveries
                   if k in ack_done and t > ack_done[k] + 1.0]
        self.assertEqual(revived, [], "delivered again after its ack returned deleted=1")
        self.note("%d messages delivered more than once (in flight at the kill)" % len(dups))
        for i in range(3):
            self.assertEqual(queued(c.kv(i), "fo"), [], "m%d still lists messages" % i)
        self.assertGreater(t_restarted, t_kill)

    def test_leader_sigkilled_at_random_points_three_times_loses_nothing(self):
        seed = int(os.environ.get("ETCDQ_QUEUE_SEED", random.randrange(1 << 30)))
        rnd = random.Random(seed)
        self.note("seed %d (ETCDQ_QUEUE_SEED)" % seed)
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        c.kv(0).Put(rpc_pb2.PutRequest(key=b"/q/rk/config", value=json.dumps(
            {"visibility_timeout": 4, "max_deliveries": 1000}).encode()), timeout=5)
        consumers = {i: Consumer(c.client(i), "rk", name="m%d-life1" % i) for i in range(3)}
        every_consumer = list(consumers.values())
        time.sleep(1.5)
        producers = [Producer(c.kv(i), "rk", i, timeout=3.0, interval=0.01) for i in range(3)]
        all_producers = list(producers)
        for k in range(3):
            time.sleep(rnd.uniform(2.0, 4.0))
            leader = c.leader_index()
            c.kill9(leader)
            consumers[leader].stop_acking()
            c.wait_leader(timeout=30)
            time.sleep(rnd.uniform(0.0, 1.5))
            c.restart(leader)
            producers[leader].finish()
            producers[leader] = Producer(c.kv(leader), "rk", 10 * (k + 1) + leader, timeout=3.0, interval=0.01)
            all_producers.append(producers[leader])
            consumers[leader] = Consumer(c.client(leader), "rk", name="m%d-life%d" % (leader, k + 2))
            every_consumer.append(consumers[leader])
        time.sleep(rnd.uniform(1.0, 3.0))
        for p in producers:
            p.finish()
        acked_produce = {payload for p in all_producers for _t, payload in p.acked}

        def delivered_payloads():
            return {d[3] for x in every_consumer for d in x.delivered()}
        leader = c.leader_index()
        ok = wait_until(lambda: not (acked_produce - delivered_payloads()) and not queued(c.kv(leader), "rk"),
                        60, step=0.25)
        time.sleep(1.0)
        for x in consumers.values():
            x.cancel()
        deliveries = [d for x in every_consumer for d in x.delivered()]
        self.note("%d produces acknowledged; %d deliveries of %d payloads" % (
            len(acked_produce), len(deliveries), len(delivered_payloads())))
        self.assertEqual(len(acked_produce - delivered_payloads()), 0, "acknowledged produces never delivered")
        self.assertTrue(ok, "not drained")
        by_idx = {}
        for _t, idx, _key, value in deliveries:
            by_idx.setdefault(idx, set()).add(value)
        self.assertEqual({i: v for i, v in by_idx.items() if len(v) > 1}, {}, "idx reused")
        ack_done = {}
        for x in every_consumer:
            for _i, key, result, t in x.acked():
                if result is True:
                    ack_done.setdefault(key, t)
        revived = [(k, round(t - ack_done[k], 2)) for t, _i, k, _v in deliveries
                   if k in ack_done and t > ack_done[k] + 1.0]
        self.assertEqual(revived, [], "delivered again after its ack returned deleted=1")
        for i in range(3):
            self.assertEqual(queued(c.kv(i), "rk"), [], "m%d still lists messages" % i)

    def test_a_consumer_name_that_is_not_utf8_does_not_cut_off_the_other_consumers_of_its_member(self):
        # etcd keys are bytes: /q/{queue}/c/{consumer} with a consumer name that is not UTF-8 is
        # a consumer like any other (it works on one member). On a follower it must not stop the
        # leader from hearing about the follower's other consumers.
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        leader = c.leader_index()
        follower = next(i for i in range(3) if i != leader)
        good = Consumer(c.client(follower), "cq")
        time.sleep(1.5)
        kv = c.kv(leader)
        kv.Put(rpc_pb2.PutRequest(key=b"/q/cq/p/a", value=b"1"), timeout=5)
        self.assertTrue(wait_until(lambda: len(good.acked()) >= 1, 10), "first message not delivered")
        odd = c.client(follower)
        odd.add_watch_callback(b"/q/other/c/name-\xff", lambda _r: None)
        time.sleep(2.5)   # a few consumer reports (every second)
        kv.Put(rpc_pb2.PutRequest(key=b"/q/cq/p/b", value=b"2"), timeout=5)
        ok = wait_until(lambda: len(good.acked()) >= 2, 10)
        good.cancel()
        self.assertTrue(ok, "the follower's good consumer got %s after another client on its member watched "
                        "/q/other/c/name-\\xff; still queued: %s" % (
                            [d[1] for d in good.delivered()], queued(c.kv(leader), "cq")))

    def test_in_flight_drops_on_the_leader_and_the_consumers_member_when_the_consumer_goes(self):
        # etcdq_queue_in_flight (and /queues) counts a message whose holder is known alive: the
        # member hosting the consumer knows at once, the leader from that member's next report
        # (every second). The third member cannot know before the visibility timeout (30 s).
        c = self.new_cluster(3, heartbeat_ms=HEARTBEAT_MS, election_ms=ELECTION_MS)
        leader = c.leader_index()
        follower = next(i for i in range(3) if i != leader)
        ws = watchlib.WatchStream(watchlib.ready_channel(c[follower]))
        self.addCleanup(ws.close)
        ws.create(b"/q/fly/c/worker")
        time.sleep(1.5)  # the follower's report reaches the leader
        c.kv(leader).Put(rpc_pb2.PutRequest(key=b"/q/fly/p/one", value=b"1"), timeout=5)
        self.assertTrue(ws.wait_until(lambda s: sum(len(r.events) for _t, r in s.log) >= 1), "not delivered")

        def in_flight(i):
            with urllib.request.urlopen("http://%s/queues.json" % c[i].endpoint, timeout=5) as r:
                q = [x for x in json.loads(r.read())["queues"] if x["name"] == "fly"]
            return q[0]["in_flight"] if q else None
        for i in (leader, follower):
            self.assertTrue(wait_until(lambda: in_flight(i) == 1, 5), (i, in_flight(i)))
        ws.close()
        for i in (leader, follower):
            self.assertTrue(wait_until(lambda: in_flight(i) == 0, 5), (i, in_flight(i)))


if __name__ == "__main__":
    main()
