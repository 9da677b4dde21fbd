#!/usr/bin/python3
"""The Lock (v3lockpb) and Election (v3electionpb) gRPC services against the
real binary. python3-etcd3 has no stubs for them, so the messages come from
our own proto/ files, compiled by protoc into a descriptor set and loaded into
a private descriptor pool (python3-etcd3 already owns the default pool's
etcdserverpb names).
"""
import os
import subprocess
import tempfile
import threading
import time
import unittest

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_messages():
    out = os.path.join(tempfile.mkdtemp(prefix="etcdq-protos-"), "set.pb")
    protos = ["etcd/api/v3lock/v3lock.proto", "etcd/api/v3election/v3election.proto"]
    subprocess.run(["protoc", "-I", os.path.join(ROOT, "proto"), "--include_imports",
                    "--descriptor_set_out", out] + protos, check=True)
    fds = descriptor_pb2.FileDescriptorSet.FromString(open(out, "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    factory = message_factory.MessageFactory(pool)
    return lambda name: factory.GetPrototype(pool.FindMessageTypeByName(name))


M = load_messages()


class Stubs:
    def __init__(self, channel):
        def unary(path, req, resp):
            return channel.unary_unary(path, request_serializer=M(req).SerializeToString,
                                       response_deserializer=M(resp).FromString)
        self.lock = unary("/v3lockpb.Lock/Lock", "v3lockpb.LockRequest", "v3lockpb.LockResponse")
        self.unlock = unary("/v3lockpb.Lock/Unlock", "v3lockpb.UnlockRequest", "v3lockpb.UnlockResponse")
        self.campaign = unary("/v3electionpb.Election/Campaign", "v3electionpb.CampaignRequest",
                              "v3electionpb.CampaignResponse")
        self.proclaim = unary("/v3electionpb.Election/Proclaim", "v3electionpb.ProclaimRequest",
                              "v3electionpb.ProclaimResponse")
        self.leader = unary("/v3electionpb.Election/Leader", "v3electionpb.LeaderRequest",
                            "v3electionpb.LeaderResponse")
        self.resign = unary("/v3electionpb.Election/Resign", "v3electionpb.ResignRequest",
                            "v3electionpb.ResignResponse")
        self.observe = channel.unary_stream("/v3electionpb.Election/Observe",
                                            request_serializer=M("v3electionpb.LeaderRequest").SerializeToString,
                                            response_deserializer=M("v3electionpb.LeaderResponse").FromString)


class LockAndElectionServices(harness.MemberTestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = cls.new_class_member()
        cls.s = Stubs(cls.m.channel())
        cls.etcd = cls.m.client()

    def grant(self, ttl=30):
        return self.etcd.lease(ttl).id

    def test_lock_returns_name_slash_lease_key_and_second_locker_waits_for_unlock(self):
        l1, l2 = self.grant(), self.grant()
        r1 = self.s.lock(M("v3lockpb.LockRequest")(name=b"svc-lock", lease=l1), timeout=5)
        self.assertEqual(r1.key, b"svc-lock/%x" % l1)
        got = {}

        def second():
            got["r"] = self.s.lock(M("v3lockpb.LockRequest")(name=b"svc-lock", lease=l2), timeout=10)
            got["t"] = time.monotonic()
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.5)
        self.assertNotIn("r", got, "the second Lock returned while the first held the lock")
        released = time.monotonic()
        self.s.unlock(M("v3lockpb.UnlockRequest")(key=r1.key), timeout=5)
        t.join(10)
        self.assertEqual(got["r"].key, b"svc-lock/%x" % l2)
        self.assertGreaterEqual(got["t"], released)
        self.assertGreater(got["r"].header.revision, r1.header.revision)
        self.s.unlock(M("v3lockpb.UnlockRequest")(key=got["r"].key), timeout=5)

    def test_lock_waiting_when_canceled_removes_its_key(self):
        l1, l2 = self.grant(), self.grant()
        r1 = self.s.lock(M("v3lockpb.LockRequest")(name=b"cancel-lock", lease=l1), timeout=5)
        with self.assertRaises(grpc.RpcError) as cm:
            self.s.lock(M("v3lockpb.LockRequest")(name=b"cancel-lock", lease=l2), timeout=0.5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            keys = [m.key for _, m in self.etcd.get_prefix("cancel-lock/")]
            if keys == [r1.key]:
                break
            time.sleep(0.05)
        self.assertEqual(keys, [r1.key])
        self.s.unlock(M("v3lockpb.UnlockRequest")(key=r1.key), timeout=5)

    def test_lock_with_unknown_lease_is_unknown_with_lease_not_found_message(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.s.lock(M("v3lockpb.LockRequest")(name=b"bad-lease", lease=0x7777), timeout=5)
        # etcd's Lock service runs clientv3 inside the server and returns its
        # error as a plain one: code Unknown, the same message.
        print("etcd-says:", cm.exception.code(), cm.exception.details())
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNKNOWN)
        self.assertEqual(cm.exception.details(), "etcdserver: requested lease not found")

    def test_unlock_with_empty_key_is_unknown_with_key_not_provided_and_changes_nothing(self):
        # etcd's Unlock deletes the key through clientv3, whose Delete("") the
        # KV server refuses; the Lock service hands that back as a plain error.
        rev = self.m.kv().Range(harness.all_keys_request(), timeout=5).header.revision
        with self.assertRaises(grpc.RpcError) as cm:
            self.s.unlock(M("v3lockpb.UnlockRequest")(key=b""), timeout=5)
        self.assertEqual((cm.exception.code(), cm.exception.details()),
                         (grpc.StatusCode.UNKNOWN, "etcdserver: key is not provided"))
        self.assertEqual(self.m.kv().Range(harness.all_keys_request(), timeout=5).header.revision, rev)

    def test_lock_with_empty_name_takes_slash_lease_key(self):
        # etcd takes an empty name: the key is "/" and the lease in hex.
        lease = self.grant()
        r = self.s.lock(M("v3lockpb.LockRequest")(name=b"", lease=lease), timeout=5)
        self.assertEqual(r.key, b"/%x" % lease)
        self.s.unlock(M("v3lockpb.UnlockRequest")(key=r.key), timeout=5)

    def test_election_campaign_leader_proclaim_observe_resign(self):
        la, lb = self.grant(), self.grant()
        LeaderKey = M("v3electionpb.LeaderKey")
        a = self.s.campaign(M("v3electionpb.CampaignRequest")(name=b"elec", lease=la, value=b"alice"), timeout=5)
        self.assertEqual(a.leader.key, b"elec/%x" % la)
        self.assertEqual(a.leader.name, b"elec")
        leader = self.s.leader(M("v3electionpb.LeaderRequest")(name=b"elec"), timeout=5)
        self.assertEqual(leader.kv.value, b"alice")

        seen = []
        stream = self.s.observe(M("v3electionpb.LeaderRequest")(name=b"elec"), timeout=15)

        def observe():
            try:
                for r in stream:
                    seen.append(r.kv.value)
                    if r.kv.value == b"bob":
                        return
            except grpc.RpcError:
                pass
        ot = threading.Thread(target=observe)
        ot.start()
        got = {}
        bt = threading.Thread(target=lambda: got.setdefault("b", self.s.campaign(
            M("v3electionpb.CampaignRequest")(name=b"elec", lease=lb, value=b"bob"), timeout=10)))
        bt.start()
        time.sleep(0.5)
        self.assertNotIn("b", got, "the second candidate was elected while the first led")
        self.s.proclaim(M("v3electionpb.ProclaimRequest")(leader=a.leader, value=b"alice2"), timeout=5)
        self.assertEqual(self.s.leader(M("v3electionpb.LeaderRequest")(name=b"elec"), timeout=5).kv.value,
                         b"alice2")
        time.sleep(0.3)
        self.s.resign(M("v3electionpb.ResignRequest")(leader=a.leader), timeout=5)
        bt.join(10)
        self.assertEqual(got["b"].leader.key, b"elec/%x" % lb)
        ot.join(10)
        stream.cancel()
        self.assertEqual(seen, [b"alice", b"alice2", b"bob"])
        # The old leader key may no longer proclaim.
        with self.assertRaises(grpc.RpcError) as cm:
            self.s.proclaim(M("v3electionpb.ProclaimRequest")(leader=a.leader, value=b"x"), timeout=5)
        self.assertEqual(cm.exception.details(), "election: not leader")
        self.s.resign(M("v3electionpb.ResignRequest")(leader=got["b"].leader), timeout=5)
        self.assertIsInstance(LeaderKey(), object)

    def test_a_member_that_served_waiting_locks_and_campaigns_exits_cleanly(self):
        """Exit status 0 at SIGTERM after Locks that waited (acquired, canceled) and
        Campaigns. A waiting recipe and its call's state held each other, so each such
        call leaked; the ASan build's leak check makes that a non-zero exit."""
        m = self.new_member(name="recipes")
        s = Stubs(m.channel())
        etcd = m.client()
        l1, l2, l3 = etcd.lease(30).id, etcd.lease(30).id, etcd.lease(30).id
        r1 = s.lock(M("v3lockpb.LockRequest")(name=b"leak", lease=l1), timeout=5)
        got = {}
        t = threading.Thread(target=lambda: got.update(r=s.lock(M("v3lockpb.LockRequest")(name=b"leak", lease=l2),
                                                                  timeout=10)))
        t.start()
        time.sleep(0.3)
        s.unlock(M("v3lockpb.UnlockRequest")(key=r1.key), timeout=5)
        t.join(10)
        self.assertIn("r", got)
        with self.assertRaises(grpc.RpcError):
            s.lock(M("v3lockpb.LockRequest")(name=b"leak", lease=l3), timeout=0.3)
        c = s.campaign(M("v3electionpb.CampaignRequest")(name=b"leak-e", lease=l1, value=b"v"), timeout=5)
        s.resign(M("v3electionpb.ResignRequest")(leader=c.leader), timeout=5)
        self.assertEqual(m.stop(), harness.clean_exit_status(), "exit status at SIGTERM\n%s" % self.log_text(m))

    def test_leader_of_empty_election_is_no_leader(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.s.leader(M("v3electionpb.LeaderRequest")(name=b"nobody-here"), timeout=5)
        self.assertEqual(cm.exception.details(), "election: no leader")


if __name__ == "__main__":
    harness.main()
