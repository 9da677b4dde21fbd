#!/usr/bin/python3
"""Work queues (QUEUES.md) through python-etcd3 (Debian's python3-etcd3): many
producers and consumers, each with its own client; a consumer that dies
mid-work; a message nobody acks landing in the dead-letter queue."""
import json
import threading
import time
import unittest

import harness
from queue_util import Consumer, msg_key, parse_msg_key, wait_until

harness.quiet_closed_etcd3_watchers()

N_MESSAGES = 10000
N_PRODUCERS = 2
N_CONSUMERS = 4


@unittest.skipIf(harness.is_reference_etcd(), "etcd has no queues")
class QueuePythonEtcd3(harness.MemberTestCase):
    def setUp(self):
        self.m = self.new_member()

    def queued(self, client, queue):
        """Message keys still in `queue` (config excluded), oldest first."""
        return [meta.key.decode() for _v, meta in client.get_prefix("/q/%s/" % queue, sort_order="ascend")
                if parse_msg_key(meta.key)]

    def test_4_consumers_2_producers_10000_messages_each_acked_exactly_once_in_fifo_order(self):
        admin = self.m.client()
        consumers = [Consumer(self.m.client(), "work") for _ in range(N_CONSUMERS)]
        produced = {}          # payload -> (producer, seq)
        produce_errors = []
        per_producer = N_MESSAGES // N_PRODUCERS

        def produce(pid):
            c = self.m.client()
            for seq in range(per_producer):
                payload = json.dumps({"producer": pid, "seq": seq})
                try:
                    c.put("/q/work/p/p%d-%05d" % (pid, seq), payload)
                    produced[payload] = (pid, seq)
                except Exception as e:  # noqa: BLE001
                    produce_errors.append("p%d seq %d: %r" % (pid, seq, e))

        t0 = time.monotonic()
        producers = [threading.Thread(target=produce, args=(pid,)) for pid in range(N_PRODUCERS)]
        for t in producers:
            t.start()
        for t in producers:
            t.join()
        t_produced = time.monotonic() - t0
        self.assertEqual(produce_errors, [])
        self.assertEqual(len(produced), N_MESSAGES)

        def all_acked():
            return sum(len(c.acked()) for c in consumers) >= N_MESSAGES
        wait_until(all_acked, 90)
        t_acked = time.monotonic() - t0
        time.sleep(1.0)  # any late duplicate shows up here
        for c in consumers:
            c.cancel()
        sys_note = "produced %d in %.1f s, all acked after %.1f s; per consumer deliveries %s" % (
            N_MESSAGES, t_produced, t_acked, [len(c.delivered()) for c in consumers])
        print("    " + sys_note)

        deliveries = [d for c in consumers for d in c.delivered()]
        acks = [a for c in consumers for a in c.acked()]
        for c in consumers:
            self.assertEqual(c.errors, [], "consumer %s" % c.id)
        # Every idx 1..N delivered; every delivered key is a well-formed message key of /q/work/.
        first = {}
        for c in consumers:
            for t, idx, key, value in c.delivered():
                self.assertIsNotNone(idx, key)
                first.setdefault(idx, (t, c.id, key, value))
        self.assertEqual(set(first), set(range(1, N_MESSAGES + 1)), sys_note)
        # Payloads: each produced payload delivered, under the key its producer named.
        idx_of = {}
        for idx, (_t, _cid, key, value) in first.items():
            q, _i, tail = parse_msg_key(key)
            self.assertEqual(q, "work")
            pid, seq = produced[value.decode()]
            self.assertEqual(tail, "p%d-%05d" % (pid, seq))
            idx_of[(pid, seq)] = idx
        self.assertEqual(len(idx_of), N_MESSAGES)
        # Each producer's messages got increasing idx in the order it produced them.
        for pid in range(N_PRODUCERS):
            idxs = [idx_of[(pid, s)] for s in range(per_producer)]
            self.assertEqual(idxs, sorted(idxs), "producer %d" % pid)
        # FIFO per first delivery: each consumer's first deliveries come in increasing idx order.
        for c in consumers:
            seen, order = set(), []
            for _t, idx, _k, _v in c.delivered():
                if idx not in seen:
                    seen.add(idx)
                    order.append(idx)
            self.assertEqual(order, sorted(order), "consumer %s first deliveries out of idx order" % c.id)
        # Acked exactly once: delete returned True once per message, never for another.
        true_acks = [idx for idx, _k, r, _t in acks if r is True]
        bad_acks = [(idx, r) for idx, _k, r, _t in acks if r is not True and r is not False]
        self.assertEqual(bad_acks, [])
        self.assertEqual(len(true_acks), N_MESSAGES, sys_note)
        self.assertEqual(sorted(true_acks), list(range(1, N_MESSAGES + 1)))
        # With the default 30 s visibility timeout and prompt acks nothing is delivered twice.
        self.assertEqual(len(deliveries), N_MESSAGES,
                         "%d deliveries for %d messages" % (len(deliveries), N_MESSAGES))
        self.assertEqual(self.queued(admin, "work"), [])

    def test_consumer_that_dies_mid_work_has_its_messages_redelivered_to_the_others(self):
        admin = self.m.client()
        # Default visibility timeout (30 s): redelivery within a few seconds can only come
        # from the dead consumer being dropped.
        admin.put("/q/die/config", json.dumps({"max_in_flight": 10}))
        for way in ("cancel", "close"):
            with self.subTest(way=way):
                start = len(self.queued(admin, "die"))
                self.assertEqual(start, 0)
                doomed_client = self.m.client()
                doomed = Consumer(doomed_client, "die", ack=False)
                for i in range(40):
                    admin.put("/q/die/p/%s-%02d" % (way, i), "%s-%d" % (way, i))
                self.assertTrue(wait_until(lambda: len(doomed.delivered()) >= 10, 10),
                                "doomed consumer got %d" % len(doomed.delivered()))
                time.sleep(0.5)
                held = {d[2] for d in doomed.delivered()}
                self.assertEqual(len(held), 10, "max_in_flight 10, the consumer holds %d" % len(held))
                others = [Consumer(self.m.client(), "die") for _ in range(2)]
                # The others take the 30 messages the doomed one does not hold.
                self.assertTrue(wait_until(lambda: sum(len(o.acked()) for o in others) >= 30, 20))
                time.sleep(0.5)
                got = {a[1] for o in others for a in o.acked()}
                self.assertEqual(len(got & held), 0, "delivered to another while the first held it")
                t_death = time.monotonic()
                if way == "cancel":
                    doomed.cancel()
                else:
                    doomed_client.close()
                self.assertTrue(wait_until(lambda: sum(len(o.acked()) for o in others) >= 40, 15),
                                "after the consumer's %s only %d of 40 acked" % (
                                    way, sum(len(o.acked()) for o in others)))
                t_done = time.monotonic() - t_death
                for o in others:
                    o.cancel()
                acked = [a for o in others for a in o.acked()]
                self.assertTrue(all(r is True for _i, _k, r, _t in acked), acked)
                self.assertEqual(len(acked), 40)
                self.assertEqual(len({a[1] for a in acked}), 40)
                self.assertTrue(held <= {a[1] for a in acked})
                self.assertLess(t_done, 10.0, "held messages came back %.1f s after the %s" % (t_done, way))
                self.assertEqual(self.queued(admin, "die"), [])
                print("    [%s] the dead consumer's 10 messages acked by others %.2f s after it ended" % (
                    way, t_done))

    def test_message_nobody_acks_goes_to_the_dead_letter_queue_after_max_deliveries(self):
        admin = self.m.client()
        admin.put("/q/poison/config", json.dumps({"visibility_timeout": 0.5, "max_deliveries": 5}))
        admin.put("/q/poison/p/bad", "payload-x")
        admin.put("/q/poison/p/good", "payload-y")
        c = Consumer(self.m.client(), "poison", ack=False)
        self.assertTrue(wait_until(lambda: len(c.delivered()) >= 10, 20),
                        "deliveries: %s" % c.delivered())
        good_key = msg_key("poison", 2, "good")
        bad_key = msg_key("poison", 1, "bad")
        dlq_key = "/q/poison.dlq/%020d/bad" % 1

        def dlq_has():
            return admin.get(dlq_key)[0] is not None
        self.assertTrue(wait_until(dlq_has, 15), "nothing at %s; queue: %s" % (dlq_key, self.queued(admin, "poison")))
        time.sleep(1.5)   # a 6th delivery would show up by now
        d = c.delivered()
        bad = [x for x in d if x[2] == bad_key.encode()]
        good = [x for x in d if x[2] == good_key.encode()]
        self.assertEqual(len(bad), 5, "bad delivered %d times" % len(bad))
        self.assertEqual(len(good), 5)
        self.assertTrue(all(x[3] == b"payload-x" for x in bad))
        # Seen by this client: a delivery it saw late shortens the next gap by as
        # much (a busy machine under TSan: 0.7 s late was seen, and a first gap of
        # 0.07 s after one seen 0.55 s late). So one gap may be short; the others
        # and the mean must still show the 0.5 s timeout. A server that redelivered
        # without waiting would make every gap short.
        gaps = [b[0] - a[0] for a, b in zip(bad, bad[1:])]
        self.assertTrue(sum(g < 0.25 for g in gaps) <= 1 and sum(gaps) / len(gaps) > 0.35,
                        "redelivery gaps %s with a 0.5 s timeout" % gaps)
        head, _, payload = admin.get(dlq_key)[0].partition(b"\n")   # a JSON line, then the payload as produced
        value = json.loads(head)
        self.assertEqual(value["queue"], "poison")
        self.assertEqual(value["idx"], 1)
        self.assertEqual(value["key"], bad_key)
        self.assertEqual(value["deliveries"], 5)
        self.assertEqual(payload, b"payload-x")
        self.assertTrue(value["reason"], value)
        # Both moved: good too (nobody acked it either).
        self.assertEqual(self.queued(admin, "poison"), [])
        dlq = [meta.key.decode() for _v, meta in admin.get_prefix("/q/poison.dlq/")]
        self.assertEqual(dlq, [dlq_key, "/q/poison.dlq/%020d/good" % 2])
        c.cancel()

        # A message acked before max deliveries never reaches the dead-letter queue.
        c2 = Consumer(self.m.client(), "poison", ack=False)
        admin.put("/q/poison/p/late", "payload-z")
        late_key = msg_key("poison", 3, "late")
        self.assertTrue(wait_until(lambda: len(c2.delivered()) >= 3, 10), c2.delivered())
        self.assertTrue(admin.delete(late_key))
        time.sleep(3.0)
        self.assertEqual(len(c2.delivered()), 3, c2.delivered())
        self.assertEqual(len(list(admin.get_prefix("/q/poison.dlq/"))), 2)
        c2.cancel()


if __name__ == "__main__":
    harness.main()
