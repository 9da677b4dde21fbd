#!/usr/bin/python3
"""Alarms as etcd applies them (src/apply/chain.h, src/member/pipeline.cc): a CORRUPT
alarm refuses every write but can always be disarmed; a NOSPACE alarm refuses what
adds data (Put, LeaseGrant, a Txn with a Put) and lets deletes through, also inside a
Txn (Kubernetes' guarded delete: compare mod_revision, then delete). Every
expectation is checked against etcd 3.6 too.

    /usr/bin/python3 tests/integration/test_alarms.py
    ETCDQ_BIN=build/etcdq /usr/bin/python3 tests/integration/test_alarms.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness  # noqa: E402
from etcd3.etcdrpc import rpc_pb2 as pb  # noqa: E402


class AlarmTest(harness.MemberTestCase):
    def alarm(self, m, action, alarm):
        return m.maintenance().Alarm(pb.AlarmRequest(action=action, memberID=0 if action == pb.AlarmRequest.GET
                                                     else self.member_id(m), alarm=alarm), timeout=5)

    def member_id(self, m):
        return m.maintenance().Status(pb.StatusRequest(), timeout=5).header.member_id

    def refused(self, fn, code):
        with self.assertRaises(grpc.RpcError) as cm:
            fn()
        self.assertEqual(cm.exception.code(), code, cm.exception.details())
        return cm.exception.details()

    def test_corrupt_refuses_writes_and_can_be_disarmed(self):
        m = self.new_member()
        kv = m.kv()
        kv.Put(pb.PutRequest(key=b"a", value=b"1"), timeout=5)
        self.alarm(m, pb.AlarmRequest.ACTIVATE, pb.CORRUPT)
        details = self.refused(lambda: kv.Put(pb.PutRequest(key=b"a", value=b"2"), timeout=5), grpc.StatusCode.DATA_LOSS)
        self.assertEqual(details, "etcdserver: corrupt cluster")
        self.refused(lambda: kv.DeleteRange(pb.DeleteRangeRequest(key=b"a"), timeout=5), grpc.StatusCode.DATA_LOSS)
        # The operator's way out: disarm, then writes go through again.
        self.alarm(m, pb.AlarmRequest.DEACTIVATE, pb.CORRUPT)
        self.assertEqual(list(self.alarm(m, pb.AlarmRequest.GET, pb.NONE).alarms), [])
        kv.Put(pb.PutRequest(key=b"a", value=b"3"), timeout=5)
        self.assertEqual(kv.Range(pb.RangeRequest(key=b"a"), timeout=5).kvs[0].value, b"3")

    def test_nospace_lets_deletes_through_also_in_a_txn(self):
        m = self.new_member()
        kv = m.kv()
        rev = kv.Put(pb.PutRequest(key=b"k", value=b"v"), timeout=5).header.revision
        kv.Put(pb.PutRequest(key=b"k2", value=b"v"), timeout=5)
        self.alarm(m, pb.AlarmRequest.ACTIVATE, pb.NOSPACE)
        space = grpc.StatusCode.RESOURCE_EXHAUSTED
        self.refused(lambda: kv.Put(pb.PutRequest(key=b"x", value=b"1"), timeout=5), space)
        self.refused(lambda: m.lease_stub().LeaseGrant(pb.LeaseGrantRequest(TTL=60), timeout=5), space)
        put_op = pb.RequestOp(request_put=pb.PutRequest(key=b"x", value=b"1"))
        self.refused(lambda: kv.Txn(pb.TxnRequest(failure=[put_op]), timeout=5), space)
        # A nested Txn's Put is charged too (3.5's quota, costTxnReq; etcd 3.4
        # charged a nested Txn nothing, so its Put added data past the alarm).
        nested = pb.RequestOp(request_txn=pb.TxnRequest(success=[put_op]))
        self.refused(lambda: kv.Txn(pb.TxnRequest(success=[nested]), timeout=5), space)
        # Kubernetes' guarded delete.
        guarded = pb.TxnRequest(
            compare=[pb.Compare(key=b"k", target=pb.Compare.MOD, result=pb.Compare.EQUAL, mod_revision=rev)],
            success=[pb.RequestOp(request_delete_range=pb.DeleteRangeRequest(key=b"k"))],
            failure=[pb.RequestOp(request_range=pb.RangeRequest(key=b"k"))])
        r = kv.Txn(guarded, timeout=5)
        self.assertTrue(r.succeeded)
        self.assertEqual(r.responses[0].response_delete_range.deleted, 1)
        self.assertEqual(kv.DeleteRange(pb.DeleteRangeRequest(key=b"k2"), timeout=5).deleted, 1)
        self.alarm(m, pb.AlarmRequest.DEACTIVATE, pb.NOSPACE)
        kv.Put(pb.PutRequest(key=b"x", value=b"1"), timeout=5)


if __name__ == "__main__":
    harness.main()
