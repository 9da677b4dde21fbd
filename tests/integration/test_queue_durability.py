#!/usr/bin/python3
"""Work queues survive kill -9 (QUEUES.md, "Durable"): producers keep producing
while the member is SIGKILLed at random points and restarted; consumers
re-attach after each restart. Every produce whose Put was acknowledged is
delivered at least once; no message whose ack (Delete) returned deleted=1
comes back; an idx is never given to two messages.

    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_queue_durability.py
    ETCDQ_QUEUE_SEED=N to repeat one run's kill points.
"""
import json
import os
import random
import sys
import time
import unittest

from etcd3.etcdrpc import rpc_pb2

import harness
from queue_util import Consumer, Producer, parse_msg_key

harness.quiet_closed_etcd3_watchers()

KILLS = 3
N_PRODUCERS = 2
N_CONSUMERS = 2
QUEUE = "dur"


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueueDurability(harness.MemberTestCase):
    def test_kill9_at_random_points_loses_no_produced_message_and_revives_no_acked_one(self):
        seed = int(os.environ.get("ETCDQ_QUEUE_SEED", random.randrange(1 << 30)))
        rnd = random.Random(seed)
        sys.stderr.write("    seed %d (ETCDQ_QUEUE_SEED)\n" % seed)
        m = self.new_member()
        admin = m.client()
        # A short visibility timeout bounds how long a message held by a consumer of an
        # earlier life of the member can wait.
        admin.put("/q/%s/config" % QUEUE, json.dumps({"visibility_timeout": 3, "max_deliveries": 1000}))

        consumers = []

        def attach():
            for _ in range(N_CONSUMERS):
                consumers.append(Consumer(m.client(), QUEUE, name="life%d-%d" % (m.starts, len(consumers))))

        attach()
        producers = [Producer(m.kv(), QUEUE, pid) for pid in range(N_PRODUCERS)]
        kill_times = []
        for k in range(KILLS):
            time.sleep(rnd.uniform(1.0, 4.0))
            m.kill9()
            kill_times.append(time.monotonic())
            sys.stderr.write("    kill %d: %d produced, %d delivered, %d acked so far\n" % (
                k + 1, sum(len(p.acked) for p in producers), sum(len(c.delivered()) for c in consumers),
                sum(1 for c in consumers for a in c.acked() if a[2] is True)))
            for c in consumers[-N_CONSUMERS:]:
                c.stop_acking()
            time.sleep(rnd.uniform(0.0, 1.0))
            m.start()
            attach()
        time.sleep(rnd.uniform(1.0, 3.0))
        for p in producers:
            p.stop.set()
        for p in producers:
            p.thread.join(10)

        acked_produce = {payload: tail for p in producers for tail, payload in p.acked}
        unknown_produce = {payload: tail for p in producers for tail, payload, _e in p.unknown}
        live = consumers[-N_CONSUMERS:]

        def delivered_payloads():
            return {d[3] for c in consumers for d in c.delivered()}

        def queued():
            return [kv.key for kv in m.kv().Range(rpc_pb2.RangeRequest(
                key=("/q/%s/" % QUEUE).encode(), range_end=("/q/%s0" % QUEUE).encode()), timeout=5).kvs
                if parse_msg_key(kv.key)]

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not (set(acked_produce) - delivered_payloads()) and not queued():
                break
            time.sleep(0.25)
        time.sleep(1.0)
        for c in live:
            c.cancel()

        deliveries = [d for c in consumers for d in c.delivered()]
        acks = [a for c in consumers for a in c.acked()]
        sys.stderr.write("    %d produces acknowledged, %d failed; %d deliveries of %d payloads; %d acks "
                         "(%d deleted=1); %d still queued\n" % (
                             len(acked_produce), len(unknown_produce), len(deliveries),
                             len(delivered_payloads()), len(acks), sum(1 for a in acks if a[2] is True),
                             len(queued())))
        self.assertGreater(len(acked_produce), 100)
        # What deleted=0 acks there were, and why (each: who got the key, when, relative to the kills).
        t_start = kill_times[0] - 100.0
        for c in consumers:
            for _idx, key, result, t in c.acked():
                if result is not True:
                    hist = sorted((round(d[0] - kill_times[0], 2), x.id) for x in consumers
                                  for d in x.delivered() if d[2] == key)
                    acks_of = sorted((round(a[3] - kill_times[0], 2), x.id, a[2]) for x in consumers
                                     for a in x.acked() if a[1] == key)
                    sys.stderr.write("    ack %s by %s at %+.2f s (kills at %s): %s; deliveries %s; acks %s\n" % (
                        key.decode(), c.id, t - kill_times[0], [round(k - kill_times[0], 2) for k in kill_times],
                        result if isinstance(result, str) else "deleted=0", hist, acks_of))
        del t_start

        # Every acknowledged produce is delivered (at least once).
        missing = sorted(acked_produce[p] for p in set(acked_produce) - delivered_payloads())
        self.assertEqual(missing, [], "%d acknowledged produces never delivered" % len(missing))
        # Nothing is delivered that was never produced.
        phantom = delivered_payloads() - set(acked_produce) - set(unknown_produce)
        self.assertEqual(phantom, set())
        # An idx names one message for ever, across restarts; each message keeps its idx.
        by_idx, by_payload = {}, {}
        for _t, idx, key, value in deliveries:
            self.assertIsNotNone(idx, key)
            by_idx.setdefault(idx, set()).add((key, value))
            by_payload.setdefault(value, set()).add(idx)
        reused = {i: v for i, v in by_idx.items() if len(v) > 1}
        self.assertEqual(reused, {}, "idx given to more than one message")
        moved = {p: v for p, v in by_payload.items() if len(v) > 1}
        self.assertEqual(moved, {}, "one produce stored under more than one idx")
        # Each delivered key's tail is its producer's tail.
        for _t, _idx, key, value in deliveries:
            tail = acked_produce.get(value) or unknown_produce.get(value)
            self.assertEqual(parse_msg_key(key)[2], tail)
        # No message whose ack returned deleted=1 comes back after that ack.
        ack_done = {}
        for _idx, key, result, t in acks:
            if result is True:
                ack_done.setdefault(key, t)
        revived = [(key, round(t - ack_done[key], 2)) for t, _i, key, _v in deliveries
                   if key in ack_done and t > ack_done[key] + 1.0]
        self.assertEqual(revived, [], "acked messages delivered again")
        # Deletes that returned True: exactly one per key (acks are idempotent, never double).
        trues = {}
        for _idx, key, result, _t in acks:
            if result is True:
                trues[key] = trues.get(key, 0) + 1
        self.assertEqual({k: n for k, n in trues.items() if n > 1}, {})
        # The queue drained: every acknowledged produce was acked by someone.
        self.assertEqual(queued(), [])
        self.assertEqual(len(kill_times), KILLS)


if __name__ == "__main__":
    harness.main()
